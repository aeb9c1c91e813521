"""One etcd lease per host, kept alive in the background.

What a lease does and does not prove. While the lease lives, the host's
ownership keys exist, so no other host can acquire its processes. But the host
only *believes* the lease lives, from its own monotonic clock: a paused or
partitioned host can believe it too long. That is why a commit never relies on
the lease: every commit carries the fencing token (the ownership key's create
revision) and Redis refuses a token below the fence. The lease state below is
self-fencing on top of that: it makes a healthy host stop early, it is not the
proof.

The local deadline is ``send time of the last successful keepalive + granted
TTL - safety margin``. Since the server renewed the lease *after* we sent the
request, the server-side expiry is never earlier than that deadline unless the
local clock runs slower than etcd's by more than the margin over one TTL.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from enum import StrEnum
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from tenacity import (
    AsyncRetrying,
    retry_if_exception_type,
    stop_after_attempt,
    stop_after_delay,
    wait_exponential,
)

from svit_cluster.defaults import DEFAULT_LEASE_TTL_S
from svit_cluster.errors import ConfigurationError, UnavailableError
from svit_cluster.ownership._etcd import DEFAULT_REQUEST_TIMEOUT_S, etcd_call
from svit_cluster.ownership._failover import FailoverClient, member_answers

__all__ = ["DEFAULT_TTL_S", "HostLease", "LeaseMetrics", "LeaseState", "certain_until",
           "deadline_reason", "judge_state", "revoke_lease_id", "tell_listeners"]

log = logging.getLogger(__name__)

#: Default lease time-to-live, in seconds: the cluster's host lease TTL
#: (``defaults.DEFAULT_LEASE_TTL_S``).
DEFAULT_TTL_S = DEFAULT_LEASE_TTL_S

Clock = Callable[[], float]
Listener = Callable[["LeaseState"], None]
#: Returns ``None`` while the host can serve, else the reason it cannot
#: (called from the keepalive thread before every keepalive; must not block long).
HealthCheck = Callable[[], "str | None"]


class LeaseMetrics:
    """Prometheus metrics of host leases (one registry; several leases may share it).

    Names:
        ``svit_lease_keepalive_lag_seconds`` -- how late each keepalive round
            started after it was due (seconds). A lag near the TTL means the
            keepalives starve.
        ``svit_lease_keepalive_age_seconds{lease}`` -- seconds since the send
            time of the last successful keepalive of the lease.
        ``svit_lease_keepalive_skipped_total`` -- rounds not sent because the
            host's health check failed.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.lag = Histogram("svit_lease_keepalive_lag_seconds",
                             "Delay between a keepalive round being due and its start.",
                             buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30),
                             registry=r)
        self.age = Gauge("svit_lease_keepalive_age_seconds",
                         "Seconds since the last successful keepalive was sent.",
                         ["lease"], registry=r)
        self.skipped = Counter("svit_lease_keepalive_skipped",
                             "Keepalive rounds skipped because the host is unhealthy.",
                             registry=r)


class LeaseState(StrEnum):
    """What the holder of a :class:`HostLease` may assume.

    HELD:
        A keepalive succeeded recently and the local deadline has not passed.
        The host may start new commits for the processes it owns. (Each commit
        is still checked against the Redis fence; HELD is not a proof.)
    SUSPENDED:
        No keepalive was answered for two keepalive intervals, or the host
        stopped its keepalives itself (paused, unhealthy), but by the local
        clock the lease cannot have expired yet -- or its local deadline passed
        while etcd answered but kept no keepalive (a leader election), within
        the election grace (see :class:`HostLease`). Do NOT start new commits
        or acquire processes; do not assume the ownership keys are still there.
        May return to HELD when a keepalive succeeds in time. One failed
        attempt alone does not suspend: it is retried on the next member
        within a fraction of an interval, and until two intervals pass the
        lease is as certain as after the last success (the deadline counts
        from that success), so pausing every actor of the host at the first
        failed attempt made the loss of one etcd member a host-wide stall.
    LOST:
        The deadline passed (extended by the election grace only when etcd
        answered), etcd reported the lease gone, or it was revoked.
        Terminal, even if a late keepalive succeeds (an etcd restart renews
        every lease, so etcd may still list it): assume every ownership under
        this lease is held by someone else. Stop serving; a new
        :class:`HostLease` is needed to serve again.
    """

    HELD = "held"
    SUSPENDED = "suspended"
    LOST = "lost"


#: The election grace is considered once the local deadline is this many
#: keepalive intervals away (or closer) with keepalives failing.
PROBE_WINDOW_INTERVALS = 2.0
#: Seconds the election grace's probe may take (shared by the members it asks).
PROBE_TIMEOUT_S = 1.0


