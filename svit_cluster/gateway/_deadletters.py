"""Admin HTTP API over the dispatcher's dead letters (admin tokens only).

``GET  /v1/admin/dead-letters?limit=&after=`` -- ``{"dead_letters": [...],
"count": <total>, "next": <id to pass as after, or null>}``, oldest first.

``POST /v1/admin/dead-letters/redrive`` with ``{"ids": [...]}`` or
``{"all": true, "limit": N}`` -- ``{"redriven": [...], "missing": [...],
"trimmed": [...]}``, plus ``"trimmed_reason"`` (which bounds removed them)
when ``trimmed`` is not empty. Safe to retry: each letter moves at most once;
a retry lists the moved ids under ``missing``. ``trimmed`` ids were removed by
the dead-letter stream's bounds (count and age, set on the dispatcher): gone
for good, nothing was re-driven for them.

A non-admin token gets 403 ``forbidden``; a gateway started without a Redis
URL answers 503 ``unavailable``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from svit_cluster.defaults import (
    DEAD_LETTER_PAGE_MAX,
    DEFAULT_DEAD_LETTER_PAGE,
    DEFAULT_REDRIVE_LIMIT,
)
from svit_cluster.errors import ErrorCode, InvalidInput, UnavailableError
from svit_cluster.gateway._access import admin_only
from svit_cluster.store import connect

__all__ = ["dead_letters_router"]


class Redrive(BaseModel):
    """``POST /v1/admin/dead-letters/redrive`` body."""

    model_config = ConfigDict(extra="ignore")
    ids: list[str] | None = Field(default=None, max_length=DEAD_LETTER_PAGE_MAX,
                                  description="dead-letter ids to re-drive")
    all: bool = Field(default=False, description="re-drive the oldest `limit` letters")
    limit: int = Field(default=DEFAULT_REDRIVE_LIMIT, ge=1, le=DEAD_LETTER_PAGE_MAX)


def dead_letters_router(redis_url: str | None, *, prefix: str = "svit") -> APIRouter:
    """The admin dead-letter routes, reading Redis at ``redis_url`` (lazily connected).

    Args:
        redis_url: the commit log's Redis; None makes every route answer 503.
        prefix: the store's key prefix (default ``"svit"``).
    """
    from svit_cluster.dispatch import DeadLetters

    router = APIRouter(prefix="/v1/admin/dead-letters", tags=["dead letters"])
    holder: dict[str, DeadLetters] = {}

    def letters() -> DeadLetters:
        if redis_url is None:
            raise UnavailableError("this gateway has no Redis URL for dead letters")
        if "q" not in holder:
            holder["q"] = DeadLetters(connect(redis_url), prefix)
        return holder["q"]

    @router.get("")
    async def list_dead_letters(
        request: Request,
        limit: int = Query(DEFAULT_DEAD_LETTER_PAGE, ge=1, le=DEAD_LETTER_PAGE_MAX,
                           description="at most this many"),
        after: str | None = Query(None, max_length=64, description="page after this id"),
    ) -> Any:
        """Dead letters, oldest first, with the total count."""
        if (denied := admin_only(request, "dead letters")) is not None:
            return denied
        q = letters()
        items = await asyncio.to_thread(q.list, limit=limit, after=after)
        total = await asyncio.to_thread(q.count)
        return {"dead_letters": [d.to_json() for d in items], "count": total,
                "next": items[-1].id if len(items) == limit else None}

    @router.post("/redrive")
    async def redrive(request: Request, body: Redrive) -> Any:
        """Send dead letters back to delivery (same idempotency keys)."""
        if (denied := admin_only(request, "dead letters")) is not None:
            return denied
        if body.ids is None and not body.all:
            raise InvalidInput('give "ids" or "all": true', code=ErrorCode.DECODE_ERROR)
        q = letters()
        result = await asyncio.to_thread(q.redrive, body.ids, limit=body.limit)
        return result.to_json()

    return router
