"""An eviction policy set on a live Redis stops writes within the check period.

``CONFIG SET maxmemory-policy allkeys-lru`` leaves open connections as they
are, so the check every new connection runs does not see it. Each write first
calls ``require_noeviction``: it reads the policy again once the node's
verdict is older than ``eviction_check_s`` and refuses the write while it is
not ``noeviction``; the first write after the policy is set back goes
through. Against real redis-server processes (one per module, reset after
each test) and the session's Redis Cluster.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator

import pytest
import redis

from svit_cluster.control import PROTOCOL, ControlRequest, ProcessController, wire
from svit_cluster.errors import ConfigurationError, UnavailableError
from svit_cluster.events import RedisEventLog
from svit_cluster.local import RedisClusterServer, RedisServer
from svit_cluster.process import Limits, Process, script_from_value
from svit_cluster.store import (
    ALLOW_UNVERIFIED_EVICTION_ENV,
    EVICTION_CHECK_ENV,
    ProcessKeys,
    RedisBackend,
    StoreConfig,
    connect,
)
from svit_cluster.store._policy import watch_of
from tests._commit_log import ConfiguredRedis, commit_write, new_log, receipt, seal_write
from tests._support import unique
from tests.conftest import running

pytestmark = pytest.mark.servers

#: The verdict period the clients of these tests use, in seconds.
PERIOD_S = 0.3


@pytest.fixture(scope="module")
def live_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("redis-live-policy"), appendfsync="no",
                         die_with_parent=True)
    with running(server):
        yield server


@pytest.fixture
def live(live_server: RedisServer, monkeypatch: pytest.MonkeyPatch
         ) -> Iterator[tuple[RedisServer, redis.Redis]]:
    """The module's server and a raw client of it; policy and memory reset afterwards."""
    monkeypatch.delenv(ALLOW_UNVERIFIED_EVICTION_ENV, raising=False)
    raw = redis.Redis.from_url(live_server.url)
    try:
        yield live_server, raw
    finally:
        raw.config_set("maxmemory-policy", "noeviction")
        raw.config_set("maxmemory", 0)
        raw.flushall()
        raw.close()


def _refused(exc: pytest.ExceptionInfo[UnavailableError], policy: str, port: int) -> None:
    fields = exc.value.fields
    assert fields["reason"] == "eviction_policy", fields
    assert fields["outcome"] == "none"
    assert fields["policy"] == policy
    assert fields["node"] == f"redis 127.0.0.1:{port}/0"
    assert policy in exc.value.message and f"127.0.0.1:{port}/0" in exc.value.message


def test_a_live_policy_change_stops_writes_within_the_period_and_set_back_resumes_them(
    live: tuple[RedisServer, redis.Redis], pid: str, config: StoreConfig,
) -> None:
    server, raw = live
    client = connect(server.url, eviction_check_s=PERIOD_S)
    backend, proc = new_log(client, pid, 1, config)
    events = RedisEventLog(client, pid, 1, prefix=config.prefix)
    commit_write(backend, proc, 1, "r1")
    events.append("s1", [({"kind": "note"}, {"text": "before"})])
    connections = int(raw.info("stats")["total_connections_received"])

    raw.config_set("maxmemory-policy", "allkeys-lru")
    time.sleep(PERIOD_S + 0.05)
    pending = seal_write(proc, 2)
    for _ in range(3):  # every attempt reads the policy again, each one refused
        with pytest.raises(UnavailableError) as commit:
            backend.commit(pending, receipt("r2"))
        _refused(commit, "allkeys-lru", server.port)
    with pytest.raises(UnavailableError) as append:
        events.append("s1", [({"kind": "note"}, {"text": "after"})])
    _refused(append, "allkeys-lru", server.port)
    with pytest.raises(UnavailableError) as claim:  # a newer owner's claim: a write too
        RedisBackend(client, pid, 2, config).claim()
    _refused(claim, "allkeys-lru", server.port)
    # Caught on the open connection: no reconnect was needed to see it.
    assert int(raw.info("stats")["total_connections_received"]) == connections
    assert raw.hget(backend.keys.head, "version") == b"1"
    assert raw.xlen(backend.keys.stream) == 1
    assert raw.get(backend.keys.fence) == b"1"

    raw.config_set("maxmemory-policy", "volatile-ttl")  # volatile-* is refused as well
    with pytest.raises(UnavailableError) as volatile:
        backend.commit(pending, receipt("r2"))
    _refused(volatile, "volatile-ttl", server.port)

    raw.config_set("maxmemory-policy", "noeviction")
    backend.commit(pending, receipt("r2"))  # the same request, at once: refusals are not cached
    proc.commit(pending)
    assert raw.hget(backend.keys.head, "version") == b"2"
    assert events.append("s1", [({"kind": "note"}, {"text": "resumed"})]) == (2, 2)
    client.close()


