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

Authorization (tenant) is checked before anything is read. One
:class:`~svit_cluster.events.SignalHub` per gateway reads each observed
process's stream once and fans it out to that process's subscriptions.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Query, Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from svit_cluster.errors import ErrorCode, InvalidInput, NotFound, SvitError
from svit_cluster.events import (
    MAX_RECENT,
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
from svit_cluster.gateway._router import Router
from svit_cluster.process import validate_process_id

__all__ = ["events_router"]


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


def events_router(router: Router, *, keepalive_s: float = 10.0) -> APIRouter:
    """The observer endpoints over ``router.signal_source()``.

    Args:
        router: the gateway's router.
        keepalive_s: seconds between keepalive comments on an idle stream.
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

    @api.get("/v1/processes/events", response_class=StreamingResponse)
    async def events(
        request: Request,
        process_id: str = Query(..., description="svit:// process id"),
        after: str = Query("$", description="'$' (now), '0' (oldest retained) or a signal id"),
        kinds: str | None = Query(None, description="comma list of kinds to deliver"),
    ) -> Response:
        """Live signals of one process as Server-Sent Events (resumable by cursor)."""
        checked = await _checked(request, process_id)
        if isinstance(checked, Response):
            return checked
        pid, source = checked
        wanted = _kinds(kinds)
        cursor = await resolve_cursor(
            source, pid, parse_cursor(request.headers.get("last-event-id") or after))

        async def stream() -> AsyncIterator[bytes]:
            yield b"retry: 1000\n" + _sse("ready", {"cursor": cursor})
            try:
                async for item in hub(source).subscribe(pid, cursor):
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

    @api.get("/v1/processes/events/recent")
    async def recent_events(
        request: Request,
        process_id: str = Query(..., description="svit:// process id"),
        limit: int = Query(64, ge=1, le=MAX_RECENT, description="newest events, 1..4096"),
        session: str | None = Query(None, description="session id (default: current)"),
    ) -> Response:
        """The newest canonical events of the current (or given) session, oldest first."""
        checked = await _checked(request, process_id)
        if isinstance(checked, Response):
            return checked
        pid, source = checked
        records = await source.recent_events(pid, limit, session)
        return JSONResponse({"process_id": pid,
                             "session": records[-1].session if records else session,
                             "events": [r.to_json() for r in records]})

    @api.get("/v1/processes/messages/recent")
    async def recent_messages(
        request: Request,
        process_id: str = Query(..., description="svit:// process id"),
        limit: int = Query(64, ge=1, le=MAX_RECENT, description="newest messages, 1..4096"),
        session: str | None = Query(None, description="session id (default: current)"),
    ) -> Response:
        """Messages projected from the newest canonical events, oldest first."""
        checked = await _checked(request, process_id)
        if isinstance(checked, Response):
            return checked
        pid, source = checked
        records = await source.recent_events(pid, limit, session)
        return JSONResponse({
            "process_id": pid, "session": records[-1].session if records else session,
            "messages": [{"session": r.session, "seq": r.seq,
                          "message": project_message(r.event)} for r in records]})

    return api
