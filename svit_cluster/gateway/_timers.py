"""A process's durable timers over HTTP: list, cancel, recent events.

``GET /v1/processes/timers?process_id=&limit=&after=`` -- ``{"process_id",
"timers": [{"id", "to", "due_ms", "state", "version"}], "next": <cursor or
null>}``: the timers the dispatcher holds for the process, in due order
(timers being delivered right now first, ``state: "firing"``; then the parked
ones, ``"pending"``), at most ``limit`` (1..:data:`MAX_TIMER_PAGE`,
``defaults.DEFAULT_TIMER_PAGE``) parked ones per
page. Pass ``next`` as ``after`` for the next page; ``null`` on the last one.
``due_ms`` is ms since the epoch on the Redis clock. A process without timers
(or one that does not exist) answers an empty list.

``POST /v1/processes/timers/cancel`` with ``{"process_id", "timer_id"}`` --
``{"process_id", "timer_id", "outcome"}``, outcome ``cancelled`` (it will
never be delivered), ``too_late`` (firing or fired: it is, or was,
delivered), ``already_cancelled`` or ``unknown`` (never parked for this
process, not parked yet, or forgotten). Decided atomically against the
firing by the dispatcher's cancel script, so ``cancelled`` is never the
answer for a timer that is delivered. Safe to retry: a retry of a cancel that
applied answers ``already_cancelled``. A timer id is the delayed intent's id
``<process_id>:<version>:<index>``; one that does not name ``process_id`` is
refused (400 ``invalid_value``), so a token can only cancel timers of
processes it may act on.

``GET /v1/processes/timers/log?process_id=&limit=`` -- ``{"process_id",
"events": [{"event", "id", "at_ms", ...}]}``: the newest ``limit`` (1..1000,
default 100) timer events, oldest first (``armed``, ``fired``,
``dead_lettered``, and the cancel outcomes with ``by``: ``guest`` or
``operator``).

Every route needs the process's tenant or an admin token
(:func:`~svit_cluster.gateway._access.process_access`, 403 otherwise). A
gateway started without a Redis URL answers 503 ``unavailable``, as does a
Redis failure (a cancel's outcome is then unknown: retry it).
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import JSONResponse

from svit_cluster.defaults import DEFAULT_TIMER_PAGE, TIMER_PAGE_MAX
from svit_cluster.errors import InvalidInput
from svit_cluster.gateway._access import process_access
from svit_cluster.gateway._process_read import process_read_route
from svit_cluster.gateway._redis import lazy_redis
from svit_cluster.process import validate_process_id

__all__ = ["MAX_TIMER_PAGE", "timer_owner", "timers_router"]

#: Largest ``limit`` of one page of timers or of timer events.
MAX_TIMER_PAGE = TIMER_PAGE_MAX


class CancelTimer(BaseModel):
    """``POST /v1/processes/timers/cancel`` body."""

    model_config = ConfigDict(extra="ignore")
    process_id: str
    timer_id: str = Field(min_length=1, max_length=512,
                          description="the delayed intent's id, <process_id>:<version>:<index>")


def timer_owner(timer_id: str) -> str | None:
    """The process that armed ``timer_id`` (``<process_id>:<version>:<index>``,
    version and index ASCII decimals), or None when it does not have that shape."""
    owner, _, rest = timer_id.rpartition(":")
    owner, _, version = owner.rpartition(":")
    if not owner or not (version + rest).isascii() or not version.isdigit() \
            or not rest.isdigit():
        return None
    return owner


def timers_router(redis_url: str | None, *, prefix: str = "svit") -> APIRouter:
    """The timer routes, reading the commit log's Redis at ``redis_url`` (lazily connected).

    Args:
        redis_url: the commit log's Redis; None makes every route answer 503.
        prefix: the store's key prefix (default ``"svit"``).
    """
    from svit_cluster import dispatch

    api = APIRouter(prefix="/v1/processes/timers", tags=["timers"])
    client = lazy_redis(redis_url, "timers")

    @api.get("", dependencies=[Depends(process_access)])
    async def list_timers(
        process_id: str = Query(..., description="svit:// process id"),
        limit: int = Query(DEFAULT_TIMER_PAGE, ge=1, le=MAX_TIMER_PAGE,
                           description="parked timers per page"),
        after: str | None = Query(None, max_length=600,
                                  description="the previous page's `next` cursor"),
    ) -> JSONResponse:
        """The process's pending timers, in due order, one page."""
        pid = validate_process_id(process_id)
        page = await asyncio.to_thread(dispatch.list_timers, client(), prefix, pid,
                                       limit, after)
        return JSONResponse({
            "process_id": pid,
            "timers": [{"id": t.id, "to": t.to, "due_ms": t.due_ms, "state": t.state,
                        "version": t.version} for t in page.timers],
            "next": page.next_after,
        })

    @api.post("/cancel", dependencies=[Depends(process_access)])
    async def cancel(body: CancelTimer) -> JSONResponse:
        """Cancel one pending timer of the process (decided against its firing)."""
        pid = validate_process_id(body.process_id)
        if timer_owner(body.timer_id) != pid:
            raise InvalidInput(f"timer {body.timer_id[:200]!r} is not a timer of {pid}: "
                               "a timer id is <process_id>:<version>:<index>",
                               process_id=pid)
        outcome = await asyncio.to_thread(dispatch.cancel_timer, client(), prefix, pid,
                                          body.timer_id)
        return JSONResponse({"process_id": pid, "timer_id": body.timer_id,
                             "outcome": str(outcome)})

    def read_log(pid: str, limit: int) -> dict[str, Any]:
        return {"events": dispatch.timer_log(client(), prefix, pid)[-limit:]}

    process_read_route(
        api, "/log", name="log", description="The process's newest timer events, oldest first.",
        default_limit=100, max_limit=MAX_TIMER_PAGE, limit_description="newest events",
        read=read_log)
    return api
