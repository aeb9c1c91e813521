"""The loop that runs a schedule against a cluster and records what it did.

:class:`NemesisRunner` starts every window of a
:class:`~svit_chaos.spec.Schedule` at its offset (windows run concurrently),
injects its fault (:func:`~svit_chaos.faults.make_nemesis`), waits out the window
or the run's stop, heals the fault and waits for the healed services to answer
(a condition, not a sleep). Each inject, heal and failure is a ``nemesis``
history event. The runner **always heals what it broke**:
:meth:`NemesisRunner.heal_all` runs on stop, on error and on cancellation. A
fault that could not be injected or healed is a harness error that makes the
run inconclusive (:meth:`NemesisRunner.raise_if_failed`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from .clock import Clock, MonotonicClock, wait_until
from .daemon_pool import in_daemon_thread
from .errors import HarnessError
from .faults import Nemesis, NemesisContext, make_nemesis
from .kinds import HOST_KINDS, OWNER_KINDS
from .spec import NemesisSpec, Schedule, Window

__all__ = ["Blocking", "NemesisRunner"]

#: Seconds between two looks at whether a waiting window's host rule holds.
ROOM_POLL_S = 0.1

#: Runs one blocking call off the event loop and returns its result.
Blocking = Callable[[Callable[[], Any]], Awaitable[Any]]


class NemesisRunner:
    """Runs a schedule against a target, recording ``nemesis`` events.

    Args:
        schedule: the windows to run (offsets from :meth:`run`'s start).
        ctx: target, history, processes and the optional stale writer.
        clock: for window timing (default monotonic).
        heal_timeout_s: bound on each inject and heal call, and on how long a
            healed service may take to answer (default 60 s); past it the fault
            counts as not healed (a harness error: the run is inconclusive).
        blocking: runs a blocking inject/heal call without blocking the loop
            (default :func:`in_daemon_thread`; tests run them inline).
        hosts: the cluster's hosts. When given, the planner's host rule holds at
            run time too (:meth:`room_for`): a window whose fault would break it
            waits at its start until it holds, and is skipped (a ``nemesis``
            event of phase ``skip``) if it still does not at its planned end.
            The planner sizes its gaps with a lease TTL, but a restarted host
            (its heal) can take longer than that, so planned windows can still
            meet at run time. Empty (default): windows start at their offsets
            whatever else is faulted (an explicit schedule's overlaps are meant).

    Attributes:
        injected: count of injected faults by kind.
        errors: harness errors (a fault that could not be injected or healed);
            any error makes the run inconclusive.
        skipped: labels of the windows skipped by the host rule.
    """

    def __init__(
        self,
        schedule: Schedule,
        ctx: NemesisContext,
        *,
        clock: Clock | None = None,
        heal_timeout_s: float = 60.0,
        blocking: Blocking | None = None,
        hosts: Sequence[str] = (),
        warm: Callable[[], set[str]] | None = None,
    ) -> None:
        self.schedule = schedule
        self.hosts = list(hosts)
        self.warm = warm
        self.skipped: list[str] = []
        #: host -> faults on it injected and not yet healed (heals included)
        self._faulted: Counter[str] = Counter()
        self._host_of: dict[int, str] = {}  # window index -> the host it faults
        self._blocking: Blocking = blocking or in_daemon_thread
        self.ctx = ctx
        self.clock: Clock = clock or MonotonicClock()
        self.heal_timeout_s = heal_timeout_s
        self.injected: Counter[str] = Counter()
        self.errors: list[str] = []
        self.active: dict[int, Nemesis] = {}
        self._lock = asyncio.Lock()

    @property
    def active_labels(self) -> list[str]:
        return [n.spec.label for n in self.active.values()]

    async def _sleep_or_stop(self, seconds: float, stop: asyncio.Event) -> bool:
        """Sleep ``seconds`` on the clock; True if ``stop`` was set first."""
        if stop.is_set():
            return True
        sleeper = asyncio.ensure_future(self.clock.sleep(seconds))
        stopper = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait({sleeper, stopper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            sleeper.cancel()
            stopper.cancel()
        return stop.is_set()

    async def run(self, stop: asyncio.Event) -> None:
        """Run every window (concurrently, each at its offset) until done or ``stop``.

        Everything injected is healed before this returns, also on cancellation.
        """
        start = self.clock.now()
        tasks = [asyncio.ensure_future(self._window(i, w, start, stop))
                 for i, w in enumerate(self.schedule.windows)]
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await asyncio.shield(self.heal_all())

    def _survivors(self, spec: NemesisSpec) -> list[str]:
        """The hosts that take over the processes of ``spec``'s fault: every host
        but the faulted one (an owner fault: every host, its owner is chosen at
        inject); none for a fault of no host."""
        if spec.kind in OWNER_KINDS:
            return list(self.hosts)
        if spec.kind in HOST_KINDS and spec.host:
            return [h for h in self.hosts if h != spec.host]
        return []

    def room_for(self, spec: NemesisSpec, warm: set[str] | None = None) -> bool:
        """The planner's host rule, now: a fault of one host needs that host free
        of faults and another host free too; an owner fault (whose host is the
        owner's, chosen at inject) needs every host free. A host is free when no
        fault injected on it is still unhealed. With ``warm`` (the hosts whose
        spares are up), every free host that takes over must be in it too: a
        host restored a moment ago, or whose spares the last failover took, is
        still coming back (the dedicated failover tests wait for warm
        survivors likewise). Always True without ``hosts``."""
        if not self.hosts:
            return True
        free = [h for h in self.hosts if not self._faulted[h]]
        if spec.kind in OWNER_KINDS:
            ok = len(free) == len(self.hosts) and len(free) >= 2
        elif spec.kind in HOST_KINDS and spec.host:
            ok = spec.host in free and len(free) >= 2
        else:
            return True
        if not ok or warm is None:
            return ok
        return all(h in warm for h in self._survivors(spec) if h in free)

    async def _wait_for_room(self, window: Window, until: float,
                             stop: asyncio.Event) -> bool:
        """Wait until :meth:`room_for` holds for ``window`` (True), or ``until``
        or ``stop`` comes first (False). The warm hosts (``warm``, a blocking
        read) are read through ``blocking`` like an inject, then the rule is
        checked with no await before the caller holds the host."""
        spec = window.spec
        while True:
            if self.room_for(spec):
                if self.warm is None or not self._survivors(spec):
                    return not stop.is_set()
                warm = await self._blocking(self.warm)
                if self.room_for(spec, warm):  # checked again after the await
                    return not stop.is_set()
            if stop.is_set() or self.clock.now() >= until:
                return False
            await self._sleep_or_stop(ROOM_POLL_S, stop)

    def _hold(self, index: int, host: object) -> None:
        if isinstance(host, str) and host and index not in self._host_of:
            self._host_of[index] = host
            self._faulted[host] += 1

    def _release(self, index: int) -> None:
        host = self._host_of.pop(index, None)
        if host is not None:
            self._faulted[host] -= 1

    async def _window(self, index: int, window: Window, start: float,
                      stop: asyncio.Event) -> None:
        delay = start + window.start_s - self.clock.now()
        if await self._sleep_or_stop(delay, stop):
            return
        planned = self.clock.now()
        if not await self._wait_for_room(window, start + window.end_s, stop):
            if not stop.is_set():
                busy = sorted(h for h in self.hosts if self._faulted[h])
                self.skipped.append(window.spec.label)
                self.ctx.history.record(
                    "nemesis", phase="skip", nemesis=window.spec.kind, window=index,
                    spec=window.spec.to_json(),
                    detail={"reason": "the host rule (free hosts, warm survivors) did not "
                                      "hold until the window's end",
                            "faulted_hosts": busy,
                            "waited_s": round(self.clock.now() - planned, 3)})
            return
        delayed = self.clock.now() - planned
        nemesis = make_nemesis(window.spec)
        spec = window.spec.to_json()
        if window.spec.kind in HOST_KINDS:
            self._hold(index, window.spec.host)
        try:
            detail = await asyncio.wait_for(
                self._blocking(functools.partial(nemesis.inject, self.ctx)),
                self.heal_timeout_s)
        except Exception as exc:  # recorded; the run becomes inconclusive
            message = f"inject {window.spec.label} failed: {type(exc).__name__}: {exc}"
            self.errors.append(message)
            self.ctx.history.record("nemesis", phase="error", nemesis=window.spec.kind,
                                    window=index, spec=spec, detail={"error": message})
            self.active[index] = nemesis  # heal what may be half-broken
            await self._heal(index)
            return
        self.active[index] = nemesis
        self.injected[window.spec.kind] += 1
        if window.spec.kind in OWNER_KINDS and isinstance(detail, dict):
            self._hold(index, detail.get("host"))
        if delayed > ROOM_POLL_S:
            detail = {**detail, "delayed_s": round(delayed, 3)}
        self.ctx.history.record("nemesis", phase="inject", nemesis=window.spec.kind,
                                window=index, spec=spec, detail=detail)
        try:
            nemesis.interrupted = await self._sleep_or_stop(window.duration_s, stop)
        except BaseException:
            nemesis.interrupted = True
            raise
        finally:
            await asyncio.shield(self._heal(index))

    async def _heal(self, index: int) -> None:
        try:
            await self._heal_once(index)
        finally:
            self._release(index)  # healed or not: the run is inconclusive if not

    async def _heal_once(self, index: int) -> None:
        async with self._lock:
            nemesis = self.active.pop(index, None)
        if nemesis is None:
            return
        spec = nemesis.spec
        try:
            timeout = self.heal_timeout_s * nemesis.heal_timeout_factor
            detail = await asyncio.wait_for(
                self._blocking(functools.partial(nemesis.heal, self.ctx)), timeout)
            ok = await wait_until(lambda: self._blocking(functools.partial(nemesis.healed,
                                                                            self.ctx)),
                                  timeout_s=self.heal_timeout_s, clock=self.clock,
                                  interval_s=0.1)
        except TimeoutError:
            detail = {"error": f"no answer within "
                               f"{self.heal_timeout_s * nemesis.heal_timeout_factor} s"}
            ok = False
        except Exception as exc:
            detail, ok = {"error": f"{type(exc).__name__}: {exc}"}, False
        if not ok:
            message = f"heal {spec.label} failed: {detail.get('error', 'not healthy in time')}"
            self.errors.append(message)
            self.ctx.history.record("nemesis", phase="error", nemesis=spec.kind, window=index,
                                    spec=spec.to_json(), detail={"error": message})
            return
        self.ctx.history.record("nemesis", phase="heal", nemesis=spec.kind, window=index,
                                spec=spec.to_json(), detail=detail)

    async def heal_all(self) -> None:
        """Heal every active nemesis (idempotent; errors are recorded, never raised)."""
        for index in sorted(self.active):
            await self._heal(index)

    def heal_all_sync(self) -> None:
        """Blocking :meth:`heal_all` for paths without a running loop (best effort)."""
        for index, nemesis in sorted(self.active.items()):
            nemesis.interrupted = True
            with contextlib.suppress(Exception):
                nemesis.heal(self.ctx)
            self.active.pop(index, None)

    def raise_if_failed(self) -> None:
        """Raise :class:`HarnessError` if any fault could not be injected or healed."""
        if self.errors:
            raise HarnessError("; ".join(self.errors[:5]), stage="nemesis")
