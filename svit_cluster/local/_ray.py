"""Ray nodes for the local cluster: start one after another, kill, pause, resume.

Each node is a ``ray start --block`` child process; its raylet, GCS and worker
processes are that process's descendants, found with psutil. Killing a host
SIGKILLs the raylet *and* every worker (workers outlive a killed raylet by 2-3 s:
``docs/architecture.md``, "Platform facts the design rests on"). Nothing is ever
matched by name (no ``pkill``).

Ports come from :class:`PortAllocator`, below the kernel's ephemeral range so
that outgoing connections cannot steal them between choosing and binding.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from svit_cluster.cluster import WORKER_NICENESS_ENV, host_resource
from svit_cluster.errors import UnavailableError
from svit_cluster.local._servers import log_tail, pid_alive, wait_exited
from svit_cluster.local._stop import continue_processes, stop_processes

__all__ = ["PortAllocator", "RayNode", "ray_env", "stop_nodes"]

_RAY_HEALTH = {
    "RAY_health_check_period_ms": "500",
    "RAY_health_check_failure_threshold": "3",
    "RAY_health_check_timeout_ms": "500",
    "RAY_health_check_initial_delay_ms": "1000",
}


def ray_env() -> dict[str, str]:
    """Environment for Ray processes and drivers of the local cluster.

    Token auth off (a loopback-only cluster), usage stats off, the tuned
    health checks (node death noticed in about 1.5 s instead of 14 s), and
    workers starting at niceness 0 (``WORKER_NICENESS_ENV``).
    """
    env = dict(os.environ)
    env.update(_RAY_HEALTH)
    env["RAY_AUTH_MODE"] = "disabled"
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    env["RAY_SCHEDULER_EVENTS"] = "0"
    env.update(WORKER_NICENESS_ENV)  # host agents (and their leases) above process actors
    return env


class PortAllocator:
    """Hands out distinct free loopback ports from ``[base, base + span)``.

    Args:
        base: first port to try (default: random in 20000..26000, so clusters
            started at the same time rarely scan the same ports; always below
            Linux's ephemeral range, which starts at 32768).
        span: how many ports to scan (default 6000).
    """

    def __init__(self, base: int | None = None, span: int = 6000) -> None:
        if base is None:  # spread concurrent clusters on one machine apart
            base = random.randrange(20000, 26000, 50)
        self._next = base
        self._end = base + span
        self._given: set[int] = set()

    @property
    def next_port(self) -> int:
        """Where the next scan starts (record it to continue in a later process)."""
        return self._next

    def take(self) -> int:
        """One free port (never the same twice from this allocator).

        Raises:
            UnavailableError: no free port is left in the range.
        """
        while self._next < self._end:
            port = self._next
            self._next += 1
            if port in self._given:
                continue
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
            self._given.add(port)
            return port
        raise UnavailableError("no free loopback port left in the allocator's range")

    def take_range(self, count: int) -> tuple[int, int]:
        """``count`` consecutive free ports as ``(first, last)``."""
        while True:
            first = self.take()
            ports = [first]
            while len(ports) < count:
                p = self.take()
                if p != ports[-1] + 1:
                    break
                ports.append(p)
            if len(ports) == count:
                return ports[0], ports[-1]


def _is_ray_process(proc: psutil.Process) -> bool:
    """A raylet, GCS, Ray worker (``ray::...``) or Ray agent/``ray start`` process."""
    if proc.name() in ("raylet", "gcs_server"):
        return True
    head = " ".join(proc.cmdline()[:3])
    return (head.startswith("ray::") or "/ray/" in head or head.endswith("/ray")
            or " ray " in f" {head} ")


@dataclass
class RayNode:
    """One Ray node run as ``ray start --block``.

    Attributes:
        name: host name (``head`` for the head node).
        temp_dir: Ray's ``--temp-dir`` (under the cluster's state dir).
        log_path: where the node's own output goes.
        head: True for the head node (GCS; hosts no Svit processes).
        gcs_port: the GCS port (head only; workers get ``address``).
    """

    name: str
    temp_dir: Path
    log_path: Path
    head: bool = False
    gcs_port: int = 0
    address: str = ""
    pid: int | None = None
    node_manager_port: int = 0
    #: CPUs and memory (bytes; 0: Ray's own reading) this host's node advertises
    #: to Ray: its share of the machine, from which its agent derives the
    #: residency budget.
    cpus: int = 2
    memory_bytes: int = 0
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False, compare=False)

    def to_json(self) -> dict[str, object]:
        """What ``cluster.json`` records about this node."""
        return {
            "name": self.name,
            "head": self.head,
            "pid": self.pid,
            "gcs_port": self.gcs_port,
            "address": self.address,
            "node_manager_port": self.node_manager_port,
            "temp_dir": str(self.temp_dir),
            "log_path": str(self.log_path),
            "cpus": self.cpus,
            "memory_bytes": self.memory_bytes,
        }

    @classmethod
    def from_json(cls, doc: dict[str, object]) -> RayNode:
        """Rebuild a node handle from :meth:`to_json` (for a later CLI call)."""
        return cls(
            name=str(doc["name"]),
            temp_dir=Path(str(doc["temp_dir"])),
            log_path=Path(str(doc["log_path"])),
            head=bool(doc["head"]),
            gcs_port=int(str(doc["gcs_port"])),
            address=str(doc["address"]),
            pid=None if doc["pid"] is None else int(str(doc["pid"])),
            node_manager_port=int(str(doc["node_manager_port"])),
            cpus=int(str(doc.get("cpus", 2))),
            memory_bytes=int(str(doc.get("memory_bytes", 0))),
        )

    def command(self, ports: PortAllocator, ray_bin: str) -> list[str]:
        lo, hi = ports.take_range(64)
        self.node_manager_port = ports.take()
        cmd = [
            ray_bin,
            "start",
            "--block",
            "--node-ip-address=127.0.0.1",
            f"--temp-dir={self.temp_dir}",
            "--disable-usage-stats",
            "--include-log-monitor=false",
            f"--node-manager-port={self.node_manager_port}",
            f"--object-manager-port={ports.take()}",
            f"--dashboard-agent-listen-port={ports.take()}",
            f"--dashboard-agent-grpc-port={ports.take()}",
            f"--runtime-env-agent-port={ports.take()}",
            f"--metrics-export-port={ports.take()}",
            f"--min-worker-port={lo}",
            f"--max-worker-port={hi}",
            "--object-store-memory=78643200",
        ]
        if self.head:
            self.gcs_port = self.gcs_port or ports.take()
            cmd += [
                "--head",
                f"--port={self.gcs_port}",
                f"--ray-client-server-port={ports.take()}",
                "--include-dashboard=false",
                "--num-cpus=0",
            ]
        else:
            cmd += [
                f"--address={self.address}",
                f"--num-cpus={self.cpus}",
                "--resources=" + json.dumps({host_resource(self.name): 10000}),
            ]
            if self.memory_bytes > 0:
                cmd.append(f"--memory={self.memory_bytes}")
        return cmd

    def start(self, ports: PortAllocator, *, timeout_s: float = 60.0, attempts: int = 3
              ) -> None:
        """Start the node and wait until its raylet listens.

        A node whose start fails (typically: another program took one of its
        ports between choosing and binding) is stopped and started again on
        fresh ports, up to ``attempts`` times.

        Raises:
            UnavailableError: the node did not come up within ``timeout_s`` on
                the last attempt; its log path is in the message.
        """
        for attempt in range(1, attempts + 1):
            try:
                self._start_once(ports, timeout_s)
                return
            except UnavailableError:
                self.stop()
                if attempt == attempts:
                    raise
                if self.head:
                    self.gcs_port = 0

    def _start_once(self, ports: PortAllocator, timeout_s: float) -> None:
        ray_bin = str(Path(sys.executable).with_name("ray"))
        self.temp_dir.mkdir(parents=True, exist_ok=True)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        cmd = self.command(ports, ray_bin)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, env=ray_env(),
                start_new_session=True,
            )
        self.pid = self.proc.pid
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise UnavailableError(
                    f"ray node {self.name} exited with {self.proc.returncode}; see "
                    f"{self.log_path}; it ends:\n{log_tail(self.log_path, 800)}")
            if _listening(self.node_manager_port) and (not self.head or _listening(self.gcs_port)):
                return
            time.sleep(0.1)
        self.stop()
        # the log's end in the message (800 bytes: a message is capped at 1 KiB),
        # since a temporary state directory may be gone when anyone reads it
        raise UnavailableError(f"ray node {self.name} did not start in {timeout_s} s; see "
                               f"{self.log_path}; it ends:\n{log_tail(self.log_path, 800)}")

    def pids(self) -> list[int]:
        """The ``ray start`` process and every descendant (raylet, GCS, workers),
        and every other process still in the session ``ray start`` opened
        (``start_new_session``): a raylet or worker whose parent died is
        re-parented, and without this a kill or pause of the node would miss it.
        Zombies (exited, not reaped) are left out: nothing of them runs."""
        if self.pid is None:
            return []
        found: list[int] = []
        try:
            root = psutil.Process(self.pid)
            found = [root.pid] + [c.pid for c in root.children(recursive=True)]
        except psutil.NoSuchProcess:
            pass
        seen = set(found)
        for pid in psutil.pids():
            if pid in seen:
                continue
            try:
                # the Ray check guards against a reused session id (``ray start``
                # gone, its PID taken by an unrelated session leader)
                if os.getsid(pid) == self.pid and _is_ray_process(psutil.Process(pid)):
                    found.append(pid)
                    seen.add(pid)
            except (OSError, psutil.Error):  # gone meanwhile, or not ours to read
                continue
        return [pid for pid in found if pid_alive(pid)]

    def raylet_pid(self) -> int | None:
        for pid in self.pids():
            try:
                if psutil.Process(pid).name() == "raylet":
                    return pid
            except psutil.NoSuchProcess:
                continue
        return None

    def _signal_all(self, sig: int) -> list[int]:
        pids = self.pids()
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        return pids

    def kill(self, *, timeout_s: float = 5.0) -> list[int]:
        """SIGKILL the raylet and every worker of this node at once; returns the PIDs.

        Returns once every one of them has exited (a zombie counts as exited),
        so a status read right after sees the node down.

        Raises:
            UnavailableError: one still ran ``timeout_s`` seconds after the signal.
        """
        pids = self._signal_all(signal.SIGKILL)
        self._reap()
        wait_exited(pids, timeout_s=timeout_s)
        return pids

    def _reap(self) -> None:
        if self.proc is not None:
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                pass

    def pause(self, *, timeout_s: float = 5.0, uninterruptible_s: float = 30.0) -> list[int]:
        """SIGSTOP every process of this node (a stale owner, frozen mid-flight).

        Returns the PIDs once each is stopped, or has exited (a worker that exits
        while its raylet is stopped stays a zombie), not merely signalled; a
        process forked meanwhile is stopped too (see
        :func:`svit_cluster.local._stop.stop_processes`).

        Raises:
            UnavailableError: a process did not stop within ``timeout_s`` seconds
                (``uninterruptible_s`` while in uninterruptible sleep); the
                message names each (PID, state, command).
        """
        seen = stop_processes(self.pids, timeout_s=timeout_s,
                              uninterruptible_s=uninterruptible_s)
        return [s.pid for s in seen]

    def resume(self, *, timeout_s: float = 5.0) -> list[int]:
        """SIGCONT every process of this node; returns the PIDs once none is stopped.

        Raises:
            UnavailableError: one was still stopped after ``timeout_s`` seconds
                (the message names it: PID, state, command).
        """
        return [s.pid for s in continue_processes(self.pids, timeout_s=timeout_s)]

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM the node, then SIGKILL whatever is left of it after ``timeout_s``."""
        stop_nodes([self], timeout_s=timeout_s)


def stop_nodes(nodes: list[RayNode], *, timeout_s: float = 10.0) -> None:
    """Stop several nodes together: SIGTERM every process of every node at once
    (``ray start``, raylet, workers), wait up to ``timeout_s`` (seconds) for
    all of them, then SIGKILL what is left. One shared wait, not one per node,
    and every process of a node signalled (a node whose raylet alone is
    signalled leaves its workers to use up the wait)."""
    all_pids: list[int] = []
    for node in nodes:
        node._signal_all(signal.SIGCONT)
        all_pids += node._signal_all(signal.SIGTERM)  # ray start, raylet and workers
    procs = [p for p in (_proc(pid) for pid in all_pids) if p is not None]
    deadline = time.monotonic() + timeout_s
    while [p for p in procs if _running(p)] and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in all_pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for node in nodes:
        node._reap()


def _running(proc: psutil.Process) -> bool:
    """Still running: a zombie (exited, not yet reaped by a parent that is not
    us) counts as gone; ``psutil.wait_procs`` would wait its whole timeout."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _proc(pid: int) -> psutil.Process | None:
    try:
        return psutil.Process(pid)
    except psutil.NoSuchProcess:
        return None


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False
