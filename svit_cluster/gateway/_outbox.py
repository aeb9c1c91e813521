"""A process's undelivered outbox intents over HTTP: ``GET /v1/processes/outbox``.

``GET /v1/processes/outbox?process_id=&limit=`` -- ``{"process_id", "committed",
"retained", "group", "intents": [{"id", "to", "version", "entry_id", "state",
"deliveries"}], "more"}``: the intents the process committed to its outbox that
the dispatcher has not acknowledged yet, at most ``limit`` (1..:data:`MAX_OUTBOX_PAGE`,
default 50): those a worker is delivering (``state: "delivering"``, with how many
times it was read) first, then those no worker has read yet (``"queued"``), each
in commit order; ``more`` says some were left out. ``committed`` counts every
intent the outbox ever took, ``retained`` those still in its stream; ``group``
is false until a dispatcher worker has read the outbox. An acknowledged intent
was delivered, dead-lettered (``/v1/admin/dead-letters``) or parked as a timer
(``/v1/processes/timers``), so it is not listed here.

Read from the commit log's Redis (``dispatch.undelivered``: a bounded number of
reads whatever the outbox's length), never through the owner. Needs the
process's tenant or an admin token (403 otherwise); a process that never
committed an intent (or does not exist) answers an empty list; 503 when the
gateway has no Redis URL or Redis fails (safe to retry).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from svit_cluster.gateway._process_read import process_read_route
from svit_cluster.gateway._redis import lazy_redis

__all__ = ["MAX_OUTBOX_PAGE", "outbox_router"]

#: Largest ``limit`` of ``GET /v1/processes/outbox``.
MAX_OUTBOX_PAGE = 200


def outbox_router(redis_url: str | None, *, prefix: str = "svit") -> APIRouter:
    """The outbox route, reading the commit log's Redis at ``redis_url`` (lazily connected).

    Args:
        redis_url: the commit log's Redis; None makes the route answer 503.
        prefix: the store's key prefix (default ``"svit"``).
    """
    from svit_cluster import dispatch

    api = APIRouter(tags=["processes"])
    client = lazy_redis(redis_url, "the outbox")

    def read(pid: str, limit: int) -> dict[str, Any]:
        page = dispatch.undelivered(client(), pid, prefix=prefix, limit=limit)
        return {
            "committed": page.committed, "retained": page.retained, "group": page.group,
            "intents": [{"id": i.id, "to": i.to, "version": i.version,
                         "entry_id": i.entry_id, "state": i.state,
                         "deliveries": i.deliveries} for i in page.intents],
            "more": page.more,
        }

    process_read_route(
        api, "/v1/processes/outbox", name="outbox",
        description="The process's outbox intents the dispatcher has not acknowledged yet.",
        default_limit=50, max_limit=MAX_OUTBOX_PAGE, limit_description="intents listed at most",
        read=read)
    return api
