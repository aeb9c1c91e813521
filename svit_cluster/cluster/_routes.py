"""Route cache: owner records and live hosts, kept current by one etcd watch.

The request path reads routes from memory; it never asks etcd in the common
case (STYLE.md §6). The cache loads ``/svit/<cluster>/`` once, then follows a
prefix watch from the next revision. If the watch breaks (etcd restart, network
cut) it reloads and watches again; the loop never dies.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from svit_cluster.cluster._moves import OwnerChanges
from svit_cluster.ownership import cluster_prefix, parse_key, record_token

__all__ = ["Route", "RouteCache"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Route:
    """Where a process is served: host, fencing token (record epoch and create
    revision, see :func:`svit_cluster.ownership.record_token`), Ray actor name.

    The actor name comes from the ownership record, so a new owner's actor never
    shares a name with an earlier owner's actor still registered on a dead node.
    """

    process_id: str
    host: str
    token: int
    actor: str


class RouteCache:
    """Owners and hosts of one cluster, from etcd, in memory.

    Args:
        client: an ``aetcd.Client``.
        cluster: cluster name.
    """

    def __init__(self, client: Any, cluster: str) -> None:
        self.client = client
        self.cluster = cluster
        self.prefix = cluster_prefix(cluster)
        self.routes: dict[str, Route] = {}
        self.hosts: dict[str, dict[str, Any]] = {}
        self.revision = 0
        self.ready = asyncio.Event()
        self.changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._watch: Any = None
        #: process id -> futures waiting for that process's route to move (see
        #: :meth:`moved`).
        self._movers: dict[str, list[tuple[Route, asyncio.Future[None]]]] = {}
        #: Called with each route whose owner died rather than released it: etcd
        #: deleted its owner record in the same revision as its host's
        #: registration, which happens only when the host's lease expired or was
        #: revoked (a lease's keys go in one revision; a release deletes one
        #: record). Seen only while the watch runs: a deletion missed while it
        #: was broken is not reported.
        self.on_orphaned: Callable[[Route], None] | None = None
        #: Called with a host's name when a new registration of it appears (a
        #: host that joined, or came back after its lease ended: its agent may
        #: be a new actor under the old name).
        self.on_host_joined: Callable[[str], None] | None = None
        #: host -> create revision of the registration seen last (kept after a
        #: deletion, so the next registration counts as new).
        self._host_revisions: dict[str, int] = {}
        self._gone_revision = 0
        self._gone_hosts: set[str] = set()
        self._gone_routes: list[Route] = []
        #: The ownership changes this cache saw (bounded; see ``_moves``).
        self.changes = OwnerChanges()

    def start(self) -> RouteCache:
        """Start the load-and-watch loop on the running event loop."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self._cancel_watch()

    def load(self) -> dict[str, int]:
        """Live processes per live host (for placement by load)."""
        counts = {h: 0 for h in self.hosts}
        for route in self.routes.values():
            if route.host in counts:
                counts[route.host] += 1
        return counts

    def moved(self, route: Route) -> asyncio.Future[None]:
        """A future done once ``route`` stops being its process's route here.

        It moves when the ownership record goes (released, or deleted with its
        host's lease: revoked or expired) or names another actor. A call in
        flight to ``route``'s actor then cannot be answered by an owner any
        more (a paused owner's call would hang until its deadline), so the
        router abandons it at once and the call fails over.
        Only a change seen after this call counts (a route the watch has not
        delivered yet, e.g. an owner another gateway just placed, is not
        "moved"). Call :meth:`forget_moved` with the future when done with it.
        """
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._movers.setdefault(route.process_id, []).append((route, fut))
        return fut

    def forget_moved(self, route: Route, fut: asyncio.Future[None]) -> None:
        """Stop tracking ``fut`` (from :meth:`moved`); no error if it is gone."""
        waiters = self._movers.get(route.process_id)
        if waiters is None:
            return
        waiters[:] = [(r, f) for r, f in waiters if f is not fut]
        if not waiters:
            del self._movers[route.process_id]

    def _same_actor(self, route: Route) -> bool:
        current = self.routes.get(route.process_id)
        return current is not None and current.actor == route.actor

    def _wake_movers(self, process_id: str) -> None:
        waiters = self._movers.get(process_id)
        if not waiters:
            return
        keep = []
        for route, fut in waiters:
            if fut.done():
                continue
            if self._same_actor(route):
                keep.append((route, fut))
            else:
                fut.set_result(None)
        if keep:
            self._movers[process_id] = keep
        else:
            del self._movers[process_id]

    def _apply(self, key: bytes, value: bytes | None, create_revision: int,
               deleted_at: int = 0) -> None:
        """Apply one record; ``deleted_at``: the revision of a watched deletion."""
        kind = parse_key(self.cluster, key)
        if kind is not None and kind[0] == "owner":
            pid = kind[1]
            if value is None:
                gone = self.routes.pop(pid, None)
                if gone is not None:
                    self.changes.ended(pid, gone.host, gone.token)
                if gone is not None and deleted_at:
                    self._note_gone(deleted_at, route=gone)
            else:
                try:
                    record = json.loads(value)
                    host, actor = str(record["host"]), str(record["address"])
                except (ValueError, KeyError, TypeError):
                    return
                route = Route(pid, host, record_token(value, create_revision), actor)
                before = self.routes.get(pid)
                self.changes.acquired(pid, host, route.token, None if before is None
                                      else (before.host, before.token))
                self.routes[pid] = route
            self._wake_movers(pid)
        elif kind is not None and kind[0] == "host":
            host = kind[1]
            if value is None:
                self.hosts.pop(host, None)
                if deleted_at:
                    self._note_gone(deleted_at, host=host)
            else:
                joined = self._host_revisions.get(host) != create_revision
                self._host_revisions[host] = create_revision
                try:
                    self.hosts[host] = dict(json.loads(value))
                except (ValueError, TypeError):
                    self.hosts[host] = {"host": host}
                if joined and self.on_host_joined is not None:
                    try:
                        self.on_host_joined(host)
                    except Exception:  # a listener's fault must not break the watch
                        log.exception("on_host_joined failed for %s", host)
        self.changed.set()

    def _note_gone(self, revision: int, *, host: str | None = None,
                   route: Route | None = None) -> None:
        """Pair the deletions of one revision: an owner record deleted with its
        host's registration is orphaned (reported once, in either order)."""
        if revision != self._gone_revision:
            self._gone_revision, self._gone_hosts, self._gone_routes = revision, set(), []
        orphans: list[Route] = []
        if host is not None:
            self._gone_hosts.add(host)
            orphans = [r for r in self._gone_routes if r.host == host]
            self._gone_routes = [r for r in self._gone_routes if r.host != host]
        elif route is not None:
            if route.host in self._gone_hosts:
                orphans = [route]
            else:
                self._gone_routes.append(route)
        for orphan in orphans:
            self.changes.lease_ended(orphan.process_id)
        if self.on_orphaned is not None:
            for orphan in orphans:
                try:
                    self.on_orphaned(orphan)
                except Exception:  # a listener's fault must not break the watch
                    log.exception("on_orphaned failed for %s", orphan.process_id)

    async def _reload(self) -> None:
        got = await asyncio.wait_for(self.client.get_prefix(self.prefix), timeout=5)
        before = dict(self.routes)
        self.routes.clear()
        self.hosts.clear()
        for kv in got:
            self._apply(bytes(kv.key), bytes(kv.value), int(kv.create_revision))
        for pid, old in before.items():  # owners that changed while the watch was broken
            new = self.routes.get(pid)
            if new is None:
                self.changes.ended(pid, old.host, old.token)
            else:
                self.changes.acquired(pid, new.host, new.token, (old.host, old.token))
        for pid in list(self._movers):  # records deleted while the watch was broken
            self._wake_movers(pid)
        self.revision = int(got.header.revision)
        self.ready.set()

    async def _cancel_watch(self) -> None:
        watch, self._watch = self._watch, None
        if watch is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(watch.cancel(), 1.0)

    async def _run(self) -> None:
        while True:
            try:
                await self._reload()
                self._watch = await asyncio.wait_for(
                    self.client.watch_prefix(self.prefix, start_revision=self.revision + 1),
                    timeout=5,
                )
                async for event in self._watch:
                    kv = event.kv
                    deleted = event.kind == "DELETE"
                    self._apply(bytes(kv.key), None if deleted else bytes(kv.value),
                                int(kv.create_revision),
                                deleted_at=int(kv.mod_revision) if deleted else 0)
                    self.revision = max(self.revision, int(kv.mod_revision))
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.info("route watch broke (%s); reloading", type(exc).__name__)
            finally:
                await self._cancel_watch()
            await asyncio.sleep(0.2)
