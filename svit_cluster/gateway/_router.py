"""The gateway's view of where processes live: the :class:`Router` contract.

* ``svit_cluster.inprocess.InProcessRouter`` keeps processes in this Python
  process (tests, benchmarks); not durable.
* ``svit_cluster.cluster.RayRouter`` routes to Ray process actors through the
  etcd owner cache, activating processes on demand (cluster hosting).
"""

from __future__ import annotations

from typing import Any, Protocol

from svit_cluster.control import ControlAnswer, ControlRequest
from svit_cluster.events import SignalSource
from svit_cluster.process import Script, Value

__all__ = [
    "TOKEN_HEADER",
    "ProcessInfo",
    "Router",
]

ProcessInfo = dict[str, Any]

#: Response header of ``/v1/control`` carrying the answering owner's fencing token.
TOKEN_HEADER = "X-Svit-Token"


class Router(Protocol):
    """Process operations behind the gateway. Every method is safe to retry
    except :meth:`create` and :meth:`fork`, which fail with ``conflict`` when
    the target already exists."""

    async def control(self, request: ControlRequest, partition: str,
                      body: bytes | None = None) -> ControlAnswer:
        """Run one control request; ``partition`` is the trusted receipt partition.

        ``body`` is the request's JSON exactly as the gateway received and
        validated it (``request`` was decoded from it): a router that sends the
        request to another process sends these bytes instead of encoding
        ``request`` again. The answer carries the response bytes, encoded once
        by the owner, and the owner's fencing token when the router knows it
        (the gateway sends it as the ``X-Svit-Token`` header)."""
        ...

    async def create(
        self, process_id: str, memory: Value, scripts: dict[str, Script]
    ) -> ProcessInfo:
        """Create a process at version 0; returns ``{process_id, version, root_hash}``.

        Raises:
            ConflictError: (409 ``conflict``) ``process_id`` already exists.
            ScriptFailed: (422 ``script_failed``) a script does not compile.
            InvalidInput, LimitExceeded: (400) a bad id, memory or script
                record, or a bound exceeded (``Process.create``).
            UnavailableError: (503) outcome unknown; retry.
        """
        ...

    async def inbox(self, process_id: str, message: Value, dedup_key: str | None
                    ) -> dict[str, Any]:
        """Commit ``message`` to ``/inbox`` (skipped if ``dedup_key`` was delivered);
        returns ``{"appended": bool, "version": int}``."""
        ...

    async def inbox_drop(self, process_id: str, *, reason: str, message_id: str | None = None,
                         head_hash: str | None = None) -> dict[str, Any]:
        """Dead-letter the inbox head named by ``message_id`` and/or ``head_hash``
        (see :meth:`ProcessController.drop_inbox_head`); returns
        ``{"dropped": dead_letter, "version": int}``. Not safe to retry blindly:
        a retry after success finds another head and answers ``inbox_conflict``."""
        ...

    async def state(self, process_id: str, path: str) -> tuple[Value, int]:
        """``(value, version)`` from one observation."""
        ...

    async def snapshot(self, process_id: str) -> bytes:
        """The process snapshot bytes."""
        ...

    async def request_status(self, process_id: str, partition: str, client_id: str,
                             request_id: str) -> dict[str, Any]:
        """Did the request ``(partition, client_id, request_id)`` commit on ``process_id``?

        Returns ``{"committed": bool, "version": int | None,
        "retained_from_version": int}`` from the owner's retained log (see
        :meth:`ProcessController.request_status`). Read-only, safe to retry."""
        ...

    async def fork(self, process_id: str, new_process_id: str, *, history: bool = False
                   ) -> ProcessInfo:
        """Fork into ``new_process_id`` (same version, new identity, empty outbox).

        Without ``history`` the child starts a fresh reasoning session. With
        ``history`` its first session also starts with the parent's immutable
        event prefix: the events up to the ``/thread/session/last_seq`` of the
        forked state (the last acknowledged turn at the snapshot's version),
        copied before the child serves, so the child's first turn continues the
        parent's turn numbering and sees that history; afterwards parent and
        child are isolated (reference: a durable fork shares an immutable event
        prefix, then diverges). The copy is bounded by the parent's retained
        events (``max_events`` per session) and safe to retry before the child
        exists (``events.fork_events``).

        Returns:
            The child's info; with ``history`` also ``"history": {"events":
            int (copied this call), "upto_seq": int}``.

        Raises:
            NotFound: (404) no process ``process_id``.
            ConflictError: (409) ``new_process_id`` already exists (a retry
                after a successful fork answers this), or its event log holds
                events of its own.
            UnavailableError: (503) outcome unknown; retry.
        """
        ...

    async def delete(self, process_id: str) -> dict[str, Any]:
        """Delete the process (fenced like a commit; see ``RedisBackend.delete``).

        Returns ``{"process_id", "deleted": True, "version"}`` (``version``: the
        head version that was deleted). Raises ``NotFound`` when there is no
        such process (never created or already deleted: a retry after an
        unknown outcome answers this), ``FencedError`` when the owner that
        tried lost the process, ``UnavailableError`` when the outcome is
        unknown (retry)."""
        ...

    async def set_residency(self, process_id: str, *, passivate_after_s: float | None
                            ) -> dict[str, Any]:
        """Set ``process_id``'s idle timeout: it passivates (releases its actor)
        after ``passivate_after_s`` idle seconds; None restores the cluster's
        default. Stored with the process, so it follows it to every host.

        Returns:
            ``{"process_id", "passivate_after_s": effective seconds, "default": bool}``.

        Raises:
            NotFound: (404) no such process. UnavailableError: (503) retry
            (safe: setting the same value twice is harmless).
        """
        ...

    async def list_processes(self, *, tenant: str | None, limit: int,
                             cursor: str | None) -> dict[str, Any]:
        """One page of the existing processes, bounded work per page.

        Args:
            tenant: only processes of this tenant (``svit://<tenant>/...``);
                None: every tenant (the gateway passes None for admins only).
            limit: processes wanted, 1..1000; a page may hold fewer (even
                none) before the last one, and a few more when the data source
                returns them in one step (a Redis ``SCAN`` step is never split).
            cursor: the previous page's ``next``; None: the first page.

        Returns:
            ``{"processes": [{"process_id", "version", "active", "host",
            "token"}], "next": cursor or None}``: ``version`` as read during the
            listing, ``active`` whether an owner serves it now (as far as this
            router's cached view knows), ``host`` that owner's host or None,
            ``token`` the fencing token it serves under or None. ``next``
            is None on the last page. A process that exists for the whole
            listing is listed at least once; one created or deleted meanwhile
            may or may not be.

        Raises:
            InvalidInput: (400) a cursor this router did not issue.
            UnavailableError: (503) the store failed (safe to retry).
        """
        ...

    async def health(self) -> dict[str, Any]:
        """``{"ok": bool, ...details}``."""
        ...

    async def owner_changes(self, limit: int) -> list[dict[str, Any]]:
        """The newest ``limit`` ownership changes this router saw, newest first:
        ``{process_id, old_host, old_token, new_host, new_token, cause,
        ended_at, acquired_at, gap_s}`` (``cause``: ``lease_ended`` -- a
        failover --, ``released`` or ``replaced``; times in unix seconds). In
        memory and bounded: this router's view since it started (see
        ``svit_cluster.cluster`` ``_moves``)."""
        ...

    async def hosts(self) -> list[dict[str, Any]]:
        """Every host that serves processes, each ``{"host", "answered", ...}``:
        its lease (``lease_state``, ``keepalive_lag_s``, ``max_keepalive_lag_s``)
        and residency (``actors``, ``max_active``, ``spares``, ``starting``,
        ``pss_mib``, ``lru_idle_s``, ``evictions``, ``host_full``; see
        ``HostAgent.status``). ``answered`` is False for a host whose agent
        did not answer (then only ``host`` is given). May be a few seconds old."""
        ...

    def signal_source(self) -> SignalSource:
        """Where observers read signals and canonical history (never the owner's path)."""
        ...
