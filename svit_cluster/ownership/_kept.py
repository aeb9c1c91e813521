"""The host agent's handle on a lease held by a keeper process (:mod:`._keeper`).

:class:`KeptLease` has the surface of :class:`~svit_cluster.ownership.HostLease`
that the agent and :class:`~svit_cluster.ownership.Owners` use (``lease_id``,
``client``, ``state``, ``ensure_held``, listeners, ``revoke``, ``close``), but
the keepalives run in another process. Its state is judged exactly as a
:class:`HostLease` judges its own (:func:`~svit_cluster.ownership.judge_state`),
from the keeper's shared record read at the moment of asking, with this
process's monotonic clock (the same clock as the keeper's). So the lease
states keep their meaning (see :class:`~svit_cluster.ownership.LeaseState`):
HELD still means "a keepalive succeeded recently and the local deadline has not
passed", only now no load inside the agent can delay that keepalive.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from svit_cluster.errors import UnavailableError
from svit_cluster.ownership._etcd import DEFAULT_REQUEST_TIMEOUT_S
from svit_cluster.ownership._lease import (
    LeaseState,
    certain_until,
    deadline_reason,
    judge_state,
    revoke_lease_id,
    tell_listeners,
)
from svit_cluster.ownership._status_file import LAG_BUCKETS_S, LeaseStatus, StatusFile

__all__ = ["KeptLease", "KeptLeaseCollector"]

log = logging.getLogger(__name__)

Listener = Callable[[LeaseState], None]

#: Seconds between two looks at the keeper's record for state changes (listeners).
WATCH_S = 0.1


def _status_dir() -> str:
    """Where the shared record lives: ``/dev/shm`` (memory) when writable, else the
    temporary directory. The keeper unlinks it as soon as both ends map it."""
    shm = "/dev/shm"
    if os.path.isdir(shm) and os.access(shm, os.W_OK):
        return shm
    return tempfile.gettempdir()


class KeptLease:
    """A host lease kept alive by a keeper process this object starts.

    Args:
        client: this process's ``aetcd.Client`` (ownership transactions and the
            fallback revoke use it; the keeper has its own connection).
        endpoint: the etcd endpoint(s) the keeper connects to.
        ttl_s: requested TTL in whole seconds.
        safety_margin_s: subtracted from the local deadline (< ``ttl_s``).
        request_timeout_s: deadline of one etcd request, seconds (default 2).
        watch: ``{label: pid}`` of processes the host needs (the agent itself,
            the raylet): the keeper revokes the lease when one is gone or
            stopped.
        niceness: the niceness the keeper asks for (None: the inherited one).
        grant_timeout_s: how long :meth:`grant` waits for the keeper's grant.
        clock: monotonic clock in seconds; must be ``time.monotonic`` in
            production (the keeper's deadlines are on it).
        python: the interpreter that runs the keeper (default: this one).

    The keeper's output goes to this process's stderr (a Ray worker's log).
    """

    def __init__(self, client: Any, endpoint: str, *, ttl_s: int, safety_margin_s: float,
                 request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
                 watch: dict[str, int] | None = None, niceness: int | None = None,
                 grant_timeout_s: float = 15.0,
                 clock: Callable[[], float] = time.monotonic,
                 python: str = sys.executable) -> None:
        self.client = client
        self.endpoint = endpoint
        self.ttl_s = ttl_s
        self.safety_margin_s = safety_margin_s
        self.request_timeout_s = request_timeout_s
        self.watch = dict(watch or {})
        self.niceness = niceness
        self.grant_timeout_s = grant_timeout_s
        self._clock = clock
        self._python = python
        self._file: StatusFile | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._send_lock = threading.Lock()
        self._last = LeaseStatus()
        self._lost_reason: str | None = None
        self._listeners: list[Listener] = []
        self._reported: LeaseState | None = None
        self._watcher: asyncio.Task[None] | None = None
        self._changed: asyncio.Condition | None = None
        #: True once the lease was revoked on etcd (by the keeper or by this object).
        self.revoked = False

    # -- the keeper's record ----------------------------------------------------------

    def status(self) -> LeaseStatus:
        """The keeper's latest published record (the last good copy if a read failed)."""
        if self._file is not None:
            got = self._file.read()
            if got is not None:
                self._last = got
        return self._last

    @property
    def lease_id(self) -> int | None:
        """The etcd lease id; None before the grant."""
        lease_id = self._last.lease_id or self.status().lease_id
        return lease_id or None

    @property
    def keeper_pid(self) -> int | None:
        """The keeper process id (None before :meth:`grant`)."""
        return None if self._proc is None else self._proc.pid

    @property
    def granted_ttl_s(self) -> int:
        return self.status().ttl_s

    @property
    def keepalive_interval_s(self) -> float:
        return self.status().interval_s

    @property
    def deadline(self) -> float:
        """Local monotonic time (s) after which the lease is LOST."""
        return self.status().deadline

    @property
    def certain_until(self) -> float:
        """As :attr:`HostLease.certain_until`, from the keeper's record: ``last_ok
        + ttl_s - safety_margin_s``, at most the deadline (s, monotonic; see
        :func:`~svit_cluster.ownership._lease.certain_until`)."""
        st = self.status()
        return certain_until(deadline=st.deadline, last_ok=st.last_ok,
                             ttl_s=self.ttl_s, safety_margin_s=self.safety_margin_s)

    @property
    def last_keepalive_lag_s(self) -> float:
        return self.status().last_lag_s

    @property
    def max_keepalive_lag_s(self) -> float:
        return self.status().max_lag_s

    @property
    def max_keepalive_rtt_s(self) -> float:
        return self.status().max_rtt_s

    @property
    def unhealthy(self) -> str | None:
        """Why the keeper found the host unable to serve (None while it can)."""
        return self.status().unhealthy or None

    @property
    def lost_reason(self) -> str | None:
        """Why the lease became LOST (None while it is not)."""
        return self._lost_reason

    @property
    def state(self) -> LeaseState:
        """HELD / SUSPENDED / LOST now (see :class:`LeaseState`); LOST is latched."""
        if self._lost_reason is not None:
            return LeaseState.LOST
        st = self.status()
        if not st.granted:
            return LeaseState.LOST
        if st.revoked:
            self.revoked = True
        if st.lost:
            self._lose(st.lost_reason or "the keeper reports the lease lost")
            return LeaseState.LOST
        now = self._clock()
        state = judge_state(now, deadline=st.deadline, last_ok=st.last_ok,
                            stopped=st.stopped or st.exited, interval_s=st.interval_s)
        if state is LeaseState.LOST:
            self._lose(deadline_reason(now, st.deadline, st.last_ok)
                       + (" (the keeper had exited)" if st.exited else ""))
        return state

    def _lose(self, reason: str) -> None:
        """Latch LOST (keeping the first reason) and have the keeper revoke now.

        The holder's verdict ends the lease at etcd too: the keeper judges from
        the same record, but a record read late (a keepalive that succeeded
        just before the deadline but was published after it; a torn read that
        kept the last good copy) can find LOST here while the keeper still
        holds the lease. The agent has then fenced out its actors, and a lease
        still refreshed would keep their ownership records in etcd -- routes
        to actors that refuse -- for as long as the keeper runs. So the first
        LOST verdict tells the keeper to revoke (it exits either way; if etcd
        is out of reach the lease lapses after its TTL).
        """
        if self._lost_reason is None:
            self._lost_reason = reason
            self._send("revoke")

    def ensure_held(self) -> None:
        """Refuse to start new work unless HELD.

        Raises:
            UnavailableError: (``unavailable``) SUSPENDED or LOST;
                ``fields["lease_state"]`` says which.
        """
        state = self.state
        if state is not LeaseState.HELD:
            raise UnavailableError(f"host lease is {state}; not starting new work",
                                   lease_state=str(state), lease_id=self.lease_id)

    # -- lifecycle ----------------------------------------------------------------------

    async def grant(self) -> KeptLease:
        """Start the keeper and wait until it holds a granted lease.

        Returns:
            ``self``, HELD.

        Raises:
            UnavailableError: the keeper could not be started, could not grant
                a lease (its reason in the message), or did not within
                ``grant_timeout_s``.
        """
        self._file = StatusFile.create(_status_dir())
        cmd = [self._python, "-m", "svit_cluster.ownership._keeper", "--etcd", self.endpoint,
               "--ttl", str(self.ttl_s), "--margin", repr(self.safety_margin_s),
               "--request-timeout", repr(self.request_timeout_s),
               "--status", self._file.path]
        for label, pid in sorted(self.watch.items()):
            cmd += ["--watch", f"{label}:{pid}"]
        if self.niceness is not None:
            cmd += ["--niceness", str(self.niceness)]
        try:
            self._proc = await asyncio.to_thread(
                subprocess.Popen, cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                close_fds=True)
        except OSError as exc:
            self._file.unlink()
            raise UnavailableError(f"cannot start the lease keeper: {exc}") from exc
        end = self._clock() + self.grant_timeout_s
        while True:
            st = self.status()
            if st.granted:
                break
            code = self._proc.poll()
            if code is not None or st.exited:
                self._file.unlink()
                raise UnavailableError(
                    f"the lease keeper could not grant a lease: {st.error or f'exit {code}'}")
            if self._clock() >= end:
                self._kill()
                self._file.unlink()
                raise UnavailableError(
                    f"the lease keeper granted no lease within {self.grant_timeout_s} s")
            await asyncio.sleep(0.02)
        self._reported = self.state
        self._watcher = asyncio.get_running_loop().create_task(self._watch())
        return self

    async def _watch(self) -> None:
        """Call listeners on state changes; reap the keeper once it exits."""
        while True:
            await asyncio.sleep(WATCH_S)
            await self._notify()
            if self._proc is not None and self._proc.poll() is not None \
                    and self.state is LeaseState.LOST:
                return

    async def _notify(self) -> None:
        state = self.state
        if state is self._reported:
            return
        self._reported = state
        tell_listeners(self._listeners, state, self.lease_id, self.lost_reason)
        cond = self._condition()
        async with cond:
            cond.notify_all()

    def _condition(self) -> asyncio.Condition:
        if self._changed is None:
            self._changed = asyncio.Condition()
        return self._changed

    def add_listener(self, listener: Listener) -> None:
        """Call ``listener(state)`` on the event loop of :meth:`grant` when the state changes
        (within :data:`WATCH_S` seconds)."""
        self._listeners.append(listener)

    def remove_listener(self, listener: Listener) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    async def wait_for(self, state: LeaseState, *, timeout_s: float) -> bool:
        """Wait until :attr:`state` is ``state``; False after ``timeout_s`` seconds."""
        end = self._clock() + timeout_s
        while self.state is not state:
            if self._clock() >= end:
                return False
            await asyncio.sleep(0.02)
        return True

    def _send(self, command: str) -> bool:
        """Write one command line to the keeper; False when it is gone."""
        proc = self._proc
        if proc is None or proc.stdin is None:
            return False
        with self._send_lock:
            try:
                proc.stdin.write(command.encode("utf-8", "replace") + b"\n")
                proc.stdin.flush()
                return True
            except (BrokenPipeError, ValueError, OSError):
                return False

    def report_unhealthy(self, reason: str) -> None:
        """The host cannot serve (e.g. Ray declared its node dead): the keeper
        revokes the lease within 0.2 s. Callable from any thread."""
        self._send(f"unhealthy {reason.replace(chr(10), ' ')}")

    def stop_keepalive(self) -> None:
        """Stop refreshing (tests; a simulated cut-off): SUSPENDED now, LOST at the deadline."""
        self._send("pause")

    async def _await_exit(self, timeout_s: float) -> bool:
        proc = self._proc
        if proc is None:
            return True
        try:
            await asyncio.to_thread(proc.wait, timeout_s)
            return True
        except subprocess.TimeoutExpired:
            return False

    def _kill(self) -> None:
        proc = self._proc
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(2.0)

    def _stop_watch(self) -> None:
        task, self._watcher = self._watcher, None
        if task is not None and not task.done():
            task.cancel()

    async def close(self) -> None:
        """Stop the keeper without revoking (the lease expires by itself after its TTL)."""
        self._stop_watch()
        if self._send("close") and not await self._await_exit(3.0):
            self._kill()
        self._kill()
        if self._proc is not None and self._proc.stdin is not None:
            with contextlib.suppress(OSError):
                self._proc.stdin.close()
        self.status()  # keep the final record
        if self._file is not None:
            self._file.close()
            self._file = None

    async def revoke(self) -> None:
        """Stop the keeper and revoke the lease (deleting every key under it).

        The state becomes LOST even if etcd cannot be reached (the lease then
        expires by itself after its TTL).

        Raises:
            UnavailableError: etcd could not be reached to revoke.
        """
        lease_id = self.lease_id
        self._stop_watch()
        if self._send("revoke"):
            if not await self._await_exit(3 * self.request_timeout_s + 2.0):
                self._kill()
        self._kill()
        st = self.status()
        self._lose("revoked by its holder")
        if self._file is not None:
            self._file.close()
            self._file = None
        if st.revoked or lease_id is None:
            self.revoked = lease_id is not None
            return
        # The keeper could not (it was gone, or etcd refused it): try from here.
        if not await revoke_lease_id(self.client, lease_id, timeout_s=self.request_timeout_s):
            raise UnavailableError(f"etcd kept lease {lease_id} after a failed revoke",
                                   op="lease_revoke", outcome="unknown")
        self.revoked = True


class KeptLeaseCollector(Collector):
    """Prometheus view of the current :class:`KeptLease` of a host agent.

    Metrics (per scrape, from the keeper's record):
        ``svit_lease_keepalive_lag_seconds`` (histogram): how late each
            keepalive round started after it was due (the keeper's rounds of
            the current lease; a new lease starts a new histogram).
        ``svit_lease_keepalive_age_seconds``: seconds since the last successful
            keepalive was sent.
        ``svit_lease_keepalive_max_lag_seconds``, ``..._max_rtt_seconds``: the
            largest start lag and round trip of the current lease.

    Args:
        lease: returns the agent's current lease (None between leases).
    """

    def __init__(self, lease: Callable[[], KeptLease | None]) -> None:
        self._lease = lease

    def collect(self) -> Iterator[Any]:
        lease = self._lease()
        st = lease.status() if lease is not None else LeaseStatus()
        running = 0
        buckets: list[tuple[str, float]] = []
        for bound, count in zip((*LAG_BUCKETS_S, float("inf")), st.lag_buckets, strict=True):
            running += count
            buckets.append(("+Inf" if bound == float("inf") else repr(bound), running))
        yield HistogramMetricFamily(
            "svit_lease_keepalive_lag_seconds",
            "Delay between a keepalive round being due and its start (the lease keeper's).",
            buckets=buckets, sum_value=st.lag_sum_s)
        age = GaugeMetricFamily("svit_lease_keepalive_age_seconds",
                                "Seconds since the last successful keepalive was sent.")
        if st.granted:
            age.add_metric([], max(0.0, time.monotonic() - st.last_ok))
        yield age
        yield GaugeMetricFamily("svit_lease_keepalive_max_lag_seconds",
                                "Largest keepalive start lag of the current lease (s).",
                                value=st.max_lag_s)
        yield GaugeMetricFamily("svit_lease_keepalive_max_rtt_seconds",
                                "Slowest keepalive round trip of the current lease (s).",
                                value=st.max_rtt_s)
