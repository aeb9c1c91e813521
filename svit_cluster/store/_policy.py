"""The eviction-policy rule: no write goes to a Redis node that may evict keys.

A Redis that may evict keys (any ``maxmemory-policy`` but ``noeviction``) can
drop a process's fence key while keeping its head, and a stale owner then
commits again (the fence is the only thing that stops it). The commit log's
keys carry no TTL, so ``volatile-*`` would spare them, but the dispatcher's
stream leases carry one (``SET ... PX``), and a lease evicted before it expires
lets two workers read one stream: ``volatile-*`` is refused too. BullMQ and
JuiceFS check the policy for the same reason.

The policy is read (``CONFIG GET maxmemory-policy``) in three places:

* on every new connection (:func:`policy_checking_connect`, redis-py's
  ``redis_connect_func``: the first one, and each one after a reconnect or,
  on a cluster, to a node promoted by a failover);
* before a write, when the node's last verdict is older than the period
  (:class:`PolicyWatch`, ``SVIT_REDIS_EVICTION_CHECK_S``): so a policy changed
  on a live server with ``CONFIG SET`` stops writes within one period, with no
  extra round trip on the writes in between;
* at start-up, eagerly (``verify_eviction_policy`` in ``_redis``).

Where ``CONFIG`` is disabled (managed Redis services rename it) a node is
refused unless the operator sets :data:`ALLOW_UNVERIFIED_ENV` to ``true``; then
a warning is logged (once per node and client) and writes go on.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

from redis.cluster import RedisCluster
from redis.exceptions import (
    ClusterDownError,
    RedisClusterException,
    RedisError,
    ResponseError,
    SlotNotCoveredError,
)

from svit_cluster.defaults import DEFAULT_EVICTION_CHECK_S

__all__ = [
    "ALLOW_UNVERIFIED_ENV",
    "EVICTION_CHECK_ENV",
    "SAFE_EVICTION_POLICY",
    "EvictionPolicyError",
    "PolicyWatch",
    "allow_unverified_from_env",
    "async_policy_check",
    "attach_watch",
    "check_eviction_policy",
    "eviction_check_from_env",
    "judge_policy_reply",
    "policy_checking_connect",
    "server_of",
    "watch_of",
]

log = logging.getLogger(__name__)

#: The only ``maxmemory-policy`` under which Redis never deletes a key on its own.
SAFE_EVICTION_POLICY = "noeviction"

#: Environment variable; ``true`` (or ``1``/``yes``) lets svit use a Redis whose
#: ``maxmemory-policy`` cannot be read (``CONFIG`` disabled), with a warning.
ALLOW_UNVERIFIED_ENV = "SVIT_REDIS_ALLOW_UNVERIFIED_EVICTION_POLICY"

#: Environment variable: seconds a node's policy verdict is trusted before a
#: write reads the policy again (``StoreSettings.redis_eviction_check_s``;
#: unset: :data:`~svit_cluster.defaults.DEFAULT_EVICTION_CHECK_S`, 2 s).
EVICTION_CHECK_ENV = "SVIT_REDIS_EVICTION_CHECK_S"


class EvictionPolicyError(RedisError):
    """Redis may evict keys (or its policy cannot be read and no override is set).

    A ``RedisError`` so that redis-py closes the connection it was raised on;
    ``_redis.redis_boundary`` turns it into ``unavailable`` with
    ``fields["reason"] == "eviction_policy"`` (and ``policy``, ``node``).

    Attributes:
        policy: the ``maxmemory-policy`` value, or None if it could not be read.
        node: the server that answered, ``"redis host:port/db"`` (None: unknown).
    """

    def __init__(self, message: str, policy: str | None, node: str | None = None) -> None:
        super().__init__(message)
        self.policy = policy
        self.node = node


def allow_unverified_from_env() -> bool:
    """:data:`ALLOW_UNVERIFIED_ENV` (``StoreSettings.redis_allow_unverified_eviction_policy``).

    Raises:
        ConfigurationError: the variable is not a boolean.
    """
    from svit_cluster.settings import StoreSettings, load_settings

    return load_settings(StoreSettings).redis_allow_unverified_eviction_policy


def eviction_check_from_env() -> float:
    """:data:`EVICTION_CHECK_ENV` in seconds (``StoreSettings.redis_eviction_check_s``).

    Unset (in any case of the name, as pydantic-settings matches it), the
    default is returned without loading pydantic-settings (a process actor's
    worker does not carry it for one constant).

    Raises:
        ConfigurationError: the variable is not a number in ``(0, 60]``.
    """
    if not any(value and key.upper() == EVICTION_CHECK_ENV for key, value in os.environ.items()):
        return DEFAULT_EVICTION_CHECK_S
    from svit_cluster.settings import StoreSettings, load_settings

    return load_settings(StoreSettings).redis_eviction_check_s


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
                          where: str = "redis", warn: bool = True) -> str | None:
    """Refuse a Redis whose ``maxmemory-policy`` is not ``noeviction``.

    Args:
        execute: sends one command and returns its reply
            (``client.execute_command``, or a raw connection's send + read).
        allow_unverified: accept a Redis that refuses ``CONFIG GET`` (logs a warning).
        where: names the server in messages (a URL without credentials).
        warn: log that warning (False: the caller already did for this server).

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
    return judge_policy_reply(reply, allow_unverified=allow_unverified, where=where, warn=warn)


def judge_policy_reply(reply: Any, *, allow_unverified: bool, where: str,
                       warn: bool = True) -> str | None:
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
            if warn:
                log.warning(
                    "cannot read maxmemory-policy of %s (%s); continuing because %s is set: "
                    "make sure it is %s, or a stale owner can commit after its fence key "
                    "is evicted", where, detail[:200], ALLOW_UNVERIFIED_ENV,
                    SAFE_EVICTION_POLICY)
            return None
        raise EvictionPolicyError(
            f"cannot read maxmemory-policy of {where} ({detail[:200]}); svit needs "
            f"maxmemory-policy {SAFE_EVICTION_POLICY}. If you have checked it yourself "
            f"(CONFIG disabled on a managed Redis), set {ALLOW_UNVERIFIED_ENV}=true",
            None, where)
    if policy != SAFE_EVICTION_POLICY:
        raise EvictionPolicyError(
            f"refusing {where}: maxmemory-policy is {policy}, which lets Redis evict "
            f"fence, head or receipt keys; set maxmemory-policy {SAFE_EVICTION_POLICY}",
            policy, where)
    return policy


def server_of(url: str) -> str:
    """``redis host:port/db`` of ``url``, for messages (never the password)."""
    return "redis " + url.rsplit("@", 1)[-1].split("://", 1)[-1]


def _node_name(host: Any, port: Any, db: Any) -> str:
    return f"redis {host}:{port}/{db or 0}"


def _node(conn: Any, fallback: str) -> str:
    """The server one connection talks to, for messages and verdicts:
    ``redis host:port/db`` (a cluster client connects to many nodes, and the
    one that refused must be named, not the startup node of the URL);
    ``fallback`` when it has no address (a Unix socket)."""
    host, port = getattr(conn, "host", None), getattr(conn, "port", None)
    if host is None or port is None:
        return fallback
    return _node_name(host, port, getattr(conn, "db", 0))


class PolicyWatch:
    """The ``maxmemory-policy`` verdicts of the nodes one sync client writes to.

    :meth:`require` is called before every write, with the write's key. It
    sends nothing while the verdict of the node that key's write goes to (the
    single server, or the master of the key's slot on a Redis Cluster) is
    younger than ``period_s``; otherwise it reads that node's policy (one
    ``CONFIG GET``) and raises unless it is ``noeviction``. A refusal is not
    cached: every write re-reads the policy of a refusing node, so writes
    resume with the first one after the policy is set back. A new
    connection's check (:func:`policy_checking_connect`) counts as a fresh
    verdict for its node, so a master promoted by a failover is checked
    before the first write reaches it. One evicting cluster master stops the
    writes to its own slots only.

    Not covered: a write that Redis Cluster redirects (``MOVED``/``ASK``,
    while a slot migrates) goes to the new master under that node's last
    verdict, which may be older than ``period_s`` if this client had a
    connection to it and has not written to it since; the next write to the
    slot is checked against the new master.

    Thread-safe; at most one thread reads a node's policy at a time, the
    others writing to that node wait and then use its verdict.

    Args:
        allow_unverified: accept a node whose policy cannot be read (``CONFIG``
            disabled), with one warning per node.
        period_s: how long a verdict is trusted, in seconds (> 0; default
            :data:`~svit_cluster.defaults.DEFAULT_EVICTION_CHECK_S`, 2 s). A
            write never goes out more than ``period_s`` after its node last
            answered ``noeviction``.
        clock: monotonic seconds (``time.monotonic``; tests inject their own).

    Raises:
        ValueError: ``period_s`` is not positive.
    """

    def __init__(self, *, allow_unverified: bool, period_s: float = DEFAULT_EVICTION_CHECK_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not period_s > 0:
            raise ValueError(f"period_s must be positive, got {period_s!r}")
        self.allow_unverified = allow_unverified
        self.period_s = float(period_s)
        self._clock = clock
        self._checked_at: dict[str, float] = {}  # node -> when it last answered noeviction
        self._warned: set[str] = set()
        self._refresh: dict[str, threading.Lock] = {}  # node -> held while it is read

    def now(self) -> float:
        """The watch's clock, in seconds (for :meth:`record`)."""
        return self._clock()

    def record(self, node: str, asked_at: float) -> None:
        """Note that ``node`` passed the check that was sent at ``asked_at``
        (:meth:`now`; a new connection's check)."""
        self._checked_at[node] = asked_at

    def forget(self, node: str) -> None:
        """Drop ``node``'s verdict (it refused): its next write reads the policy."""
        self._checked_at.pop(node, None)

    def require(self, client: Any, key: str) -> None:
        """Raise unless the node ``client`` sends writes of ``key`` to answered
        ``noeviction`` (or, allowed, could not be read) within ``period_s``.

        Args:
            client: a ``redis.Redis`` or ``redis.cluster.RedisCluster``.
            key: a key of the write (any one: a write touches one slot).

        Raises:
            EvictionPolicyError: the node's policy is not ``noeviction`` (or
                cannot be read and no override is set); the message names the
                node and its policy.
            redis.exceptions.RedisError: the node did not answer (timeout,
                connection refused), or (cluster) no master covers the slot.
        """
        name, node = _write_node(client, key)
        if self._fresh(name):
            return
        with self._refresh.setdefault(name, threading.Lock()):
            if self._fresh(name):  # another thread read it while this one waited
                return
            execute = (client.execute_command if node is None
                       else client.get_redis_connection(node).execute_command)
            asked_at = self._clock()
            try:
                policy = check_eviction_policy(
                    execute, allow_unverified=self.allow_unverified, where=name,
                    warn=name not in self._warned)
            except EvictionPolicyError:
                self.forget(name)
                raise
            if policy is None:
                self._warned.add(name)
            self._checked_at[name] = asked_at

    def _fresh(self, name: str) -> bool:
        at = self._checked_at.get(name)
        return at is not None and self._clock() - at < self.period_s


def _write_node(client: Any, key: str) -> tuple[str, Any]:
    """``(node name, cluster node or None)`` of the node a write of ``key`` goes to;
    a local lookup (the slot map), no round trip.

    Raises:
        redis.exceptions.ClusterDownError: (cluster) no master covers the
            key's slot, even after the slot map was read again (as redis-py
            does before it fails a command on an uncovered slot).
    """
    if isinstance(client, RedisCluster):
        try:
            node = client.get_node_from_key(key)  # type: ignore[no-untyped-call]
        except SlotNotCoveredError:
            try:
                client.nodes_manager.initialize()
                node = client.get_node_from_key(key)  # type: ignore[no-untyped-call]
            except RedisClusterException as exc:
                raise ClusterDownError(f"no master covers the slot of {key}: {exc}") from exc
        return _node_name(node.host, node.port, 0), node
    kwargs = client.connection_pool.connection_kwargs
    host, port = kwargs.get("host"), kwargs.get("port")
    if host is None or port is None:
        return f"redis {kwargs.get('path', '?')}", None  # a Unix socket
    return _node_name(host, port, kwargs.get("db")), None


_watches: weakref.WeakKeyDictionary[Any, PolicyWatch] = weakref.WeakKeyDictionary()
_watches_lock = threading.Lock()


def attach_watch(client: Any, watch: PolicyWatch) -> None:
    """Make ``watch`` the one :func:`watch_of` returns for ``client`` (``connect`` does)."""
    with _watches_lock:
        _watches[client] = watch


def watch_of(client: Any) -> PolicyWatch:
    """The :class:`PolicyWatch` of ``client``, shared by every writer using it.

    A client that ``connect`` did not build gets one on first use, with the
    override and the period from the environment (:data:`ALLOW_UNVERIFIED_ENV`,
    :data:`EVICTION_CHECK_ENV`).

    Raises:
        ConfigurationError: one of those variables does not parse.
    """
    watch = _watches.get(client)
    if watch is not None:
        return watch
    with _watches_lock:
        watch = _watches.get(client)
        if watch is None:
            watch = PolicyWatch(allow_unverified=allow_unverified_from_env(),
                                period_s=eviction_check_from_env())
            _watches[client] = watch
        return watch


def policy_checking_connect(allow_unverified: bool, url_where: str,
                            watch: PolicyWatch | None = None) -> Callable[[Any], None]:
    """A ``redis_connect_func`` for sync clients: handshake, then the policy check.

    Args:
        allow_unverified: as ``allow_unverified_eviction_policy`` of ``connect``.
        url_where: the URL's server (:func:`server_of`), named for a connection
            without an address.
        watch: records each passed check as a fresh verdict for its node.
    """
    def on_connect(conn: Any) -> None:
        conn.on_connect()  # handshake (AUTH, SELECT) as redis-py would do it

        def execute(*args: Any) -> Any:
            conn.send_command(*args)
            return conn.read_response()

        node = _node(conn, url_where)
        asked_at = watch.now() if watch is not None else 0.0
        try:
            check_eviction_policy(execute, allow_unverified=allow_unverified, where=node)
        except EvictionPolicyError:
            if watch is not None:
                watch.forget(node)
            raise
        if watch is not None:
            watch.record(node, asked_at)

    return on_connect


def async_policy_check(url: str, *, allow_unverified: bool | None = None
                       ) -> Callable[[Any], Awaitable[None]]:
    """A ``redis_connect_func`` for ``redis.asyncio`` clients: the check of ``connect``
    on every new connection (no periodic re-check).

    Args:
        url: the client's URL (named in messages, without credentials).
        allow_unverified: as in ``connect`` (None reads :data:`ALLOW_UNVERIFIED_ENV`).
    """
    allow = allow_unverified_from_env() if allow_unverified is None else allow_unverified
    url_where = server_of(url)

    async def on_connect(conn: Any) -> None:
        await conn.on_connect()
        await conn.send_command("CONFIG", "GET", "maxmemory-policy")
        try:
            reply: Any = await conn.read_response()
        except ResponseError as exc:
            reply = exc
        judge_policy_reply(reply, allow_unverified=allow, where=_node(conn, url_where))

    return on_connect
