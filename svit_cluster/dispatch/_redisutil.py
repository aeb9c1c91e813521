"""Redis helpers of the dispatcher: clients, the error boundary, byte decoding."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from redis.exceptions import RedisError

from svit_cluster.errors import SvitError, UnavailableError
from svit_cluster.store import AsyncRedisClient, async_connect, failure_reason

__all__ = ["async_client", "boundary", "text"]


def async_client(url: str, *, timeout_s: float = 5.0) -> AsyncRedisClient:
    """An asyncio redis-py client for ``url`` with client-side retries disabled.

    The dispatcher's loops retry on their own terms; a silent resend by the
    client would only hide which command failed. Every new connection refuses
    a Redis that may evict keys (an evicted stream claim lets two workers read
    one stream). A Redis Cluster client when ``SVIT_REDIS_CLUSTER`` is true
    (the store's one factory, ``svit_cluster.store._redis.async_connect``).
    """
    return async_connect(url, timeout_s=timeout_s)


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
