"""The Redis boundary: client construction and explicit error conversion.

Every redis-py exception raised inside :func:`redis_boundary` becomes an
:class:`~svit_cluster.errors.UnavailableError` with the original as
``__cause__``. Our own :class:`~svit_cluster.errors.SvitError` passes through.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import redis
from redis.backoff import NoBackoff
from redis.exceptions import RedisError
from redis.retry import Retry

from svit_cluster.errors import SvitError, UnavailableError

__all__ = ["DEFAULT_TIMEOUT_S", "connect", "redis_boundary"]

#: Default socket connect and read timeout, in seconds.
DEFAULT_TIMEOUT_S = 5.0


def connect(url: str, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> redis.Redis:
    """A thread-safe, pooled client for ``url`` with client-side retries disabled.

    redis-py would otherwise silently resend a command after a connection
    error; for a commit whose reply was lost that resend can only report a
    misleading ``conflict``. Here the caller sees ``unavailable`` instead and
    retries with the same request id, which replays the stored receipt.
    (A pooled connection that the server closed is still replaced before use.)

    Args:
        url: ``redis://host:port/db``.
        timeout_s: socket connect and read timeout (default 5 s).

    Raises:
        InvalidInput-free: a malformed URL raises ``ValueError`` from redis-py.
    """
    if timeout_s <= 0:
        raise ValueError("timeout_s must be positive")
    return redis.Redis.from_url(
        url,
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s,
        retry=Retry(NoBackoff(), 0),
        retry_on_error=[],
    )


@contextmanager
def redis_boundary(op: str, process_id: str, *, outcome: str = "none") -> Iterator[None]:
    """Convert redis-py errors raised in the block to ``UnavailableError``.

    Args:
        op: the operation name, recorded in ``fields["op"]``.
        process_id: recorded in ``fields["process_id"]``.
        outcome: ``"none"`` (nothing can have changed) or ``"unknown"`` (a
            write may or may not have been applied), in ``fields["outcome"]``.

    Raises:
        UnavailableError: (``unavailable``) Redis is down, slow, loading,
            read-only, or answered with an error.
    """
    try:
        yield
    except SvitError:
        raise
    except RedisError as exc:
        raise UnavailableError(
            f"redis {op} failed for {process_id}: {type(exc).__name__}: {exc}",
            op=op,
            process_id=process_id,
            outcome=outcome,
        ) from exc
