"""The stream of refused writes (``<prefix>:stale_writes``): its key, bound and appender.

One entry per write a stale owner attempted and was refused. It is
observability only: appending is best effort (a Redis error is logged and
ignored, the refusal itself is raised by the caller regardless), and nothing
reads the stream for safety.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import redis

from svit_cluster.store._redis import RedisClient

__all__ = ["STALE_WRITES_RETAINED", "record_refusal", "stale_writes_key"]

log = logging.getLogger(__name__)

#: Approximate number of refused writes kept in :func:`stale_writes_key` (oldest trimmed).
STALE_WRITES_RETAINED = 10_000


def stale_writes_key(prefix: str) -> str:
    """The Redis stream of refused writes of every process (``<prefix>:stale_writes``).

    One entry per write a stale owner attempted and was refused: ``process_id``,
    ``op`` (``commit``, ``claim``, ``put_receipt``, …, or ``guard``), ``by``
    (``fence``: the Lua script saw a higher fence; ``self``: the owner's own
    lease guard), ``token``, ``fence``, ``at`` (Unix seconds). Observability
    only (``svit-cluster demo`` counts them); nothing reads it for safety.
    """
    return f"{prefix}:stale_writes"


def record_refusal(client: RedisClient, prefix: str, process_id: str, token: int,
                   op: str, by: str, *, fence: int | None = None, reason: str = "") -> None:
    """Best effort: append one refused write to :func:`stale_writes_key` (bounded stream).

    ``by`` is ``"fence"`` (the Lua script found a higher fence than this
    owner's token) or ``"self"`` (the owner's own guard refused: lease
    suspended/lost, fenced out). ``reason`` is cut to 200 characters. The
    stream keeps about :data:`STALE_WRITES_RETAINED` entries (``MAXLEN ~``).
    Never raises: a Redis error here is logged at debug level and ignored.
    """
    fields: dict[Any, Any] = {"process_id": process_id, "op": op, "by": by,
                              "token": token, "at": time.time()}
    if fence is not None:
        fields["fence"] = fence
    if reason:
        fields["reason"] = reason[:200]
    try:
        client.xadd(stale_writes_key(prefix), fields,
                    maxlen=STALE_WRITES_RETAINED, approximate=True)
    except redis.RedisError as exc:
        log.debug("could not record a refused write of %s: %s", process_id, exc)
