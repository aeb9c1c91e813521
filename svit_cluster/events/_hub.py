"""Fan-out on a gateway: one stream reader per process, many subscriptions.

Without a hub every subscription reads the store on its own, so a commit
costs O(subscriptions) store round trips. With :class:`SignalHub`, one
reader task per observed process follows the stream (:func:`observe`) and
copies each signal into the bounded queue of every subscription; the store
work per commit does not grow with the number of observers.

A subscription still owns its cursor. It first catches up from its cursor
directly from the store (with lag detection), then follows the hub's feed,
skipping what it already delivered. If it falls more than ``buffer`` signals
behind the hub, it is detached and catches up from the store again (so a slow
subscription costs only itself and is reported ``Lagged`` only when its
cursor left retention).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from svit_cluster.errors import SvitError, UnavailableError
from svit_cluster.events._model import Lagged, Signal, cursor_key
from svit_cluster.events._observer import DEFAULT_BATCH, DEFAULT_BLOCK_S, observe
from svit_cluster.events._source import SignalSource

__all__ = ["SignalHub"]

log = logging.getLogger(__name__)

_RESYNC = object()


@dataclass(eq=False)
class _Sub:
    queue: asyncio.Queue[object] = field(default_factory=asyncio.Queue)
    detached: bool = False


@dataclass(eq=False)
class _Feed:
    subs: set[_Sub] = field(default_factory=set)
    task: asyncio.Task[None] | None = None


class SignalHub:
    """Shared per-process readers for the subscriptions of one gateway.

    Args:
        source: where signals are read.
        buffer: signals queued per subscription before it is detached and
            catches up from the store (default 1024).
        batch: signals per store read (default 256).
        block_s: seconds of silence before a keepalive tick (default 10).
    """

    def __init__(self, source: SignalSource, *, buffer: int = 1024,
                 batch: int = DEFAULT_BATCH, block_s: float = DEFAULT_BLOCK_S) -> None:
        self.source = source
        self.buffer = buffer
        self.batch = batch
        self.block_s = block_s
        self._feeds: dict[str, _Feed] = {}

    def readers(self) -> int:
        """Processes with a live reader."""
        return sum(1 for f in self._feeds.values() if f.task is not None)

    async def _read(self, process_id: str, feed: _Feed, start: str) -> None:
        try:
            async for item in observe(self.source, process_id, start, batch=self.batch,
                                      block_s=self.block_s):
                if item is None:
                    continue
                payload: object = _RESYNC if isinstance(item, Lagged) else item
                for sub in list(feed.subs):
                    if sub.detached:
                        continue
                    if payload is _RESYNC or sub.queue.qsize() >= self.buffer:
                        sub.detached = True
                        sub.queue.put_nowait(_RESYNC)
                    else:
                        sub.queue.put_nowait(payload)
        except asyncio.CancelledError:
            raise
        except SvitError as exc:
            failure: BaseException = exc
        except Exception as exc:  # keep the gateway alive; report unavailable
            log.warning("signal reader of %s failed: %s", process_id, type(exc).__name__)
            failure = UnavailableError("signal reader failed")
        for sub in list(feed.subs):
            sub.queue.put_nowait(failure)
        if self._feeds.get(process_id) is feed:
            del self._feeds[process_id]

    def _join(self, process_id: str, start: str) -> tuple[_Feed, _Sub]:
        feed = self._feeds.get(process_id)
        if feed is None:
            feed = self._feeds[process_id] = _Feed()
        sub = _Sub()
        feed.subs.add(sub)
        if feed.task is None:
            feed.task = asyncio.get_running_loop().create_task(
                self._read(process_id, feed, start))
        return feed, sub

    def _leave(self, process_id: str, feed: _Feed, sub: _Sub) -> None:
        feed.subs.discard(sub)
        if not feed.subs and feed.task is not None:
            feed.task.cancel()
            feed.task = None
            if self._feeds.get(process_id) is feed:
                del self._feeds[process_id]

    async def _catch_up(self, process_id: str, cursor: str
                        ) -> AsyncIterator[Signal | Lagged]:
        async for item in observe(self.source, process_id, cursor, batch=self.batch,
                                  block_s=0):
            if item is None:
                return
            yield item

    async def subscribe(self, process_id: str, cursor: str
                        ) -> AsyncIterator[Signal | Lagged | None]:
        """Follow ``process_id`` after the resolved ``cursor``, forever.

        Yields:
            Like :func:`observe`: signals in order, :class:`Lagged`, and
            ``None`` keepalive ticks.

        Raises:
            UnavailableError: the store failed (resume from the last cursor).
        """
        feed, sub = self._join(process_id, cursor)
        try:
            while True:
                # Attach first, then catch up: whatever the hub reads from now on is
                # queued, and what the catch-up already delivered is skipped below.
                sub.detached = False
                async for item in self._catch_up(process_id, cursor):
                    cursor = item.resume if isinstance(item, Lagged) else item.id
                    yield item
                while True:
                    try:
                        got = await asyncio.wait_for(sub.queue.get(), self.block_s)
                    except TimeoutError:
                        yield None
                        continue
                    if got is _RESYNC:
                        while not sub.queue.empty():  # drop the stale backlog
                            stale = sub.queue.get_nowait()
                            if isinstance(stale, BaseException):
                                raise stale
                        break
                    if isinstance(got, BaseException):
                        raise got
                    assert isinstance(got, Signal)
                    if cursor_key(got.id) <= cursor_key(cursor):
                        continue
                    cursor = got.id
                    yield got
                if feed.task is None or feed.task.done():  # the reader ended: rejoin
                    self._leave(process_id, feed, sub)
                    feed, sub = self._join(process_id, cursor)
        finally:
            with contextlib.suppress(Exception):
                self._leave(process_id, feed, sub)
