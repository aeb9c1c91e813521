"""Observer endpoints: live signals as Server-Sent Events, and bounded history.

* ``GET /v1/processes/events?process_id=…&after=…&kinds=…`` -- SSE. ``after``
  is ``$`` (default: from now), ``0`` (oldest retained) or a signal id; the
  ``Last-Event-ID`` header (sent by SSE clients on reconnect) takes
  precedence. The stream starts with ``event: ready`` (``{cursor}``), then one
  SSE event per signal (``id`` = signal id, ``event`` = kind, ``data`` = the
  signal JSON). When the cursor is out of retention it sends ``event:
  lagged`` (``{resume, oldest}``) and continues after ``resume``: recover with
  the history endpoints and ``/v1/processes/state``. ``: keepalive`` comments
  are sent while idle.
* ``GET /v1/processes/events/recent?process_id=…&limit=…`` -- the newest
  canonical events (1..4096), oldest first.
* ``GET /v1/processes/messages/recent?process_id=…&limit=…`` -- the messages
  projected from them.
* ``POST /v1/processes/observe-token`` (``{process_id, ttl_s}``) -- a
  short-lived, read-only observe token for one process, for a browser's
  ``EventSource`` (``?observe_token=…`` on the SSE endpoint only; see
  :mod:`svit_cluster.gateway._observe`). A stream opened with one ends with
  ``event: expired`` (``{expires_at}``) at the first keepalive or signal after
  the token's expiry.

Authorization (tenant) is checked before anything is read. One
:class:`~svit_cluster.events.SignalHub` per gateway reads each observed
process's stream once and fans it out to that process's subscriptions.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import JSONResponse, Response, StreamingResponse

from svit_cluster.errors import ErrorCode, InvalidInput, NotFound, SvitError
from svit_cluster.events import (
    MAX_RECENT,
    EventRecord,
    Lagged,
    SignalHub,
    SignalKind,
    SignalSource,
    parse_cursor,
    project_message,
    resolve_cursor,
)
from svit_cluster.gateway._auth import Principal, authorize
from svit_cluster.gateway._errors import error_response
from svit_cluster.gateway._observe import (
    DEFAULT_OBSERVE_TTL_S,
    MAX_OBSERVE_TTL_S,
    OBSERVE_PARAM,
    ObserveTokens,
)
from svit_cluster.gateway._router import Router
from svit_cluster.process import validate_process_id

__all__ = ["events_router"]

#: A session id, as the store keys a session's event log (``ProcessKeys.events``).
_SESSION_PATTERN = r"^[A-Za-z0-9_.-]{1,64}$"

#: The ``session`` query parameter of the history endpoints.
_Session = Annotated[str | None, Query(pattern=_SESSION_PATTERN,
                                       description="session id (default: current)")]


def _sse(event: str, data: Any, event_id: str | None = None) -> bytes:
    head = f"id: {event_id}\n" if event_id else ""
    return f"{head}event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def _kinds(text: str | None) -> frozenset[SignalKind] | None:
    if not text:
        return None
    try:
        return frozenset(SignalKind(k.strip()) for k in text.split(",") if k.strip())
    except ValueError:
        raise InvalidInput("kinds must be a comma list of signal kinds",
                           code=ErrorCode.DECODE_ERROR) from None


class ObserveTokenRequest(BaseModel):
    """``POST /v1/processes/observe-token`` body."""

    model_config = ConfigDict(extra="ignore")
    process_id: str
    ttl_s: int = Field(default=DEFAULT_OBSERVE_TTL_S, ge=1, le=MAX_OBSERVE_TTL_S,
                       description="lifetime in seconds, 1..3600")


def events_router(router: Router, *, keepalive_s: float = 10.0,
                  observe: ObserveTokens | None = None) -> APIRouter:
    """The observer endpoints over ``router.signal_source()``.

    Args:
        router: the gateway's router.
        keepalive_s: seconds between keepalive comments on an idle stream.
        observe: the observe-token signer; None: ``POST
            /v1/processes/observe-token`` is not offered.
    """
    api = APIRouter()
    hubs: list[SignalHub] = []

    def hub(source: SignalSource) -> SignalHub:
        if not hubs:
            hubs.append(SignalHub(source, block_s=keepalive_s))
        return hubs[0]

    async def _checked(request: Request, process_id: str) -> tuple[str, SignalSource] | Response:
        pid = validate_process_id(process_id)
        principal = request.scope.get("svit.principal")
        assert isinstance(principal, Principal)
        if not authorize(principal, pid):
            return error_response(403, str(ErrorCode.FORBIDDEN),
                                  f"token may not act on {pid[:200]}")
        source = router.signal_source()
        if not await source.exists(pid):
            raise NotFound(f"unknown process {pid[:200]}")
        return pid, source

    async def _recent(request: Request, process_id: str, limit: int, session: str | None,
                      field: str, item: Callable[[EventRecord], Any]) -> Response:
        """``{process_id, session, <field>: [item(record), ...]}`` over the newest
        ``limit`` canonical events of ``session`` (None: the current one)."""
        checked = await _checked(request, process_id)
        if isinstance(checked, Response):
            return checked
        pid, source = checked
        records = await source.recent_events(pid, limit, session)
        return JSONResponse({"process_id": pid,
                             "session": records[-1].session if records else session,
                             field: [item(r) for r in records]})

    @api.get("/v1/processes/events", response_class=StreamingResponse)
    async def events(
        request: Request,
        process_id: str = Query(..., description="svit:// process id"),
        after: str = Query("$", description="'$' (now), '0' (oldest retained) or a signal id"),
        kinds: str | None = Query(None, description="comma list of kinds to deliver"),
        observe_token: str | None = Query(
            None, alias=OBSERVE_PARAM,
            description="observe token instead of Authorization (browser EventSource); "
                        "see POST /v1/processes/observe-token"),
    ) -> Response:
        """Live signals of one process as Server-Sent Events (resumable by cursor)."""
        del observe_token  # checked by the authentication layer
        checked = await _checked(request, process_id)
        if isinstance(checked, Response):
            return checked
        pid, source = checked
        principal = request.scope["svit.principal"]
        expires_at: float | None = principal.expires_at
        wanted = _kinds(kinds)
        cursor = await resolve_cursor(
            source, pid, parse_cursor(request.headers.get("last-event-id") or after))

        async def stream() -> AsyncIterator[bytes]:
            yield b"retry: 1000\n" + _sse("ready", {"cursor": cursor})
            try:
                async for item in hub(source).subscribe(pid, cursor):
                    if expires_at is not None and time.time() >= expires_at:
                        yield _sse("expired", {"expires_at": int(expires_at)})
                        return
                    if item is None:
                        yield b": keepalive\n\n"
                    elif isinstance(item, Lagged):
                        yield _sse("lagged", item.to_json(), item.resume)
                    elif wanted is None or item.kind in wanted:
                        yield _sse(str(item.kind), item.to_json(), item.id)
            except SvitError as exc:
                yield _sse("error", exc.to_failure())

        return StreamingResponse(stream(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache",
                                          "X-Accel-Buffering": "no"})

    if observe is not None:
        signer = observe

        @api.post("/v1/processes/observe-token")
        async def observe_token(request: Request, body: ObserveTokenRequest) -> Response:
            """Mint a read-only observe token for one process's event stream.

            Answers ``{process_id, token, expires_at, ttl_s}`` (``expires_at`` in
            unix seconds). The token is accepted only as ``?observe_token=`` (or
            the ``svit_observe_token`` cookie) on ``GET /v1/processes/events``
            for ``process_id``. 403 when the caller may not act on the
            process, 404 when it does not exist.
            """
            checked = await _checked(request, body.process_id)
            if isinstance(checked, Response):
                return checked
            pid, _ = checked
            token, expires_at = signer.mint(pid, body.ttl_s)
            return JSONResponse({"process_id": pid, "token": token,
                                 "expires_at": expires_at, "ttl_s": body.ttl_s},
                                headers={"Cache-Control": "no-store"})

    @api.get("/v1/processes/events/recent")
    async def recent_events(
        request: Request,
        process_id: str = Query(..., description="svit:// process id"),
        limit: int = Query(64, ge=1, le=MAX_RECENT, description="newest events, 1..4096"),
        session: _Session = None,
    ) -> Response:
        """The newest canonical events of the current (or given) session, oldest first."""
        return await _recent(request, process_id, limit, session, "events",
                             lambda r: r.to_json())

    @api.get("/v1/processes/messages/recent")
    async def recent_messages(
        request: Request,
        process_id: str = Query(..., description="svit:// process id"),
        limit: int = Query(64, ge=1, le=MAX_RECENT, description="newest messages, 1..4096"),
        session: _Session = None,
    ) -> Response:
        """Messages projected from the newest canonical events, oldest first."""
        return await _recent(request, process_id, limit, session, "messages",
                             lambda r: {"session": r.session, "seq": r.seq,
                                        "message": project_message(r.event)})

    return api
