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
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeAlias

import redis
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.commands.core import Script
from redis.exceptions import (
    AskError,
    BusyLoadingError,
    ClusterDownError,
    MasterDownError,
    MovedError,
    OutOfMemoryError,
    ReadOnlyError,
    RedisClusterException,
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
    "CLUSTER_ENV",
    "DEFAULT_TIMEOUT_S",
    "REFUSALS",
    "SAFE_EVICTION_POLICY",
    "AsyncRedisClient",
    "EvictionPolicyError",
    "RedisClient",
    "allow_unverified_from_env",
    "async_connect",
    "async_policy_check",
    "check_eviction_policy",
    "cluster_from_env",
    "connect",
    "failure_reason",
    "judge_policy_reply",
    "redis_boundary",
    "refusal_reason",
    "run_replicated",
    "split_startup_nodes",
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

#: Environment variable; ``true`` (or ``1``/``yes``) makes :func:`connect` and
#: :func:`async_connect` build a ``redis.cluster.RedisCluster`` client (the URL
#: names one startup node; the others are discovered). The Helm chart renders it
#: from ``redis.external.cluster``.
CLUSTER_ENV = "SVIT_REDIS_CLUSTER"

#: What :func:`connect` returns: a single-node or a Redis Cluster client.
RedisClient: TypeAlias = redis.Redis | RedisCluster

#: What :func:`async_connect` returns.
AsyncRedisClient: TypeAlias = aioredis.Redis | AsyncRedisCluster

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
# "replication" (not a Redis reply): WAIT counted fewer replicas than configured
# (StoreConfig.wait_replicas); the write may or may not survive a failover.

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


def cluster_from_env() -> bool:
    """:data:`CLUSTER_ENV` (``StoreSettings.redis_cluster``; unset: False).

    Raises:
        ConfigurationError: the variable is not a boolean (``true``/``false``, ...).
    """
    from svit_cluster.settings import StoreSettings, load_settings

    return load_settings(StoreSettings).redis_cluster


def allow_unverified_from_env() -> bool:
    """:data:`ALLOW_UNVERIFIED_ENV` (``StoreSettings.redis_allow_unverified_eviction_policy``).

    Raises:
        ConfigurationError: the variable is not a boolean.
    """
    from svit_cluster.settings import StoreSettings, load_settings

    return load_settings(StoreSettings).redis_allow_unverified_eviction_policy


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


def _node(conn: Any, where: str) -> str:
    """The server one connection talks to, for messages: ``redis host:port/db``
    (a cluster client connects to many nodes, and the one that refused must be
    named, not the startup node of the URL); ``where`` when it has no address."""
    host, port = getattr(conn, "host", None), getattr(conn, "port", None)
    if host is None or port is None:
        return where
    return f"redis {host}:{port}/{getattr(conn, 'db', 0) or 0}"


def _policy_checking_connect(allow_unverified: bool, where: str) -> Callable[[Any], None]:
    def on_connect(conn: Any) -> None:
        conn.on_connect()  # handshake (AUTH, SELECT) as redis-py would do it

        def execute(*args: Any) -> Any:
            conn.send_command(*args)
            return conn.read_response()

        check_eviction_policy(execute, allow_unverified=allow_unverified,
                              where=_node(conn, where))

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
        judge_policy_reply(reply, allow_unverified=allow, where=_node(conn, where))

    return on_connect


def connect(url: str, *, timeout_s: float = DEFAULT_TIMEOUT_S,
            allow_unverified_eviction_policy: bool | None = None,
            cluster: bool | None = None) -> RedisClient:
    """The one connection factory: a thread-safe, pooled client for ``url``
    with client-side retries disabled; a Redis Cluster client when configured.

    redis-py would otherwise silently resend a command after a connection
    error; for a commit whose reply was lost that resend can only report a
    misleading ``conflict``. Here the caller sees ``unavailable`` instead and
    retries with the same request id, which replays the stored receipt.
    (A pooled connection that the server closed is still replaced before use.)

    With ``cluster`` the client is a ``redis.cluster.RedisCluster``: ``url``
    is one startup node, the slot map is discovered, ``MOVED``/``ASK``
    redirections are followed (nothing was executed, so that is safe), and a
    connection error refreshes the slot map and is raised, not retried (after
    a master dies the next call reaches the promoted replica). Every key svit
    writes carries a hash tag, and every script and ``MULTI`` touches one slot
    only (the process's ``{<process>}``, or the dispatcher's ``{dispatch}``).

    Every new connection, to every cluster node too (the first one and each one
    after a reconnect) checks the eviction policy
    (:func:`check_eviction_policy`) before it is used; a refusal names the node
    that refused and surfaces as ``unavailable`` (``reason``
    ``eviction_policy``) from the call that needed the connection.
    Construction of a single-node client sends nothing. A cluster client is
    built by talking to two nodes: the startup node (the slot map) and
    redis-py's default node (the first master of that map, for the ``COMMAND``
    table; the same node unless a failover moved slot 0); a refusal by either
    is raised by this function. Call :func:`verify_eviction_policy` to check
    every node eagerly at start-up.

    Args:
        url: ``redis://host:port/db`` (db 0 for a cluster); for a cluster it
            may list several startup nodes, ``redis://h1:p1,h2:p2/0``
            (:func:`split_startup_nodes`), so one dead node does not stop
            discovery.
        timeout_s: socket connect and read timeout (default 5 s).
        allow_unverified_eviction_policy: accept a Redis whose policy cannot be
            read; None (default) reads :data:`ALLOW_UNVERIFIED_ENV`.
        cluster: build a Redis Cluster client; None (default) reads
            :data:`CLUSTER_ENV` (``ClusterConfig.redis_cluster``).

    Raises:
        ValueError: ``timeout_s`` is not positive; a malformed URL (from redis-py).
        EvictionPolicyError: (cluster only) the startup node or the default
            node refused (see above), naming it.
        redis.exceptions.RedisClusterException: (cluster only) no startup node
            answered, or the nodes do not agree on a slot map.
    """
    if timeout_s <= 0:
        raise ValueError("timeout_s must be positive")
    allow = (allow_unverified_from_env() if allow_unverified_eviction_policy is None
             else allow_unverified_eviction_policy)
    on_connect = _policy_checking_connect(allow, _where(url))
    if cluster_from_env() if cluster is None else cluster:
        from redis.cluster import ClusterNode

        first, extra = split_startup_nodes(url)
        try:
            return RedisCluster.from_url(
                first,
                startup_nodes=[ClusterNode(h, p)  # type: ignore[no-untyped-call]
                               for h, p in extra] or None,
                socket_timeout=timeout_s,
                socket_connect_timeout=timeout_s,
                retry=Retry(NoBackoff(), 0),
                redis_connect_func=on_connect,
            )
        except RedisClusterException as exc:
            # redis-py reports a refused startup node as "cannot be connected.
            # Please provide at least one reachable node"; it was reachable
            refused = exc.__cause__
            if isinstance(refused, EvictionPolicyError):
                raise EvictionPolicyError(str(refused), refused.policy) from exc
            raise
    return redis.Redis.from_url(
        url,
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s,
        retry=Retry(NoBackoff(), 0),
        retry_on_error=[],
        redis_connect_func=on_connect,
    )


def split_startup_nodes(url: str) -> tuple[str, list[tuple[str, int]]]:
    """``redis://[auth@]h1:p1,h2:p2,.../db`` -> (``redis://[auth@]h1:p1/db``, [(h2, p2), ...]).

    A Redis Cluster URL may list several startup nodes, so that a client can
    still discover the cluster when the first one is down. A URL with one
    node is returned unchanged with no extra nodes.

    Raises:
        ValueError: an extra node is not ``host:port``.
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url, []
    auth, at, hostpart = rest.rpartition("@")
    netloc, slash, path = hostpart.partition("/")
    first, *others = netloc.split(",")
    extra: list[tuple[str, int]] = []
    for entry in others:
        host, _, port = entry.strip().rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"redis cluster startup node must be host:port, got {entry!r}")
        extra.append((host, int(port)))
    return f"{scheme}://{auth}{at}{first}{slash}{path}", extra


def async_connect(url: str, *, timeout_s: float = DEFAULT_TIMEOUT_S,
                  connect_timeout_s: float | None = None,
                  allow_unverified: bool | None = None,
                  cluster: bool | None = None) -> AsyncRedisClient:
    """:func:`connect` for ``redis.asyncio``: same retries, policy check and choice.

    Args:
        url, timeout_s, cluster: as for :func:`connect` (``timeout_s`` is the
            socket read timeout: longer than any blocking read).
        connect_timeout_s: socket connect timeout (default ``timeout_s``).
        allow_unverified: as ``allow_unverified_eviction_policy`` of :func:`connect`.

    Raises:
        ValueError: ``timeout_s`` is not positive; a malformed URL (from redis-py).
    """
    from redis.asyncio.retry import Retry as AsyncRetry

    if timeout_s <= 0:
        raise ValueError("timeout_s must be positive")
    check = async_policy_check(url, allow_unverified=allow_unverified)
    connect_s = timeout_s if connect_timeout_s is None else connect_timeout_s
    if cluster_from_env() if cluster is None else cluster:
        from redis.asyncio.cluster import ClusterNode as AsyncClusterNode

        first, extra = split_startup_nodes(url)
        client = AsyncRedisCluster.from_url(
            first, startup_nodes=[AsyncClusterNode(h, p) for h, p in extra] or None,
            socket_timeout=timeout_s, socket_connect_timeout=connect_s,
            retry=AsyncRetry(NoBackoff(), 0))
        # The asyncio cluster client has no redis_connect_func argument; every
        # node (startup nodes and the ones discovered later) is built from
        # these connection kwargs, so each of its connections runs the check.
        client.nodes_manager.connection_kwargs["redis_connect_func"] = check
        for node in client.nodes_manager.startup_nodes.values():
            node.connection_kwargs["redis_connect_func"] = check
        return client
    return aioredis.Redis.from_url(
        url, socket_timeout=timeout_s, socket_connect_timeout=connect_s,
        retry=AsyncRetry(NoBackoff(), 0), retry_on_error=[],
        redis_connect_func=check,
    )


def verify_eviction_policy(url: str, *, timeout_s: float = DEFAULT_TIMEOUT_S,
                           allow_unverified: bool | None = None,
                           cluster: bool | None = None) -> str | None:
    """Check at start-up that the Redis at ``url`` (every node of a cluster) never evicts keys.

    Args:
        url: ``redis://host:port/db``.
        timeout_s: connect and read timeout (default 5 s).
        allow_unverified: as in :func:`connect` (None reads :data:`ALLOW_UNVERIFIED_ENV`).
        cluster: as in :func:`connect` (None reads :data:`CLUSTER_ENV`); then
            every node of the cluster, masters and replicas, is checked.

    Returns:
        ``"noeviction"``, or None when unverifiable and allowed (a warning is logged).

    Raises:
        ConfigurationError: the policy can evict keys, or cannot be read and no
            override is set; the message names ``maxmemory-policy`` and its value.
        UnavailableError: Redis is unreachable.
    """
    allow = allow_unverified_from_env() if allow_unverified is None else allow_unverified
    is_cluster = cluster_from_env() if cluster is None else cluster
    client: RedisClient | None = None
    try:
        if is_cluster:
            from redis.cluster import ClusterNode

            first, extra = split_startup_nodes(url)
            client = RedisCluster.from_url(first, socket_timeout=timeout_s,
                                           startup_nodes=[ClusterNode(h, p)  # type: ignore[no-untyped-call]
                                                          for h, p in extra]
                                           or None,
                                           socket_connect_timeout=timeout_s,
                                           retry=Retry(NoBackoff(), 0))
            result: str | None = SAFE_EVICTION_POLICY
            for node in client.get_nodes():  # type: ignore[no-untyped-call]
                one = client.get_redis_connection(node)
                checked = check_eviction_policy(one.execute_command, allow_unverified=allow,
                                                where=f"redis {node.name}")
                result = result if checked is not None else None
            return result
        client = redis.Redis.from_url(url, socket_timeout=timeout_s,
                                      socket_connect_timeout=timeout_s,
                                      retry=Retry(NoBackoff(), 0), retry_on_error=[])
        return check_eviction_policy(client.execute_command, allow_unverified=allow,
                                     where=_where(url))
    except EvictionPolicyError as exc:
        raise ConfigurationError(str(exc), setting="maxmemory-policy",
                                 value=exc.policy) from exc
    except (RedisError, RedisClusterException) as exc:  # the latter: no startup node answered
        raise UnavailableError(f"{_where(url)} unreachable: {type(exc).__name__}: {exc}",
                               op="verify_eviction_policy",
                               reason=failure_reason(exc)) from exc
    finally:
        if client is not None:
            client.close()


def run_replicated(client: RedisClient, script: Script, keys: Sequence[str],
                   args: Sequence[Any], *, replicas: int, timeout_ms: int
                   ) -> tuple[Any, int | None]:
    """Run ``script`` and then ``WAIT replicas timeout_ms`` on the same connection.

    ``WAIT`` counts the replicas that have acknowledged every write sent on
    *its own connection*, so the script and the ``WAIT`` go in one
    (non-transactional) pipeline on one connection to the master of
    ``keys[0]``'s slot. A ``MOVED``/``ASK`` reply to the script (the slot
    moved: nothing ran) refreshes the cluster's slot map and is sent once
    more; a connection error refreshes it and is raised.

    Args:
        client: from :func:`connect`.
        script: a registered script (``client.register_script``).
        keys: the script's keys (one hash slot).
        args: the script's arguments.
        replicas: replicas that must acknowledge; 0 runs the script alone.
        timeout_ms: how long ``WAIT`` blocks at most (> 0).

    Returns:
        ``(script reply, replicas that acknowledged)``; the count is None when
        ``replicas`` is 0. The caller decides what a short count means.

    Raises:
        redis.exceptions.RedisError: the script or ``WAIT`` failed, or Redis is
            unreachable (convert with :func:`redis_boundary`).
    """
    if replicas <= 0:
        return script(keys=keys, args=args), None
    for attempt in range(2):
        if isinstance(client, RedisCluster):
            node = client.get_redis_connection(
                client.get_node_from_key(keys[0]))  # type: ignore[no-untyped-call]
        else:
            node = client
        pipe = node.pipeline(transaction=False)
        try:
            script(keys=keys, args=args, client=pipe)
            pipe.execute_command("WAIT", replicas, timeout_ms)  # type: ignore[no-untyped-call]
            reply, acked = pipe.execute(raise_on_error=False)
        except (RedisConnectionError, RedisTimeoutError):
            if isinstance(client, RedisCluster):
                client.nodes_manager.initialize()
            raise
        finally:
            pipe.reset()
        if (isinstance(reply, MovedError | AskError) and isinstance(client, RedisCluster)
                and attempt == 0):
            client.nodes_manager.initialize()
            continue
        if isinstance(reply, Exception):
            raise reply
        if isinstance(acked, Exception):
            raise acked
        return reply, int(acked)
    raise AssertionError("unreachable")  # pragma: no cover


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
