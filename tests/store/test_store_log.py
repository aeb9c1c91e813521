"""The fenced commit log on a real redis-server: commit, receipts, claim, errors."""

from __future__ import annotations

import threading

import pytest
import redis

from svit_cluster.errors import (
    ConfigurationError,
    ConflictError,
    CorruptData,
    ErrorCode,
    FencedError,
    InvalidInput,
    NotFound,
    UnavailableError,
)
from svit_cluster.local import RedisServer
from svit_cluster.process import GENESIS_HASH, Process
from svit_cluster.store import ProcessKeys, RedisBackend, StoreConfig, connect
from tests._commit_log import commit_write, new_log, receipt, seal_write

pytestmark = pytest.mark.servers


def test_commit_stores_record_receipt_intents_and_head_together(
    rclient: redis.Redis, pid: str, config: StoreConfig
) -> None:
    backend, proc = new_log(rclient, pid, 7, config)
    t = seal_write(proc, 1)
    intents = [{"id": f"{pid}:1:0", "to": "svit://test/other", "body": {"n": 1}}]
    backend.commit(t, receipt("r1"), intents)
    proc.commit(t)
    keys = backend.keys
    [(eid, fields)] = rclient.xrange(keys.stream)
    assert eid == b"1-0"
    assert fields == {b"record": t.record.encode(), b"token": b"7", b"version": b"1",
                      b"request": b"tenant-a\x00c1\x00r1"}
    head = backend.head()
    assert head is not None
    assert (head.version, head.chain_head, head.root_hash, head.position, head.token) == (
        1, t.record.event_hash, proc.root_hash, 1, 7)
    assert backend.get_receipt("tenant-a", "c1", "r1") == receipt("r1")
    assert backend.get_receipt("tenant-b", "c1", "r1") is None  # partitioned by tenant
    [(_, outbox)] = rclient.xrange(keys.outbox)
    assert outbox[b"version"] == b"1" and b'"to":"svit://test/other"' in outbox[b"intent"]


def test_keys_share_one_hash_tag_and_reject_braces(pid: str) -> None:
    keys = ProcessKeys(pid)
    assert all(k.startswith(f"svit:{{{pid}}}:") for k in keys.all())
    assert keys.receipts_order == f"svit:{{{pid}}}:receipts:order"
    for bad in ("svit://a/{x}", "svit://a/}", "http://x"):
        with pytest.raises(InvalidInput) as info:
            ProcessKeys(bad)
        assert info.value.code is ErrorCode.INVALID_PROCESS_ID


def test_config_is_validated() -> None:
    for kwargs in ({"max_receipts": 0}, {"max_receipts": 4097}, {"snapshot_every": 0},
                   {"trim_margin": -1}):
        with pytest.raises(ConfigurationError):
            StoreConfig(**kwargs)  # type: ignore[arg-type]


def test_conflict_and_missing_process_store_nothing(
    rclient: redis.Redis, pid: str, config: StoreConfig
) -> None:
    backend = RedisBackend(rclient, pid, 3, config)
    proc = Process.create(pid)
    with pytest.raises(NotFound):
        backend.commit(seal_write(proc, 1))
    backend.create(proc)
    with pytest.raises(ConflictError):
        backend.create(proc)
    stale = seal_write(proc, 1)
    commit_write(backend, proc, 2)
    with pytest.raises(ConflictError) as info:
        backend.commit(stale, receipt("lost"))
    assert info.value.fields["actual_version"] == 1
    assert info.value.fields["expected_version"] == 0
    assert backend.get_receipt("tenant-a", "c1", "lost") is None
    assert rclient.xlen(backend.keys.stream) == 1


def test_never_half_written_when_the_stream_refuses(
    rclient: redis.Redis, pid: str, config: StoreConfig
) -> None:
    backend, proc = new_log(rclient, pid, 3, config)
    rclient.xadd(backend.keys.stream, {"record": b"x", "token": b"3", "version": b"5"},
                 id="5-0")  # planted: the stream is ahead of the head
    with pytest.raises(CorruptData) as info:
        backend.commit(seal_write(proc, 1), receipt("r"), [{"id": "i"}])
    assert info.value.code is ErrorCode.CORRUPT_LOG and pid in info.value.message
    head = backend.head()
    assert head is not None and head.version == 0 and head.chain_head == GENESIS_HASH
    assert backend.get_receipt("tenant-a", "c1", "r") is None
    assert rclient.exists(backend.keys.outbox) == 0


