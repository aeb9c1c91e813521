"""The gateway ASGI app: svit-control@1 over HTTP, plus the host API.

Layers, outermost first (each its own module and tests):

0. :class:`TraceContextMiddleware` -- W3C ``traceparent`` in and out, the
   request's span (a bad header starts a new trace, never an error);
   then :class:`ConsoleMiddleware` -- the browser console's static files under
   ``/ui/`` (no data, so before the byte cap and authentication);
1. :class:`ByteCapMiddleware` -- body byte cap, before any decoding (413);
2. :class:`BearerAuthMiddleware` -- bearer token -> principal (401);
3. the :func:`~svit_cluster.gateway._access.process_access` dependency (or, for
   ``/v1/control``, :func:`require_access` after decoding the envelope) checks the
   process tenant (403) **before** the router performs any receipt lookup;
   receipts are partitioned by the authenticated principal.

Routes, one module per concern: ``_probes`` (health, readiness, liveness,
metrics), ``_control`` (initialize, control), ``_processes`` (the host API),
``_events`` (signals and history), ``_deadletters`` (the admin queue),
``_timers`` (a process's durable timers), ``_log`` (its newest log entries),
``_outbox`` (its undelivered outbox intents), ``_hosts`` and ``_summary`` (the admin cluster view).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.responses import JSONResponse

from svit_cluster import __version__
from svit_cluster.control import ControlRequest
from svit_cluster.errors import ErrorCode, FencedError, SvitError, UnavailableError
from svit_cluster.gateway._access import Forbidden, forbidden_handler
from svit_cluster.gateway._auth import BearerAuthMiddleware, TokenStore
from svit_cluster.gateway._bytecap import (
    DEFAULT_MAX_REQUEST_BYTES,
    ByteCapMiddleware,
    PayloadTooLarge,
    payload_too_large_handler,
)
from svit_cluster.gateway._console import ConsoleMiddleware
from svit_cluster.gateway._control import CAPABILITIES, control_router
from svit_cluster.gateway._cors import with_cors
from svit_cluster.gateway._deadletters import dead_letters_router
from svit_cluster.gateway._errors import (
    error_response,
    from_exception,
    from_http_exception,
    internal_error_handler,
)
from svit_cluster.gateway._events import events_router
from svit_cluster.gateway._hosts import hosts_router
from svit_cluster.gateway._log import log_router
from svit_cluster.gateway._metrics import GatewayMetrics
from svit_cluster.gateway._observe import ObserveTokens, install_log_redaction
from svit_cluster.gateway._outbox import outbox_router
from svit_cluster.gateway._probes import probes_router
from svit_cluster.gateway._processes import processes_router
from svit_cluster.gateway._router import Router
from svit_cluster.gateway._summary import summary_router
from svit_cluster.gateway._timers import timers_router
from svit_cluster.gateway._tracing import TraceContextMiddleware

__all__ = ["CAPABILITIES", "create_app"]


def create_app(
    router: Router,
    tokens: TokenStore,
    *,
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
    metrics: GatewayMetrics | None = None,
    redis_url: str | None = None,
    cors_origins: Sequence[str] = (),
    store_prefix: str = "svit",
    console: bool = True,
) -> Any:
    """Build the gateway ASGI app.

    Args:
        router: where processes live (``inprocess.InProcessRouter`` or the Ray router).
        tokens: accepted bearer tokens (hashed).
        max_request_bytes: body cap in bytes (default 1 MiB).
        metrics: a metrics registry; a fresh one by default.
        redis_url: the commit log's Redis, for the routes that read the
            dispatcher's keys and the commit log (``/v1/admin/dead-letters``,
            ``/v1/processes/timers``, ``/v1/processes/log``,
            ``/v1/processes/outbox``); None: they answer 503, and the
            listing's ``last_commit_at`` and the summary's ``dispatcher`` are null.
        cors_origins: browser origins allowed cross-origin access
            (``scheme://host[:port]`` or ``*``); empty (default): no CORS.
        store_prefix: the store's key prefix in that Redis (default ``"svit"``).
        console: serve the browser console at ``/ui/`` (default True; its
            files hold no data, every call it makes is authenticated).

    Returns:
        The ASGI app (trace context -> console files -> CORS when configured
        -> byte cap -> auth -> FastAPI routes). Observe tokens
        (``POST /v1/processes/observe-token``) are signed with
        ``tokens.observe_key()``; creating the app also installs
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
    # One router per concern, each in its own module.
    api.include_router(dead_letters_router(redis_url, prefix=store_prefix))
    api.include_router(timers_router(redis_url, prefix=store_prefix))
    api.include_router(log_router(redis_url, prefix=store_prefix))
    api.include_router(hosts_router(router))
    api.include_router(outbox_router(redis_url, prefix=store_prefix))
    api.include_router(summary_router(router, m, redis_url, prefix=store_prefix))
    api.include_router(events_router(router, observe=observe))
    api.include_router(probes_router(router, m))
    api.include_router(control_router(router, m, max_request_bytes=max_request_bytes))
    api.include_router(processes_router(router, redis_url, prefix=store_prefix))

    @api.exception_handler(RequestValidationError)
    async def _bad_body(_: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        loc = ".".join(str(x) for x in first.get("loc", ()))
        return error_response(400, str(ErrorCode.DECODE_ERROR), f"{loc}: {first.get('msg', '')}")

    @api.exception_handler(StarletteHTTPException)
    async def _framework_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        # no such route (404), wrong method (405), a body FastAPI could not parse (400)
        return from_http_exception(exc)

    # The byte cap raises inside ``receive``, i.e. in whatever reads the body
    # (its own handler: the more specific class wins).
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

    # Any other exception: a typed 500 plus one ERROR log line. FastAPI's
    # ``build_middleware_stack`` hands the handler registered for ``Exception``
    # not to ExceptionMiddleware but to the outermost ServerErrorMiddleware,
    # which awaits it and sends its response when no response has started yet,
    # then re-raises; uvicorn logs that traceback and sends its own plain-text
    # 500 only when no response has started, so the client gets this JSON body.
    # A response already streaming cannot be replaced (the connection closes),
    # and exceptions in the ASGI layers wrapped around ``api`` below never
    # reach this handler.
    api.add_exception_handler(Exception, internal_error_handler)

    def openapi() -> dict[str, Any]:
        if api.openapi_schema is None:
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
    inner = with_cors(
        ByteCapMiddleware(BearerAuthMiddleware(api, tokens, observe), max_request_bytes),
        cors_origins)
    return TraceContextMiddleware(ConsoleMiddleware(inner) if console else inner)
