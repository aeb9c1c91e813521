"""Re-drive queued inboxes: a process whose committed inbox is non-empty gets an owner.

The rule this module keeps: **a process whose committed inbox is non-empty
always gets an owner whose loop drives it, within a bounded time, without a
new client request**, whatever happened to its previous owner or to the
notice of that owner's death.

Only an owner's reasoning loop answers a queued message. The death notice the
:class:`~svit_cluster.cluster._rehome.Rehomer` acts on (an owner record
deleted in the same etcd revision as its host's registration) can be missed
or acted on in vain: the host re-registers under a new lease before the old
one ends (the old lease then deletes the owner records alone); the route
watch is broken or reloads while the deletion happens; the gateway restarts;
the Rehomer gives up after its tries while the cluster recovers; the process
is passivated at the residency budget while its loop waits to retry a failed
turn. Each of these leaves a queued message and no owner. So instead of
trusting any one notice, the gateway reconciles against durable state:

* **the index**: ``<prefix>:{P}:queued`` (:attr:`ProcessKeys.queued`) exists
  exactly while the committed ``/inbox`` is non-empty. The fenced commit and
  create scripts set or delete it as their last write, with the state they
  store, so it cannot disagree with the log (no separate writer, no crash
  window) and it lives in the process's own hash slot (one-slot scripts on a
  Redis Cluster). ``DELETE`` removes it.
* **the sweep** (:class:`InboxRedrive`, one per gateway, a loop that never
  dies): every ``period_s`` it reads one page of at most ``batch`` queued
  process ids (:func:`svit_cluster.store.list_queued`, a bounded ``SCAN``;
  the cursor carries over, so a pass over the whole key space takes
  ``ceil(queued / batch)`` periods at least). A process with no route in the
  route cache that has been seen owner-less for at least ``grace_s`` (the
  lease TTL: a host that lost its lease but lives may claim its processes
  again first, as the Rehomer allows it) is handed to the Rehomer, which
  activates it (at most ``AT_ONCE`` at a time, ``MAX_PENDING`` waiting); the
  new owner's loop takes the head at once.
* **back-off per process** (:class:`RedriveBackoff`): after a re-drive the
  same process is re-driven again no sooner than ``base_s`` later, doubling
  per re-drive up to ``max_s`` (the reasoning loop's ``retry_after_s`` and
  ``max_retry_after_s``), so a head that keeps failing (or a process that
  keeps being evicted at the budget) is never re-driven in a hot loop. The
  history of a process is forgotten once a whole pass no longer lists it
  (its inbox drained, or it was deleted); at most ``max_tracked`` processes
  are tracked (others wait for a later pass).

Bound: a queued process with no owner is activated at most ``grace_s`` +
one pass + ``period_s`` after its owner record went (its first re-drive), and
again at most every ``max_s`` while it stays queued and owner-less. A process
that has an owner is never touched here: its loop drives it under its own
retry rules (``ReasonerConfig``), and its actor does not passivate at the idle
timeout while that loop waits to retry (``ProcessActor._idle_loop``).

Why this shape: the inbox lives inside the process state (snapshot + log), so
"which processes have a queued message" cannot be derived from existing keys
without restoring every process; a mark written by the one script that
commits the state is exact and costs one ``SET``/``DEL`` per commit. Why the
gateway and not the dispatcher: the gateway already holds the route cache
(which process has an owner, from the etcd watch) and the Rehomer (bounded,
retried placement), so the sweep only adds a ``SCAN`` page per period; the
dispatcher would have to learn owners and place processes through the
gateway's API.

Several gateways each sweep; the claim protocol admits one owner, so the worst
case is a placement that finds the owner another gateway just made. A process
whose inbox was queued before its store wrote the mark (an older version's
commit) is indexed at its next commit.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from svit_cluster.store import QueuedPage

__all__ = ["InboxRedrive", "RedriveBackoff"]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Seen:
    ownerless_since: float | None = None  # monotonic s; None: owned when last seen
    redrives: int = 0
    next_at: float = 0.0  # monotonic s before which it is not re-driven again


class RedriveBackoff:
    """Which queued processes to re-drive now (pure bookkeeping, no I/O).

    Args:
        grace_s: seconds a process must be seen owner-less before its first
            re-drive (>= 0).
        base_s: seconds before the second re-drive of the same process; each
            later one waits twice as long as the previous (> 0).
        max_s: the longest wait between two re-drives (>= ``base_s``).
        max_tracked: processes remembered at most (> 0).

    Raises:
        ValueError: a bound out of range.
    """

    def __init__(self, *, grace_s: float, base_s: float, max_s: float,
                 max_tracked: int = 10_000) -> None:
        if grace_s < 0 or base_s <= 0 or max_s < base_s or max_tracked < 1:
            raise ValueError("need grace_s >= 0, 0 < base_s <= max_s, max_tracked >= 1")
        self.grace_s = grace_s
        self.base_s = base_s
        self.max_s = max_s
        self.max_tracked = max_tracked
        self._seen: dict[str, _Seen] = {}
        self._pass: set[str] = set()

    def __len__(self) -> int:
        return len(self._seen)

    def observe(self, process_id: str, owned: bool, now: float) -> bool:
        """Note that ``process_id`` is queued (``owned``: it has a route now);
        True when it should be re-driven now (then counted as re-driven)."""
        self._pass.add(process_id)
        seen = self._seen.get(process_id)
        if seen is None:
            if len(self._seen) >= self.max_tracked:
                return False  # tracked next pass, once some entry is forgotten
            seen = self._seen[process_id] = _Seen()
        if owned:
            seen.ownerless_since = None
            return False
        if seen.ownerless_since is None:
            seen.ownerless_since = now
        if now - seen.ownerless_since < self.grace_s or now < seen.next_at:
            return False
        seen.redrives += 1
        seen.next_at = now + min(self.base_s * 2 ** (seen.redrives - 1), self.max_s)
        return True

    def end_pass(self) -> int:
        """A whole pass over the index ended: forget the processes it did not
        list (drained or deleted); returns how many."""
        gone = [pid for pid in self._seen if pid not in self._pass]
        for pid in gone:
            del self._seen[pid]
        self._pass = set()
        return len(gone)


class InboxRedrive:
    """The gateway's sweep of the queued-inbox index (see the module docstring).

    Args:
        page: ``page(cursor)`` reads one page of queued process ids
            (:func:`svit_cluster.store.list_queued`, off the event loop);
            may raise anything (logged, retried next period).
        owned: whether a process has a route now (the route cache).
        redrive: activate a process (``Rehomer.add_id``); must not block.
        backoff: the per-process bookkeeping.
        period_s: seconds between two pages (> 0; default 2).
    """

    def __init__(self, page: Callable[[str | None], Awaitable[QueuedPage]],
                 owned: Callable[[str], bool], redrive: Callable[[str], None],
                 backoff: RedriveBackoff, *, period_s: float = 2.0) -> None:
        if period_s <= 0:
            raise ValueError("period_s must be positive")
        self._page = page
        self._owned = owned
        self._redrive = redrive
        self.backoff = backoff
        self.period_s = period_s
        self._cursor: str | None = None
        self._task: asyncio.Task[None] | None = None
        #: processes handed to the Rehomer (since start) and sweeps that failed
        self.redriven = 0
        self.errors = 0

    def start(self) -> InboxRedrive:
        """Run the sweep on the running event loop (idempotent)."""
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def sweep_once(self) -> int:
        """Read one page and re-drive what is due; returns how many were re-driven.

        Raises:
            Exception: whatever ``page`` raised (nothing re-driven).
        """
        page = await self._page(self._cursor)
        now = time.monotonic()
        count = 0
        for pid in page.process_ids:
            if self.backoff.observe(pid, self._owned(pid), now):
                self._redrive(pid)
                count += 1
        self._cursor = page.next_cursor
        if page.next_cursor is None:
            self.backoff.end_pass()
        self.redriven += count
        if count:
            log.info("re-driving %d queued process(es) that had no owner", count)
        return count

    async def _run(self) -> None:
        while True:
            try:
                await self.sweep_once()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the sweep never dies: Redis down, a bug
                self.errors += 1
                self._cursor = None
                log.warning("inbox re-drive sweep failed: %s", type(exc).__name__)
            await asyncio.sleep(self.period_s)