def judge_state(now: float, *, deadline: float, last_ok: float, stopped: bool,
                interval_s: float) -> LeaseState:
    """The state of a granted, not (yet) latched-LOST lease at monotonic time ``now``.

    LOST at or after the local ``deadline``; SUSPENDED while the host has
    ``stopped`` its keepalives (paused, unhealthy, no keeper) or none succeeded
    for two intervals (``interval_s``); HELD otherwise. A failing attempt that
    the next round retries is not ``stopped``. Shared by :class:`HostLease` and
    the keeper's view of it (:class:`svit_cluster.ownership.KeptLease`), so both
    judge alike.
    """
    if now >= deadline:
        return LeaseState.LOST
    if stopped or now >= last_ok + 2 * interval_s:
        return LeaseState.SUSPENDED
    return LeaseState.HELD


def certain_until(*, deadline: float, last_ok: float, ttl_s: float,
                  safety_margin_s: float) -> float:
    """Local monotonic time (s) until which a lease cannot have expired on etcd,
    by the last answered keepalive alone.

    ``min(deadline, last_ok + ttl_s - safety_margin_s)``: ``last_ok`` is the
    local send time (s) of the last successful keepalive (or the grant),
    ``ttl_s`` the requested TTL (s) and ``safety_margin_s`` the margin (s)
    subtracted for clock drift; never later than the local ``deadline`` (s), and
    never extended by the election grace. A host may keep committing until
    then while keepalives fail. Shared by :class:`HostLease` and the keeper's
    view of it (:class:`svit_cluster.ownership.KeptLease`), so both count alike.
    """
    return min(deadline, last_ok + ttl_s - safety_margin_s)


def tell_listeners(listeners: list[Listener], state: LeaseState, lease_id: int | None,
                   lost_reason: str | None) -> None:
    """Log a lease's new ``state`` and call each listener with it; a listener
    that raises is logged and the others still run (it must not stop the loop
    that tells them)."""
    if state is LeaseState.LOST:
        log.warning("lease %s is now lost: %s", lease_id, lost_reason)
    else:
        log.info("lease %s is now %s", lease_id, state)
    for listener in list(listeners):
        try:
            listener(state)
        except Exception:
            log.exception("lease listener failed")


def deadline_reason(now: float, deadline: float, last_ok: float) -> str:
    """Why a lease judged at ``now`` is LOST by its local deadline (for ``lost_reason``)."""
    return (f"local deadline passed {now - deadline:.2f} s ago, "
            f"{now - last_ok:.2f} s after the last keepalive was sent")


