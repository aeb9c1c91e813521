"""Stop (SIGSTOP) and continue (SIGCONT) a group of processes, and prove it took effect.

``kill(SIGSTOP)`` returns before the target stops, so a pause is only done once
the kernel reports every target stopped. What counts, per process state
(``/proc/<pid>/stat``, read through psutil):

* ``T`` (stopped) or ``t`` (stopped by its tracer): stopped. A traced process
  does not run until its tracer lets it, which a pause must not undo.
* ``Z`` (zombie) or gone: nothing of it runs, so it counts as stopped. A child
  that exits while its parent is stopped stays a zombie until the parent runs
  again and reaps it; it never reaches ``T``.
* a PID now held by another process: the listed process exited (psutil compares
  the start time it read at listing with the PID's current one); the newcomer is
  never signalled.
* ``D`` (uninterruptible sleep): the stop takes effect when the kernel call
  returns, so it is waited for longer (``uninterruptible_s``).
* anything else (running, sleeping) must reach ``T`` within ``timeout_s``.

A process forked after the group was listed would keep running, so the group is
listed again after the signals until a listing names nobody new.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import psutil

from svit_cluster.errors import UnavailableError

__all__ = ["Seen", "continue_processes", "stop_processes"]

#: States in which a process runs no instruction until continued.
_STOPPED = frozenset({psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP})
#: States of a process that has exited.
_EXITED = frozenset({psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD})
_POLL_S = 0.005


@dataclass(frozen=True)
class Seen:
    """What was found of one process: ``pid``, ``status`` (a psutil status such as
    ``running``, ``disk-sleep``, ``stopped``, ``zombie``; ``exited`` when the PID is
    gone or held by another process) and ``command`` (its command line, or its name)."""

    pid: int
    status: str
    command: str

    def __str__(self) -> str:
        return f"pid {self.pid} ({self.status}, {self.command!r})"

    def to_json(self) -> dict[str, object]:
        return {"pid": self.pid, "status": self.status, "command": self.command}


def _seen(proc: psutil.Process) -> Seen:
    try:
        if not proc.is_running():  # gone, or the PID now names another process
            return Seen(proc.pid, "exited", "")
        status = proc.status()
        try:
            command = " ".join(proc.cmdline())[:120] or proc.name()
        except psutil.Error:  # a zombie has no command line
            command = proc.name()
        return Seen(proc.pid, status, command)
    except psutil.NoSuchProcess:
        return Seen(proc.pid, "exited", "")
    except psutil.Error:  # not ours to read: report what we know
        return Seen(proc.pid, "unknown", "")


def _signal(proc: psutil.Process, sig: int) -> None:
    try:
        proc.send_signal(sig)  # refuses a PID reused since listing (start time differs)
    except psutil.NoSuchProcess:
        pass  # exited meanwhile: nothing to stop or continue


def stop_processes(list_pids: Callable[[], Iterable[int]], *, timeout_s: float = 5.0,
                   uninterruptible_s: float = 30.0,
                   clock: Callable[[], float] = time.monotonic) -> list[Seen]:
    """SIGSTOP every process ``list_pids()`` names; return once each is stopped or exited.

    ``list_pids`` is called again after the signals, and after every process
    seen so far has stopped, until it names no process not signalled yet (a child
    forked between a listing and its parent's stop is stopped too).

    Args:
        list_pids: the PIDs of the group now (called several times).
        timeout_s: how long (seconds, default 5.0) a process that is not in
            uninterruptible sleep may take to stop.
        uninterruptible_s: how long (seconds, default 30.0) a process last seen in
            uninterruptible sleep (``D``) may take to stop.
        clock: monotonic seconds (injectable for tests).

    Returns:
        What was found of every process signalled, in signal order (status
        ``stopped``, ``tracing-stop``, ``zombie`` or ``exited``).

    Raises:
        UnavailableError: a process had not stopped by its deadline; the message
            names each such process (PID, state, command) and ``fields["stragglers"]``
            holds them as ``Seen.to_json`` dicts. The group stays signalled.
    """
    start = clock()
    procs: dict[int, psutil.Process] = {}

    def signal_newcomers() -> bool:
        added = False
        for pid in list_pids():
            known = procs.get(pid)
            if known is not None and known.is_running():
                continue  # already signalled (same start time)
            try:
                proc = psutil.Process(pid)
            except psutil.NoSuchProcess:
                continue
            procs[pid] = proc
            _signal(proc, signal.SIGSTOP)
            added = True
        return added

    signal_newcomers()
    while True:
        seen = [_seen(p) for p in procs.values()]
        pending = [s for s in seen if s.status not in _STOPPED | _EXITED | {"exited"}]
        if not pending:
            if signal_newcomers():
                continue
            return seen
        waited = clock() - start
        in_kernel = all(s.status == psutil.STATUS_DISK_SLEEP for s in pending)
        if waited > uninterruptible_s or (waited > timeout_s and not in_kernel):
            raise UnavailableError(
                f"{len(pending)} of {len(procs)} processes did not stop within "
                f"{round(waited, 1)} s (limit {timeout_s} s, {uninterruptible_s} s in "
                f"uninterruptible sleep): " + "; ".join(str(s) for s in pending),
                stragglers=[s.to_json() for s in pending])
        time.sleep(_POLL_S)


def continue_processes(list_pids: Callable[[], Iterable[int]], *, timeout_s: float = 5.0,
                       clock: Callable[[], float] = time.monotonic) -> list[Seen]:
    """SIGCONT every process ``list_pids()`` names; return once none of them is
    stopped (``T``).

    A process stopped by its tracer (``t``) is left to its tracer, and one that
    has exited is skipped; neither counts against the wait.

    Args:
        list_pids: the PIDs of the group now.
        timeout_s: how long (seconds, default 5.0) a process may stay stopped.
        clock: monotonic seconds (injectable for tests).

    Returns:
        What was found of every process signalled, after the wait.

    Raises:
        UnavailableError: a process was still stopped after ``timeout_s``; the
            message names each (PID, state, command), ``fields["stragglers"]``
            holds them.
    """
    procs: dict[int, psutil.Process] = {}
    for pid in list_pids():
        if pid in procs:
            continue
        try:
            procs[pid] = psutil.Process(pid)
        except psutil.NoSuchProcess:
            continue
        _signal(procs[pid], signal.SIGCONT)
    start = clock()
    while True:
        seen = [_seen(p) for p in procs.values()]
        pending = [s for s in seen if s.status == psutil.STATUS_STOPPED]
        if not pending:
            return seen
        if clock() - start > timeout_s:
            raise UnavailableError(
                f"{len(pending)} of {len(procs)} processes still stopped {timeout_s} s "
                f"after SIGCONT: " + "; ".join(str(s) for s in pending),
                stragglers=[s.to_json() for s in pending])
        time.sleep(_POLL_S)
