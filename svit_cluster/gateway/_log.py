"""A process's newest commit-log entries over HTTP: ``GET /v1/processes/log``.

``GET /v1/processes/log?process_id=&limit=`` -- ``{"process_id", "entries":
[{"version", "token", "source", "paths", "client_id", "request_id",
"trace"}]}``, newest first: each retained entry's version, the fencing token
it was committed under, what committed it (``source``: the activated script's
operation, ``inbox.append``, ...), the paths its mutations wrote (at most
:data:`MAX_PATHS`, sorted), the request that committed it (null for a host
operation, or an entry older than the field) and the commit's ``traceparent``.

Read from the commit log's Redis (``store.newest_entries``), never through the
owner: it does not activate a passivated process. Only the retained tail is
there (the entries after the latest snapshot and its margin), so ``limit``
(1..:data:`MAX_LOG_PAGE`, default 20) is an upper bound. Needs the process's
tenant or an admin token (403 otherwise); 404 for a process with no head;
503 when the gateway has no Redis URL or Redis fails (safe to retry).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from svit_cluster.errors import NotFound
from svit_cluster.gateway._process_read import process_read_route
from svit_cluster.gateway._redis import lazy_redis
from svit_cluster.process import Transaction
from svit_cluster.store import newest_entries

__all__ = ["MAX_LOG_PAGE", "MAX_PATHS", "log_router"]

#: Largest ``limit`` of ``GET /v1/processes/log``.
MAX_LOG_PAGE = 100
#: Paths listed per entry (an entry may write many more).
MAX_PATHS = 32


def _request_ids(raw: bytes | None) -> tuple[str | None, str | None]:
    """``(client_id, request_id)`` from an entry's ``tenant\\0client\\0request`` field."""
    if not raw:
        return None, None
    parts = raw.split(b"\0")
    if len(parts) != 3:
        return None, None
    return (parts[1].decode("utf-8", errors="replace"),
            parts[2].decode("utf-8", errors="replace"))


def log_router(redis_url: str | None, *, prefix: str = "svit") -> APIRouter:
    """The log route, reading the commit log's Redis at ``redis_url`` (lazily connected).

    Args:
        redis_url: the commit log's Redis; None makes the route answer 503.
        prefix: the store's key prefix (default ``"svit"``).
    """
    api = APIRouter(tags=["processes"])
    client = lazy_redis(redis_url, "the commit log")

    def read(pid: str, limit: int) -> dict[str, Any]:
        entries = newest_entries(client(), pid, prefix=prefix, limit=limit)
        if entries is None:
            raise NotFound(f"unknown process {pid[:200]}")
        out = []
        for entry in entries:
            record = Transaction.decode(entry.record)
            client_id, request_id = _request_ids(entry.request)
            out.append({"version": entry.version, "token": entry.token,
                        "source": record.source,
                        "paths": sorted({m.path for m in record.mutations})[:MAX_PATHS],
                        "client_id": client_id, "request_id": request_id,
                        "trace": entry.trace})
        return {"entries": out}

    process_read_route(
        api, "/v1/processes/log", name="recent_log",
        description="The process's newest retained commit-log entries, newest first.",
        default_limit=20, max_limit=MAX_LOG_PAGE, limit_description="newest entries",
        read=read)
    return api