class HostLease:
    """The host's etcd lease with a background keepalive loop.

    Args:
        client: an ``aetcd.Client`` (see :func:`svit_cluster.ownership.open_client`).
        ttl_s: requested TTL in whole seconds (:data:`DEFAULT_TTL_S`; etcd may grant more,
            its minimum is about 2 s).
        safety_margin_s: subtracted from the local deadline (default 1 s);
            must be below ``ttl_s``.
        keepalive_interval_s: time between keepalives (default
            ``(ttl_s - safety_margin_s) / 4``: 1 s at TTL 5 s and a 1 s margin).
            What makes a lease survive the loss of the etcd leader: the lease
            is LOST locally at ``last success + TTL - margin``, the last success
            can be one interval before the leader dies, and a 3-member etcd
            with the default 1 s election timeout needs 1-2 s to elect a new
            leader (more after a split vote). ``ttl_s / 3`` (etcd's own client
            cadence) would leave under 0.1 s of slack at TTL 5 s.
        request_timeout_s: deadline of one etcd request (default 2 s).
        retry_timeout_s: deadline of a keepalive attempt once keepalives fail
            (default ``min(request_timeout_s, max(0.25, interval / 2))``): the
            first attempt of a round gets ``request_timeout_s``, retries move to
            the next member after this long (with a multi-member client).
        retry_attempts: attempts per grant or keepalive round (default 3),
            with exponential backoff; a round starts no attempt after one
            interval, and after a failed round the next starts after
            :attr:`retry_pause_s` (not a whole interval), until the deadline.
        clock: monotonic clock in seconds (injectable for tests).
        keepalive_client: factory of a second ``aetcd.Client``. When given, the
            keepalive loop runs in its own daemon thread with its own event loop
            and this client, so a blocked or overloaded caller event loop cannot
            starve the keepalives. Listeners are then called on
            the caller's loop when it next runs. Without it, the loop is a task
            on the caller's loop.
        health_check: called before every keepalive round; while it returns a
            reason (a string) the round is skipped, so the lease lapses after its
            TTL unless the host recovers (a host's lease means the host can
            serve). An exception counts as healthy (logged).
        metrics: :class:`LeaseMetrics` to record keepalive lag in (optional).
        revoke_when_unhealthy: with a ``health_check``, also run it every
            ``health_poll_s`` seconds between keepalives, and the moment it
            gives a reason, revoke the lease on etcd (best effort) and become
            LOST instead of letting it lapse after the TTL: the host knows it
            cannot serve, so its processes need not wait for expiry. Default
            False (keepalives are only skipped).
        health_poll_s: period of that check in seconds (default 0.2).
        on_round: called (on the keepalive loop, so it must be quick and must
            not raise) after the grant, after every keepalive round, and when
            the lease becomes LOST: the lease keeper publishes its state then
            (:mod:`svit_cluster.ownership._keeper`).
        election_grace_s: seconds the local deadline moves, once per outage,
            when no keepalive succeeded for two intervals and, within
            :data:`PROBE_WINDOW_INTERVALS` intervals of the deadline, an etcd
            member answers a status request (default ``ttl_s``; 0: never).
            See "Election grace" below.
        probe_client: factory of the ``aetcd.Client`` the election grace asks
            (its own, so that its failovers never close a channel under a
            keepalive); default: ``keepalive_client``, else ``client``.

    Election grace. A 3-member etcd that loses its leader keeps no keepalive
    until a new leader is elected (one to two election timeouts, 1-2 s with
    etcd's defaults; more after a split vote), and the last keepalive may have
    been sent an interval before: at TTL 3 s the local deadline (2.25 s after
    it) often passes first, and every host of the cluster would lose its lease
    at once. Nothing expires meanwhile, though: without a leader no lease
    expires and no key can be written, and a new leader renews every lease by
    at least its TTL when it takes over (etcd's lessor ``Promote``). So when
    the deadline nears with keepalives failing while a member answers (etcd
    is reachable, it is the leader that is missing), the lease stays
    SUSPENDED for ``election_grace_s`` more instead of becoming LOST: the host
    serves nothing meanwhile, and only a keepalive answered with TTL > 0 makes
    it HELD again. That reply comes from the leader and proves the lease
    exists now, hence every ownership key under it (etcd deletes a lease's
    keys with it), so no other host can have claimed those processes and
    their fencing tokens are still the newest. A host that reaches no member
    (cut off from etcd) gets no grace: it is LOST at the deadline, and a peer
    revokes its lease at once (``AgentLease.revoke_lost``).

    Raises:
        ConfigurationError: an option is out of range.
    """

    def __init__(
        self,
        client: Any,
        *,
        ttl_s: int = DEFAULT_TTL_S,
        safety_margin_s: float = 1.0,
        keepalive_interval_s: float | None = None,
        request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
        retry_timeout_s: float | None = None,
        retry_attempts: int = 3,
        clock: Clock = time.monotonic,
        keepalive_client: Callable[[], Any] | None = None,
        health_check: HealthCheck | None = None,
        metrics: LeaseMetrics | None = None,
        revoke_when_unhealthy: bool = False,
        health_poll_s: float = 0.2,
        on_round: Callable[[], None] | None = None,
        election_grace_s: float | None = None,
        probe_client: Callable[[], Any] | None = None,
    ) -> None:
        if type(ttl_s) is not int or ttl_s < 1:
            raise ConfigurationError(f"ttl_s must be a positive integer, got {ttl_s!r}")
        if not 0 <= safety_margin_s < ttl_s:
            raise ConfigurationError("safety_margin_s must be in [0, ttl_s)")
        interval = ((ttl_s - safety_margin_s) / 4 if keepalive_interval_s is None
                    else keepalive_interval_s)
        if not 0 < interval < ttl_s - safety_margin_s:
            raise ConfigurationError("keepalive_interval_s must be in (0, ttl_s - margin)")
        if request_timeout_s <= 0 or retry_attempts < 1:
            raise ConfigurationError("request_timeout_s and retry_attempts must be positive")
        if retry_timeout_s is None:
            retry_timeout_s = min(request_timeout_s, max(0.25, interval / 2))
        if retry_timeout_s <= 0:
            raise ConfigurationError("retry_timeout_s must be positive")
        self.retry_timeout_s = retry_timeout_s
        self._probe_client_factory = probe_client or keepalive_client
        self._probe_client: Any = None
        self.election_grace_s = float(ttl_s) if election_grace_s is None else election_grace_s
        if self.election_grace_s < 0:
            raise ConfigurationError("election_grace_s must be >= 0")
        #: True while the current outage's deadline was moved by the election grace.
        self.in_grace = False
        #: How many times the election grace moved the deadline (outages ridden out
        #: or not).
        self.graces = 0
        self.client = client
        self.ttl_s = ttl_s
        self.safety_margin_s = safety_margin_s
        self.keepalive_interval_s = interval
        self.request_timeout_s = request_timeout_s
        self.retry_attempts = retry_attempts
        self._clock = clock
        self.lease_id: int | None = None
        #: TTL granted by etcd (>= ``ttl_s``), in seconds; 0 before :meth:`grant`.
        self.granted_ttl_s = 0
        self._deadline = 0.0
        self._last_ok = 0.0
        self._failing = False
        self._retry_soon = False
        self._lost = False
        self._paused = False
        self._crashed = False
        #: Pause (s) before the next round after a failed one (``min(0.2, interval / 4)``).
        self.retry_pause_s = min(0.2, interval / 4)
        self._task: asyncio.Task[None] | None = None
        self._listeners: list[Listener] = []
        self._reported: LeaseState | None = None
        self._changed: asyncio.Condition | None = None
        self._keepalive_client_factory = keepalive_client
        self._health_check = health_check
        self.metrics = metrics
        if health_poll_s <= 0:
            raise ConfigurationError("health_poll_s must be positive")
        self.revoke_when_unhealthy = revoke_when_unhealthy and health_check is not None
        self.health_poll_s = health_poll_s
        self._on_round = on_round
        #: True once this object revoked the lease on etcd (:meth:`revoke`, or the
        #: unhealthy-host revoke): its keys are gone, nobody needs to revoke it again.
        self.revoked = False
        #: Reason the last health check gave, or None while healthy.
        self.unhealthy: str | None = None
        #: Keepalive rounds started (each one a lag sample).
        self.keepalive_rounds = 0
        #: Start lag (s) of the most recent keepalive round, and the largest seen.
        self.last_keepalive_lag_s = 0.0
        self.max_keepalive_lag_s = 0.0
        #: Round trip (s) of the slowest successful keepalive request.
        self.max_keepalive_rtt_s = 0.0
        #: Why the lease became LOST (None while it is not).
        self.lost_reason: str | None = None
        self._owner_loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._thread_loop: asyncio.AbstractEventLoop | None = None
        self._thread_task: asyncio.Task[None] | None = None
        self._ka_client: Any = None
        self._threaded = False
        self._closing = False
        #: Deadline (s) of the keepalive client's first connection, made before the grant.
        self.connect_timeout_s = max(request_timeout_s, 5.0)
        self._ka_connected = threading.Event()
        self._granted = threading.Event()

    # -- state ------------------------------------------------------------------

    @property
    def state(self) -> LeaseState:
        """The current state, judged from the local monotonic clock (thread-safe read)."""
        if self._lost or self.lease_id is None:
            return LeaseState.LOST
        now = self._clock()
        state = judge_state(now, deadline=self._deadline, last_ok=self._last_ok,
                            stopped=self.stopped, interval_s=self.keepalive_interval_s)
        if state is LeaseState.LOST:
            # latched: a late keepalive reply must not revive it
            self._lose(deadline_reason(now, self._deadline, self._last_ok))
        return state

    def _lose(self, reason: str) -> None:
        """Latch LOST, keeping the first reason (read by :attr:`lost_reason`)."""
        if not self._lost:
            self.lost_reason = reason
        self._lost = True

    @property
    def deadline(self) -> float:
        """Local monotonic time (s) after which the lease is treated as LOST."""
        return self._deadline

    @property
    def certain_until(self) -> float:
        """Local monotonic time (s) until which the lease cannot have expired on
        etcd, by the last answered keepalive alone: ``last_ok + ttl_s -
        safety_margin_s`` (the requested TTL; never extended by the election
        grace). A host may keep committing until then while keepalives fail
        (see :func:`certain_until`)."""
        return certain_until(deadline=self._deadline, last_ok=self._last_ok,
                             ttl_s=self.ttl_s, safety_margin_s=self.safety_margin_s)

    @property
    def last_ok(self) -> float:
        """Local monotonic send time (s) of the last successful keepalive (or the grant)."""
        return self._last_ok

    @property
    def failing(self) -> bool:
        """True while keepalives fail (or are paused or skipped as unhealthy)."""
        return self._failing

    @property
    def stopped(self) -> bool:
        """True while no keepalive is even tried: paused (:meth:`stop_keepalive`,
        :meth:`close`), skipped as unhealthy, or the keepalive thread crashed."""
        return self._paused or self.unhealthy is not None or self._crashed

    @property
    def lost(self) -> bool:
        """True once LOST was latched (by :attr:`state`, etcd, a revoke or the loop ending)."""
        return self._lost

    def ensure_held(self) -> None:
        """Refuse to start new work unless HELD (self-fencing; callable from any thread).

        Raises:
            UnavailableError: (``unavailable``) the state is SUSPENDED or LOST;
                ``fields["lease_state"]`` says which.
        """
        state = self.state
        if state is not LeaseState.HELD:
            raise UnavailableError(f"host lease is {state}; not starting new work",
                                   lease_state=str(state), lease_id=self.lease_id)

    def add_listener(self, listener: Listener) -> None:
        """Call ``listener(state)`` on the event loop whenever the state changes."""
        self._listeners.append(listener)

    def remove_listener(self, listener: Listener) -> None:
        """Stop calling ``listener`` (no error if it was not added)."""
        if listener in self._listeners:
            self._listeners.remove(listener)

    async def wait_for(self, state: LeaseState, *, timeout_s: float) -> bool:
        """Wait until :attr:`state` is ``state``; False after ``timeout_s`` seconds."""
        cond = self._condition()
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout_s
        async with cond:
            while self.state is not state:
                remaining = end - loop.time()
                if remaining <= 0:
                    return False
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(cond.wait(), min(remaining, 0.05))
        return True

    def _condition(self) -> asyncio.Condition:
        if self._changed is None:
            self._changed = asyncio.Condition()
        return self._changed

    async def _notify(self) -> None:
        state = self.state
        if state is self._reported:
            return
        self._reported = state
        tell_listeners(self._listeners, state, self.lease_id, self.lost_reason)
        cond = self._condition()
        async with cond:
            cond.notify_all()

    # -- lifecycle ----------------------------------------------------------------

    def _retrying(self) -> AsyncRetrying:
        return AsyncRetrying(
            stop=stop_after_attempt(self.retry_attempts)
            | stop_after_delay(self.keepalive_interval_s),
            wait=wait_exponential(multiplier=0.05, max=0.5),
            retry=retry_if_exception_type(UnavailableError),
            reraise=True,
        )

    async def grant(self) -> HostLease:
        """Grant the lease (bounded retries) and start the keepalive loop.

        Returns:
            ``self``, now HELD.

        With a ``keepalive_client``, the keepalive thread starts first and
        connects its client (one read, at most :attr:`connect_timeout_s`) before
        the lease is granted: the first keepalive is due ``keepalive_interval_s``
        after the grant, and a connection made only then (a TCP and HTTP/2
        handshake on a loaded host) could eat the whole local deadline (issue
        15 item 5: every rejoin's fresh lease was lost that way).

        Raises:
            UnavailableError: etcd could not grant a lease.
            ConfigurationError: already granted.
        """
        if self.lease_id is not None:
            raise ConfigurationError("lease already granted")
        self._owner_loop = asyncio.get_running_loop()
        if self._keepalive_client_factory is not None and self._thread is None:
            self._threaded = True
            self._thread = threading.Thread(target=self._thread_main, daemon=True,
                                            name="lease-keepalive")
            self._thread.start()
            await asyncio.to_thread(self._ka_connected.wait, self.connect_timeout_s + 1.0)
        try:
            async for attempt in self._retrying():
                with attempt:
                    sent = self._clock()
                    lease = await etcd_call("lease_grant", self.client.lease(self.ttl_s),
                                            timeout_s=self.request_timeout_s)
        except BaseException:
            self._closing = True  # the keepalive thread ends without a lease
            self._granted.set()
            raise
        self.lease_id = int(lease.id)
        self.granted_ttl_s = int(lease.ttl)
        self._deadline = sent + self.granted_ttl_s - self.safety_margin_s
        self._last_ok = sent
        await self._notify()
        if self.metrics is not None:
            self.metrics.age.labels(str(self.lease_id)).set_function(
                lambda: max(0.0, self._clock() - self._last_ok))
        self._observed()
        if self._keepalive_client_factory is None:
            self._task = self._owner_loop.create_task(self._keepalive_loop())
        else:
            self._granted.set()  # the keepalive thread starts its loop
        return self

    def _observed(self) -> None:
        """Tell ``on_round`` that a round ended or the state moved."""
        if self._on_round is not None:
            try:
                self._on_round()
            except Exception:  # an observer must not kill the keepalive loop
                log.exception("lease %s round observer failed", self.lease_id)

    # -- keepalive thread -----------------------------------------------------------

    def _thread_main(self) -> None:
        """Body of the keepalive thread: its own loop, its own etcd client."""
        try:
            asyncio.run(self._thread_body())
        except Exception:
            log.exception("lease %s keepalive thread crashed", self.lease_id)
            self._failing = self._crashed = True

    async def _thread_body(self) -> None:
        assert self._keepalive_client_factory is not None
        self._thread_loop = asyncio.get_running_loop()
        self._ka_client = self._keepalive_client_factory()
        self._thread_task = asyncio.current_task()
        try:
            await self._connect_keepalive_client()
            while not self._granted.is_set():
                await asyncio.sleep(0.01)
            if not self._paused and not self._closing:
                await self._keepalive_loop()
        except asyncio.CancelledError:
            pass
        finally:
            with contextlib.suppress(Exception):
                await self._ka_client.close()

    async def _connect_keepalive_client(self) -> None:
        """Connect the keepalive client with one read (within
        :attr:`connect_timeout_s`); a failure is only logged (the keepalive
        rounds retry). Sets ``_ka_connected`` either way."""
        try:
            await etcd_call("connect", self._ka_client.get(b"\0svit-keepalive-connect"),
                            timeout_s=self.connect_timeout_s)
        except UnavailableError as exc:
            log.warning("the keepalive client could not connect to etcd yet: %s", exc)
        finally:
            self._ka_connected.set()

    async def _signal(self) -> None:
        """Tell listeners about a state change, on the caller's event loop."""
        if not self._threaded or self._owner_loop is None:
            await self._notify()
            return
        loop = self._owner_loop

        def schedule() -> None:
            loop.create_task(self._notify())

        with contextlib.suppress(RuntimeError):  # the owner loop is closed
            loop.call_soon_threadsafe(schedule)

    async def _refresh_once(self, *, short: bool) -> tuple[float, int]:
        sent = self._clock()
        client = self._ka_client if self._ka_client is not None else self.client
        # The first attempt after a success gets the full request deadline; once
        # keepalives fail, each attempt gets a short one, so that a member that
        # holds the request (no leader yet) or does not answer is left quickly
        # for the next. No attempt outlives the local deadline (a later reply
        # is void anyway).
        timeout_s = self.retry_timeout_s if short else self.request_timeout_s
        timeout_s = min(timeout_s, max(0.05, self._deadline - sent))
        if isinstance(client, FailoverClient):
            # the gRPC deadline ends the call, so the client fails over; the
            # local one is a guard against a hung channel
            call = client.refresh_lease(self.lease_id, timeout_s=timeout_s)
            guard_s = timeout_s + 0.5
        else:
            call, guard_s = client.refresh_lease(self.lease_id), timeout_s
        reply = await etcd_call("lease_keepalive", call, timeout_s=guard_s)
        return sent, int(reply.TTL) if reply is not None else 0

    async def _keepalive_round(self) -> None:
        async for attempt in self._retrying():
            with attempt:
                short = self._failing or attempt.retry_state.attempt_number > 1
                sent, ttl = await self._refresh_once(short=short)
        rtt = self._clock() - sent
        self.max_keepalive_rtt_s = max(self.max_keepalive_rtt_s, rtt)
        if ttl <= 0:
            # etcd forgot the lease: someone may already own our processes.
            self._lose(f"etcd answered a keepalive with TTL {ttl} (lease gone; "
                       f"round trip {rtt:.2f} s)")
            return
        if self.state is LeaseState.LOST:
            # our deadline passed before this reply: someone may already own our
            # processes, even if etcd (restarted, which renews every lease)
            # still lists the lease.
            return
        self._deadline = sent + ttl - self.safety_margin_s
        self._last_ok = sent
        self._failing = False
        if self.in_grace:
            log.warning("lease %s held again: a keepalive was answered with TTL %d s "
                        "during the election grace", self.lease_id, ttl)
            self.in_grace = False

    async def _keepalive_loop(self) -> None:
        """Refresh every interval until LOST; never dies on an error.

        After a failed round the next one starts after :attr:`retry_pause_s`,
        not a whole interval: while an etcd member fails or a new leader is
        being elected, every moment until the local deadline counts: with TTL
        5 s, waiting ``ttl_s / 3`` (1.7 s) between failed rounds can lose the
        lease during a 1-2 s leader election.
        """
        watcher = asyncio.get_running_loop().create_task(self._grace_watch())
        try:
            await self._keepalive_rounds()
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
            probe, self._probe_client = self._probe_client, None
            if probe is not None:
                with contextlib.suppress(Exception):
                    await probe.close()

    async def _keepalive_rounds(self) -> None:
        """The body of :meth:`_keepalive_loop`."""
        while self.state is not LeaseState.LOST and not self._closing:
            wait = self.retry_pause_s if self._retry_soon else self.keepalive_interval_s
            delay = min(wait, max(0.0, self._deadline - self._clock()))
            due = self._clock() + delay
            unhealthy = await self._sleep_watching_health(delay)
            if self._closing:
                return
            if unhealthy:
                await self._revoke_unhealthy()
                return
            lag = max(0.0, self._clock() - due)
            self.keepalive_rounds += 1
            self.last_keepalive_lag_s = lag
            self.max_keepalive_lag_s = max(self.max_keepalive_lag_s, lag)
            if self.metrics is not None:
                self.metrics.lag.observe(lag)
            if self._paused:
                self._failing = True
                self._observed()
                await self._signal()
                continue
            if self._unhealthy_now():
                self._failing = True
                if self.revoke_when_unhealthy:
                    await self._revoke_unhealthy()
                    return
                self._observed()
                await self._signal()
                continue
            self._retry_soon = False
            try:
                await self._keepalive_round()
            except UnavailableError as exc:
                self._failing = self._retry_soon = True
                log.warning("lease %s keepalive failed: %s", self.lease_id, exc)
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if task is None or task.cancelling():
                    raise  # close() or the owner cancelled the loop
                # A cancellation nobody asked for (gRPC cancels calls on a closed
                # channel): a failed round, and the loop goes on.
                self._failing = self._retry_soon = True
                log.warning("lease %s keepalive call was cancelled under it", self.lease_id)
            except Exception:
                self._failing = self._retry_soon = True
                log.exception("lease %s keepalive round crashed", self.lease_id)
            self._observed()
            await self._signal()
        if self._closing:
            return
        self._lose("keepalive loop ended")
        self._observed()
        await self._signal()

    async def _grace_watch(self) -> None:
        """Beside the keepalive loop, every interval / 8: tell listeners of the
        state changes the clock makes (a round may last longer), and once no
        keepalive succeeded for two intervals and the deadline is
        :data:`PROBE_WINDOW_INTERVALS` intervals away or closer, ask etcd for a
        status (its own client, whatever a keepalive attempt in flight is
        doing) and move the deadline by :attr:`election_grace_s` if a member
        answers, once per outage (see "Election grace" in the class docstring)."""
        window = PROBE_WINDOW_INTERVALS * self.keepalive_interval_s
        tick = self.keepalive_interval_s / 8
        while not self._closing and not self._lost:
            if self.state is not self._reported:
                # a change the clock made between two rounds (two quiet intervals,
                # the deadline): listeners hear of it now, not when a round ends
                self._observed()
                await self._signal()
            now = self._clock()
            left = self._deadline - now
            quiet = now >= self._last_ok + 2 * self.keepalive_interval_s
            # no grace for keepalives this host skips itself (unhealthy, paused):
            # its lease is meant to lapse
            skipping = self.stopped
            if (self.election_grace_s <= 0 or self.in_grace or not quiet or left > window
                    or left < 0.1 or skipping):
                await asyncio.sleep(tick)
                continue
            if await member_answers(self._prober(), timeout_s=min(PROBE_TIMEOUT_S, left - 0.05)):
                if self._lost or self._clock() >= self._deadline:  # passed meanwhile
                    continue
                self._deadline += self.election_grace_s
                self.in_grace = True
                self.graces += 1
                log.warning("lease %s: no keepalive answered but etcd answers (a leader "
                            "election?): suspended for up to %.1f s more, held again only "
                            "when a keepalive is answered", self.lease_id,
                            self._deadline - self._clock())
                self._observed()
                await self._signal()
            else:
                await asyncio.sleep(tick)

    def _prober(self) -> Any:
        """The client of the election grace's status requests (made on first use)."""
        if self._probe_client is None:
            if self._probe_client_factory is None:
                return self._ka_client if self._ka_client is not None else self.client
            self._probe_client = self._probe_client_factory()
        return self._probe_client

    async def _sleep_watching_health(self, delay: float) -> bool:
        """Sleep ``delay`` seconds; with :attr:`revoke_when_unhealthy`, run the health
        check every :attr:`health_poll_s` meanwhile. True as soon as it fails."""
        if not self.revoke_when_unhealthy:
            await asyncio.sleep(delay)
            return False
        end = self._clock() + delay
        while (left := end - self._clock()) > 0:
            await asyncio.sleep(min(left, self.health_poll_s))
            if self._closing or self._paused:
                return False
            if self._unhealthy_now():
                return True
        return False

    async def _revoke_unhealthy(self) -> None:
        """The host cannot serve: become LOST now and revoke the lease (best effort;
        if etcd cannot be reached the lease lapses after its TTL)."""
        self._failing = True
        self._lose(f"host unhealthy: {self.unhealthy}")
        self._observed()
        await self._signal()
        client = self._ka_client if self._ka_client is not None else self.client
        try:
            await etcd_call("lease_revoke", client.revoke_lease(self.lease_id),
                            timeout_s=self.request_timeout_s, outcome="unknown")
            self.revoked = True
            self._observed()
            log.warning("lease %s revoked: host unhealthy (%s)", self.lease_id, self.unhealthy)
        except UnavailableError as exc:
            log.warning("lease %s: host unhealthy (%s); revoke failed (%s), it lapses "
                        "after its TTL", self.lease_id, self.unhealthy, exc)

    def _unhealthy_now(self) -> bool:
        """Run the health check; True (skip the keepalive) when it gives a reason."""
        if self._health_check is None:
            return False
        try:
            reason = self._health_check()
        except Exception:
            log.exception("lease %s health check failed; assuming healthy", self.lease_id)
            reason = None
        if reason is not None and self.unhealthy is None:
            log.warning("lease %s: host unhealthy (%s); stopping keepalives",
                        self.lease_id, reason)
        self.unhealthy = reason
        if reason is not None and self.metrics is not None:
            self.metrics.skipped.inc()
        return reason is not None

    def stop_keepalive(self) -> None:
        """Stop refreshing; the lease then expires on etcd after its TTL.

        For tests and for simulating a host that cannot reach etcd. The state
        still follows the local clock and listeners are still told: SUSPENDED
        now, LOST at the deadline.
        """
        self._paused = True
        self._failing = True

    async def close(self) -> None:
        """Stop the keepalive loop without revoking (the lease expires by itself)."""
        self._paused = True
        self._closing = True
        thread, self._thread = self._thread, None
        if thread is not None:
            tloop, ttask = self._thread_loop, self._thread_task
            if tloop is not None and ttask is not None:
                with contextlib.suppress(RuntimeError):  # its loop already ended
                    tloop.call_soon_threadsafe(ttask.cancel)
            await asyncio.to_thread(thread.join, 5.0)
        if self.metrics is not None and self.lease_id is not None:
            with contextlib.suppress(KeyError):
                self.metrics.age.remove(str(self.lease_id))
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def revoke(self) -> None:
        """Stop the keepalive loop and revoke the lease, deleting every key under it.

        The state becomes LOST even if etcd cannot be reached (the lease then
        expires by itself after its TTL).

        Raises:
            UnavailableError: etcd could not be reached to revoke.
        """
        await self.close()
        self._lose("revoked by its holder")
        await self._notify()
        # A lease that already expired (or a peer revoked) is gone: that is
        # success, not an error (etcd answers "lease not found").
        if self.lease_id is not None:
            if not await revoke_lease_id(self.client, self.lease_id,
                                         timeout_s=self.request_timeout_s):
                raise UnavailableError(f"etcd kept lease {self.lease_id} after a failed revoke",
                                       op="lease_revoke", outcome="unknown")
            self.revoked = True


