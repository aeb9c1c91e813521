"""Restore elsewhere the processes whose owner died, without waiting for a request.

A process is activated by a request; its reasoning loop then runs on the
owner and answers every queued inbox message. When the owner's host dies
mid-turn, nothing else would ever ask for the process again: the client that
sent the message waits for an answer that never comes. So the router
restores every process whose owner record went with its host's lease
(:attr:`RouteCache.on_orphaned`) on a live host; restore replays the log and
the new owner's loop resumes the queued messages at once. A process with
nothing queued passivates after its idle timeout, like any other.

Rules:

* a host Ray declared dead is acted on at once; otherwise after ``grace_s``
  (the lease TTL), so a host that lost its lease but lives (a pause, an etcd
  cut) can rejoin and claim its processes again first: a process that has an
  owner again by then is left where it is;
* at most :data:`AT_ONCE` placements at a time, :data:`ATTEMPTS` tries each
  (``unavailable`` is retried with backoff; a process deleted meanwhile is
  skipped); at most :data:`MAX_PENDING` processes wait, the rest are counted
  in :attr:`Rehomer.dropped` and logged. A process given up on, dropped, or
  whose death notice never came is not lost when its inbox holds a message:
  the inbox re-drive (:mod:`svit_cluster.cluster._redrive`) hands it back
  through :meth:`Rehomer.add_id` while it stays queued and owner-less; one
  with nothing queued is restored by its next request.

Several gateways each restore the same processes: placement is single-flight
per gateway and the claim protocol admits one owner, so the worst case is a
claim that loses and is released.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from svit_cluster.cluster._routes import Route
from svit_cluster.errors import NotFound, UnavailableError

__all__ = ["ATTEMPTS", "AT_ONCE", "MAX_PENDING", "Rehomer"]

log = logging.getLogger(__name__)

#: Placements under way at once.
AT_ONCE = 4
#: Tries per process (the waits between them double from 0.5 s to 8 s).
ATTEMPTS = 6
#: Processes waiting to be restored, at most.
MAX_PENDING = 10_000


class Rehomer:
    """Restores orphaned processes on the running event loop.

    Args:
        place: ``place(process_id)`` activates the process (or finds its
            current owner) and returns its route; raises ``UnavailableError``
            to be retried, ``NotFound`` for a process that no longer exists.
        host_dead: whether Ray declared ``host`` dead (no grace needed).
        grace_s: seconds to wait for a host that may still rejoin (lease TTL).
    """

    def __init__(self, place: Callable[[str], Awaitable[Route]],
                 host_dead: Callable[[str], bool], *, grace_s: float) -> None:
        self._place = place
        self._host_dead = host_dead
        self.grace_s = grace_s
        self._due: dict[str, float] = {}  # process id -> monotonic time to act
        self._task: asyncio.Task[None] | None = None
        #: processes restored, given up on (after ATTEMPTS), and not queued (full)
        self.restored = 0
        self.failed = 0
        self.dropped = 0

    def add(self, route: Route) -> None:
        """Queue ``route``'s process (its owner died). Call on the event loop."""
        self._queue(route.process_id, 0.0 if self._host_dead(route.host) else self.grace_s)

    def add_id(self, process_id: str) -> None:
        """Queue ``process_id`` for placement now (the inbox re-drive found its
        inbox queued and no owner, past its grace). Call on the event loop."""
        self._queue(process_id, 0.0)

    def _queue(self, process_id: str, delay_s: float) -> None:
        if process_id in self._due:
            return
        if len(self._due) >= MAX_PENDING:
            self.dropped += 1
            log.warning("not restoring %s: %d processes already wait", process_id,
                        MAX_PENDING)
            return
        self._due[process_id] = time.monotonic() + delay_s
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def close(self) -> None:
        """Stop; processes still waiting are restored by their next request."""
        task, self._task = self._task, None
        self._due.clear()
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _run(self) -> None:
        limit = asyncio.Semaphore(AT_ONCE)
        running: set[asyncio.Task[None]] = set()
        try:
            while self._due:
                now = time.monotonic()
                for pid in [p for p, at in self._due.items() if at <= now]:
                    del self._due[pid]
                    task = asyncio.create_task(self._one(pid, limit))
                    running.add(task)
                    task.add_done_callback(running.discard)
                if self._due:
                    await asyncio.sleep(max(0.05, min(self._due.values()) - time.monotonic()))
            if running:
                await asyncio.gather(*running, return_exceptions=True)
        finally:
            for task in running:
                task.cancel()

    async def _one(self, process_id: str, limit: asyncio.Semaphore) -> None:
        async with limit:
            try:
                async for attempt in AsyncRetrying(
                        stop=stop_after_attempt(ATTEMPTS),
                        wait=wait_exponential(multiplier=0.5, max=8.0),
                        retry=retry_if_exception_type(UnavailableError), reraise=True):
                    with attempt:
                        route = await self._place(process_id)
            except NotFound:
                return  # deleted meanwhile
            except Exception as exc:
                self.failed += 1
                log.warning("could not restore %s after its owner died: %s", process_id, exc)
                return
            self.restored += 1
            log.info("restored %s on %s after its owner died", process_id, route.host)
