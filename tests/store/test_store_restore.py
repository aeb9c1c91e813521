"""Snapshots, trimming and restore; corrupted logs fail loudly with corrupt_log."""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis

from svit_cluster.errors import ConflictError, CorruptData, ErrorCode
from svit_cluster.process import Process
from svit_cluster.store import RedisBackend, StoreConfig
from tests._commit_log import commit_write, new_log, rewrite_stream, seal_write

pytestmark = pytest.mark.servers


def _build(rclient: redis.Redis, pid: str, config: StoreConfig, n: int,
           token: int = 1) -> tuple[RedisBackend, Process]:
    backend, proc = new_log(rclient, pid, token, config)
    for i in range(1, n + 1):
        commit_write(backend, proc, i)
    return backend, proc


def test_restore_replays_snapshot_plus_tail_to_the_live_state(
    rclient: redis.Redis, pid: str, config: StoreConfig
) -> None:
    backend, proc = _build(rclient, pid, config, 21)  # snapshots at 8 and 16
    restored = RedisBackend(rclient, pid, 2, config).restore()
    assert restored is not None
    assert (restored.version, restored.root_hash, restored.chain_head, restored.position) == (
        proc.version, proc.root_hash, proc.chain_head, proc.position)
    assert restored.read("/memory/count") == 21
    snap = rclient.hgetall(backend.keys.snapshot)
    assert snap[b"version"] == b"16"
    # the stream was trimmed below the snapshot, keeping trim_margin=2 entries
    ids = [eid for eid, _ in rclient.xrange(backend.keys.stream)]
    assert ids[0] == b"15-0" and ids[-1] == b"21-0"


def test_restore_of_a_never_created_process_is_none(
    rclient: redis.Redis, pid: str, config: StoreConfig
) -> None:
    assert RedisBackend(rclient, pid, 1, config).restore() is None


def test_restore_is_o_snapshot_plus_tail_not_history(rclient: redis.Redis, pid: str) -> None:
    config = StoreConfig(prefix="otail", snapshot_every=50, trim_margin=10)
    small_pid, big_pid = pid + "-small", pid + "-big"
    _build(rclient, small_pid, config, 60)
    big, _ = _build(rclient, big_pid, config, 1030)
    assert rclient.xlen(big.keys.stream) <= config.snapshot_every + config.trim_margin

    def timed(process_id: str) -> tuple[float, Any]:
        backend = RedisBackend(rclient, process_id, 2, config)
        best = float("inf")
        for _ in range(5):
            started = time.perf_counter()
            backend.restore()
            best = min(best, time.perf_counter() - started)
        return best, backend.last_restore

    small_s, small_stats = timed(small_pid)
    big_s, big_stats = timed(big_pid)
    assert big_stats.snapshot_version == 1000 and big_stats.tail_entries == 30
    assert small_stats.tail_entries == 10
    # 17x the history, but no more entries read: the time stays within a small factor
    assert big_s < 4 * small_s + 0.02


def test_snapshot_of_a_stale_state_is_refused(
    rclient: redis.Redis, pid: str, config: StoreConfig
) -> None:
    backend, proc = _build(rclient, pid, config, 3)
    old = RedisBackend(rclient, pid, 1, config).restore()
    assert old is not None
    commit_write(backend, proc, 4)
    with pytest.raises(ConflictError):
        backend.snapshot(old)
    assert backend.snapshot(proc) is True
    assert backend.snapshot(proc) is False  # one at least as new exists


def _restore_fails(rclient: redis.Redis, pid: str, config: StoreConfig) -> CorruptData:
    with pytest.raises(CorruptData) as info:
        RedisBackend(rclient, pid, 5, config).restore()
    assert info.value.code is ErrorCode.CORRUPT_LOG
    assert pid in info.value.message
    return info.value


def test_missing_entry_fails_restore(rclient: redis.Redis, pid: str,
                                     config: StoreConfig) -> None:
    backend, _ = _build(rclient, pid, config, 5)
    rclient.xdel(backend.keys.stream, "3-0")
    err = _restore_fails(rclient, pid, config)
    assert "missing stream entry at version 3" in err.message and err.fields["version"] == 3


def test_missing_last_entry_fails_restore(rclient: redis.Redis, pid: str,
                                          config: StoreConfig) -> None:
    backend, _ = _build(rclient, pid, config, 5)
    rclient.xdel(backend.keys.stream, "5-0")
    assert "missing stream entry at version 5" in _restore_fails(rclient, pid, config).message


def test_stale_token_after_a_newer_token_fails_restore(
    rclient: redis.Redis, pid: str, config: StoreConfig
) -> None:
    backend, _ = _build(rclient, pid, config, 5, token=4)
    rewrite_stream(rclient, backend.keys.stream,
                   lambda v, f: {**f, b"token": b"3"} if v == 4 else f)
    err = _restore_fails(rclient, pid, config)
    assert "stale token 3 after token 4 at version 4" in err.message


def test_broken_chain_fails_restore_naming_the_position(
    rclient: redis.Redis, pid: str, config: StoreConfig
) -> None:
    backend, _ = _build(rclient, pid, config, 5)
    other = Process.create(pid, memory={"count": 0})  # same id, another history
    for i in range(1, 3):
        other.commit(seal_write(other, 100 + i))
    foreign = seal_write(other, 103).record.encode()  # a valid record for version 3
    rewrite_stream(rclient, backend.keys.stream,
                   lambda v, f: {**f, b"record": foreign} if v == 3 else f)
    err = _restore_fails(rclient, pid, config)
    assert "broken hash chain" in err.message and "position 3" in err.message


def test_garbled_record_fails_restore(rclient: redis.Redis, pid: str,
                                      config: StoreConfig) -> None:
    backend, _ = _build(rclient, pid, config, 5)
    rewrite_stream(rclient, backend.keys.stream,
                   lambda v, f: {**f, b"record": f[b"record"].replace(b"5", b"6", 1)}
                   if v == 5 else f)
    err = _restore_fails(rclient, pid, config)
    assert err.fields["version"] == 5


def test_corrupted_snapshot_fails_restore(rclient: redis.Redis, pid: str,
                                          config: StoreConfig) -> None:
    backend, _ = _build(rclient, pid, config, 10)  # snapshot at 8
    data = rclient.hget(backend.keys.snapshot, "data")
    assert data is not None
    rclient.hset(backend.keys.snapshot, "data", data.replace(b'"value":8', b'"value":9'))
    err = _restore_fails(rclient, pid, config)
    assert "snapshot at version 8 does not verify" in err.message
    rclient.hset(backend.keys.snapshot, "data", b"{not json")
    _restore_fails(rclient, pid, config)
    rclient.hdel(backend.keys.snapshot, "data")
    _restore_fails(rclient, pid, config)


def test_head_that_does_not_match_the_replay_fails_restore(
    rclient: redis.Redis, pid: str, config: StoreConfig
) -> None:
    backend, _ = _build(rclient, pid, config, 5)
    rclient.hset(backend.keys.head, "root_hash", "0" * 64)
    assert "does not match the stored head" in _restore_fails(rclient, pid, config).message