def test_a_stale_owner_cannot_commit_after_a_live_policy_change_evicts_its_fence(
    live: tuple[RedisServer, redis.Redis], pid: str, config: StoreConfig,
) -> None:
    """The issue's scenario: both owners' connections are open and checked; the
    policy turns evicting at run time, memory pressure evicts the fence (token
    20's claim), and the old owner (token 10) tries to commit."""
    server, raw = live
    old_client = connect(server.url, eviction_check_s=PERIOD_S)
    new_client = connect(server.url, eviction_check_s=PERIOD_S)
    old, proc = new_log(old_client, pid, 10, config)
    assert RedisBackend(new_client, pid, 20, config).claim() == 20

    raw.config_set("maxmemory-policy", "allkeys-lru")
    changed = time.monotonic()
    # The fence is the least recently used key, the filler next, the head was
    # just used (RESTORE ... IDLETIME sets the LRU ages).
    filler = raw.dump("filler") if raw.set("filler", os.urandom(4096)) else None
    assert filler is not None
    for i in range(200):
        raw.restore(f"fill:{i}", 0, filler, idletime=3600)
    dumped = raw.dump(old.keys.fence)
    assert dumped is not None
    raw.restore(old.keys.fence, 0, dumped, replace=True, idletime=7200)
    raw.config_set("maxmemory-samples", 64)
    raw.config_set("maxmemory", int(raw.info("memory")["used_memory"]) - 32 * 1024)
    for i in range(100):
        if not raw.exists(old.keys.fence):
            break
        raw.set(f"trigger:{i}", os.urandom(4096))
    raw.config_set("maxmemory", 0)
    assert not raw.exists(old.keys.fence), "the fence key was not evicted"
    assert raw.exists(old.keys.head)

    time.sleep(max(0.0, changed + PERIOD_S + 0.05 - time.monotonic()))
    with pytest.raises(UnavailableError) as stale:
        old.commit(seal_write(proc, 1), receipt("stale"))
    _refused(stale, "allkeys-lru", server.port)
    assert raw.xlen(old.keys.stream) == 0
    assert raw.hget(old.keys.head, "version") == b"0"
    old_client.close()
    new_client.close()


def test_writes_within_the_period_send_no_policy_read(
    live: tuple[RedisServer, redis.Redis], pid: str, config: StoreConfig,
) -> None:
    """The hot path: one ``CONFIG GET`` per node and period, none per commit."""
    server, raw = live
    client = connect(server.url, eviction_check_s=30.0)
    backend, proc = new_log(client, pid, 1, config)
    raw.config_resetstat()
    for n in range(1, 41):
        commit_write(backend, proc, n, f"r{n}")
    stats = raw.info("commandstats")
    assert stats["cmdstat_evalsha"]["calls"] >= 40
    assert "cmdstat_config|get" not in stats and "cmdstat_config" not in stats, stats
    client.close()


def test_an_activation_through_the_controller_is_refused_then_replayed(
    live: tuple[RedisServer, redis.Redis], pid: str, config: StoreConfig,
) -> None:
    """The process activation path: ``ProcessController`` over ``RedisBackend``."""
    server, raw = live
    client = connect(server.url, eviction_check_s=PERIOD_S)
    counter = script_from_value({"source": (
        '(define (main input) (write "/memory/count" (+ (read "/memory/count") 1)))')},
        Limits())
    backend = RedisBackend(client, pid, 1, config)
    backend.claim()
    proc = Process.create(pid, memory={"count": 0}, scripts={"counter": counter})
    backend.create(proc)
    ctrl = ProcessController(proc, backend, token=1)

    def activate(request_id: str, expected: int) -> str:
        request = ControlRequest.model_validate({
            "protocol": PROTOCOL, "client_id": "c1", "request_id": request_id,
            "process_id": pid, "expected_version": expected,
            "command": {"operation": "activate", "script": "counter", "input": wire({})}})
        return ctrl.execute(request, tenant="t").outcome.status

    assert activate("a1", 0) == "committed"
    raw.config_set("maxmemory-policy", "allkeys-random")
    time.sleep(PERIOD_S + 0.05)
    with pytest.raises(UnavailableError) as refused:
        activate("a2", 1)
    _refused(refused, "allkeys-random", server.port)
    assert raw.hget(backend.keys.head, "version") == b"1"
    raw.config_set("maxmemory-policy", "noeviction")
    assert activate("a2", 1) == "committed"  # the client's retry, same request id
    assert raw.hget(backend.keys.head, "version") == b"2"
    assert ctrl.read_versioned("/memory/count")[0] == 2
    client.close()


