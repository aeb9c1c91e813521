"""Launchers for the local redis-server and etcd processes (tests, benchmarks, ``up``).

Each launcher starts one real server on a free loopback port with its own data
directory under a given state directory, waits until it answers, and stops it
*by its PID* (SIGTERM, then SIGKILL after a grace period). Nothing here ever
signals a process it did not start itself.

Durability of the defaults (see ``svit_cluster/store/README.md``):

* Redis runs with ``appendonly yes`` and ``appendfsync always``: a write is
  fsynced to the append-only file before Redis replies, so an acknowledged
  commit survives ``kill -9`` of the server and :meth:`RedisServer.restart`.
* etcd keeps its write-ahead log in its own data directory and fsyncs before
  acknowledging, so :meth:`EtcdServer.restart` keeps keys and revisions.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from abc import ABC, abstractmethod
from pathlib import Path
from types import TracebackType
from typing import Self

import psutil

from svit_cluster.defaults import LEASE_NICENESS
from svit_cluster.errors import UnavailableError

__all__ = ["EtcdServer", "RedisServer", "ServerError", "free_port", "stop_pid"]

_LOOPBACK = "127.0.0.1"
#: etcd history kept (periodic auto-compaction; below one hour, etcd compacts
#: every retention period). Five minutes, the interval at which kube-apiserver
#: compacts its etcd: far longer than any watch resume, short enough that a
#: churning cluster's database stops growing within minutes.
COMPACTION_RETENTION = "5m"


def wait_stopped(pids: list[int], *, timeout_s: float = 5.0,
                 uninterruptible_s: float = 30.0) -> None:
    """Wait until every process in ``pids`` is stopped (``T`` or ``t``) or has
    exited (gone or a zombie: nothing of it runs).

    ``kill(SIGSTOP)`` returns before the target stops; on a loaded machine the
    target may still run (and answer a request) for a while. A process in
    uninterruptible sleep (``D``) stops only when its kernel call returns: it
    may take ``uninterruptible_s``.

    Raises:
        UnavailableError: one of them did not stop within ``timeout_s`` seconds
            (``uninterruptible_s`` while in ``D``); the message gives its PID,
            state and command.
    """
    start = time.monotonic()
    for pid in pids:
        while (state := _proc_state(pid)) not in ("T", "t", "Z", "X", None):
            waited = time.monotonic() - start
            if waited > uninterruptible_s or (waited > timeout_s and state != "D"):
                raise UnavailableError(
                    f"pid {pid} (state {state}, command {_command(pid)!r}) did not stop "
                    f"within {round(waited, 1)} s (limit {timeout_s} s, "
                    f"{uninterruptible_s} s in uninterruptible sleep)",
                    pid=pid, state=state)
            time.sleep(0.005)


def _command(pid: int) -> str:
    """The command line of ``pid`` (its name for a kernel thread), '' if gone."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read()
        if not raw:
            with open(f"/proc/{pid}/comm", "rb") as f:
                raw = f.read().strip()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()[:120]


def pid_alive(pid: int | None) -> bool:
    """True while ``pid`` is a process that has not exited.

    A zombie (exited, not yet reaped) counts as gone: ``psutil.pid_exists``
    and ``os.kill(pid, 0)`` still see it. A process started by a command that
    has since returned (``svit-cluster up``) is re-parented, and an init that
    does not reap orphans (as in some containers and micro-VMs) leaves it a
    zombie for good once it is killed.
    """
    return pid is not None and _proc_state(pid) not in (None, "Z", "X")


def wait_exited(pids: list[int], *, timeout_s: float = 5.0) -> None:
    """Wait until no process in ``pids`` is alive (:func:`pid_alive`).

    ``kill(SIGKILL)`` returns before the target exits; until it has, it still
    runs in ``/proc`` and holds its sockets.

    Raises:
        UnavailableError: one of them still ran after ``timeout_s`` seconds
            (for a SIGKILL: a process stuck in the kernel, state ``D``).
    """
    deadline = time.monotonic() + timeout_s
    for pid in pids:
        while pid_alive(pid):
            if time.monotonic() > deadline:
                raise UnavailableError(f"pid {pid} still runs {timeout_s} s after the "
                                       f"signal (state {_proc_state(pid)})")
            time.sleep(0.005)


