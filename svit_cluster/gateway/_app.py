"""The gateway ASGI app: svit-control@1 over HTTP, plus the host API.

Layers, outermost first (each its own module and tests):

0. :class:`TraceContextMiddleware` -- W3C ``traceparent`` in and out, the
   request's span (a bad header starts a new trace, never an error);
1. :class:`ByteCapMiddleware` -- body byte cap, before any decoding (413);
2. :class:`BearerAuthMiddleware` -- bearer token -> principal (401);
3. the :func:`~svit_cluster.gateway._access.process_access` dependency (or, for
   ``/v1/control``, :func:`require_access` after decoding the envelope) checks the
   process tenant (403) **before** the router performs any receipt lookup;
   receipts are partitioned by the authenticated principal.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import ClientDisconnect
from starlette.responses import JSONResponse, Response

from svit_cluster import __version__
from svit_cluster.control import ControlRequest, ControlResponse, decode_request
from svit_cluster.errors import ErrorCode, FencedError, InvalidInput, SvitError, UnavailableError
from svit_cluster.gateway._access import (
    Forbidden,
    forbidden_handler,
    principal_of,
    process_access,
    require_access,
)
from svit_cluster.gateway._auth import BearerAuthMiddleware, Principal, TokenStore
from svit_cluster.gateway._bytecap import (
    DEFAULT_MAX_REQUEST_BYTES,
    ByteCapMiddleware,
    PayloadTooLarge,
    payload_too_large_handler,
)
from svit_cluster.gateway._cors import with_cors
from svit_cluster.gateway._deadletters import dead_letters_router
from svit_cluster.gateway._errors import error_response, from_exception
from svit_cluster.gateway._events import events_router
from svit_cluster.gateway._metrics import GatewayMetrics
from svit_cluster.gateway._observe import ObserveTokens, install_log_redaction
from svit_cluster.gateway._router import TOKEN_HEADER, Router, capture_owner_token
from svit_cluster.gateway._tracing import TraceContextMiddleware
from svit_cluster.process import (
    PROTOCOL,
    Script,
    decode_value,
    encode_value,
    from_plain_json,
    parse_path,
    script_from_value,
    strict_json_loads,
    validate_process_id,
)
from svit_cluster.process import Limits as _Limits

__all__ = ["CAPABILITIES", "create_app"]

#: Optional behaviours this gateway offers (negotiated by ``initialize``).
CAPABILITIES: tuple[str, ...] = ("host-api", "fenced-receipts", "events")
IMPLEMENTATION = {"name": "svit-cluster", "version": __version__}
#: ``client_id`` / ``request_id`` syntax (control protocol: envelope identifiers).
_ID_PATTERN = r"^[A-Za-z0-9._-]{1,128}$"


class CreateProcess(BaseModel):
    """``POST /v1/processes`` body."""

    model_config = ConfigDict(extra="ignore")
    process_id: str
    memory: Any = Field(default=None, description="initial /memory map")
    memory_encoding: str = Field(default="plain", pattern="^(plain|tagged)$")
    scripts: dict[str, Any] = Field(
        default_factory=dict, description="name -> Svit Lisp source, or {source, documentation}"
    )


class InboxMessage(BaseModel):
    """``POST /v1/processes/inbox`` body."""

    model_config = ConfigDict(extra="ignore")
    process_id: str
    message: Any = Field(description="the inbox item (plain JSON, or tagged)")
    message_encoding: str = Field(default="plain", pattern="^(plain|tagged)$")
    dedup_key: str | None = Field(
        default=None, max_length=512,
        description="deliver at most once per key (the outbox dispatcher sends the intent id)",
    )


class InboxDrop(BaseModel):
    """``POST /v1/processes/inbox/drop`` body: name the head (id and/or hash) and say why."""

    model_config = ConfigDict(extra="ignore")
    process_id: str
    message_id: str | None = Field(default=None, max_length=512,
                                   description="the head's message id ({content, id})")
    head_hash: str | None = Field(default=None, max_length=128,
                                  description="the head's content hash")
    reason: str = Field(min_length=1, max_length=512, description="why it is dropped")


class ProcessRef(BaseModel):
    model_config = ConfigDict(extra="ignore")
    process_id: str


class ForkProcess(BaseModel):
    model_config = ConfigDict(extra="ignore")
    process_id: str
    new_process_id: str


class Initialize(BaseModel):
    model_config = ConfigDict(extra="ignore")
    protocols: list[str] = Field(default_factory=lambda: [PROTOCOL])
    capabilities: list[str] = Field(default_factory=list)
    client: dict[str, Any] = Field(default_factory=dict)


def create_app(
    router: Router,
    tokens: TokenStore,
    *,
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
    metrics: GatewayMetrics | None = None,
    redis_url: str | None = None,
    cors_origins: Sequence[str] = (),
) -> Any:
    """Build the gateway ASGI app.

    Args:
        router: where processes live (``LocalRouter`` or the Ray router).
        tokens: accepted bearer tokens (hashed).
        max_request_bytes: body cap in bytes (default 1 MiB).
        metrics: a metrics registry; a fresh one by default.
        redis_url: the commit log's Redis, for the admin dead-letter routes
            (``/v1/admin/dead-letters``); None: they answer 503.
        cors_origins: browser origins allowed cross-origin access
            (``scheme://host[:port]`` or ``*``); empty (default): no CORS.

    Returns:
        The ASGI app (trace context -> CORS when configured -> byte cap ->
        auth -> FastAPI routes). Observe tokens (``POST /v1/processes/observe-token``) are
        signed with ``tokens.observe_key()``; creating the app also installs
        :func:`~svit_cluster.gateway._observe.install_log_redaction`.

    Raises:
        ConfigurationError: a malformed CORS origin.
    """
    observe = ObserveTokens(tokens.observe_key())
    install_log_redaction()
    m = metrics or GatewayMetrics()
    api = FastAPI(
        title="svit-cluster gateway",
        version=__version__,
        description="svit-control@1 over HTTP with bearer authentication.",
    )
    api.state.metrics = m
    api.state.router = router
    api.include_router(dead_letters_router(redis_url))
    api.include_router(events_router(router, observe=observe))

    @api.exception_handler(RequestValidationError)
    async def _bad_body(_: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        loc = ".".join(str(x) for x in first.get("loc", ()))
        return error_response(400, str(ErrorCode.DECODE_ERROR), f"{loc}: {first.get('msg', '')}")

    # The byte cap raises inside ``receive``, i.e. in whatever reads the body.
    api.add_exception_handler(PayloadTooLarge, payload_too_large_handler)
    api.add_exception_handler(Forbidden, forbidden_handler)

    @api.exception_handler(ClientDisconnect)
    async def _disconnected(_: Request, __: ClientDisconnect) -> JSONResponse:
        # The client closed before its body was complete (truncated upload): nobody
        # reads this answer, but it is an input error, not a server error.
        return error_response(400, str(ErrorCode.DECODE_ERROR),
                              "client disconnected before the request body was complete",
                              headers={"Connection": "close"})

    @api.exception_handler(SvitError)
    async def _svit_error(_: Request, exc: SvitError) -> JSONResponse:
        if isinstance(exc, FencedError):
            m.fenced.inc()
        if isinstance(exc, FencedError | UnavailableError):
            m.unavailable.inc()
        return from_exception(exc)

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
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return Response(generate_latest(m.registry), media_type=CONTENT_TYPE_LATEST)

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
        with capture_owner_token() as tokens:
            response = await router.control(decoded, principal.partition)
        outcome = response.outcome
        m.outcomes.labels(outcome.status).inc()
        if outcome.status == "rejected":
            m.rejections.labels(outcome.failure.code).inc()
        m.latency.labels("control").observe(time.perf_counter() - start)
        headers = {TOKEN_HEADER: str(tokens[-1])} if tokens else None
        return Response(response.model_dump_json(), media_type="application/json",
                        headers=headers)

    @api.post("/v1/processes", status_code=201, dependencies=[Depends(process_access)])
    async def create_process(body: CreateProcess) -> JSONResponse:
        """Create a process with initial memory and a script library."""
        pid = validate_process_id(body.process_id)
        lim = _Limits()
        memory = (
            decode_value(body.memory) if body.memory_encoding == "tagged"
            else from_plain_json(body.memory)
        ) if body.memory is not None else {}
        scripts: dict[str, Script] = {}
        for name, src in body.scripts.items():
            scripts[name] = script_from_value(
                src if isinstance(src, dict) else {"source": src}, lim
            )
        info = await router.create(pid, memory, scripts)
        return JSONResponse(info, status_code=201)

    @api.get("/v1/processes/state", dependencies=[Depends(process_access)])
    async def state(
        process_id: str = Query(..., description="svit:// process id"),
        path: str = Query("/", description="absolute path, e.g. /memory/count"),
    ) -> JSONResponse:
        """Value and version of ``path`` from one observation."""
        pid = validate_process_id(process_id)
        parse_path(path)
        value, version = await router.state(pid, path)
        return JSONResponse(
            {"process_id": pid, "path": path, "version": version, "value": encode_value(value)}
        )

    @api.get("/v1/processes/requests")
    async def request_status(
        principal: Annotated[Principal, Depends(process_access)],
        process_id: str = Query(..., description="svit:// process id"),
        client_id: str = Query(..., pattern=_ID_PATTERN, description="envelope client_id"),
        request_id: str = Query(..., pattern=_ID_PATTERN, description="envelope request_id"),
    ) -> JSONResponse:
        """Did this principal's request ``(client_id, request_id)`` commit?

        Answers from the owner's retained log after the receipt may have been
        evicted: ``{process_id, client_id, request_id, committed, version,
        retained_from_version}``; ``committed: false`` is definitive only for
        versions ``>= retained_from_version``. Partitioned by the
        authenticated principal, like receipts.
        """
        pid = validate_process_id(process_id)
        status = await router.request_status(pid, principal.partition, client_id, request_id)
        return JSONResponse({"process_id": pid, "client_id": client_id,
                             "request_id": request_id, **status})

    @api.delete("/v1/processes", dependencies=[Depends(process_access)])
    async def delete_process(
        process_id: str = Query(..., description="svit:// process id"),
    ) -> JSONResponse:
        """Delete a process: its log, snapshot, receipts, outbox, signals and owner record.

        Fenced like a commit: the current owner deletes under its fencing
        token, and the stored fence stays as a tombstone, so an older owner
        can never write the process back. Intents not yet delivered are
        dropped. ``200 {process_id, deleted: true, version}``; ``404`` when
        there is no such process (also the answer to a retry of a delete that
        did happen); ``503`` when the outcome is unknown (retry).
        """
        pid = validate_process_id(process_id)
        result = await router.delete(pid)
        return JSONResponse({"process_id": pid, "deleted": True,
                             "version": result.get("version")})

    @api.post("/v1/processes/inbox", dependencies=[Depends(process_access)])
    async def inbox(body: InboxMessage) -> JSONResponse:
        """Commit one message to the process inbox, under the fence; size-checked first."""
        pid = validate_process_id(body.process_id)
        message = (
            decode_value(body.message) if body.message_encoding == "tagged"
            else from_plain_json(body.message)
        )
        result = await router.inbox(pid, message, body.dedup_key)
        return JSONResponse({"process_id": pid, **result})

    @api.post("/v1/processes/inbox/drop", dependencies=[Depends(process_access)])
    async def inbox_drop(body: InboxDrop) -> JSONResponse:
        """Dead-letter the inbox head (a message whose turn never succeeds blocks the
        agent): it moves to ``/thread/dead_letters`` in one fenced commit. The head
        must match ``message_id``/``head_hash`` (else 409 ``inbox_conflict``)."""
        pid = validate_process_id(body.process_id)
        if body.message_id is None and body.head_hash is None:
            raise InvalidInput("name the inbox head to drop: message_id or head_hash")
        result = await router.inbox_drop(pid, reason=body.reason, message_id=body.message_id,
                                         head_hash=body.head_hash)
        return JSONResponse({"process_id": pid, **result})

    @api.post("/v1/processes/snapshot", dependencies=[Depends(process_access)])
    async def snapshot(body: ProcessRef) -> JSONResponse:
        """The process snapshot (strict JSON document)."""
        pid = validate_process_id(body.process_id)
        data = await router.snapshot(pid)
        doc = strict_json_loads(data, what="snapshot")
        return JSONResponse({"process_id": pid, "version": doc["version"], "snapshot": doc})

    @api.post("/v1/processes/fork", status_code=201, dependencies=[Depends(process_access)])
    async def fork(body: ForkProcess) -> JSONResponse:
        """Fork a process into a new id (same version, new identity, empty outbox)."""
        pid = validate_process_id(body.process_id)
        new_pid = validate_process_id(body.new_process_id)
        info = await router.fork(pid, new_pid)
        return JSONResponse(info, status_code=201)

    def openapi() -> dict[str, Any]:
        if api.openapi_schema is None:
            from fastapi.openapi.utils import get_openapi

            spec = get_openapi(title=api.title, version=api.version,
                               description=api.description, routes=api.routes)
            request_schema = ControlRequest.model_json_schema(
                ref_template="#/components/schemas/{model}"
            )
            schemas = spec.setdefault("components", {}).setdefault("schemas", {})
            schemas.update(request_schema.pop("$defs", {}))
            schemas["ControlRequest"] = request_schema
            api.openapi_schema = spec
        return api.openapi_schema

    api.openapi = openapi  # type: ignore[method-assign]
    return TraceContextMiddleware(with_cors(
        ByteCapMiddleware(BearerAuthMiddleware(api, tokens, observe), max_request_bytes),
        cors_origins))
