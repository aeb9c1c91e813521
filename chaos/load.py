"""Load beside one host: busy loops and held memory, a noisy neighbour stopped by PID.

:func:`start_load` starts, for the ``load-host`` nemesis
(:class:`svit_chaos.faults.LoadHost`), ``cpu`` busy-loop processes and, with
``memory_mib`` > 0, one process that allocates that many MiB, writes to every
page and keeps the pages resident (it writes to each again every second) until
it is stopped. :meth:`HostLoad.stop` SIGKILLs and reaps each of them by its
``Popen`` handle.

Why each property holds:

* **Normal priority.** Each load runs at the host agent's niceness
  (``RAY_worker_niceness`` of ``svit_cluster.cluster.WORKER_NICENESS_ENV``: 0),
  set by the harness with ``setpriority`` right after the start (lowering a
  niceness needs privilege; without it the load keeps the harness's niceness
  and :meth:`HostLoad.describe` reports the one it got). A neighbour at normal
  priority competes with the agent's lease keepalives on equal terms, which is
  what the nemesis measures.
* **Beside the host, not in it.** The loads run in a session of their own, not
  in the session of the host's ``ray start`` (``RayNode.pids`` collects that
  session): a ``kill-host`` or ``pause-host`` of the same host neither kills
  nor stops them, and the window's heal stops them whatever became of the host.
  On a local cluster every host is a Ray node on the same machine, so the loads
  compete for the CPUs of every host (and of etcd, Redis, the proxies and the
  harness), not only the named one; the named host is the one the history
  records. With 2 busy loops on a 2-core machine the CPUs are saturated.
* **Bounded memory.** The memory process holds at most
  :data:`MAX_MEMORY_SHARE` of the memory available when it starts (the request
  is cut down to that and the cut recorded), so it cannot push the machine
  into the OOM killer.
* **Stopped by PID, never leaked.** A ``Popen`` handle signals only its own
  child, and a child is not reaped before :meth:`HostLoad.stop` waits for it,
  so its PID cannot have been reused. Every load also asks the kernel to
  SIGKILL it when the thread that started it exits
  (``PR_SET_PDEATHSIG``; the nemesis runner starts loads from long-lived
  worker threads), and :func:`stop_all_loads` (run at teardown and at exit)
  stops whatever is still running.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import select
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import psutil

from svit_cluster.cluster import WORKER_NICENESS_ENV
from svit_cluster.errors import ConfigurationError

__all__ = [
    "LOAD_MARKER",
    "MAX_MEMORY_SHARE",
    "HostLoad",
    "load_niceness",
    "start_load",
    "stop_all_loads",
]

#: The first argument of every load process: ``svit-chaos-load:<host>:<cpu|memory>``.
LOAD_MARKER = "svit-chaos-load"
#: The memory load holds at most this share of the memory available at its start.
MAX_MEMORY_SHARE = 0.25
#: How long :func:`start_load` waits for the memory load to hold its pages (seconds).
MEMORY_READY_TIMEOUT_S = 60.0

_CPU_CODE = """\
while True:
    pass
"""
_MEMORY_CODE = """\
import mmap, sys, time
size = int(sys.argv[2]) * 1024 * 1024
buf = bytearray(size)
for i in range(0, size, mmap.PAGESIZE):
    buf[i] = 1
sys.stdout.write("ready\\n")
sys.stdout.flush()
while True:
    time.sleep(1.0)
    for i in range(0, size, mmap.PAGESIZE):
        buf[i] ^= 1
"""

_LIVE: set[HostLoad] = set()
_LIVE_LOCK = threading.Lock()
_LIBC = ctypes.CDLL(None, use_errno=True)


def _die_with_starter() -> None:  # pragma: no cover - runs in the child before exec
    """Ask Linux to SIGKILL this child when the thread that started it exits."""
    _LIBC.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def load_niceness() -> int:
    """The niceness loads run at: the host agent's (``RAY_worker_niceness``, 0)."""
    return int(WORKER_NICENESS_ENV["RAY_worker_niceness"])