def stop_pid(pid: int | None, *, grace_s: float = 10.0) -> None:
    """SIGTERM ``pid`` (and SIGCONT it, in case it is paused), then SIGKILL after ``grace_s``."""
    if pid is None:
        return
    try:
        proc = psutil.Process(pid)
        os.kill(pid, signal.SIGCONT)
        proc.terminate()
        proc.wait(grace_s)
    except psutil.TimeoutExpired:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    except (psutil.NoSuchProcess, ProcessLookupError):
        pass


def _proc_state(pid: int) -> str | None:
    """The one-letter state of ``pid`` from ``/proc/<pid>/stat``; None if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # the command name (field 2) may hold spaces and parentheses: split after its end
    return stat[stat.rindex(b")") + 2:][:1].decode()


class ServerError(UnavailableError):
    """A local server could not be started (binary missing, exited, not ready in time).

    Fields: ``binary`` (the executable name) and, when known, ``log`` (path of
    the server's log file) and ``reason`` (``"exited"`` or ``"timeout"``).
    """


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((_LOOPBACK, 0))
        return int(s.getsockname()[1])


def _find_binary(binary: str, package: str) -> str:
    path = shutil.which(binary)
    if path is None:
        raise ServerError(
            f"{binary} not found on PATH; install it with `apt-get install {package}`",
            binary=binary,
        )
    return path


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    """Ask Linux to SIGKILL this child when the thread that started it exits."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _child_setup(die_with_parent: bool, niceness: int | None) -> None:  # pragma: no cover
    """Runs in the child before exec: the parent-death signal, then the niceness
    (best effort: without ``CAP_SYS_NICE`` the child keeps the inherited one).
    Set before exec, so every thread the server starts inherits it."""
    if die_with_parent:
        _die_with_parent()
    if niceness is not None:
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, 0, niceness)


def log_tail(path: Path, max_bytes: int = 2000) -> str:
    """The last ``max_bytes`` bytes of the log at ``path`` as text ("" if unreadable)."""
    try:
        data = path.read_bytes()
    except OSError:
        return ""
    return data[-max_bytes:].decode("utf-8", errors="replace")


