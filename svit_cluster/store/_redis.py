"""The Redis boundary: client construction and explicit error conversion.

Every redis-py exception raised inside :func:`redis_boundary` becomes an
:class:`~svit_cluster.errors.UnavailableError` with the original as
``__cause__`` and a ``fields["reason"]`` from :func:`failure_reason`. Our own
:class:`~svit_cluster.errors.SvitError` passes through.

Every client :func:`connect` builds refuses to write to a Redis node that may
evict keys: each new connection checks ``maxmemory-policy``, and
:func:`require_noeviction` (called before every write of the store and the
event log) re-reads it once its verdict is older than the period; the rule and
its reasons are in :mod:`svit_cluster.store._policy`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeAlias

import redis
import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode as AsyncClusterNode
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.commands.core import Script
from redis.exceptions import (
    AskError,
    BusyLoadingError,
    ClusterDownError,
    MasterDownError,
    MovedError,
    NoScriptError,
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
from svit_cluster.store._policy import (
    ALLOW_UNVERIFIED_ENV,
    EVICTION_CHECK_ENV,
    SAFE_EVICTION_POLICY,
    EvictionPolicyError,
    PolicyWatch,
    allow_unverified_from_env,
    async_policy_check,
    attach_watch,
    check_eviction_policy,
    eviction_check_from_env,
    judge_policy_reply,
    policy_checking_connect,
    server_of,
    watch_of,
)

__all__ = [
    "ALLOW_UNVERIFIED_ENV",
    "CLUSTER_ENV",
    "DEFAULT_TIMEOUT_S",
    "EVICTION_CHECK_ENV",
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
    "require_noeviction",
    "run_replicated",
    "split_startup_nodes",
    "verify_eviction_policy",
]

#: Default socket connect and read timeout, in seconds.
DEFAULT_TIMEOUT_S = 5.0

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


def connect(url: str, *, timeout_s: float = DEFAULT_TIMEOUT_S,
            allow_unverified_eviction_policy: bool | None = None,
            cluster: bool | None = None,
            eviction_check_s: float | None = None) -> RedisClient:
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

    The policy can change on a live server (``CONFIG SET``) while connections
    stay open, so the client also gets a :class:`~svit_cluster.store._policy.PolicyWatch`:
    :func:`require_noeviction`, which every write of :class:`RedisBackend`
    and of the event log calls first, re-reads the policy of the node the
    write goes to (a cluster: its slot's master) once that node's verdict is
    older than ``eviction_check_s``, and refuses the write while the node is
    evicting. A connection's own check counts as a verdict, so the writes in
    between cost no round trip.

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
        eviction_check_s: how long a node's policy verdict is trusted, in
            seconds (> 0); None (default) reads :data:`EVICTION_CHECK_ENV`
            (unset: ``defaults.DEFAULT_EVICTION_CHECK_S``, 2 s).

    Raises:
        ValueError: ``timeout_s`` or ``eviction_check_s`` is not positive; a
            malformed URL (from redis-py).
        ConfigurationError: an environment variable read here does not parse.
        EvictionPolicyError: (cluster only) the startup node or the default
            node refused (see above), naming it.
        redis.exceptions.RedisClusterException: (cluster only) no startup node
            answered, or the nodes do not agree on a slot map.
    """
    if timeout_s <= 0:
        raise ValueError("timeout_s must be positive")
    allow = (allow_unverified_from_env() if allow_unverified_eviction_policy is None
             else allow_unverified_eviction_policy)
    watch = PolicyWatch(allow_unverified=allow, period_s=(
        eviction_check_from_env() if eviction_check_s is None else eviction_check_s))
    on_connect = policy_checking_connect(allow, server_of(url), watch)
    client: RedisClient
    if cluster_from_env() if cluster is None else cluster:
        first, extra = split_startup_nodes(url)
        try:
            client = RedisCluster.from_url(
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
                raise EvictionPolicyError(str(refused), refused.policy,
                                          refused.node) from exc
            raise
    else:
        client = redis.Redis.from_url(
            url,
            socket_timeout=timeout_s,
            socket_connect_timeout=timeout_s,
            retry=Retry(NoBackoff(), 0),
            retry_on_error=[],
            redis_connect_func=on_connect,
        )
    attach_watch(client, watch)
    return client


def require_noeviction(client: RedisClient, key: str, *, op: str, process_id: str) -> None:
    """Refuse a write of ``key`` while the node it goes to may evict keys.

    Sends nothing while that node's verdict in :func:`watch_of` ``(client)``
    is younger than its period (``eviction_check_s`` of :func:`connect`);
    otherwise reads the node's policy first (see
    :class:`~svit_cluster.store._policy.PolicyWatch`). Call it before the write.

    Args:
        client: from :func:`connect` (another client gets a watch configured
            from the environment on first use).
        key: a key the write touches (on a cluster: its slot's master is checked).
        op, process_id: named in the error, as in :func:`redis_boundary`.

    Raises:
        UnavailableError: (``reason`` ``eviction_policy``, ``outcome``
            ``none``, fields ``policy`` and ``node``) the node's
            ``maxmemory-policy`` is not ``noeviction``, or cannot be read and no
            override is set: nothing was sent, retry once the policy is set
            back; or (another ``reason``) the node did not answer.
    """
    with redis_boundary(op, process_id, outcome="none"):
        watch_of(client).require(client, key)


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
    if timeout_s <= 0:
        raise ValueError("timeout_s must be positive")
    check = async_policy_check(url, allow_unverified=allow_unverified)
    connect_s = timeout_s if connect_timeout_s is None else connect_timeout_s
    if cluster_from_env() if cluster is None else cluster:
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
                                     where=server_of(url))
    except EvictionPolicyError as exc:
        raise ConfigurationError(str(exc), setting="maxmemory-policy",
                                 value=exc.policy) from exc
    except (RedisError, RedisClusterException) as exc:  # the latter: no startup node answered
        raise UnavailableError(f"{server_of(url)} unreachable: {type(exc).__name__}: {exc}",
                               op="verify_eviction_policy",
                               reason=failure_reason(exc)) from exc
    finally:
        if client is not None:
            client.close()


def run_script(client: RedisClient, script: Script, keys: Sequence[str],
               args: Sequence[Any]) -> Any:
    """``EVALSHA`` of ``script`` on ``client`` (the cheapest call redis-py has: one
    command, the script preloaded on the server), loading it on ``NOSCRIPT``
    (a restarted or new server) and sending it once more.

    Raises:
        redis.exceptions.RedisError: as ``EVALSHA`` (convert with :func:`redis_boundary`).
    """
    try:
        return client.evalsha(script.sha, len(keys), *keys, *args)
    except NoScriptError:
        return script(keys=keys, args=args, client=client)


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
        return run_script(client, script, keys, args), None
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
        extra: dict[str, Any] = ({"policy": exc.policy, "node": exc.node}
                                 if isinstance(exc, EvictionPolicyError) else {})
        raise UnavailableError(
            f"redis {op} failed for {process_id}: {type(exc).__name__}: {exc}",
            op=op,
            process_id=process_id,
            outcome=outcome,
            reason=failure_reason(exc),
            **extra,
        ) from exc