def test_receipts_are_bounded_fifo(rclient: redis.Redis, pid: str) -> None:
    config = StoreConfig(prefix="fifo", max_receipts=3)
    backend, proc = new_log(rclient, pid, 1, config)
    for i in range(5):
        commit_write(backend, proc, i, request_id=f"r{i}")
    assert [backend.get_receipt("tenant-a", "c1", f"r{i}") is not None for i in range(5)] == [
        False, False, True, True, True]
    assert rclient.hlen(backend.keys.receipts) == 3
    assert rclient.llen(backend.keys.receipts_order) == 3
    backend.put_receipt(receipt("conflict-1"), version=5)
    assert backend.get_receipt("tenant-a", "c1", "r2") is None
    assert backend.get_receipt("tenant-a", "c1", "conflict-1") == receipt("conflict-1")


def test_claim_is_an_atomic_max_and_fences_lower_tokens(
    rclient: redis.Redis, pid: str, config: StoreConfig
) -> None:
    old, proc = new_log(rclient, pid, 10, config)
    new = RedisBackend(rclient, pid, 11, config)
    assert new.claim() == 11
    with pytest.raises(FencedError) as info:
        old.claim()
    assert info.value.fields == {"token": 10, "fence": 11, "process_id": pid}
    for call in (lambda: old.commit(seal_write(proc, 1)),
                 lambda: old.put_receipt(receipt("x"), version=0),
                 lambda: old.snapshot(proc)):
        with pytest.raises(FencedError) as info:
            call()
        assert (info.value.fields["token"], info.value.fields["fence"]) == (10, 11)
    assert rclient.xlen(old.keys.stream) == 0 and old.fence() == 11


def test_claims_racing_each_other_leave_the_highest_token(
    rclient: redis.Redis, pid: str, config: StoreConfig
) -> None:
    tokens = list(range(1, 41))
    barrier = threading.Barrier(len(tokens))
    results: dict[int, int | FencedError] = {}

    def claim(token: int) -> None:
        backend = RedisBackend(rclient, pid, token, config)
        barrier.wait()
        try:
            results[token] = backend.claim()
        except FencedError as exc:
            results[token] = exc

    threads = [threading.Thread(target=claim, args=(t,)) for t in tokens]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert results[40] == 40
    for token, result in results.items():
        if isinstance(result, FencedError):
            assert result.fields["fence"] > token
    assert RedisBackend(rclient, pid, 1, config).fence() == 40


def test_commit_raises_the_fence_so_tokens_never_go_back(
    rclient: redis.Redis, pid: str, config: StoreConfig
) -> None:
    low, proc = new_log(rclient, pid, 5, config)
    high = RedisBackend(rclient, pid, 9, config)  # commits without claiming first
    commit_write(high, proc, 1)
    assert high.fence() == 9
    with pytest.raises(FencedError):
        low.commit(seal_write(proc, 2))


def test_noscript_after_script_flush_is_handled(
    rclient: redis.Redis, pid: str, config: StoreConfig
) -> None:
    backend, proc = new_log(rclient, pid, 1, config)
    commit_write(backend, proc, 1)
    rclient.script_flush()
    commit_write(backend, proc, 2)
    assert backend.head() is not None and backend.restore() is not None


def test_noscript_after_redis_restart_is_handled(fresh_redis: RedisServer, pid: str,
                                                 config: StoreConfig) -> None:
    client = connect(fresh_redis.url)
    backend, proc = new_log(client, pid, 1, config)
    commit_write(backend, proc, 1)
    fresh_redis.restart()
    assert client.script_exists(backend._scripts.commit.sha) == [False]
    commit_write(backend, proc, 2)  # EVALSHA -> NOSCRIPT -> SCRIPT LOAD -> EVALSHA
    restored = RedisBackend(client, pid, 1, config).restore()
    assert restored is not None and restored.version == 2
    client.close()


def test_redis_down_is_unavailable_with_cause(fresh_redis: RedisServer, pid: str,
                                              config: StoreConfig) -> None:
    client = connect(fresh_redis.url, timeout_s=1)
    backend, proc = new_log(client, pid, 1, config)
    pending = seal_write(proc, 1)
    fresh_redis.stop()
    with pytest.raises(UnavailableError) as info:
        backend.commit(pending, receipt("r1"))
    assert info.value.code is ErrorCode.UNAVAILABLE
    assert info.value.fields["outcome"] == "unknown"
    assert isinstance(info.value.__cause__, redis.exceptions.ConnectionError)
    for call in (backend.restore, backend.claim, backend.head,
                 lambda: backend.get_receipt("tenant-a", "c1", "r1")):
        with pytest.raises(UnavailableError):
            call()
    fresh_redis.start()
    backend.commit(pending, receipt("r1"))  # the retry commits exactly once
    proc.commit(pending)
    with pytest.raises(ConflictError):
        backend.commit(pending, receipt("r1"))
    assert client.xlen(backend.keys.stream) == 1
    client.close()