class _Started(ABC):
    """Something started and stopped as a whole: ``with x:`` starts it and stops
    it on the way out (also when the block raises)."""

    @abstractmethod
    def start(self) -> None:
        """Start it and wait until it answers."""

    @abstractmethod
    def stop(self) -> None:
        """Stop it. Safe to repeat."""

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class _Server(_Started):
    """Common process handling: start, readiness wait, stop by PID, restart."""

    _binary = ""
    _package = ""
    _name = ""

    def __init__(
        self,
        state_dir: str | os.PathLike[str],
        *,
        startup_timeout_s: float,
        die_with_parent: bool,
    ) -> None:
        if startup_timeout_s <= 0:
            raise ValueError("startup_timeout_s must be positive")
        self.state_dir = Path(state_dir)
        self.data_dir = self.state_dir / self._name
        self.log_path = self.state_dir / f"{self._name}.log"
        self.startup_timeout_s = startup_timeout_s
        self.die_with_parent = die_with_parent
        self.port = 0
        self._proc: subprocess.Popen[bytes] | None = None

    #: Scheduling niceness the server starts at (None: the inherited one).
    _niceness: int | None = None

    # -- subclass hooks ---------------------------------------------------------

    @abstractmethod
    def _command(self, binary: str) -> list[str]:
        """The server's command line."""

    def _allocate_ports(self) -> None:
        self.port = free_port()

    @abstractmethod
    def _ready(self) -> bool:
        """True once the server answers."""

    # -- lifecycle --------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        """PID of the running server, or None when it is not running."""
        if self._proc is None or self._proc.poll() is not None:
            return None
        return self._proc.pid

    @property
    def running(self) -> bool:
        return self.pid is not None

    def start(self) -> None:
        """Start the server and wait until it answers.

        The first start picks free loopback port(s) (and picks again, up to 3
        times, if the server exits at once, e.g. because another process took
        the port meanwhile); later starts reuse them.

        Raises:
            ServerError: the binary is missing (the message says how to install
                it), the server exited, or it was not ready within
                ``startup_timeout_s``. The server is stopped before raising.
        """
        if self.running:
            return
        binary = _find_binary(self._binary, self._package)
        chosen = not self.port
        for attempt in range(3 if chosen else 1):
            if chosen:
                self._allocate_ports()
            try:
                self._start_once(binary)
                return
            except ServerError as exc:
                if not chosen or attempt == 2 or exc.fields.get("reason") != "exited":
                    raise

    def _start_once(self, binary: str) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        try:
            self._proc = subprocess.Popen(
                self._command(binary),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=(functools.partial(_child_setup, self.die_with_parent,
                                              self._niceness)
                            if self.die_with_parent or self._niceness is not None else None),
            )
        finally:
            log.close()
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise ServerError(
                    f"{self._binary} exited with {self._proc.returncode}: "
                    f"{log_tail(self.log_path)[-400:]}",
                    binary=self._binary,
                    log=str(self.log_path),
                    reason="exited",
                )
            if self._ready():
                return
            time.sleep(0.02)
        self.stop()
        raise ServerError(
            f"{self._binary} not ready within {self.startup_timeout_s} s",
            binary=self._binary,
            log=str(self.log_path),
            reason="timeout",
        )

    def _signal(self, sig: signal.Signals) -> None:
        proc = self._proc
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, sig)

    def stop(self, *, grace_s: float = 10.0) -> None:
        """Stop the server by PID: SIGTERM, then SIGKILL after ``grace_s`` seconds.

        Safe to call when it is not running. Lets Redis flush its AOF on SIGTERM.
        """
        proc = self._proc
        if proc is None:
            return
        self._signal(signal.SIGCONT)  # a paused server cannot handle SIGTERM
        self._signal(signal.SIGTERM)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            self._signal(signal.SIGKILL)
            proc.wait(timeout=10)

    def kill9(self) -> None:
        """SIGKILL the server by PID and reap it (no flush, no clean shutdown)."""
        proc = self._proc
        if proc is None:
            return
        self._signal(signal.SIGKILL)
        proc.wait(timeout=10)

    def pause(self, *, timeout_s: float = 5.0) -> None:
        """SIGSTOP the server (it keeps its sockets but answers nothing).

        Returns once the kernel reports the process stopped (``T`` in
        ``/proc/<pid>/stat``), not merely signalled: on a loaded machine a
        request sent right after ``kill`` could otherwise still be answered.

        Raises:
            UnavailableError: it did not stop within ``timeout_s`` seconds.
        """
        self._signal(signal.SIGSTOP)
        proc = self._proc
        if proc is not None and proc.poll() is None:
            wait_stopped([proc.pid], timeout_s=timeout_s)

    def resume(self) -> None:
        """SIGCONT a paused server."""
        self._signal(signal.SIGCONT)

    def restart(self) -> None:
        """Stop (if running) and start again on the same port(s) and data directory.

        Raises:
            ServerError: as :meth:`start`.
        """
        self.stop()
        self.start()


