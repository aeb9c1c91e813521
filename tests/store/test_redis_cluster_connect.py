"""The one connection factory against a real Redis Cluster (issue 20, item 1).

``connect``/``async_connect`` choose ``RedisCluster`` from ``cluster=`` or
``SVIT_REDIS_CLUSTER``; a single-node client against a cluster gets ``MOVED``.
Every connection to every cluster node checks ``maxmemory-policy``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from svit_cluster.errors import ConfigurationError, UnavailableError
from svit_cluster.local import RedisClusterServer
from svit_cluster.store import ProcessKeys, RedisBackend, StoreConfig, connect
from svit_cluster.store._redis import CLUSTER_ENV, async_connect, verify_eviction_policy
from tests.store._support import unique

pytestmark = pytest.mark.servers


def _pid_on(cluster: RedisClusterServer, port: int, prefix: str) -> str:
    """A process id whose slot's master listens on ``port``."""
    for _ in range(500):
        pid = f"svit://test/{unique('slot')}"
        if cluster.master_of(ProcessKeys(pid, prefix).fence).port == port:
            return pid
    raise AssertionError("no process id found for that master")


@pytest.fixture
def lru_master(redis_cluster_server: RedisClusterServer) -> Iterator[int]:
    """One master of the shared cluster (not the startup node of its URL, which a
    cluster client reads the slot map from) set to ``allkeys-lru`` for this test."""
    startup = int(redis_cluster_server.url.rsplit(":", 1)[1].split("/")[0])
    port = next(port for port in (
        redis_cluster_server.master_of(ProcessKeys(f"svit://t/{unique('x')}", "p").fence).port
        for _ in range(500)) if port != startup)
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
