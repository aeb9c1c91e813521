"""The Redis client of a gateway route that reads the commit log's Redis itself."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from svit_cluster.errors import UnavailableError
from svit_cluster.store import connect

__all__ = ["lazy_redis"]


def lazy_redis(redis_url: str | None, purpose: str) -> Callable[[], Any]:
    """A function that returns one Redis client for ``redis_url``, connected on
    its first call (a gateway that never serves the route never connects).

    Args:
        redis_url: the commit log's Redis, or None (the gateway has none).
        purpose: what the route reads, for the error (``"timers"``, ...).

    The returned function raises ``UnavailableError`` (HTTP 503) when
    ``redis_url`` is None.
    """
    holder: dict[str, Any] = {}

    def client() -> Any:
        if redis_url is None:
            raise UnavailableError(f"this gateway has no Redis URL for {purpose}")
        if "c" not in holder:
            holder["c"] = connect(redis_url)
        return holder["c"]

    return client