class RedisServer(_Server):
    """A local ``redis-server`` with a durable append-only file.

    Args:
        state_dir: parent directory; the data lives in ``<state_dir>/redis`` and
            the log in ``<state_dir>/redis.log``.
        appendfsync: ``"always"`` (default: fsync before every reply),
            ``"everysec"`` or ``"no"``; only ``always`` keeps every
            acknowledged commit across ``kill -9``.
        startup_timeout_s: how long :meth:`start` waits for ``PING`` (default 10 s).
        die_with_parent: SIGKILL the server when the *thread* that started it
            exits (Linux ``PR_SET_PDEATHSIG``; default False). Tests set it so a
            crashed test run leaves no server behind.

    Attributes:
        port: the TCP port (0 before the first start).
        url: ``redis://127.0.0.1:<port>/0``.
    """

    _binary = "redis-server"
    _package = "redis-server"
    _name = "redis"

    def __init__(
        self,
        state_dir: str | os.PathLike[str],
        *,
        appendfsync: str = "always",
        startup_timeout_s: float = 10.0,
        die_with_parent: bool = False,
    ) -> None:
        if appendfsync not in ("always", "everysec", "no"):
            raise ValueError(f"appendfsync must be always|everysec|no, got {appendfsync!r}")
        super().__init__(
            state_dir, startup_timeout_s=startup_timeout_s, die_with_parent=die_with_parent
        )
        self.appendfsync = appendfsync

    @property
    def url(self) -> str:
        return f"redis://{_LOOPBACK}:{self.port}/0"

    def _command(self, binary: str) -> list[str]:
        return [
            binary,
            "--port", str(self.port),
            "--bind", _LOOPBACK,
            "--dir", str(self.data_dir),
            "--appendonly", "yes",
            "--appendfsync", self.appendfsync,
            "--save", "",
            "--daemonize", "no",
            "--protected-mode", "yes",
        ]

    def _ready(self) -> bool:
        # A raw PING, so the launcher does not depend on a client library; a
        # server still loading its AOF answers -LOADING and is not ready yet.
        try:
            with socket.create_connection((_LOOPBACK, self.port), timeout=0.5) as s:
                s.sendall(b"PING\r\n")
                return s.recv(64).startswith(b"+PONG")
        except OSError:
            return False


class EtcdServer(_Server):
    """A local single-member ``etcd`` with its own data directory, started at
    niceness :data:`~svit_cluster.defaults.LEASE_NICENESS` (when allowed), as
    high as the lease keepers whose keepalives it answers.

    Args:
        state_dir: parent directory; the data lives in ``<state_dir>/etcd`` and
            the log in ``<state_dir>/etcd.log``.
        startup_timeout_s: how long :meth:`start` waits for ``/health`` (default 15 s).
        die_with_parent: as for :class:`RedisServer`.
        compaction_retention: etcd's ``--auto-compaction-retention`` in periodic
            mode, a duration such as ``"5m"`` (default :data:`COMPACTION_RETENTION`).

    Attributes:
        port: the client port; ``peer_port``: the peer port.
        endpoint: ``127.0.0.1:<port>``; ``url``: ``http://127.0.0.1:<port>``.
    """

    _binary = "etcd"
    _package = "etcd-server"
    _name = "etcd"
    # the other end of every host's keepalive: as high as the lease keepers
    _niceness = LEASE_NICENESS

    def __init__(
        self,
        state_dir: str | os.PathLike[str],
        *,
        startup_timeout_s: float = 15.0,
        die_with_parent: bool = False,
        compaction_retention: str = "",
    ) -> None:
        super().__init__(
            state_dir, startup_timeout_s=startup_timeout_s, die_with_parent=die_with_parent
        )
        self.peer_port = 0
        self.compaction_retention = compaction_retention or COMPACTION_RETENTION

    def _allocate_ports(self) -> None:
        self.port = free_port()
        self.peer_port = free_port()
        while self.peer_port == self.port:
            self.peer_port = free_port()

    @property
    def host(self) -> str:
        return _LOOPBACK

    @property
    def endpoint(self) -> str:
        return f"{_LOOPBACK}:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{_LOOPBACK}:{self.port}"

    def _command(self, binary: str) -> list[str]:
        peer = f"http://{_LOOPBACK}:{self.peer_port}"
        return [
            binary,
            "--name", "svit",
            "--data-dir", str(self.data_dir),
            "--listen-client-urls", self.url,
            "--advertise-client-urls", self.url,
            "--listen-peer-urls", peer,
            "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"svit={peer}",
            "--initial-cluster-state", "new",
            # Keep a few minutes of history, like the chart (etcd.autoCompaction):
            # revisions of released owner records (every passivation, every
            # deleted process) do not pile up. Tokens are revisions, which
            # compaction never changes; a watch that starts below the compacted
            # revision fails, and the route cache then reloads.
            "--auto-compaction-mode", "periodic",
            "--auto-compaction-retention", self.compaction_retention,
        ]

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=0.5) as resp:
                return b'"true"' in resp.read()
        except (OSError, urllib.error.URLError):
            return False