def available_memory_mib() -> int:
    """Memory available for new allocations now, in MiB (``MemAvailable``)."""
    return int(psutil.virtual_memory().available // (1024 * 1024))


@dataclass(eq=False)
class HostLoad:
    """The load processes of one ``load-host`` window.

    Attributes:
        host: the host the load is beside (what the history records).
        cpu: busy-loop processes.
        memory_mib: MiB the memory process holds (0: none); may be below
            ``requested_memory_mib`` (:data:`MAX_MEMORY_SHARE`).
        requested_memory_mib: what the spec asked for.
        started_at: ``time.monotonic()`` when the last load was started.
    """

    host: str
    cpu: int
    memory_mib: int
    requested_memory_mib: int
    procs: dict[int, tuple[str, subprocess.Popen[bytes]]] = field(default_factory=dict)
    niceness: dict[int, int | None] = field(default_factory=dict)
    started_at: float = 0.0

    @property
    def pids(self) -> list[int]:
        """Every load's PID (started, whether still running or not)."""
        return sorted(self.procs)

    def running(self) -> list[int]:
        """PIDs of loads still running (each one that has exited is reaped here)."""
        return sorted(pid for pid, (_, p) in self.procs.items() if p.poll() is None)

    def describe(self) -> dict[str, Any]:
        """The inject detail: host, PIDs by role, niceness, memory held."""
        return {"host": self.host, "pids": self.pids,
                "cpu_pids": sorted(p for p, (r, _) in self.procs.items() if r == "cpu"),
                "memory_pids": sorted(p for p, (r, _) in self.procs.items() if r == "memory"),
                "memory_mib": self.memory_mib,
                "requested_memory_mib": self.requested_memory_mib,
                "niceness": {str(pid): nice for pid, nice in sorted(self.niceness.items())}}

    def stop(self, *, timeout_s: float = 10.0) -> dict[str, Any]:
        """SIGKILL every load still running and reap it; safe to call twice.

        Returns:
            ``{"stopped": [PIDs signalled], "exited_before": {PID: exit code}}``
            (a load that ended by itself before, e.g. killed by the kernel).
        """
        stopped: list[int] = []
        exited: dict[str, int | None] = {}
        for pid, (_, proc) in sorted(self.procs.items()):
            if proc.returncode is not None:
                continue
            if proc.poll() is not None:
                exited[str(pid)] = proc.returncode
                continue
            proc.kill()
            stopped.append(pid)
        deadline = time.monotonic() + timeout_s
        for _, proc in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(max(0.1, deadline - time.monotonic()))
            if proc.stdout is not None:
                proc.stdout.close()
        with _LIVE_LOCK:
            if not self.running():
                _LIVE.discard(self)
        return {"stopped": stopped, "exited_before": exited,
                "ran_s": round(time.monotonic() - self.started_at, 3)}

    def _spawn(self, role: str, code: str, *args: str) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            [sys.executable, "-c", code, f"{LOAD_MARKER}:{self.host}:{role}", *args],
            stdin=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            stdout=subprocess.PIPE if role == "memory" else subprocess.DEVNULL,
            start_new_session=True, close_fds=True, preexec_fn=_die_with_starter)
        self.procs[proc.pid] = (role, proc)
        self.niceness[proc.pid] = _set_niceness(proc.pid, load_niceness())
        return proc


def _set_niceness(pid: int, niceness: int) -> int | None:
    """Set ``pid``'s niceness (best effort); returns the niceness it has now."""
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, pid, niceness)
    try:
        return int(psutil.Process(pid).nice())
    except psutil.Error:
        return None


def _wait_ready(proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    """Wait until the memory load wrote ``ready`` (every page touched)."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout_s
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"the memory load (PID {proc.pid}) did not hold its pages "
                               f"within {timeout_s:.0f} s")
        ready, _, _ = select.select([proc.stdout], [], [], min(left, 0.5))
        if ready:
            line = proc.stdout.readline()
            if line.strip() == b"ready":
                return
            raise RuntimeError(f"the memory load (PID {proc.pid}) exited before holding "
                               f"its pages (exit code {proc.wait(5)})")


def start_load(host: str, *, cpu: int, memory_mib: int = 0) -> HostLoad:
    """Start ``cpu`` busy loops and a ``memory_mib`` MiB holder beside ``host``.

    The memory load starts first and is waited for (every page written), then
    the busy loops: when this returns the whole load is on.

    Raises:
        ConfigurationError: ``cpu`` or ``memory_mib`` is negative, or both are 0.
        TimeoutError, RuntimeError, OSError: a load did not start; whatever
            was started is stopped first.
    """
    if cpu < 0 or memory_mib < 0 or cpu + memory_mib == 0:
        raise ConfigurationError(f"load-host needs cpu >= 1 or memory_mib >= 1 "
                                 f"(got cpu={cpu}, memory_mib={memory_mib})")
    held = min(memory_mib, int(available_memory_mib() * MAX_MEMORY_SHARE))
    load = HostLoad(host, cpu, max(0, held), memory_mib)
    with _LIVE_LOCK:
        _LIVE.add(load)
    try:
        if load.memory_mib > 0:
            _wait_ready(load._spawn("memory", _MEMORY_CODE, str(load.memory_mib)),
                        MEMORY_READY_TIMEOUT_S)
        for _ in range(cpu):
            load._spawn("cpu", _CPU_CODE)
    except BaseException:
        load.stop()
        raise
    load.started_at = time.monotonic()
    return load


def stop_all_loads() -> list[int]:
    """Stop every load of this process still running (teardown; never raises).

    Returns:
        The PIDs signalled.
    """
    with _LIVE_LOCK:
        loads = list(_LIVE)
    stopped: list[int] = []
    for load in loads:
        with contextlib.suppress(Exception):
            stopped.extend(load.stop()["stopped"])
    return stopped


atexit.register(stop_all_loads)
