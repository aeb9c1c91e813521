"""Admin HTTP API: one cheap cluster summary, ``GET /v1/admin/summary`` (admin tokens only).

What a console polls: ::

    {"gateway": {"version", "ok", "hosts_live", "routes"},
     "counters": {"committed", "conflict", "rejected", "fenced", "unavailable",
                  "failovers"},
     "hosts": [... as GET /v1/admin/hosts ...],
     "owner_changes": [{"process_id", "old_host", "old_token", "new_host",
                        "new_token", "cause", "ended_at", "acquired_at",
                        "gap_s"}, ...],
     "dispatcher": {"ok", "live", "expired",
                    "workers": [{"worker", "live", "expires_in_s"}, ...]}
                   or {"ok": false, "error"} or null}

``counters`` are this gateway's totals since it started (the same series as
``/metrics``: ``svit_control_outcomes_total`` by status, ``svit_fenced_total``,
``svit_unavailable_total``, ``svit_failovers_total``); a poller turns two
answers into rates. ``gateway`` is ``Router.health()``'s view (route cache,
live hosts). ``owner_changes`` are the newest :data:`OWNER_CHANGES` ownership
changes this gateway's route cache saw, newest first (``cause``
``lease_ended`` is a failover; ``Router.owner_changes``). ``dispatcher``: the
outbox dispatcher workers' heartbeats in the commit log's Redis
(``dispatch.worker_health``: how many are live and expired, the
:data:`DISPATCH_WORKERS` latest to expire); ``ok`` is true when at least one
worker is live; ``{"ok": false, "error"}`` when Redis failed (the rest of the
summary is still answered); null when the gateway has no Redis URL. The cost is
bounded and does not grow with the number of processes: the host figures come
from ``Router.hosts()``, which asks each host's agent at most every few
seconds however often it is called, the dispatcher's from three Redis reads,
and the rest is read from memory. A non-admin token gets ``403 forbidden``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse

from svit_cluster import __version__
from svit_cluster.errors import UnavailableError
from svit_cluster.gateway._access import admin_only
from svit_cluster.gateway._metrics import GatewayMetrics
from svit_cluster.gateway._router import Router
from svit_cluster.store import connect

__all__ = ["DISPATCH_WORKERS", "OWNER_CHANGES", "summary_router"]

#: Ownership changes in one summary.
OWNER_CHANGES = 20
#: Dispatcher workers listed in one summary (all are counted).
DISPATCH_WORKERS = 16

#: ``counters`` key -> (metric sample name, labels).
_COUNTERS: tuple[tuple[str, str, dict[str, str]], ...] = (
    ("committed", "svit_control_outcomes_total", {"status": "committed"}),
    ("conflict", "svit_control_outcomes_total", {"status": "conflict"}),
    ("rejected", "svit_control_outcomes_total", {"status": "rejected"}),
    ("fenced", "svit_fenced_total", {}),
    ("unavailable", "svit_unavailable_total", {}),
    ("failovers", "svit_failovers_total", {}),
)


def summary_router(router: Router, metrics: GatewayMetrics, redis_url: str | None = None,
                   *, prefix: str = "svit") -> APIRouter:
    """The admin summary over ``router``, this gateway's ``metrics`` and the
    dispatcher's heartbeats in the Redis at ``redis_url`` (None: not read)."""
    from svit_cluster import dispatch

    api = APIRouter(prefix="/v1/admin/summary", tags=["hosts"])
    holder: dict[str, Any] = {}

    def workers(url: str) -> dict[str, Any]:
        if "c" not in holder:
            holder["c"] = connect(url)
        health = dispatch.worker_health(holder["c"], prefix=prefix, limit=DISPATCH_WORKERS)
        return {"ok": health.live > 0, "live": health.live, "expired": health.expired,
                "workers": health.workers}

    async def dispatcher() -> dict[str, Any] | None:
        if redis_url is None:
            return None
        try:
            return await asyncio.to_thread(workers, redis_url)
        except UnavailableError as exc:
            return {"ok": False, "error": str(exc)[:300]}

    @api.get("")
    async def summary(request: Request) -> JSONResponse:
        """This gateway's health and counters and every host's figures (admin only)."""
        if (denied := admin_only(request, "cluster figures")) is not None:
            return denied
        health = await router.health()
        counters: dict[str, int] = {}
        for key, sample, labels in _COUNTERS:
            value = metrics.registry.get_sample_value(sample, labels)
            counters[key] = int(value or 0)
        gateway: dict[str, Any] = {
            "version": __version__,
            "ok": bool(health.get("ok")),
            "hosts_live": health.get("hosts_live"),
            "routes": health.get("routes"),
        }
        return JSONResponse({"gateway": gateway, "counters": counters,
                             "hosts": await router.hosts(),
                             "owner_changes": await router.owner_changes(OWNER_CHANGES),
                             "dispatcher": await dispatcher()})

    return api
