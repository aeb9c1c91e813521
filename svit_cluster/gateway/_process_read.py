"""One read-only ``GET`` route about one process: ``?process_id=&limit=``, answered
by a blocking read (the commit log's Redis) run in a worker thread.

The routes that read a process's data straight from Redis, never through the
owner (``/v1/processes/log``, ``/v1/processes/outbox``,
``/v1/processes/timers/log``), differ only in what they read; this module holds
the rest: the tenant check, the id check, the ``limit`` bounds and the thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Depends, Query
from starlette.responses import JSONResponse

from svit_cluster.gateway._access import process_access
from svit_cluster.process import validate_process_id

__all__ = ["process_read_route"]


def process_read_route(
    api: APIRouter,
    path: str,
    *,
    name: str,
    description: str,
    default_limit: int,
    max_limit: int,
    limit_description: str,
    read: Callable[[str, int], dict[str, Any]],
) -> None:
    """Add ``GET path?process_id=&limit=`` to ``api``.

    The route needs the process's tenant or an admin token
    (:func:`~svit_cluster.gateway._access.process_access`, 403 otherwise),
    validates ``process_id`` (400), then calls ``read(process_id, limit)`` in a
    worker thread and answers ``{"process_id": <id>, **read(...)}`` with 200.
    Errors ``read`` raises (``NotFound``, ``UnavailableError``, ...) answer as
    the gateway maps them.

    Args:
        api: the router to add the route to.
        path: the route's path, relative to ``api``'s prefix.
        name: the endpoint's name (the OpenAPI summary and operation id derive
            from it).
        description: the OpenAPI description of the route.
        default_limit: ``limit`` when the query does not give one.
        max_limit: the largest ``limit`` (1..max_limit, else 400).
        limit_description: the OpenAPI description of ``limit``.
        read: ``(process_id, limit) -> fields of the answer``; it may block.
    """
    async def endpoint(
        process_id: str = Query(..., description="svit:// process id"),
        limit: int = Query(default_limit, ge=1, le=max_limit, description=limit_description),
    ) -> JSONResponse:
        pid = validate_process_id(process_id)
        fields = await asyncio.to_thread(read, pid, limit)
        return JSONResponse({"process_id": pid, **fields})

    api.get(path, dependencies=[Depends(process_access)], name=name,
            description=description)(endpoint)
