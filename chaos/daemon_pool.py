"""Long-lived daemon worker threads for blocking harness calls (:func:`in_daemon_thread`).

Fault actions and service probes block; the runner and the run await them
through :func:`in_daemon_thread` so the event loop keeps running. The workers
are long-lived, because a server started from a thread with
``PR_SET_PDEATHSIG`` dies when that thread exits, and daemon, because a call
that never returns (a host that does not come back) must not block
interpreter exit. At most 8 run at once; callers bound each wait.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

__all__ = ["in_daemon_thread"]


class _DaemonPool:
    """Long-lived daemon worker threads for blocking fault actions.

    Long-lived, because a server started from a thread with
    ``PR_SET_PDEATHSIG`` dies when *that thread* exits; daemon, because a call
    that never returns (a host that does not come back) must not block
    interpreter exit. Workers are started on demand, up to ``size``.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self._queue: queue.SimpleQueue[tuple[Callable[[], Any], concurrent.futures.Future[Any]]]
        self._queue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._workers = 0
        self._idle = 0

    def submit(self, fn: Callable[[], T]) -> concurrent.futures.Future[T]:
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        with self._lock:
            self._queue.put((fn, future))
            if self._queue.qsize() > self._idle and self._workers < self.size:
                self._workers += 1
                threading.Thread(target=self._work, name="svit-chaos-worker",
                                 daemon=True).start()
        return future

    def _work(self) -> None:
        while True:
            with self._lock:
                self._idle += 1
            fn, future = self._queue.get()
            with self._lock:
                self._idle -= 1
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn())
                except BaseException as exc:
                    future.set_exception(exc)


_POOL = _DaemonPool(8)


async def in_daemon_thread(fn: Callable[[], T]) -> T:
    """Run blocking ``fn`` on a long-lived daemon worker and await its result.

    Unlike :func:`asyncio.to_thread`, a call that never returns neither blocks
    interpreter exit nor the default executor; callers bound the wait with a
    timeout (the worker stays busy until the call ends).
    """
    return await asyncio.wrap_future(_POOL.submit(fn))
