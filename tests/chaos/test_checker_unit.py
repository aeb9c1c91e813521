"""Each invariant on hand-made histories and in-memory logs: a valid case and a violation."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

import pytest
from svit_chaos.checker import DEFAULT_INVARIANTS, Anomaly, Context, check
from svit_chaos.clock import ManualClock
from svit_chaos.history import Event, HistoryWriter
from svit_chaos.logs import StoredEntry, StoredLogs

from svit_cluster.process import Process, Transaction
from tests.chaos._support import Clients, MemoryLog, logs_of, new_process, seal_op

PID = "svit://chaos/unit-p0"


@dataclass
class Built:
    history: HistoryWriter
    clients: Clients
    log: MemoryLog
    proc: Process
    rids: list[str]

    def logs(self) -> StoredLogs:
        return logs_of(self.log.to_log(self.proc))

    def events(self) -> list[Event]:
        return self.history.events


def build(n: int = 6, *, token: int = 5, snapshot_at: int | None = None,
          record_ok: bool = True) -> Built:
    history = HistoryWriter(clock=ManualClock())
    clients = Clients(history)
    proc = new_process(PID)
    log = MemoryLog(PID, token, new_process(PID))
    rids = []
    for _ in range(n):
        rid = clients.invoke(PID, proc.version)
        t = seal_op(proc, rid)
        log.commit(t, token)
        proc.commit(t)
        if record_ok:
            clients.ok(PID, rid, proc.version)
        rids.append(rid)
        if snapshot_at is not None and proc.version == snapshot_at:
            log.snapshot(proc, token)
    return Built(history, clients, log, proc, rids)


def names(anomalies: list[Anomaly]) -> set[str]:
    return {a.invariant for a in anomalies}


def test_a_valid_run_passes_every_invariant() -> None:
    b = build(6, snapshot_at=3)
    result = check(b.events(), b.logs())
    assert result.verdict == "pass", result.to_json()
    assert result.stats["ok"] == 6 and result.stats["entries"] == 6
    assert [n for n, _ in DEFAULT_INVARIANTS] == result.stats["invariants"]


# -- (1) chain ---------------------------------------------------------------------------


def test_chain_gap_is_reported_with_the_acked_line() -> None:
    b = build(6)
    del b.log.entries[4]
    result = check(b.events(), b.logs())
    gaps = [a for a in result.anomalies if a.invariant == "chain" and "gap" in a.message]
    assert gaps and gaps[0].versions == (4,) and gaps[0].process == PID
    ok_line = next(e["line"] for e in b.events() if e["kind"] == "ok" and e["version"] == 4)
    assert ok_line in gaps[0].lines
    assert "acked" in names(result.anomalies)


def test_chain_fork_two_branches_break_the_hash_chain() -> None:
    b = build(5)
    # a second owner restored at version 3 and committed its own version 4
    other = new_process(PID)
    other.replay([Transaction.decode(b.log.entries[v].record) for v in range(1, 4)])
    rid = b.clients.invoke(PID, 3, client="c9")
    t = seal_op(other, rid)
    b.log.entries[4] = StoredEntry(PID, 4, 5, t.record.encode())
    result = check(b.events(), b.logs())
    chain = [a for a in result.anomalies if a.invariant == "chain"]
    assert any("hash chain breaks between versions 4 and 5" in a.message for a in chain)
    assert "acked" in names(result.anomalies)  # the ack of the original version 4 is lost


def test_chain_two_acks_at_one_version_are_a_fork() -> None:
    b = build(3)
    rid = b.clients.invoke(PID, 2, client="c1")
    b.clients.ok(PID, rid, 3, client="c1")
    result = check(b.events(), b.logs())
    assert any(a.invariant == "chain" and a.message.startswith("fork") for a in result.anomalies)


def test_chain_collected_entry_that_changed_is_a_lost_commit() -> None:
    b = build(4)
    logs = b.logs()
    log = logs.processes[PID]
    log.collected = dict(log.entries)
    # the store now holds another record at version 2 (e.g. an AOF lost the first)
    log.collected[2] = replace(log.entries[2], token=3)
    result = check(b.events(), logs)
    assert any("changed after it was committed" in a.message for a in result.anomalies)


def test_chain_undecodable_record_and_head_mismatch() -> None:
    b = build(3)
    logs = b.logs()
    log = logs.processes[PID]
    log.entries[2] = replace(log.entries[2], record=log.entries[2].record.replace(b"t.", b"x."))
    assert log.head is not None
    log.head = replace(log.head, root_hash="0" * 64)
    result = check(b.events(), logs)
    messages = [a.message for a in result.anomalies if a.invariant == "chain"]
    assert any("does not decode" in m for m in messages)
    assert any("head at version 3 does not match" in m for m in messages)


# -- (2) acked -----------------------------------------------------------------------------


def test_acked_version_holding_another_request_is_lost() -> None:
    b = build(4)
    rid = b.clients.invoke(PID, 1, client="c7")
    b.clients.ok(PID, rid, 2, client="c7")  # claims version 2, which holds another rid
    result = check(b.events(), b.logs())
    lost = [a for a in result.anomalies if a.invariant == "acked"]
    assert lost and "is lost" in lost[0].message and lost[0].versions == (2,)


def test_acked_beyond_the_stored_head_is_lost() -> None:
    b = build(3)
    rid = b.clients.invoke(PID, 3)
    b.clients.ok(PID, rid, 4)
    result = check(b.events(), b.logs())
    assert any(a.invariant == "acked" and "ends at version 3" in a.message
               for a in result.anomalies)


def test_trimmed_acked_versions_make_the_run_inconclusive() -> None:
    b = build(6, snapshot_at=4)
    for v in (1, 2, 3):
        del b.log.entries[v]  # trimmed below the snapshot, never collected
    result = check(b.events(), b.logs())
    assert result.verdict == "inconclusive", result.to_json()
    assert not result.anomalies and result.unverified


# -- (3) unique and phantom ------------------------------------------------------------------


def test_a_request_committed_twice_is_reported() -> None:
    b = build(2)
    rid = b.rids[0]
    t = seal_op(b.proc, rid)  # the same request id applied again on top
    b.log.commit(t, 5)
    b.proc.commit(t)
    result = check(b.events(), b.logs())
    dup = [a for a in result.anomalies if a.invariant == "unique"]
    assert dup and dup[0].versions == (1, 3)


def test_a_commit_nobody_invoked_is_a_phantom() -> None:
    b = build(2)
    t = seal_op(b.proc, "t.ghost.1")
    b.log.commit(t, 5)
    b.proc.commit(t)
    result = check(b.events(), b.logs())
    assert any(a.invariant == "phantom" and a.versions == (3,) for a in result.anomalies)


def test_a_failed_request_that_committed_is_reported() -> None:
    b = build(3, record_ok=False)
    for i, rid in enumerate(b.rids):
        if i == 1:
            b.clients.fail(PID, rid, outcome="conflict", actual=5)
        else:
            b.clients.ok(PID, rid, i + 1)
    result = check(b.events(), b.logs())
    assert any(a.invariant == "refused" and a.versions == (2,) for a in result.anomalies)


# -- (4) tokens ------------------------------------------------------------------------------


def test_tokens_may_rise_but_never_fall() -> None:
    b = build(4)
    b.log.entries[3] = replace(b.log.entries[3], token=9)
    b.log.entries[4] = replace(b.log.entries[4], token=9)
    b.log.fence = 9
    ok = check(b.events(), b.logs())
    assert ok.verdict == "pass", ok.to_json()
    b.log.entries[4] = replace(b.log.entries[4], token=6)  # a stale owner after token 9
    result = check(b.events(), b.logs())
    stale = [a for a in result.anomalies if a.invariant == "tokens"]
    assert stale and stale[0].tokens == (9, 6) and stale[0].versions == (3, 4)


def test_entry_below_an_observed_fence_is_stale() -> None:
    b = build(2)
    b.history.record("fence", process=PID, fence=8, head=1)
    b.log.fence = 8
    result = check(b.events(), b.logs())
    stale = [a for a in result.anomalies if a.invariant == "tokens"]
    assert stale and stale[0].versions == (1, 2) and stale[0].tokens == (8, 5)
    fence_line = next(e["line"] for e in b.events() if e["kind"] == "fence")
    assert fence_line in stale[0].lines


def test_entry_above_the_final_fence_is_reported() -> None:
    b = build(2)
    b.log.fence = 4
    result = check(b.events(), b.logs())
    assert any("above the final fence" in a.message for a in result.anomalies)


def test_tokens_compare_across_fence_epochs() -> None:
    """After an etcd restore the new owner's token is a higher epoch with a LOWER
    create revision (``svit_cluster.ownership``): still a rise; and an old-epoch
    owner with a higher revision committing after it is still a stale owner."""
    from svit_cluster.ownership import fencing_token

    old, new = fencing_token(0, 300), fencing_token(1, 20)
    b = build(4, token=old)
    b.log.entries[3] = replace(b.log.entries[3], token=new)
    b.log.entries[4] = replace(b.log.entries[4], token=new)
    b.log.fence = new
    ok = check(b.events(), b.logs())
    assert ok.verdict == "pass", ok.to_json()
    stale_token = fencing_token(0, 400)
    b.log.entries[4] = replace(b.log.entries[4], token=stale_token)
    result = check(b.events(), b.logs())
    stale = [a for a in result.anomalies if a.invariant == "tokens"]
    assert stale and stale[0].tokens == (new, stale_token) and stale[0].versions == (3, 4)


# -- (5) restore -----------------------------------------------------------------------------


def test_every_snapshot_replays_to_the_head() -> None:
    b = build(6, snapshot_at=2)
    b.log.snapshot(b.proc, 5)  # a second, newer snapshot at the head
    assert check(b.events(), b.logs()).verdict == "pass"


def test_tampered_snapshot_is_reported() -> None:
    b = build(4, snapshot_at=2)
    logs = b.logs()
    snap = logs.processes[PID].snapshots[0]
    logs.processes[PID].snapshots[0] = replace(snap, data=snap.data.replace(b'"count"',
                                                                            b'"cOunt"'))
    result = check(b.events(), logs)
    assert any(a.invariant == "restore" and "does not restore" in a.message
               for a in result.anomalies)


def test_gateway_state_must_agree_with_the_restored_log() -> None:
    b = build(3)
    b.history.record("final", process=PID, version=3, count=3, last=b.rids[-1])
    assert check(b.events(), b.logs()).verdict == "pass"
    b.history.record("final", process=PID, version=2, count=2, last=b.rids[-2])
    result = check(b.events(), b.logs())
    assert any(a.invariant == "restore" and "gateway served version 2" in a.message
               for a in result.anomalies)


# -- (6) memory ------------------------------------------------------------------------------


@pytest.mark.parametrize(("last", "expected"), [("info", "pass"), ("pending", "pass"),
                                             ("fail", "fail")])
def test_final_count_is_bounded_by_acked_and_unknown(last: str, expected: str) -> None:
    b = build(6, record_ok=False)
    for i, rid in enumerate(b.rids[:4]):
        b.clients.ok(PID, rid, i + 1)
    b.clients.info(PID, b.rids[4])
    if last == "info":
        b.clients.info(PID, b.rids[5])
    elif last == "fail":  # reported as failed, yet stored: count 6 > acked 4 + unknown 1
        b.clients.fail(PID, b.rids[5], outcome="rejected", code="script_failed")
    result = check(b.events(), b.logs())
    assert result.verdict == expected, result.to_json()
    if expected == "fail":
        memory = [a for a in result.anomalies if a.invariant == "memory"]
        assert memory and "final count 6" in memory[0].message
        assert "refused" in names(result.anomalies)


def test_count_below_acked_is_reported() -> None:
    b = build(4)
    logs = b.logs()
    # drop the tail entirely: the store says version 2, four were acknowledged
    log = logs.processes[PID]
    for v in (3, 4):
        del log.entries[v]
    proc = new_process(PID)
    proc.replay([Transaction.decode(log.entries[v].record) for v in (1, 2)])
    assert log.head is not None
    log.head = replace(log.head, version=2, chain_head=proc.chain_head,
                       root_hash=proc.root_hash, position=proc.position)
    result = check(b.events(), logs)
    assert any(a.invariant == "memory" and "outside [acked 4" in a.message
               for a in result.anomalies)


# -- pluggable invariants --------------------------------------------------------------------


def test_custom_invariants_plug_in_and_broken_ones_are_harness_errors() -> None:
    b = build(2)

    def every_op_on_c0(ctx: Context) -> Iterator[Anomaly]:
        for op in ctx.ops.values():
            if op.client != "c0":
                yield Anomaly("custom", op.process, "foreign client", lines=op.lines)

    def broken(ctx: Context) -> Iterator[Anomaly]:
        raise RuntimeError("boom")
        yield  # pragma: no cover

    result = check(b.events(), b.logs(), invariants=(*DEFAULT_INVARIANTS,
                                                     ("custom", every_op_on_c0)))
    assert result.verdict == "pass"
    result = check(b.events(), b.logs(), invariants=(("broken", broken),))
    assert result.verdict == "inconclusive"
    assert "invariant broken raised RuntimeError: boom" in result.harness_errors[0]


def test_history_errors_are_reported() -> None:
    history = HistoryWriter(clock=ManualClock())
    history.record("ok", client="c0", process=PID, rid="r1", version=1)
    history.record("invoke", client="c0", process=PID, rid="r2", expected=0)
    history.record("invoke", client="c0", process=PID, rid="r2", expected=0)
    result = check(history.events, StoredLogs())
    assert {a.invariant for a in result.anomalies} == {"history"}
    assert len(result.anomalies) == 2
