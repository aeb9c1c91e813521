"""Redis refusing a command (OOM, READONLY, BUSY, LOADING...) is ``unavailable``, never
``corrupt_log``: nothing was written, and the same request commits
once Redis recovers. Against real redis-server processes."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from starlette.testclient import TestClient

from svit_cluster.control import ProcessController
from svit_cluster.errors import ErrorCode, UnavailableError
from svit_cluster.gateway import Principal, TokenStore, create_app
from svit_cluster.inprocess import InProcessRouter
from svit_cluster.local import RedisServer
from svit_cluster.process import Process, encode_value
from svit_cluster.store import RedisBackend, StoreConfig, connect
from svit_cluster.store._redis import REFUSALS, failure_reason, refusal_reason
from tests._commit_log import new_log, receipt, seal_write
from tests._support import unique

COUNTER = """(define (main input)
  (let ((count (+ (read "/memory/count") (value-get input "/by"))))
    (do (write "/memory/count" count) (value-map "count" count))))"""
TOKEN = "acme-token-0123456789"


@contextlib.contextmanager
def memory_full(client: redis.Redis, max_keys: int = 10_000) -> Iterator[None]:
    """Set ``maxmemory`` just above current use (``noeviction``), fill it, then free it."""
    used = int(client.info("memory")["used_memory"])
    client.config_set("maxmemory-policy", "noeviction")
    client.config_set("maxmemory", used + 256 * 1024)
    filled = 0
    try:
        with pytest.raises(redis.exceptions.OutOfMemoryError):
            for _ in range(max_keys):
                client.set(f"fill:{filled}", b"x" * 16384)
                filled += 1
        # A large SET is refused while its own query buffer still counts, at the
        # very edge; lower the limit below what is now stored so that every
        # write is refused however memory use wobbles.
        client.config_set("maxmemory", int(client.info("memory")["used_memory"]) - 65536)
        with pytest.raises(redis.exceptions.OutOfMemoryError):
            client.set("fill:probe", b"x")
        yield
    finally:
        client.delete(*[f"fill:{i}" for i in range(filled + 1)])
        client.config_set("maxmemory", 0)


def test_commit_under_oom_is_unavailable_and_the_same_request_commits_later(
    fresh_redis: RedisServer, pid: str, config: StoreConfig
) -> None:
    client = connect(fresh_redis.url)
    backend, proc = new_log(client, pid, 3, config)
    pending = seal_write(proc, 1)
    with memory_full(client):
        with pytest.raises(UnavailableError) as info:
            backend.commit(pending, receipt("r1"), [{"id": "i1"}])
        assert info.value.code is ErrorCode.UNAVAILABLE
        assert info.value.fields["reason"] == "oom"
        assert info.value.fields["outcome"] == "none"
        head = backend.head()
        assert head is not None and head.version == 0  # nothing was written
        assert client.xlen(backend.keys.stream) == 0
        assert backend.get_receipt("tenant-a", "c1", "r1") is None
        assert client.exists(backend.keys.outbox, backend.keys.signals) == 0
    backend.commit(pending, receipt("r1"), [{"id": "i1"}])  # memory freed: the retry commits
    head = backend.head()
    assert head is not None and head.version == 1
    assert backend.get_receipt("tenant-a", "c1", "r1") == receipt("r1")
    client.close()


def test_gateway_answers_503_under_oom_and_the_retry_commits(
    fresh_redis: RedisServer, config: StoreConfig
) -> None:
    """Through the gateway: 503 ``unavailable`` (the SDK retries it), not 500 ``corrupt_log``."""
    client = connect(fresh_redis.url)
    pid2 = f"svit://acme/{unique('gw')}"  # the token's tenant is acme
    backend = RedisBackend(client, pid2, 3, config)
    backend.claim()
    proc = Process.create(pid2, memory={"count": 0}, scripts={"counter": COUNTER})
    backend.create(proc)
    router = InProcessRouter()
    router._controllers[pid2] = ProcessController(proc, backend)
    tokens = TokenStore()
    tokens.add(TOKEN, Principal(tenant="acme"))
    http = TestClient(create_app(router, tokens, max_request_bytes=65536))
    doc = {"protocol": "svit-control@1", "client_id": "c", "request_id": "r1",
           "process_id": pid2, "expected_version": 0,
           "command": {"operation": "activate", "script": "counter",
                       "input": encode_value({"by": 2})}}
    headers = {"Authorization": f"Bearer {TOKEN}"}
    with memory_full(client):
        resp = http.post("/v1/control", json=doc, headers=headers)
        assert resp.status_code == 503, resp.text
        assert resp.json()["error"]["code"] == "unavailable"
    resp = http.post("/v1/control", json=doc, headers=headers)  # same request id
    assert resp.status_code == 200, resp.text
    assert resp.json()["outcome"]["status"] == "committed"
    head = backend.head()
    assert head is not None and head.version == 1
    client.close()


@pytest.fixture
def replica(fresh_redis: RedisServer, tmp_path: Path) -> Iterator[RedisServer]:
    """A second redis-server replicating ``fresh_redis`` (link up).

    The master starts the full sync at once (``repl-diskless-sync-delay 0``; the
    default waits 5 s for more replicas), and the replica is SIGKILLed at the end:
    on SIGTERM right after its sync it waits for its AOF rewrite, about 10 s, and
    nothing reads its data afterwards."""
    master = redis.Redis.from_url(fresh_redis.url)
    master.config_set("repl-diskless-sync-delay", 0)
    master.close()
    server = RedisServer(tmp_path / "redis-replica", die_with_parent=True)
    server.start()
    try:
        raw = redis.Redis.from_url(server.url)
        raw.replicaof("127.0.0.1", fresh_redis.port)
        deadline = time.monotonic() + 10
        while raw.info("replication").get("master_link_status") != "up":
            assert time.monotonic() < deadline, "replica did not sync"
            time.sleep(0.05)
        raw.close()
        yield server
    finally:
        server.kill9()


def test_commit_against_a_replica_is_unavailable_readonly(
    fresh_redis: RedisServer, replica: RedisServer, pid: str, config: StoreConfig
) -> None:
    """A client left on a demoted master (now a replica): the script's first write is
    refused with READONLY, which must not read as a corrupt log."""
    primary = connect(fresh_redis.url)
    backend, proc = new_log(primary, pid, 3, config)
    deadline = time.monotonic() + 10
    on_replica = connect(replica.url)
    while on_replica.hget(backend.keys.head, "version") is None:
        assert time.monotonic() < deadline, "head did not replicate"
        time.sleep(0.05)
    stale = RedisBackend(on_replica, pid, 3, config)
    with pytest.raises(UnavailableError) as info:
        stale.commit(seal_write(proc, 1), receipt("r1"))
    assert info.value.fields["reason"] == "readonly"
    assert info.value.fields["outcome"] == "none"
    with pytest.raises(UnavailableError) as claim_info:
        RedisBackend(on_replica, pid, 4, config).claim()
    assert claim_info.value.fields["reason"] == "readonly"
    head = backend.head()
    assert head is not None and head.version == 0
    primary.close()
    on_replica.close()


def test_commit_while_a_script_is_busy_is_unavailable_busy(
    fresh_redis: RedisServer, pid: str, config: StoreConfig
) -> None:
    client = connect(fresh_redis.url)
    backend, proc = new_log(client, pid, 3, config)
    client.config_set("busy-reply-threshold", 50)  # ms (lua-time-limit before 7.0)
    hog = redis.Redis.from_url(fresh_redis.url, socket_timeout=30)
    outcome: list[Any] = []

    def spin() -> None:
        try:
            hog.eval("while true do end", 0)
        except redis.RedisError as exc:  # killed by SCRIPT KILL
            outcome.append(exc)

    thread = threading.Thread(target=spin, daemon=True)
    thread.start()
    admin = redis.Redis.from_url(fresh_redis.url, socket_timeout=5)
    try:
        deadline = time.monotonic() + 10
        while True:  # wait until the server is inside the script past the threshold
            try:
                admin.ping()
            except redis.exceptions.ResponseError as exc:
                assert str(exc).startswith("BUSY")
                break
            assert time.monotonic() < deadline, "the spinning script never ran"
            time.sleep(0.02)
        with pytest.raises(UnavailableError) as info:
            backend.commit(seal_write(proc, 1), receipt("r1"))
        assert info.value.fields["reason"] == "busy"
    finally:
        admin.script_kill()
        thread.join(10)
        admin.close()
        hog.close()
    assert outcome, "the spinning script was not killed"
    head = backend.head()
    assert head is not None and head.version == 0
    backend.commit(seal_write(proc, 1), receipt("r1"))
    client.close()


@pytest.mark.parametrize(("exc", "reason"), [
    (redis.exceptions.OutOfMemoryError("command not allowed"), "oom"),
    (redis.exceptions.BusyLoadingError("Redis is loading the dataset in memory"), "loading"),
    (redis.exceptions.ReadOnlyError("You can't write against a read only replica."),
     "readonly"),
    (redis.exceptions.MasterDownError("Link with MASTER is down"), "masterdown"),
    (redis.exceptions.TryAgainError("Multiple keys request during rehashing"), "tryagain"),
    (redis.exceptions.ClusterDownError("The cluster is down"), "clusterdown"),
    (redis.exceptions.ResponseError("BUSY Redis is busy running a script."), "busy"),
    (redis.exceptions.ResponseError("MISCONF Redis is configured to save RDB snapshots"),
     "misconf"),
    (redis.exceptions.ResponseError("NOREPLICAS Not enough good replicas to write."),
     "noreplicas"),
    (redis.exceptions.TimeoutError("Timeout reading from socket"), "timeout"),
    (redis.exceptions.ConnectionError("Connection refused"), "connection"),
    (redis.exceptions.ResponseError("ERR something else"), "error"),
])
def test_failure_reason_names_each_refusal(exc: Exception, reason: str) -> None:
    assert failure_reason(exc) == reason


def test_refusal_reason_reads_raw_error_replies() -> None:
    """What a ``redis.pcall`` inside a script sees (the prefix is kept)."""
    for prefix, reason in REFUSALS.items():
        assert refusal_reason(f"{prefix} some text") == reason
        assert refusal_reason(f"-{prefix} some text") == reason
    assert refusal_reason("ERR The ID specified in XADD is equal or smaller") is None
    assert refusal_reason("WRONGTYPE Operation against a key") is None
    assert refusal_reason("") is None