async def revoke_lease_id(client: Any, lease_id: int, *,
                          timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S) -> bool:
    """Revoke lease ``lease_id`` through ``client`` (any etcd client, not the holder's).

    For a host cut off from etcd: its lease went LOST by its own clock, so it
    has stopped serving, but only etcd can end the lease, and without a revoke
    that waits for etcd's expiry (up to a whole TTL after the last keepalive
    that got through). The holder asks a peer that can reach etcd to revoke
    it in its name. Revoking is always safe for the holder's
    consent: lease ids are never reused, and LOST is terminal for the holder.

    Returns:
        True when the lease is gone now (revoked here, or already revoked or
        expired); False when etcd answered that it is still alive after a
        failed revoke (should not happen).

    Raises:
        UnavailableError: etcd could not be reached.
    """
    try:
        await etcd_call("lease_revoke", client.revoke_lease(lease_id), timeout_s=timeout_s,
                        outcome="unknown", lease_id=lease_id)
        return True
    except UnavailableError:
        # etcd refuses to revoke an unknown lease: gone already (expired or
        # revoked by someone else) -- or it was not reachable: look again.
        info = await etcd_call("lease_info", client.get_lease_info(lease_id),
                               timeout_s=timeout_s, lease_id=lease_id)
        return int(info.TTL) == -1
