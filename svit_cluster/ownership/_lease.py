"""One etcd lease per host, kept alive in the background (DESIGN.md §3 "Host").

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
import time
from collections.abc import Callable
from enum import StrEnum
from typing import Any

from tenacity import (
    AsyncRetrying,
    retry_if_exception_type,
    stop_after_attempt,
    stop_after_delay,
    wait_exponential,
)

from svit_cluster.errors import ConfigurationError, UnavailableError
from svit_cluster.ownership._etcd import DEFAULT_REQUEST_TIMEOUT_S, etcd_call

__all__ = ["DEFAULT_TTL_S", "HostLease", "LeaseState"]

log = logging.getLogger(__name__)

#: Default lease time-to-live, in seconds.
DEFAULT_TTL_S = 5

Clock = Callable[[], float]
Listener = Callable[["LeaseState"], None]


class LeaseState(StrEnum):
    """What the holder of a :class:`HostLease` may assume.

    HELD:
        A keepalive succeeded recently and the local deadline has not passed.
        The host may start new commits for the processes it owns. (Each commit
        is still checked against the Redis fence; HELD is not a proof.)
    SUSPENDED:
        Keepalives are failing, but by the local clock the lease cannot have
        expired yet. Do NOT start new commits or acquire processes; do not
        assume the ownership keys are still there. May return to HELD when a
        keepalive succeeds in time.
    LOST:
        The deadline passed, etcd reported the lease gone, or it was revoked.
        Terminal, even if a late keepalive succeeds (an etcd restart renews
        every lease, so etcd may still list it): assume every ownership under
        this lease is held by someone else. Stop serving; a new
        :class:`HostLease` is needed to serve again.
    """

    HELD = "held"
    SUSPENDED = "suspended"
    LOST = "lost"


class HostLease:
    """The host's etcd lease with a background keepalive loop.

    Args:
        client: an ``aetcd.Client`` (see :func:`svit_cluster.ownership.open_client`).
        ttl_s: requested TTL in whole seconds (default 5; etcd may grant more,
            its minimum is about 2 s).
        safety_margin_s: subtracted from the local deadline (default 1 s);
            must be below ``ttl_s``.
        keepalive_interval_s: time between keepalives (default ``ttl_s / 3``).
        request_timeout_s: deadline of one etcd request (default 2 s).
        retry_attempts: attempts per grant or keepalive round (default 3),
            with exponential backoff; a round never outlasts the interval.
        clock: monotonic clock in seconds (injectable for tests).

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
        retry_attempts: int = 3,
        clock: Clock = time.monotonic,
    ) -> None:
        if type(ttl_s) is not int or ttl_s < 1:
            raise ConfigurationError(f"ttl_s must be a positive integer, got {ttl_s!r}")
        if not 0 <= safety_margin_s < ttl_s:
            raise ConfigurationError("safety_margin_s must be in [0, ttl_s)")
        interval = ttl_s / 3 if keepalive_interval_s is None else keepalive_interval_s
        if not 0 < interval < ttl_s - safety_margin_s:
            raise ConfigurationError("keepalive_interval_s must be in (0, ttl_s - margin)")
        if request_timeout_s <= 0 or retry_attempts < 1:
            raise ConfigurationError("request_timeout_s and retry_attempts must be positive")
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
        self._lost = False
        self._paused = False
        self._task: asyncio.Task[None] | None = None
        self._listeners: list[Listener] = []
        self._reported: LeaseState | None = None
        self._changed: asyncio.Condition | None = None

    # -- state ------------------------------------------------------------------

    @property
    def state(self) -> LeaseState:
        """The current state, judged from the local monotonic clock (thread-safe read)."""
        if self._lost or self.lease_id is None:
            return LeaseState.LOST
        now = self._clock()
        if now >= self._deadline:
            self._lost = True  # latched: a late keepalive reply must not revive it
            return LeaseState.LOST
        if self._failing or now >= self._last_ok + 2 * self.keepalive_interval_s:
            return LeaseState.SUSPENDED
        return LeaseState.HELD

    @property
    def deadline(self) -> float:
        """Local monotonic time (s) after which the lease is treated as LOST."""
        return self._deadline

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
        log.info("lease %s is now %s", self.lease_id, state)
        for listener in list(self._listeners):
            try:
                listener(state)
            except Exception:  # a listener must not kill the keepalive loop
                log.exception("lease listener failed")
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

        Raises:
            UnavailableError: etcd could not grant a lease.
            ConfigurationError: already granted.
        """
        if self.lease_id is not None:
            raise ConfigurationError("lease already granted")
        async for attempt in self._retrying():
            with attempt:
                sent = self._clock()
                lease = await etcd_call("lease_grant", self.client.lease(self.ttl_s),
                                        timeout_s=self.request_timeout_s)
        self.lease_id = int(lease.id)
        self.granted_ttl_s = int(lease.ttl)
        self._deadline = sent + self.granted_ttl_s - self.safety_margin_s
        self._last_ok = sent
        await self._notify()
        self._task = asyncio.get_running_loop().create_task(self._keepalive_loop())
        return self

    async def _refresh_once(self) -> tuple[float, int]:
        sent = self._clock()
        reply = await etcd_call("lease_keepalive", self.client.refresh_lease(self.lease_id),
                                timeout_s=self.request_timeout_s)
        return sent, int(reply.TTL) if reply is not None else 0

    async def _keepalive_round(self) -> None:
        async for attempt in self._retrying():
            with attempt:
                sent, ttl = await self._refresh_once()
        if ttl <= 0 or self.state is LeaseState.LOST:
            # etcd forgot the lease, or our deadline passed before this reply:
            # someone may already own our processes, even if etcd (restarted,
            # which renews every lease) still lists the lease.
            self._lost = True
            return
        self._deadline = sent + ttl - self.safety_margin_s
        self._last_ok = sent
        self._failing = False

    async def _keepalive_loop(self) -> None:
        """Refresh every interval until LOST; never dies on an error."""
        while self.state is not LeaseState.LOST:
            delay = min(self.keepalive_interval_s, max(0.0, self._deadline - self._clock()))
            await asyncio.sleep(delay)
            if self._paused:
                self._failing = True
                await self._notify()
                continue
            try:
                await self._keepalive_round()
            except UnavailableError as exc:
                self._failing = True
                log.warning("lease %s keepalive failed: %s", self.lease_id, exc)
            except Exception:
                self._failing = True
                log.exception("lease %s keepalive round crashed", self.lease_id)
            await self._notify()
        self._lost = True
        await self._notify()

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
        self._lost = True
        await self._notify()
        if self.lease_id is not None:
            await etcd_call("lease_revoke", self.client.revoke_lease(self.lease_id),
                            timeout_s=self.request_timeout_s, outcome="unknown")
