"""An evicting Redis is refused.

Under any ``maxmemory-policy`` but ``noeviction`` Redis may delete a process's
fence key while keeping its head, and a stale owner then commits after a newer
claim. svit refuses such a Redis at start-up (:func:`verify_eviction_policy`) and
on every new connection (:func:`connect`); where ``CONFIG`` is disabled, only an
explicit override lets it start (with a warning). Against real redis-server.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from svit_cluster.cluster._config import ClusterConfig
from svit_cluster.errors import ConfigurationError, UnavailableError
from svit_cluster.local import RedisServer
from svit_cluster.process import Process
from svit_cluster.store import (
    ALLOW_UNVERIFIED_EVICTION_ENV,
    RedisBackend,
    StoreConfig,
    connect,
    verify_eviction_policy,
)
from tests._commit_log import ConfiguredRedis, receipt, seal_write
from tests.conftest import running


@pytest.fixture
def lru_redis(tmp_path: Path) -> Iterator[ConfiguredRedis]:
    server = ConfiguredRedis(tmp_path / "redis-lru", ["--maxmemory-policy", "allkeys-lru"])
    with running(server):
        yield server


@pytest.fixture(autouse=True)
def no_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ALLOW_UNVERIFIED_EVICTION_ENV, raising=False)


def test_startup_refuses_an_evicting_policy(lru_redis: ConfiguredRedis, pid: str,
                                            config: StoreConfig) -> None:
    with pytest.raises(ConfigurationError) as info:
        verify_eviction_policy(lru_redis.url)
    message = str(info.value)
    assert "maxmemory-policy" in message and "allkeys-lru" in message
    assert "noeviction" in message
    assert info.value.fields == {"setting": "maxmemory-policy", "value": "allkeys-lru"}
    # The data path refuses too, before anything is written.
    client = connect(lru_redis.url)
    with pytest.raises(UnavailableError) as refused:
        RedisBackend(client, pid, 1, config).claim()
    assert refused.value.fields["reason"] == "eviction_policy"
    assert "allkeys-lru" in refused.value.message
    raw = redis.Redis.from_url(lru_redis.url)
    assert raw.keys("*") == []
    # Every evicting policy is refused, volatile-* included; noeviction is accepted.
    for policy in ("allkeys-lfu", "allkeys-random", "volatile-lru", "volatile-lfu",
                   "volatile-random", "volatile-ttl"):
        raw.config_set("maxmemory-policy", policy)
        with pytest.raises(ConfigurationError, match=policy):
            verify_eviction_policy(lru_redis.url)
    raw.config_set("maxmemory-policy", "noeviction")
    assert verify_eviction_policy(lru_redis.url) == "noeviction"
    RedisBackend(connect(lru_redis.url), pid, 1, config).claim()
    raw.close()
    client.close()


def test_the_policy_is_checked_again_after_a_reconnect(
    fresh_redis: RedisServer, pid: str, config: StoreConfig
) -> None:
    client = connect(fresh_redis.url)
    backend = RedisBackend(client, pid, 1, config)
    backend.claim()
    proc = Process.create(pid, memory={"count": 0})
    backend.create(proc)
    raw = redis.Redis.from_url(fresh_redis.url)
    raw.config_set("maxmemory-policy", "volatile-lru")
    # The pooled connection predates the change; once the server drops it, the
    # reconnect must read the policy again and refuse.
    raw.client_kill_filter(_type="normal", skipme=True)
    with pytest.raises(UnavailableError) as info:
        backend.commit(seal_write(proc, 1), receipt("r1"))
    assert info.value.fields["reason"] == "eviction_policy"
    assert "volatile-lru" in info.value.message
    assert raw.hget(backend.keys.head, "version") == b"0"
    raw.config_set("maxmemory-policy", "noeviction")
    backend.commit(seal_write(proc, 1), receipt("r1"))  # the same request, now accepted
    assert raw.hget(backend.keys.head, "version") == b"1"
    raw.close()
    client.close()


def test_a_redis_without_config_needs_the_override(
    no_config_redis: ConfiguredRedis, pid: str, config: StoreConfig,
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    raw = redis.Redis.from_url(no_config_redis.url)
    with pytest.raises(redis.exceptions.ResponseError):
        raw.config_get("maxmemory-policy")  # the server really has no CONFIG
    with pytest.raises(ConfigurationError) as info:
        verify_eviction_policy(no_config_redis.url)
    assert ALLOW_UNVERIFIED_EVICTION_ENV in str(info.value)
    assert "maxmemory-policy" in str(info.value)
    with pytest.raises(UnavailableError) as refused:
        RedisBackend(connect(no_config_redis.url), pid, 1, config).claim()
    assert refused.value.fields["reason"] == "eviction_policy"
    assert raw.keys("*") == []
    # The explicit override: an argument, or the environment variable.
    with caplog.at_level(logging.WARNING, logger="svit_cluster.store._redis"):
        assert verify_eviction_policy(no_config_redis.url, allow_unverified=True) is None
        backend = RedisBackend(connect(no_config_redis.url,
                                       allow_unverified_eviction_policy=True), pid, 1, config)
        assert backend.claim() == 1
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings and all("maxmemory-policy" in r.getMessage() for r in warnings)
    monkeypatch.setenv(ALLOW_UNVERIFIED_EVICTION_ENV, "true")
    assert verify_eviction_policy(no_config_redis.url) is None
    assert RedisBackend(connect(no_config_redis.url), pid, 2, config).claim() == 2
    assert ClusterConfig.from_env().redis_allow_unverified_eviction_policy is True
    monkeypatch.setenv(ALLOW_UNVERIFIED_EVICTION_ENV, "false")
    assert ClusterConfig.from_env().redis_allow_unverified_eviction_policy is False
    with pytest.raises(ConfigurationError):
        verify_eviction_policy(no_config_redis.url)
    raw.close()


def test_a_stale_owner_cannot_commit_after_its_fence_is_evicted(
    lru_redis: ConfiguredRedis, pid: str, config: StoreConfig
) -> None:
    """The original scenario: under allkeys-lru, filling memory evicts the fence key
    (but not the recently used head); the old owner (token 10) then commits after a
    new owner claimed with token 20. Now nobody gets to write to such a Redis."""
    raw = redis.Redis.from_url(lru_redis.url)
    old = RedisBackend(connect(lru_redis.url), pid, 10, config)
    new = RedisBackend(connect(lru_redis.url), pid, 20, config)
    proc = Process.create(pid, memory={"count": 0})
    refusals: list[UnavailableError] = []
    try:
        old.claim()
        old.create(proc)
        assert new.claim() == 20
    except UnavailableError as exc:
        refusals.append(exc)
    # Memory fills up with other data; the fence is the least recently used key
    # (as after a quiet hour), the other data next, the head was just used. LRU
    # clocks tick once a second, so RESTORE ... IDLETIME sets the ages.
    filler = raw.dump("filler") if raw.set("filler", os.urandom(4096)) else None
    assert filler is not None
    for i in range(200):
        raw.restore(f"fill:{i}", 0, filler, idletime=3600)
    dumped = raw.dump(old.keys.fence)
    if dumped is not None:
        raw.restore(old.keys.fence, 0, dumped, replace=True, idletime=7200)
    raw.config_set("maxmemory-samples", 64)  # LRU close to exact
    raw.config_set("maxmemory", int(raw.info("memory")["used_memory"]) - 32 * 1024)
    for i in range(100):  # each write evicts the oldest keys it samples
        if not raw.exists(old.keys.fence):
            break
        raw.set(f"trigger:{i}", os.urandom(4096))
    raw.config_set("maxmemory", 0)
    evicted = int(raw.info("stats")["evicted_keys"])
    assert evicted > 0
    stale_commit_landed = False
    try:
        old.commit(seal_write(proc, 1), receipt("stale"))
        stale_commit_landed = True
    except UnavailableError as exc:
        refusals.append(exc)
    assert not stale_commit_landed, (
        f"the old owner (token 10) committed after token 20 claimed; head now "
        f"{raw.hgetall(old.keys.head)}, fence {raw.get(old.keys.fence)}")
    assert refusals and all(r.fields["reason"] == "eviction_policy" for r in refusals)
    assert raw.xlen(old.keys.stream) == 0
    raw.close()


async def test_the_dispatcher_client_refuses_an_evicting_redis(
    lru_redis: ConfiguredRedis, fresh_redis: RedisServer
) -> None:
    """The dispatcher's stream leases carry a TTL: volatile-* and allkeys-* could
    evict one early and let two workers read one stream."""
    from svit_cluster.dispatch._redisutil import async_client, boundary

    client = async_client(lru_redis.url)
    with pytest.raises(UnavailableError) as info:
        with boundary("lease.claim", outcome="unknown"):
            await client.set("svit:dispatch:lease", "w1", px=1000)
    assert info.value.fields["reason"] == "eviction_policy"
    assert "allkeys-lru" in info.value.message
    await client.aclose()
    ok = async_client(fresh_redis.url)
    assert await ok.set("svit:dispatch:lease", "w1", px=1000)
    await ok.aclose()
    raw = redis.Redis.from_url(lru_redis.url)
    assert raw.keys("*") == []
    raw.close()


async def test_a_host_agent_refuses_to_join_over_an_evicting_redis(
    lru_redis: ConfiguredRedis, caplog: pytest.LogCaptureFixture
) -> None:
    """The start-up check of the host agent (called as a plain object, no Ray):
    it refuses before it grants a lease or registers the host in etcd."""
    from svit_cluster.cluster._agent import HostAgent

    config = ClusterConfig(redis_url=lru_redis.url, etcd_endpoint="127.0.0.1:9")
    agent = HostAgent(config, "h1")
    with pytest.raises(ConfigurationError) as info:
        await agent.start()
    assert "maxmemory-policy is allkeys-lru" in str(info.value)
    assert agent.lease is None
    # Redis unreachable at start: only a warning (each connection checks again).
    down = HostAgent(ClusterConfig(redis_url="redis://127.0.0.1:9/0"), "h2")
    with caplog.at_level(logging.WARNING, logger="svit_cluster.cluster._agent"):
        down._check_redis()
    assert any("eviction policy" in r.getMessage() for r in caplog.records)
