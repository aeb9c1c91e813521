"""The protocol routes: ``POST /v1/initialize`` and ``POST /v1/control``
(svit-control@1: ``reference/control-protocol.md``)."""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import Response

from svit_cluster import __version__
from svit_cluster.control import ControlRequest, ControlResponse, decode_request
from svit_cluster.errors import ErrorCode, InvalidInput
from svit_cluster.gateway._access import principal_of, require_access
from svit_cluster.gateway._errors import error_response
from svit_cluster.gateway._metrics import GatewayMetrics
from svit_cluster.gateway._router import TOKEN_HEADER, Router
from svit_cluster.process import PROTOCOL

__all__ = ["CAPABILITIES", "IMPLEMENTATION", "control_router"]

#: Optional behaviours this gateway offers (negotiated by ``initialize``).
CAPABILITIES: tuple[str, ...] = ("host-api", "fenced-receipts", "events")
IMPLEMENTATION = {"name": "svit-cluster", "version": __version__}


class Initialize(BaseModel):
    model_config = ConfigDict(extra="ignore")
    protocols: list[str] = Field(default_factory=lambda: [PROTOCOL])
    capabilities: list[str] = Field(default_factory=list)
    client: dict[str, Any] = Field(default_factory=dict)


def control_router(router: Router, m: GatewayMetrics, *, max_request_bytes: int) -> APIRouter:
    """``initialize`` (protocol and capability negotiation; advertises
    ``max_request_bytes``) and ``control`` (one request: decode, authorize the
    tenant, run through ``router``; outcome counts and latency into ``m``)."""
    api = APIRouter(tags=["protocol"])

    @api.post("/v1/initialize")
    async def initialize(body: Initialize) -> dict[str, Any]:
        """Negotiate protocol major, capabilities, implementation, auth scheme."""
        chosen = PROTOCOL if PROTOCOL in body.protocols else None
        if chosen is None:
            raise InvalidInput(
                f"no common protocol major; this gateway speaks {PROTOCOL}",
                code=ErrorCode.DECODE_ERROR,
            )
        return {
            "protocol": chosen,
            "protocols": [PROTOCOL],
            # Only what both sides list: a capability the client omits (or an
            # empty list) is unsupported (control protocol: protocol evolution).
            "capabilities": [c for c in CAPABILITIES if c in body.capabilities],
            "implementation": IMPLEMENTATION,
            "authentication": {"scheme": "bearer", "header": "Authorization"},
            "limits": {"max_request_bytes": max_request_bytes},
        }

    @api.post(
        "/v1/control",
        response_model=ControlResponse,
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {
                    "application/json": {
                        "schema": {"$ref": "#/components/schemas/ControlRequest"}
                    }
                },
            }
        },
    )
    async def control(request: Request) -> Response:
        """Run one svit-control@1 request (decode -> authorize -> controller)."""
        start = time.perf_counter()
        ctype = request.headers.get("content-type", "")
        if not ctype.split(";")[0].strip().lower() == "application/json":
            return error_response(415, str(ErrorCode.DECODE_ERROR),
                                  "content type must be application/json")
        body = await request.body()
        decoded: ControlRequest = decode_request(body)
        principal = principal_of(request)
        require_access(principal, decoded.process_id)
        # decoded once here; the router sends `body` on, and its answer's bytes
        # (encoded once by the owner) go out unchanged
        answer = await router.control(decoded, principal.partition, body)
        m.outcomes.labels(answer.status).inc()
        if answer.code is not None:
            m.rejections.labels(answer.code).inc()
        m.latency.labels("control").observe(time.perf_counter() - start)
        headers = {TOKEN_HEADER: str(answer.token)} if answer.token is not None else None
        return Response(answer.body, media_type="application/json", headers=headers)

    return api
