"""Injectable clocks and condition waits for the harness.

Every timestamp the harness writes is ``clock.now()`` minus the run's start,
in seconds, from a *monotonic* clock: wall-clock jumps (NTP, suspend) never
reorder a history. Tests pass :class:`ManualClock` to drive schedules and
waits deterministically, without sleeping.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Awaitable, Callable
from typing import Protocol

__all__ = ["Clock", "ManualClock", "MonotonicClock", "wait_until"]


class Clock(Protocol):
    """A monotonic clock the harness can sleep on."""

    def now(self) -> float:
        """Monotonic seconds (arbitrary origin, never decreasing)."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Sleep ``seconds`` on this clock (0 or less returns at once)."""
        ...


class MonotonicClock:
    """The real clock: :func:`time.monotonic` and :func:`asyncio.sleep`."""

    def now(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


class ManualClock:
    """A clock that only moves when :meth:`advance` is called (tests).

    Sleepers wake in deadline order as time passes them. ``advance`` yields to
    the event loop after every wake-up so woken tasks run before time moves on.
    """

    def __init__(self, start: float = 0.0) -> None:
        self._now = start
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    def now(self) -> float:
        return self._now

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._now + seconds, next(self._seq), fut))
        await fut

    @property
    def sleepers(self) -> int:
        """How many tasks are sleeping on this clock now."""
        return sum(1 for _, _, f in self._sleepers if not f.done())

    async def advance(self, seconds: float, *, step: float | None = None) -> None:
        """Move time forward by ``seconds``, waking every sleeper that comes due.

        Args:
            seconds: how far to move (>= 0).
            step: if given, move in increments of at most ``step`` seconds so
                that tasks woken early can schedule further sleeps in between.
        """
        if seconds < 0:
            raise ValueError("a clock cannot go backwards")
        target = self._now + seconds
        while True:
            for _ in range(20):
                await asyncio.sleep(0)
            nxt = self._sleepers[0][0] if self._sleepers else None
            limit = target if step is None else min(target, self._now + step)
            if nxt is not None and nxt <= limit:
                deadline, _, fut = heapq.heappop(self._sleepers)
                self._now = max(self._now, deadline)
                if not fut.done():
                    fut.set_result(None)
                continue
            if self._now >= target:
                break
            self._now = limit
        for _ in range(20):
            await asyncio.sleep(0)


async def wait_until(
    condition: Callable[[], bool] | Callable[[], Awaitable[bool]],
    *,
    timeout_s: float,
    clock: Clock,
    interval_s: float = 0.1,
) -> bool:
    """Poll ``condition`` until it holds or ``timeout_s`` passes on ``clock``.

    Args:
        condition: a callable returning a bool (or an awaitable of one); an
            exception raised by it counts as "not yet".
        timeout_s: give up after this many seconds.
        clock: whose time and sleep to use.
        interval_s: pause between checks (default 0.1 s).

    Returns:
        True as soon as the condition holds; False on timeout.
    """
    deadline = clock.now() + timeout_s
    while True:
        try:
            result = condition()
            if isinstance(result, Awaitable):
                result = await result
            if result:
                return True
        except Exception:  # a failing probe means "not yet"
            pass
        if clock.now() >= deadline:
            return False
        await clock.sleep(min(interval_s, max(0.0, deadline - clock.now())))
