"""Redis helpers of the dispatcher: clients, the error boundary, byte decoding."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import redis.asyncio as aioredis
from redis.backoff import NoBackoff
from redis.exceptions import RedisError
from redis.retry import Retry

from svit_cluster.errors import SvitError, UnavailableError
from svit_cluster.store._redis import async_policy_check, failure_reason

__all__ = ["async_client", "boundary", "text"]


def async_client(url: str, *, timeout_s: float = 5.0) -> aioredis.Redis:
    """An asyncio redis-py client for ``url`` with client-side retries disabled.

    The dispatcher's loops retry on their own terms; a silent resend by the
    client would only hide which command failed. Every new connection refuses
    a Redis that may evict keys (an evicted stream lease lets two workers read
    one stream; see ``svit_cluster.store`` ``async_policy_check``).
    """
    return aioredis.Redis.from_url(
        url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s,
        retry=Retry(NoBackoff(), 0), retry_on_error=[],
        redis_connect_func=async_policy_check(url),
    )


@contextmanager
def boundary(op: str, *, outcome: str = "none") -> Iterator[None]:
    """Convert redis-py errors in the block to ``UnavailableError`` (cause chained).

    ``fields["outcome"]`` is ``"unknown"`` for writes that may have applied.
    """
    try:
        yield
    except SvitError:
        raise
    except RedisError as exc:
        raise UnavailableError(f"redis {op} failed: {type(exc).__name__}: {exc}", op=op,
                               outcome=outcome, reason=failure_reason(exc)) from exc


def text(raw: bytes | str | None, default: str = "") -> str:
    """Decode a Redis reply item (bytes or str) to str."""
    if raw is None:
        return default
    return raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else str(raw)
