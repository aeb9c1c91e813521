"""Admin HTTP API over the cluster's hosts: ``GET /v1/admin/hosts`` (admin tokens only).

``{"hosts": [{"host", "answered", "lease_state", "keepalive_lag_s",
"max_keepalive_lag_s", "actors", "max_active", "spares", "starting", "pss_mib",
"lru_idle_s", "evictions", "host_full", ...}, ...]}`` -- each host's lease and
residency as its agent reports them (``Router.hosts``; at most a few seconds
old). A host whose agent did not answer is ``{"host", "answered": false}``.
``svit-cluster status`` prints it; ``/metrics`` exports the same figures as
``svit_host_*`` gauges (:meth:`GatewayMetrics.observe_hosts`).
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse

from svit_cluster.gateway._access import admin_only
from svit_cluster.gateway._router import Router

__all__ = ["hosts_router"]


def hosts_router(router: Router) -> APIRouter:
    """The admin host view over ``router``."""
    api = APIRouter(prefix="/v1/admin/hosts", tags=["hosts"])

    @api.get("")
    async def hosts(request: Request) -> JSONResponse:
        """Every host's lease and residency (admin tokens only; else 403)."""
        if (denied := admin_only(request, "host figures")) is not None:
            return denied
        return JSONResponse({"hosts": await router.hosts()})

    return api
