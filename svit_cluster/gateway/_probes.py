"""Probe and metrics routes: ``/healthz``, ``/readyz``, ``/livez``, ``/metrics``."""

from __future__ import annotations

from fastapi import APIRouter
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.responses import JSONResponse, Response

from svit_cluster.gateway._metrics import GatewayMetrics
from svit_cluster.gateway._router import Router

__all__ = ["probes_router"]


def probes_router(router: Router, m: GatewayMetrics) -> APIRouter:
    """Kubernetes probes (readiness asks ``router.health()``; liveness asks
    nothing) and the Prometheus exposition of ``m``."""
    api = APIRouter(tags=["probes"])

    @api.get("/healthz")
    async def healthz() -> JSONResponse:
        """Readiness: 200 when the gateway can route (hosts registered), else 503."""
        health = await router.health()
        return JSONResponse(health, status_code=200 if health.get("ok") else 503)

    @api.get("/readyz")
    async def readyz() -> JSONResponse:
        """Readiness probe: the same answer as ``/healthz``."""
        return await healthz()

    @api.get("/livez")
    async def livez() -> JSONResponse:
        """Liveness probe: 200 while the event loop answers. It never depends on
        etcd, Ray or the hosts, so an outage of those does not restart gateways
        (Kubernetes restarts a container whose liveness probe fails)."""
        return JSONResponse({"ok": True})

    @api.get("/metrics")
    async def metrics_endpoint() -> Response:
        """Prometheus exposition: the gateway's own metrics and every host's lease
        and residency (``svit_host_*``, from ``router.hosts()``)."""
        m.observe_hosts(await router.hosts())
        return Response(generate_latest(m.registry), media_type=CONTENT_TYPE_LATEST)

    return api
