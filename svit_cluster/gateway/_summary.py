"""Admin HTTP API: one cheap cluster summary, ``GET /v1/admin/summary`` (admin tokens only).

What a console polls: ::

    {"gateway": {"version", "ok", "hosts_live", "routes"},
     "counters": {"committed", "conflict", "rejected", "fenced", "unavailable",
                  "failovers"},
     "hosts": [... as GET /v1/admin/hosts ...],
     "owner_changes": [{"process_id", "old_host", "old_token", "new_host",
                        "new_token", "cause", "ended_at", "acquired_at",
                        "gap_s"}, ...]}

``counters`` are this gateway's totals since it started (the same series as
``/metrics``: ``svit_control_outcomes_total`` by status, ``svit_fenced_total``,
``svit_unavailable_total``, ``svit_failovers_total``); a poller turns two
answers into rates. ``gateway`` is ``Router.health()``'s view (route cache,
live hosts). ``owner_changes`` are the newest :data:`OWNER_CHANGES` ownership
changes this gateway's route cache saw, newest first (``cause``
``lease_ended`` is a failover; ``Router.owner_changes``). The cost is
bounded and does not grow with the number of processes: the host figures come
from ``Router.hosts()``, which asks each host's agent at most every few
seconds however often it is called, and the rest is read from memory. A
non-admin token gets ``403 forbidden``.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse

from svit_cluster import __version__
from svit_cluster.gateway._access import admin_only
from svit_cluster.gateway._metrics import GatewayMetrics
from svit_cluster.gateway._router import Router

__all__ = ["OWNER_CHANGES", "summary_router"]

#: Ownership changes in one summary.
OWNER_CHANGES = 20

#: ``counters`` key -> (metric sample name, labels).
_COUNTERS: tuple[tuple[str, str, dict[str, str]], ...] = (
    ("committed", "svit_control_outcomes_total", {"status": "committed"}),
    ("conflict", "svit_control_outcomes_total", {"status": "conflict"}),
    ("rejected", "svit_control_outcomes_total", {"status": "rejected"}),
    ("fenced", "svit_fenced_total", {}),
    ("unavailable", "svit_unavailable_total", {}),
    ("failovers", "svit_failovers_total", {}),
)


def summary_router(router: Router, metrics: GatewayMetrics) -> APIRouter:
    """The admin summary over ``router`` and this gateway's ``metrics``."""
    api = APIRouter(prefix="/v1/admin/summary", tags=["hosts"])

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
                             "owner_changes": await router.owner_changes(OWNER_CHANGES)})

    return api
