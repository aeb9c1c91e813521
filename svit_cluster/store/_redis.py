"""The Redis boundary: client construction, explicit error conversion, and the
eviction-policy check.

Every redis-py exception raised inside :func:`redis_boundary` becomes an
:class:`~svit_cluster.errors.UnavailableError` with the original as
``__cause__`` and a ``fields["reason"]`` from :func:`failure_reason`. Our own
:class:`~svit_cluster.errors.SvitError` passes through.

A Redis that may evict keys (any ``maxmemory-policy`` but ``noeviction``) can
drop a process's fence key while keeping its head, and a stale owner then
commits again (the fence is the only thing that stops it). So every connection
:func:`connect` opens first reads ``CONFIG GET maxmemory-policy`` and refuses
anything but ``noeviction``; where ``CONFIG`` is disabled (managed Redis
services rename it) the connection is refused unless the operator sets
:data:`ALLOW_UNVERIFIED_ENV` to ``true``, and then a warning is logged. BullMQ
and JuiceFS check the policy at connect for the same reason.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.exceptions import (
    BusyLoadingError,
    ClusterDownError,
    MasterDownError,
    OutOfMemoryError,
    ReadOnlyError,
    RedisError,
    ResponseError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from svit_cluster.errors import ConfigurationError, SvitError, UnavailableError

__all__ = [
    "ALLOW_UNVERIFIED_ENV",
    "DEFAULT_TIMEOUT_S",
    "REFUSALS",
    "SAFE_EVICTION_POLICY",
    "EvictionPolicyError",
    "allow_unverified_from_env",
    "async_policy_check",
    "check_eviction_policy",
    "connect",
    "failure_reason",
    "judge_policy_reply",
    "redis_boundary",
    "refusal_reason",
    "verify_eviction_policy",
]

log = logging.getLogger(__name__)

#: Default socket connect and read timeout, in seconds.
DEFAULT_TIMEOUT_S = 5.0

#: The only ``maxmemory-policy`` under which Redis never deletes a key on its own.
SAFE_EVICTION_POLICY = "noeviction"

#: Environment variable; ``true`` (or ``1``/``yes``) lets svit use a Redis whose
#: ``maxmemory-policy`` cannot be read (``CONFIG`` disabled), with a warning.
ALLOW_UNVERIFIED_ENV = "SVIT_REDIS_ALLOW_UNVERIFIED_EVICTION_POLICY"

#: Error-reply prefixes with which Redis refuses a command (or a script's
#: first write) because of its own state, mapped to ``fields["reason"]``. Each
#: is transient: retrying the same request later can succeed.
REFUSALS: dict[str, str] = {
    "OOM": "oom",                # maxmemory reached under noeviction
    "LOADING": "loading",        # still loading the dataset (AOF/RDB) after a restart
    "BUSY": "busy",              # a script or function ran past busy-reply-threshold
    "READONLY": "readonly",      # connected to a replica (e.g. a demoted master)
    "MASTERDOWN": "masterdown",  # replica with replica-serve-stale-data no
    "TRYAGAIN": "tryagain",      # cluster resharding
    "CLUSTERDOWN": "clusterdown",
    "MISCONF": "misconf",        # writes stopped after a failed RDB save
    "NOREPLICAS": "noreplicas",  # min-replicas-to-write not met
}

# redis-py turns some prefixes into classes and strips the prefix from the text.
_REFUSAL_CLASSES: tuple[tuple[type[RedisError], str], ...] = (
    (OutOfMemoryError, "oom"),
    (BusyLoadingError, "loading"),
    (ReadOnlyError, "readonly"),
    (MasterDownError, "masterdown"),
    (TryAgainError, "tryagain"),
    (ClusterDownError, "clusterdown"),
)


def refusal_reason(reply: str) -> str | None:
    """The :data:`REFUSALS` reason of a Redis error reply text, or None.

    Args:
        reply: an error reply as Redis sends it (``"OOM command not allowed..."``),
            e.g. the ``err`` of a ``redis.pcall`` inside a script.
    """
    word = reply.lstrip("-").split(" ", 1)[0].upper()
    return REFUSALS.get(word)


class EvictionPolicyError(RedisError):
    """Redis may evict keys (or its policy cannot be read and no override is set).

    A ``RedisError`` so that redis-py closes the connection it was raised on;
    :func:`redis_boundary` turns it into ``unavailable`` with
    ``fields["reason"] == "eviction_policy"``.

    Attributes:
        policy: the ``maxmemory-policy`` value, or None if it could not be read.
    """

    def __init__(self, message: str, policy: str | None) -> None:
        super().__init__(message)
        self.policy = policy


def failure_reason(exc: BaseException) -> str:
    """A short stable name for why a redis-py call failed (``fields["reason"]``).

    Returns:
        One of the :data:`REFUSALS` values, ``"eviction_policy"``, ``"timeout"``,
        ``"connection"``, or ``"error"`` (any other error reply).
    """
    if isinstance(exc, EvictionPolicyError):
        return "eviction_policy"
    for cls, reason in _REFUSAL_CLASSES:
        if isinstance(exc, cls):
            return reason
    if isinstance(exc, RedisTimeoutError):
        return "timeout"
    if isinstance(exc, RedisConnectionError):
        return "connection"
    if isinstance(exc, ResponseError):
        return refusal_reason(str(exc)) or "error"
    return "error"


def allow_unverified_from_env() -> bool:
    """Whether :data:`ALLOW_UNVERIFIED_ENV` is set to ``true``/``1``/``yes``."""
    return os.environ.get(ALLOW_UNVERIFIED_ENV, "").strip().lower() in ("1", "true", "yes")


def _config_value(reply: Any, name: str) -> str | None:
    """The value in a ``CONFIG GET`` reply: a flat list (RESP2) or a map (RESP3)."""
    def text(item: Any) -> str:
        return item.decode(errors="replace") if isinstance(item, bytes) else str(item)

    pairs: list[tuple[Any, Any]]
    if isinstance(reply, dict):
        pairs = list(reply.items())
    elif isinstance(reply, list | tuple):
        pairs = list(zip(reply[::2], reply[1::2], strict=False))
    else:
        return None
    for key, value in pairs:
        if text(key).lower() == name:
            return text(value)
    return None


def check_eviction_policy(execute: Callable[..., Any], *, allow_unverified: bool,
                          where: str = "redis") -> str | None:
    """Refuse a Redis whose ``maxmemory-policy`` is not ``noeviction``.

    Args:
        execute: sends one command and returns its reply
            (``client.execute_command``, or a raw connection's send + read).
        allow_unverified: accept a Redis that refuses ``CONFIG GET`` (logs a warning).
        where: names the server in messages (a URL without credentials).

    Returns:
        The policy read, or None when it could not be read and
        ``allow_unverified`` is set.

    Raises:
        EvictionPolicyError: the policy is anything but ``noeviction``, or it
            cannot be read and ``allow_unverified`` is False.
        redis.exceptions.ConnectionError, TimeoutError: Redis is unreachable.
    """
    try:
        reply: Any = execute("CONFIG", "GET", "maxmemory-policy")
    except ResponseError as exc:  # unknown command (renamed away), NOPERM, ...
        reply = exc
    return judge_policy_reply(reply, allow_unverified=allow_unverified, where=where)


def judge_policy_reply(reply: Any, *, allow_unverified: bool, where: str) -> str | None:
    """:func:`check_eviction_policy` on an already read ``CONFIG GET`` reply.

    Args:
        reply: the reply, or the ``ResponseError`` Redis answered instead.

    Returns and raises as :func:`check_eviction_policy`.
    """
    if isinstance(reply, ResponseError):
        policy = None
        detail = str(reply)
    else:
        policy = _config_value(reply, "maxmemory-policy")
        detail = "CONFIG GET returned no value"
    if policy is None:
        if allow_unverified:
            log.warning(
                "cannot read maxmemory-policy of %s (%s); continuing because %s is set: "
                "make sure it is %s, or a stale owner can commit after its fence key "
                "is evicted", where, detail[:200], ALLOW_UNVERIFIED_ENV, SAFE_EVICTION_POLICY)
            return None
        raise EvictionPolicyError(
            f"cannot read maxmemory-policy of {where} ({detail[:200]}); svit needs "
            f"maxmemory-policy {SAFE_EVICTION_POLICY}. If you have checked it yourself "
            f"(CONFIG disabled on a managed Redis), set {ALLOW_UNVERIFIED_ENV}=true",
            None)
    if policy != SAFE_EVICTION_POLICY:
        raise EvictionPolicyError(
            f"refusing {where}: maxmemory-policy is {policy}, which lets Redis evict "
            f"fence, head or receipt keys; set maxmemory-policy {SAFE_EVICTION_POLICY}",
            policy)
    return policy


def _where(url: str) -> str:
    # host:port/db only; never echo a password from the URL
    return "redis " + url.rsplit("@", 1)[-1].split("://", 1)[-1]


def _policy_checking_connect(allow_unverified: bool, where: str) -> Callable[[Any], None]:
    def on_connect(conn: Any) -> None:
        conn.on_connect()  # handshake (AUTH, SELECT) as redis-py would do it

        def execute(*args: Any) -> Any:
            conn.send_command(*args)
            return conn.read_response()

        check_eviction_policy(execute, allow_unverified=allow_unverified, where=where)

    return on_connect


def async_policy_check(url: str, *, allow_unverified: bool | None = None
                       ) -> Callable[[Any], Awaitable[None]]:
    """A ``redis_connect_func`` for ``redis.asyncio`` clients: the check of :func:`connect`.

    Args:
        url: the client's URL (named in messages, without credentials).
        allow_unverified: as in :func:`connect` (None reads :data:`ALLOW_UNVERIFIED_ENV`).
    """
    allow = allow_unverified_from_env() if allow_unverified is None else allow_unverified
    where = _where(url)

    async def on_connect(conn: Any) -> None:
        await conn.on_connect()
        await conn.send_command("CONFIG", "GET", "maxmemory-policy")
        try:
            reply: Any = await conn.read_response()
        except ResponseError as exc:
            reply = exc
        judge_policy_reply(reply, allow_unverified=allow, where=where)

    return on_connect


def connect(url: str, *, timeout_s: float = DEFAULT_TIMEOUT_S,
            allow_unverified_eviction_policy: bool | None = None) -> redis.Redis:
    """A thread-safe, pooled client for ``url`` with client-side retries disabled.

    redis-py would otherwise silently resend a command after a connection
    error; for a commit whose reply was lost that resend can only report a
    misleading ``conflict``. Here the caller sees ``unavailable`` instead and
    retries with the same request id, which replays the stored receipt.
    (A pooled connection that the server closed is still replaced before use.)

    Every new connection (the first and each one after a reconnect) checks the
    eviction policy (:func:`check_eviction_policy`) before it is used; a
    refusal surfaces as ``unavailable`` (``reason`` ``eviction_policy``) from
    the call that needed the connection. Construction sends nothing; call
    :func:`verify_eviction_policy` to check eagerly at start-up.

    Args:
        url: ``redis://host:port/db``.
        timeout_s: socket connect and read timeout (default 5 s).
        allow_unverified_eviction_policy: accept a Redis whose policy cannot be
            read; None (default) reads :data:`ALLOW_UNVERIFIED_ENV`.

    Raises:
        ValueError: ``timeout_s`` is not positive; a malformed URL (from redis-py).
    """
    if timeout_s <= 0:
        raise ValueError("timeout_s must be positive")
    allow = (allow_unverified_from_env() if allow_unverified_eviction_policy is None
             else allow_unverified_eviction_policy)
    return redis.Redis.from_url(
        url,
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s,
        retry=Retry(NoBackoff(), 0),
        retry_on_error=[],
        redis_connect_func=_policy_checking_connect(allow, _where(url)),
    )


def verify_eviction_policy(url: str, *, timeout_s: float = DEFAULT_TIMEOUT_S,
                           allow_unverified: bool | None = None) -> str | None:
    """Check at start-up that the Redis at ``url`` never evicts keys.

    Args:
        url: ``redis://host:port/db``.
        timeout_s: connect and read timeout (default 5 s).
        allow_unverified: as in :func:`connect` (None reads :data:`ALLOW_UNVERIFIED_ENV`).

    Returns:
        ``"noeviction"``, or None when unverifiable and allowed (a warning is logged).

    Raises:
        ConfigurationError: the policy can evict keys, or cannot be read and no
            override is set; the message names ``maxmemory-policy`` and its value.
        UnavailableError: Redis is unreachable.
    """
    allow = allow_unverified_from_env() if allow_unverified is None else allow_unverified
    client = redis.Redis.from_url(url, socket_timeout=timeout_s,
                                  socket_connect_timeout=timeout_s,
                                  retry=Retry(NoBackoff(), 0), retry_on_error=[])
    try:
        return check_eviction_policy(client.execute_command, allow_unverified=allow,
                                     where=_where(url))
    except EvictionPolicyError as exc:
        raise ConfigurationError(str(exc), setting="maxmemory-policy",
                                 value=exc.policy) from exc
    except RedisError as exc:
        raise UnavailableError(f"{_where(url)} unreachable: {type(exc).__name__}: {exc}",
                               op="verify_eviction_policy",
                               reason=failure_reason(exc)) from exc
    finally:
        client.close()


@contextmanager
def redis_boundary(op: str, process_id: str, *, outcome: str = "none") -> Iterator[None]:
    """Convert redis-py errors raised in the block to ``UnavailableError``.

    Args:
        op: the operation name, recorded in ``fields["op"]``.
        process_id: recorded in ``fields["process_id"]``.
        outcome: ``"none"`` (nothing can have changed) or ``"unknown"`` (a
            write may or may not have been applied), in ``fields["outcome"]``.
            It is kept as given even for a refusal (``OOM``...): a
            non-transactional pipeline may have applied earlier commands.

    Raises:
        UnavailableError: (``unavailable``) Redis is down, slow, out of memory,
            loading, busy, read-only, evicting, or answered with an error;
            ``fields["reason"]`` is :func:`failure_reason` of the cause. A retry
            with the same request id is safe.
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
            reason=failure_reason(exc),
        ) from exc