def test_guard_refuses_before_anything_is_sent(
    rclient: redis.Redis, pid: str, config: StoreConfig
) -> None:
    base, proc = new_log(rclient, pid, 1, config)

    def refuse() -> None:
        raise UnavailableError("lease suspended", lease_state="suspended")

    guarded = RedisBackend(rclient, pid, 1, config, guard=refuse)
    with pytest.raises(UnavailableError):
        guarded.commit(seal_write(proc, 1))
    assert rclient.xlen(base.keys.stream) == 0
    assert guarded.restore() is not None  # reads are not guarded


def test_entries_name_their_request_and_find_request_answers_within_the_tail(
    rclient: redis.Redis, pid: str, config: StoreConfig
) -> None:
    """Each entry names its committing request while retained."""
    from svit_cluster.control import RequestStatus

    backend, proc = new_log(rclient, pid, 3, config)  # snapshot_every=8, trim_margin=2
    commit_write(backend, proc, 1, "r1")
    commit_write(backend, proc, 2)  # a host operation names no request
    assert [e.request for e in backend.entries()] == [b"tenant-a\x00c1\x00r1", b""]
    assert backend.find_request("tenant-a", "c1", "r1") == RequestStatus(True, 1, 1)
    assert backend.find_request("tenant-b", "c1", "r1") == RequestStatus(False, None, 1)
    assert backend.find_request("tenant-a", "c1", "r2") == RequestStatus(False, None, 1)
    for v in range(3, 11):
        commit_write(backend, proc, v, f"r{v}")
    # The snapshot at version 8 trimmed the stream below 8 - 2 + 1 = 7.
    assert backend.find_request("tenant-a", "c1", "r1") == RequestStatus(False, None, 7)
    assert backend.find_request("tenant-a", "c1", "r9") == RequestStatus(True, 9, 7)


def test_entries_without_the_request_field_stay_readable_and_count_as_unknown(
    rclient: redis.Redis, pid: str, config: StoreConfig
) -> None:
    """Entries written before entries named their request (553f5d4) restore as
    before; find_request reports them as not retained."""
    from svit_cluster.control import RequestStatus
    from svit_cluster.store._scripts import COMMIT

    legacy_source = COMMIT.replace(", 'request', ARGV[8])", ")")
    assert legacy_source != COMMIT
    backend, proc = new_log(rclient, pid, 3, config)
    new_script = backend._scripts.commit
    backend._scripts.commit = rclient.register_script(legacy_source)
    commit_write(backend, proc, 1, "r1")
    commit_write(backend, proc, 2, "r2")
    backend._scripts.commit = new_script
    commit_write(backend, proc, 3, "r3")
    assert [e.request for e in backend.entries()] == [None, None, b"tenant-a\x00c1\x00r3"]
    assert backend.find_request("tenant-a", "c1", "r1") == RequestStatus(False, None, 3)
    assert backend.find_request("tenant-a", "c1", "r3") == RequestStatus(True, 3, 3)
    restored = RedisBackend(rclient, pid, 3, config).restore()
    assert restored is not None
    assert (restored.version, restored.read("/memory/count")) == (3, 3)
    with pytest.raises(NotFound):
        RedisBackend(rclient, pid + "-none", 3, config).find_request("t", "c", "r")


def test_a_tail_readers_hold_keeps_what_it_has_not_copied(
    rclient: redis.Redis, pid: str, config: StoreConfig
) -> None:
    """The snapshot trim keeps every entry above ``hold`` (the chaos observer's
    last copied version) and never more than ``hold_max_entries`` below the
    snapshot; without a hold it trims as before; delete removes the hold."""
    held = StoreConfig(prefix=config.prefix, snapshot_every=8, trim_margin=2,
                       hold_max_entries=12, max_receipts=16)
    backend, proc = new_log(rclient, pid, 3, held)
    rclient.set(backend.keys.hold, 3)
    for v in range(1, 9):
        commit_write(backend, proc, v)
    # snapshot at 8: without the hold the stream would start at 7; it keeps 4..8
    assert [e.version for e in backend.entries()] == list(range(4, 9))
    for v in range(9, 17):
        commit_write(backend, proc, v)
    # snapshot at 16: the hold (3) asks for 4.., the bound for 16 - 12 + 1 = 5..
    assert [e.version for e in backend.entries()] == list(range(5, 17))
    rclient.delete(backend.keys.hold)
    for v in range(17, 25):
        commit_write(backend, proc, v)
    assert [e.version for e in backend.entries()] == list(range(23, 25))
    rclient.set(backend.keys.hold, 24)
    backend.delete()
    assert not rclient.exists(backend.keys.hold)
    with pytest.raises(ConfigurationError, match="hold_max_entries"):
        StoreConfig(trim_margin=16, hold_max_entries=8)