def test_one_cluster_master_turned_evicting_stops_the_writes_to_its_slots(
    redis_cluster_server: RedisClusterServer, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(ALLOW_UNVERIFIED_EVICTION_ENV, raising=False)
    config = StoreConfig(prefix=unique("clive"))
    pids = [f"svit://test/{unique('clive')}" for _ in range(12)]
    ports = {p: redis_cluster_server.master_of(ProcessKeys(p, config.prefix).fence).port
             for p in pids}
    on_bad = pids[0]
    bad_port = ports[on_bad]
    elsewhere = next(p for p in pids if ports[p] != bad_port)
    client = connect(redis_cluster_server.url, cluster=True, eviction_check_s=PERIOD_S)
    (bad, bad_proc), (good, good_proc) = (new_log(client, p, 1, config)
                                          for p in (on_bad, elsewhere))
    raw = redis.Redis(port=bad_port)
    raw.config_set("maxmemory-policy", "allkeys-lfu")
    try:
        time.sleep(PERIOD_S + 0.05)
        pending = seal_write(bad_proc, 1)
        with pytest.raises(UnavailableError) as refused:
            bad.commit(pending, receipt("c-bad"))
        _refused(refused, "allkeys-lfu", bad_port)
        commit_write(good, good_proc, 1, "c-good")  # another master's slots go on
        raw.config_set("maxmemory-policy", "noeviction")
        bad.commit(pending, receipt("c-bad"))
        for backend in (bad, good):
            head = backend.head()
            assert head is not None and head.version == 1
    finally:
        raw.config_set("maxmemory-policy", "noeviction")
        raw.close()
        client.close()


def test_where_config_is_disabled_the_override_keeps_writes_going_with_one_warning(
    no_config_redis: ConfiguredRedis, pid: str, config: StoreConfig,
    caplog: pytest.LogCaptureFixture,
) -> None:
    client = connect(no_config_redis.url, allow_unverified_eviction_policy=True,
                     eviction_check_s=0.05)
    with caplog.at_level(logging.WARNING):
        backend, proc = new_log(client, pid, 1, config)
        for n in range(1, 5):
            time.sleep(0.06)  # each commit finds the verdict stale and reads again
            commit_write(backend, proc, n, f"r{n}")
    head = backend.head()
    assert head is not None and head.version == 4
    periodic = [r for r in caplog.records
                if r.name == "svit_cluster.store._policy" and "maxmemory-policy" in r.getMessage()]
    # one from the connection's check, one from the first periodic read, no more
    assert 1 <= len(periodic) <= 2, [r.getMessage() for r in periodic]
    client.close()
    refusing = connect(no_config_redis.url, allow_unverified_eviction_policy=False)
    with pytest.raises(UnavailableError) as refused:
        RedisBackend(refusing, pid, 2, config).claim()
    assert refused.value.fields["reason"] == "eviction_policy"
    refusing.close()


def test_the_period_is_a_documented_setting(monkeypatch: pytest.MonkeyPatch,
                                            live: tuple[RedisServer, redis.Redis]) -> None:
    server, _ = live
    monkeypatch.delenv(EVICTION_CHECK_ENV, raising=False)
    assert watch_of(connect(server.url)).period_s == 2.0
    monkeypatch.setenv(EVICTION_CHECK_ENV, "0.5")
    assert watch_of(connect(server.url)).period_s == 0.5
    assert watch_of(connect(server.url, eviction_check_s=7)).period_s == 7.0
    for bad in ("0", "61", "soon"):
        monkeypatch.setenv(EVICTION_CHECK_ENV, bad)
        with pytest.raises(ConfigurationError, match=EVICTION_CHECK_ENV):
            connect(server.url)
    monkeypatch.delenv(EVICTION_CHECK_ENV)
    with pytest.raises(ValueError, match="period_s"):
        connect(server.url, eviction_check_s=0)
