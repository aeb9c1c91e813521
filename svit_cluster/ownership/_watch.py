"""Tell a host when it has lost the ownership of a process.

An :class:`OwnershipWatch` reports loss when any of these is observed:

* the ownership record was deleted (lease expired, released, removed by hand);
* the record was re-created by another acquisition (another create revision
  or lease);
* the host lease became LOST.

The watch reconnects after etcd errors (a loop that never dies until
cancelled), re-checking the record before watching again, so a loss during an
outage is reported once etcd answers. Loss is final for that ownership. While
etcd is unreachable the watch cannot know; the lease state (SUSPENDED, then
LOST) covers that window, and the Redis fence covers everything.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from svit_cluster.errors import FencedError
from svit_cluster.ownership._etcd import etcd_call
from svit_cluster.ownership._lease import HostLease, LeaseState
from svit_cluster.ownership._record import Ownership

__all__ = ["OwnershipWatch"]

log = logging.getLogger(__name__)


class OwnershipWatch:
    """Watches one :class:`Ownership`; create it with ``Owners.watch(ownership)``.

    Attributes:
        ownership: what is watched.
        reason: None while owned; then ``"deleted"``, ``"replaced"`` or
            ``"lease_lost"``.
    """

    def __init__(self, lease: HostLease, ownership: Ownership, *,
                 retry_delay_s: float = 0.2) -> None:
        self.ownership = ownership
        self.reason: str | None = None
        self._lease = lease
        self._retry_delay_s = retry_delay_s
        self._lost = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._watch: Any = None

    def start(self) -> OwnershipWatch:
        """Start watching in the background (call on the event loop)."""
        if self._task is None:
            self._lease.add_listener(self._on_lease)
            self._task = asyncio.get_running_loop().create_task(self._run())
            if self._lease.state is LeaseState.LOST:
                self._set_lost("lease_lost")
        return self

    @property
    def lost(self) -> bool:
        """True once loss was observed (final)."""
        return self.reason is not None

    def ensure_owned(self) -> None:
        """Raise unless ownership is still believed held (callable from any thread).

        Raises:
            FencedError: loss was observed (field ``reason``; ``token`` is ours).
        """
        if self.reason is not None:
            raise FencedError(
                f"ownership of {self.ownership.process_id} lost ({self.reason})",
                token=self.ownership.token,
                reason=self.reason,
                process_id=self.ownership.process_id,
            )

    async def wait_lost(self, *, timeout_s: float) -> bool:
        """Wait until loss is observed; False after ``timeout_s`` seconds."""
        try:
            await asyncio.wait_for(self._lost.wait(), timeout_s)
        except TimeoutError:
            return False
        return True

    def _on_lease(self, state: LeaseState) -> None:
        if state is LeaseState.LOST:
            self._set_lost("lease_lost")

    def _set_lost(self, reason: str) -> None:
        if self.reason is None:
            self.reason = reason
            log.info("ownership of %s (token %d) lost: %s",
                     self.ownership.process_id, self.ownership.token, reason)
            self._lost.set()

    def _replaced(self, kv: Any) -> bool:
        # Create revision and lease: after an etcd restore revisions repeat, so
        # another host's record can carry our create revision, never our lease.
        return (int(kv.create_revision) != self.ownership.revision
                or int(kv.lease) != self.ownership.lease_id)

    async def _check_record(self) -> int | None:
        """Return the revision to watch from, or None after reporting loss."""
        client = self._lease.client
        got = await etcd_call("watch_get", client.get(self.ownership.key),
                              timeout_s=self._lease.request_timeout_s)
        if got is None:
            self._set_lost("deleted")
            return None
        if self._replaced(got):
            self._set_lost("replaced")
            return None
        return int(got.header.revision) + 1

    async def _watch_once(self) -> None:
        start = await self._check_record()
        if start is None:
            return
        client = self._lease.client
        self._watch = await etcd_call("watch", client.watch(self.ownership.key,
                                                            start_revision=start),
                                      timeout_s=self._lease.request_timeout_s)
        async for event in self._watch:
            if event.kind == "DELETE":
                self._set_lost("deleted")
                return
            if self._replaced(event.kv):
                self._set_lost("replaced")
                return
        # The stream ended without an event (etcd restarted): check again.

    async def _run(self) -> None:
        while not self.lost:
            try:
                await self._watch_once()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the loop never dies; it re-checks after a pause
                log.debug("ownership watch of %s: %s", self.ownership.process_id, exc)
            finally:
                await self._cancel_stream()
            if not self.lost:
                await asyncio.sleep(self._retry_delay_s)

    async def _cancel_stream(self) -> None:
        watch, self._watch = self._watch, None
        if watch is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(watch.cancel(), 1.0)

    async def cancel(self) -> None:
        """Stop watching (idempotent)."""
        self._lease.remove_listener(self._on_lease)
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self._cancel_stream()
