"""Observers: one cursor per subscription, explicit lag, bounded buffers.

Server side, :func:`observe` follows one process's signal stream from a
cursor. It reads in bounded batches (pull-based: a slow consumer only slows
its own reads) and, before each batch, compares its cursor with the oldest
retained signal (and the signal just before it, the newest trimmed one):
when signals after its cursor were trimmed, it yields
:class:`Lagged` and continues after the newest signal at that moment.

Client side, :class:`BoundedFeed` is the subscription's bounded buffer: when
it is full, new signals are dropped and the consumer gets one
:class:`Lagged` (``source="client"``) in their place.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from typing import Generic, TypeVar

from svit_cluster.errors import InvalidInput
from svit_cluster.events._model import ORIGIN, Lagged, Signal, cursor_key, parse_cursor
from svit_cluster.events._source import SignalSource

__all__ = ["DEFAULT_BATCH", "DEFAULT_BLOCK_S", "BoundedFeed", "observe", "resolve_cursor"]

#: Signals read per batch.
DEFAULT_BATCH = 256
#: Seconds one blocking read waits before a keepalive tick.
DEFAULT_BLOCK_S = 10.0

T = TypeVar("T")


async def resolve_cursor(source: SignalSource, process_id: str, after: str) -> str:
    """A concrete cursor: ``"$"`` becomes the newest signal id now (or the origin).

    Raises:
        InvalidInput: a malformed cursor.
        UnavailableError: the store failed.
    """
    cursor = parse_cursor(after)
    if cursor == "$":
        window = await source.window(process_id)
        return window.last or ORIGIN
    return cursor


async def observe(
    source: SignalSource, process_id: str, cursor: str, *,
    batch: int = DEFAULT_BATCH, block_s: float = DEFAULT_BLOCK_S,
) -> AsyncIterator[Signal | Lagged | None]:
    """Follow ``process_id``'s signals after a resolved ``cursor``, forever.

    Yields:
        :class:`Signal` in stream order; :class:`Lagged` when signals after
        the cursor were trimmed (then continues after the newest signal);
        ``None`` after ``block_s`` seconds without a signal (a keepalive tick).

    Raises:
        InvalidInput: ``batch`` is not in 1..4096 or the cursor is malformed.
        UnavailableError: the store failed (resume with the last cursor).
    """
    if not 1 <= batch <= 4096:
        raise InvalidInput("batch must be in 1..4096")
    cursor = parse_cursor(cursor)
    if cursor == "$":
        cursor = await resolve_cursor(source, process_id, cursor)
    origin_ok = False
    if cursor == ORIGIN:
        origin_ok = not (await source.window(process_id)).trimmed
    while True:
        got = await source.read(process_id, cursor, count=batch, block_s=block_s)
        first = got.first
        # Lag means "something after my cursor is gone": a cursor before the oldest
        # retained signal has lost nothing when it is at or after the signal just
        # before it (an exact trim up to the cursor), e.g. cursor v5 with v6 first.
        behind = first is not None and cursor_key(cursor) < cursor_key(first)
        if behind and got.before_first is not None:
            behind = cursor_key(cursor) < cursor_key(got.before_first)
        if behind and not origin_ok:
            window = await source.window(process_id)
            resume = window.last or cursor
            yield Lagged(resume=resume, oldest=window.first)
            cursor = resume
            continue
        origin_ok = False
        if not got.signals:
            yield None
            continue
        for signal in got.signals:
            cursor = signal.id
            yield signal


class BoundedFeed(Generic[T]):
    """A subscription's bounded buffer with explicit lag (client side).

    Args:
        capacity: signals buffered before dropping (>= 1).

    The producer calls :meth:`offer` (never blocks); the consumer awaits
    :meth:`get`. When full, offered items are dropped and counted; the next
    item that fits is preceded by ``Lagged(missed=n, source="client")``.
    """

    def __init__(self, capacity: int) -> None:
        if type(capacity) is not int or capacity < 1:
            raise InvalidInput("buffer capacity must be a positive integer")
        self.capacity = capacity
        self._items: deque[T | Lagged | BaseException] = deque()
        self._ready = asyncio.Event()
        self._missed = 0
        self._last_cursor: str | None = None
        self.closed = False

    def offer(self, item: T, cursor: str | None = None) -> bool:
        """Buffer ``item`` (whose signal id is ``cursor``); False if it was dropped."""
        if len(self._items) >= self.capacity:
            self._missed += 1
            self._last_cursor = cursor
            return False
        if self._missed:
            self._items.append(Lagged(resume=self._last_cursor or "", missed=self._missed,
                                      source="client"))
            self._missed = 0
        self._items.append(item)
        self._ready.set()
        return True

    def offer_lagged(self, lagged: Lagged) -> None:
        """Forward a server-side :class:`Lagged` (always kept: it replaces content)."""
        self._items.append(lagged)
        self._ready.set()

    def fail(self, exc: BaseException) -> None:
        """End the feed with ``exc`` (raised to the consumer after buffered items)."""
        self._items.append(exc)
        self.closed = True
        self._ready.set()

    async def get(self) -> T | Lagged:
        """The next buffered item; raises the exception passed to :meth:`fail`.

        Once the buffer is drained after an overflow, the pending
        :class:`Lagged` is returned at once (not only when the next signal
        arrives), so a consumer learns about the gap where it happened.
        """
        while not self._items:
            if self._missed:
                lagged = Lagged(resume=self._last_cursor or "", missed=self._missed,
                                source="client")
                self._missed = 0
                return lagged
            self._ready.clear()
            await self._ready.wait()
        item = self._items.popleft()
        if isinstance(item, BaseException):
            self._items.appendleft(item)
            raise item
        return item
