"""The one connection factory against a real Redis Cluster.

``connect``/``async_connect`` choose ``RedisCluster`` from ``cluster=`` or
``SVIT_REDIS_CLUSTER``; a single-node client against a cluster gets ``MOVED``.
Every connection to every cluster node checks ``maxmemory-policy``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from svit_cluster.errors import ConfigurationError, UnavailableError
from svit_cluster.local import RedisClusterServer, free_port
from svit_cluster.store import ProcessKeys, RedisBackend, StoreConfig, connect
from svit_cluster.store._redis import (
    CLUSTER_ENV,
    EvictionPolicyError,
    async_connect,
    verify_eviction_policy,
)
from tests._support import unique

pytestmark = pytest.mark.servers


def _pid_on(cluster: RedisClusterServer, port: int, prefix: str) -> str:
    """A process id whose slot's master listens on ``port``."""
    for _ in range(500):
        pid = f"svit://test/{unique('slot')}"
        if cluster.master_of(ProcessKeys(pid, prefix).fence).port == port:
            return pid
    raise AssertionError("no process id found for that master")


def _startup_port(url: str) -> int:
    return int(url.rsplit(":", 1)[1].split("/")[0])


def _ports_read_at_construction(url: str) -> set[int]:
    """The nodes a cluster client talks to while it is built: the startup node
    of ``url`` (the slot map) and redis-py's default node, the first master of
    that map (the ``COMMAND`` table). Which master is first changes when a
    failover moves slot 0, so it is asked, not assumed."""
    plain = redis.RedisCluster.from_url(url)
    try:
        default = plain.get_default_node().port
    finally:
        plain.close()
    return {_startup_port(url), int(default)}


@pytest.fixture
def lru_master(redis_cluster_server: RedisClusterServer) -> Iterator[int]:
    """One master of the shared cluster that a client does not read while it is
    built (:func:`_ports_read_at_construction`), set to ``allkeys-lru`` for
    this test."""
    read_at_construction = _ports_read_at_construction(redis_cluster_server.url)
    port = next(port for port in (
        redis_cluster_server.master_of(ProcessKeys(f"svit://t/{unique('x')}", "p").fence).port
        for _ in range(500)) if port not in read_at_construction)
    raw = redis.Redis(port=port)
    raw.config_set("maxmemory-policy", "allkeys-lru")
    try:
        yield port
    finally:
        raw.config_set("maxmemory-policy", "noeviction")
        raw.close()


def test_the_factory_chooses_the_cluster_client(redis_cluster_server: RedisClusterServer,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    config = StoreConfig(prefix=unique("f"))
    pids = [f"svit://test/{unique('f')}" for _ in range(12)]  # spread over all masters
    monkeypatch.delenv(CLUSTER_ENV, raising=False)
    single = connect(redis_cluster_server.url)
    moved = []
    for pid in pids:
        try:
            RedisBackend(single, pid, 1, config).claim()
        except UnavailableError as exc:
            moved.append(exc)
    assert moved and all("MOVED" in str(e.__cause__) or "Moved" in type(e.__cause__).__name__
                         for e in moved)
    monkeypatch.setenv(CLUSTER_ENV, "true")
    clustered = connect(redis_cluster_server.url)
    assert all(RedisBackend(clustered, pid, 1, config).claim() == 1 for pid in pids)
    single.close()
    clustered.close()


def test_every_cluster_node_connection_checks_the_eviction_policy(
    redis_cluster_server: RedisClusterServer, lru_master: int,
) -> None:
    config = StoreConfig(prefix=unique("lru"))
    bad = _pid_on(redis_cluster_server, lru_master, config.prefix)
    good = next(p for p in (f"svit://test/{unique('ok')}" for _ in range(500))
                if redis_cluster_server.master_of(ProcessKeys(p, config.prefix).fence).port
                != lru_master)
    client = connect(redis_cluster_server.url, cluster=True)
    assert RedisBackend(client, good, 1, config).claim() == 1
    with pytest.raises(UnavailableError) as refused:
        RedisBackend(client, bad, 1, config).claim()
    assert refused.value.fields["reason"] == "eviction_policy"
    assert f":{lru_master}/" in str(refused.value)  # the node that refused, not the URL's
    client.close()
    with pytest.raises(ConfigurationError, match="allkeys-lru"):
        verify_eviction_policy(redis_cluster_server.url, cluster=True)


async def test_async_cluster_client_checks_every_node(
    redis_cluster_server: RedisClusterServer, lru_master: int,
) -> None:
    prefix = unique("alru")
    bad = ProcessKeys(_pid_on(redis_cluster_server, lru_master, prefix), prefix).fence
    client = async_connect(redis_cluster_server.url, cluster=True)
    try:
        with pytest.raises(redis.RedisError, match="allkeys-lru"):
            await client.get(bad)
    finally:
        await client.aclose()


def test_a_node_read_while_the_client_is_built_refuses_by_name(
    redis_cluster_server: RedisClusterServer,
) -> None:
    """The startup node refuses: ``connect`` raises ``EvictionPolicyError`` naming
    it, not redis-py's "cannot be connected ... provide at least one reachable
    node" (it was reachable)."""
    url = redis_cluster_server.url
    startup = _startup_port(url)
    raw = redis.Redis(port=startup)
    raw.config_set("maxmemory-policy", "volatile-lru")
    try:
        with pytest.raises(EvictionPolicyError, match=f":{startup}/0: maxmemory-policy is "
                                                      "volatile-lru") as refused:
            connect(url, cluster=True)
        assert refused.value.policy == "volatile-lru"
    finally:
        raw.config_set("maxmemory-policy", "noeviction")
        raw.close()


def test_verify_reports_an_unreachable_cluster_as_unavailable() -> None:
    with pytest.raises(UnavailableError, match="unreachable"):
        verify_eviction_policy(f"redis://127.0.0.1:{free_port()}/0", cluster=True,
                               timeout_s=1.0)
