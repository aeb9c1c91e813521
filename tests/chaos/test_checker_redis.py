"""The checker on REAL Redis logs: fenced runs pass, unfenced and damaged runs fail.

The store is driven directly (two owners, a paused owner, a stale writer), the
observer polls it by hand (``poll_once``) so every fence observation is
deterministic, and the logs are dumped exactly as ``svit-chaos run`` dumps them.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import redis
from svit_chaos.checker import CheckResult, check
from svit_chaos.clock import ManualClock
from svit_chaos.history import HistoryWriter, read_history, write_history
from svit_chaos.logs import StoredLogs, dump_processes, read_logs, write_logs
from svit_chaos.observer import StoreObserver
from svit_chaos.stale import StaleWriter

from svit_cluster.errors import FencedError
from svit_cluster.local import EtcdServer, RedisServer
from svit_cluster.store import RedisBackend, StoreConfig, connect
from svit_cluster.store.testing import disable_fencing_for_negative_control
from tests._support import unique
from tests.chaos._support import Clients, redis_commit, redis_new_log, seal_op

pytestmark = pytest.mark.servers


def setup(rclient: redis.Redis, **kw: int) -> tuple[str, StoreConfig, HistoryWriter, Clients,
                                                      StoreObserver]:
    pid = f"svit://chaos/{unique('p')}"
    config = StoreConfig(prefix=unique("chaos"), snapshot_every=kw.get("snapshot_every", 4),
                         trim_margin=kw.get("trim_margin", 1))
    history = HistoryWriter(clock=ManualClock())
    observer = StoreObserver(rclient, [pid], history, prefix=config.prefix)
    return pid, config, history, Clients(history), observer


def paused_owner_run(rclient: redis.Redis, *, fenced: bool) -> tuple[
        str, StoreConfig, HistoryWriter, StoreObserver, StaleWriter]:
    """Owner A (token 1) is paused mid-request; owner B (token 2) claims; A resumes.

    With fencing on, A's late commit is refused. With fencing off it lands on
    top of the head B restored, which the fence observation exposes.
    """
    pid, config, history, clients, observer = setup(rclient)
    a, proc_a = redis_new_log(rclient, pid, 1, config)
    if not fenced:
        disable_fencing_for_negative_control(a)
    observer.poll_once()
    for _ in range(3):
        redis_commit(a, proc_a, clients, "c0")
    observer.poll_once()
    # A is paused while handling c1's request: sealed, not yet committed
    late_rid = clients.invoke(pid, proc_a.version, "c1")
    late = seal_op(proc_a, late_rid)
    # A's lease expires; B claims and restores
    b = RedisBackend(rclient, pid, 2, config)
    b.claim()
    proc_b = b.restore()
    assert proc_b is not None and proc_b.version == 3
    observer.poll_once()  # sees fence 2 while the head is at 3
    # A resumes and commits its request
    try:
        a.commit(late)
        proc_a.commit(late)
        clients.ok(pid, late_rid, proc_a.version, "c1")
    except FencedError:
        clients.info(pid, late_rid, "c1")  # the client saw 503: unknown outcome
    observer.poll_once()
    # B serves on (restoring again if A's commit moved the head under it)
    proc_b = b.restore()
    assert proc_b is not None
    for _ in range(3):
        redis_commit(b, proc_b, clients, "c2")
        observer.poll_once()
    stale = StaleWriter(rclient, history, run_id="t", prefix=config.prefix, unfenced=not fenced)
    stale.write(pid, 1)  # a zombie with token 1 restores and writes again
    observer.poll_once()
    return pid, config, history, observer, stale


def dump_and_check(
    rclient: redis.Redis, pid: str, config: StoreConfig, history: HistoryWriter,
    observer: StoreObserver,
) -> tuple[CheckResult, StoredLogs]:
    logs = dump_processes(rclient, [pid], prefix=config.prefix, collected=observer.snapshot())
    return check(history.events, logs), logs


def test_fenced_paused_owner_run_passes(rclient: redis.Redis) -> None:
    pid, config, history, observer, stale = paused_owner_run(rclient, fenced=True)
    result, logs = dump_and_check(rclient, pid, config, history, observer)
    assert result.verdict == "pass", result.to_json()
    assert stale.committed == 0
    kinds = [(e["kind"], e.get("outcome")) for e in history.events if e.get("client") == "stale"]
    assert kinds == [("invoke", None), ("fail", "fenced")]
    fences = [(e["fence"], e["head"]) for e in history.events if e["kind"] == "fence"]
    assert fences == [(1, 0), (2, 3)]
    tokens = [e.token for _, e in sorted(logs.processes[pid].entries.items())]
    assert tokens == sorted(tokens) and tokens[-1] == 2


def test_unfenced_paused_owner_run_fails_with_stale_tokens(rclient: redis.Redis) -> None:
    pid, config, history, observer, stale = paused_owner_run(rclient, fenced=False)
    result, _ = dump_and_check(rclient, pid, config, history, observer)
    assert result.verdict == "fail"
    stale_anomalies = [a for a in result.anomalies
                       if a.invariant == "tokens"]
    # A's late commit at version 4 (token 1) after the fence was seen at 2 with head 3
    fence_line = next(e["line"] for e in history.events
                      if e["kind"] == "fence" and e["fence"] == 2)
    late = [a for a in stale_anomalies if 4 in a.versions and fence_line in a.lines]
    assert late and late[0].tokens == (2, 1) and late[0].process == pid
    # and the zombie's write after token-2 entries: tokens fall in version order
    assert stale.committed == 1
    assert any("after token 2" in a.message for a in stale_anomalies)


def test_deleting_an_acknowledged_entry_is_caught(rclient: redis.Redis) -> None:
    pid, config, history, observer, _ = paused_owner_run(rclient, fenced=True)
    result, logs = dump_and_check(rclient, pid, config, history, observer)
    assert result.verdict == "pass"
    log = logs.processes[pid]
    snap = log.final_snapshot
    victim = max(v for v in log.entries if v > (snap.version if snap else 0))
    rclient.xdel(f"{config.prefix}:{{{pid}}}:stream", f"{victim}-0")
    damaged, _ = dump_and_check(rclient, pid, config, history, observer)
    assert damaged.verdict == "fail"
    hit = {a.invariant for a in damaged.anomalies if victim in a.versions}
    assert {"chain", "acked"} <= hit


@pytest.mark.parametrize(("margin", "hold_lost"), [(1, False), (0, False), (0, True)])
def test_observer_copies_entries_before_snapshots_trim_them(rclient: redis.Redis,
                                                            margin: int,
                                                            hold_lost: bool) -> None:
    """The observer's hold keeps every entry it has not copied, even with a trim
    margin of 0 (a snapshot trims its own version in the same commit); only a
    lost hold (a Redis node lost with it) lets a version go uncopied."""
    pid, config, history, clients, observer = setup(rclient, snapshot_every=3,
                                                    trim_margin=margin)
    backend, proc = redis_new_log(rclient, pid, 7, config)
    for _ in range(10):
        if hold_lost:
            rclient.delete(backend.keys.hold)
        redis_commit(backend, proc, clients)
        observer.poll_once()
    logs = dump_processes(rclient, [pid], prefix=config.prefix, collected=observer.snapshot())
    log = logs.processes[pid]
    assert min(log.entries) > 1  # the stream was trimmed
    assert len({s.version for s in log.snapshots}) >= 3
    result = check(history.events, logs)
    if not hold_lost:
        assert sorted(log.collected) == list(range(1, 11))
        assert result.verdict == "pass", result.to_json()
        # without the observer's copies the trimmed acks cannot be verified
        bare = dump_processes(rclient, [pid], prefix=config.prefix)
        assert check(history.events, bare).verdict == "inconclusive"
    else:
        # margin 0 trims the snapshot's own version in the same commit: never copied
        assert 3 not in log.collected
        assert any(e["kind"] == "note" and "missed versions 3..3" in e["message"]
                   for e in history.events)
        assert result.verdict == "inconclusive" and not result.anomalies


def test_logs_and_history_round_trip_through_jsonl(rclient: redis.Redis,
                                                   tmp_path: Path) -> None:
    pid, config, history, observer, _ = paused_owner_run(rclient, fenced=False)
    result, logs = dump_and_check(rclient, pid, config, history, observer)
    write_logs(tmp_path / "logs.jsonl", logs)
    write_history(tmp_path / "history.jsonl", history.events)
    again = check(read_history(tmp_path / "history.jsonl"), read_logs(tmp_path / "logs.jsonl"))
    assert again.to_json() == result.to_json()


def test_kill9_of_redis_keeps_every_acknowledged_commit(fresh_redis: RedisServer) -> None:
    client = connect(fresh_redis.url, timeout_s=2)
    try:
        pid, config, history, clients, observer = setup(client, snapshot_every=5)
        backend, proc = redis_new_log(client, pid, 3, config)
        for _ in range(12):
            redis_commit(backend, proc, clients)
            observer.poll_once()
        fresh_redis.kill9()
        assert not observer.poll_once()
        fresh_redis.start()  # same port and data dir: reloads the AOF
        observer.poll_once()
        logs = dump_processes(client, [pid], prefix=config.prefix,
                              collected=observer.snapshot())
        result = check(history.events, logs)
        assert result.verdict == "pass", result.to_json()
        assert result.stats["ok"] == 12
    finally:
        client.close()


def test_observer_records_ownership_changes_from_etcd(rclient: redis.Redis,
                                                      fresh_etcd: EtcdServer) -> None:
    import base64
    import json
    import urllib.request

    def put(key: str, value: str) -> None:
        body = json.dumps({"key": base64.b64encode(key.encode()).decode(),
                           "value": base64.b64encode(value.encode()).decode()}).encode()
        urllib.request.urlopen(urllib.request.Request(
            f"{fresh_etcd.url}/v3/kv/put", data=body,
            headers={"Content-Type": "application/json"}), timeout=2).read()

    pid, config, history, _, _ = setup(rclient)
    observer = StoreObserver(rclient, [pid], history, prefix=config.prefix,
                             etcd_endpoint=fresh_etcd.endpoint, cluster="c1", owners_every=1)
    put(f"/svit/c1/owners/{pid}", '{"address": "", "host": "h2"}')
    put("/svit/c1/owners/svit://chaos/other", '{"host": "h1"}')
    observer.poll_once()
    observer.poll_once()  # unchanged: no second event
    put(f"/svit/c1/owners/{pid}", '{"address": "", "host": "h3"}')  # same key: same token
    observer.poll_once()
    owners = [(e["host"], e["token"]) for e in history.events if e["kind"] == "owner"]
    assert [h for h, _ in owners] == ["h2", "h3"] and owners[0][1] == owners[1][1] > 0
