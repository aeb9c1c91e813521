"""Invariant 7 (``outbox``): every committed intent is dispatched at least once and
recorded once at its Svit destination -- hand-made histories and logs."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from svit_chaos.checker import SENT_PATH, check, outbox_event
from svit_chaos.clock import ManualClock
from svit_chaos.history import Event, HistoryWriter, read_history, write_history
from svit_chaos.logs import StoredLogs

from svit_cluster.dispatch import DeliveryState, DestinationRecord, IntentStatus, OutboxSummary
from svit_cluster.process import Process, Transition
from svit_cluster.process._inbox import dedup_slot
from tests.chaos._support import Clients, MemoryLog, logs_of, new_process

PID = "svit://chaos/ob-p0"
SINK = "svit://chaos/ob-sink"


def seal_sending(process: Process, rid: str, every: int) -> tuple[Transition, str | None]:
    """The workload script's change, plus ``/memory/sent`` on every ``every``-th count."""
    wc = process.working_copy()
    count = process.read("/memory/count")
    count = (count if isinstance(count, int) else 0) + 1
    wc.write("/memory/last", rid)
    wc.write("/memory/count", count)
    iid = None
    if count % every == 0:
        iid = f"{PID}:{process.version + 1}:0"
        wc.write(SENT_PATH, iid)
    return process.seal(wc, "activation"), iid


def build(n: int = 6, every: int = 2) -> tuple[HistoryWriter, StoredLogs, list[tuple[str, int]]]:
    history = HistoryWriter(clock=ManualClock())
    history.record("meta", leg="main", sink=SINK, send_every=every)
    clients = Clients(history)
    proc = new_process(PID)
    log = MemoryLog(PID, 5, new_process(PID))
    sent: list[tuple[str, int]] = []
    for _ in range(n):
        rid = clients.invoke(PID, proc.version)
        t, iid = seal_sending(proc, rid, every)
        log.commit(t, 5)
        proc.commit(t)
        clients.ok(PID, rid, proc.version, token=5)
        if iid is not None:
            sent.append((iid, proc.version))
    return history, logs_of(log.to_log(proc)), sent


def status(iid: str, version: int, state: DeliveryState = DeliveryState.DELIVERED,
           **kw: object) -> IntentStatus:
    return IntentStatus(intent_id=iid, source=PID, version=version, to=SINK,
                        entry_id=f"{version}-0", state=state, **kw)  # type: ignore[arg-type]


def record(ids: list[str], *, appends: dict[str, int] | None = None,
           complete: bool = True) -> DestinationRecord:
    return DestinationRecord(SINK, 2 * len(ids), appends or dict.fromkeys(ids, 1), complete,
                             {}, frozenset(dedup_slot(i) for i in ids))


def finish(history: HistoryWriter, statuses: list[IntentStatus],
           dest: DestinationRecord | None, *, drained: bool = True) -> list[Event]:
    history.record("outbox", **outbox_event(SINK, statuses, dest, drained=drained))
    return history.events


def test_every_intent_delivered_and_recorded_once_passes(tmp_path: Path) -> None:
    history, logs, sent = build()
    assert [v for _, v in sent] == [2, 4, 6]
    ids = [i for i, _ in sent]
    events = finish(history, [status(i, v) for i, v in sent], record(ids))
    # the outbox event survives the JSONL round trip: `svit-chaos check DIR` sees the same
    write_history(tmp_path / "history.jsonl", events)
    result = check(read_history(tmp_path / "history.jsonl"), logs)
    assert result.verdict == "pass", result.to_json()
    assert "outbox" in result.stats["invariants"] and result.stats["intents"] == 3


def test_an_intent_never_delivered_is_an_anomaly() -> None:
    history, logs, sent = build()
    (a, va), (b, vb), (c, vc) = sent
    statuses = [status(a, va), status(b, vb, DeliveryState.PENDING)]  # c: not in the outbox
    result = check(finish(history, statuses, record([a]), drained=False), logs)
    assert result.verdict == "fail"
    messages = [x.message for x in result.anomalies if x.invariant == "outbox"]
    assert any(b in m and "never delivered" in m for m in messages), messages
    assert any(c in m and "not in the sender's outbox" in m for m in messages), messages
    assert {x.versions for x in result.anomalies} == {(vb,), (vc,)}


def test_a_dead_lettered_intent_is_an_anomaly() -> None:
    history, logs, sent = build()
    statuses = [status(i, v) for i, v in sent[:2]]
    iid, v = sent[2]
    statuses.append(status(iid, v, DeliveryState.DEAD_LETTERED, reason="attempts",
                           error="503 unavailable"))
    result = check(finish(history, statuses, record([i for i, _ in sent[:2]])), logs)
    assert [x.invariant for x in result.anomalies] == ["outbox"]
    assert "dead-lettered" in result.anomalies[0].message


def test_an_intent_recorded_twice_or_not_at_all_is_an_anomaly() -> None:
    history, logs, sent = build()
    ids = [i for i, _ in sent]
    twice = record(ids, appends={ids[0]: 1, ids[1]: 2, ids[2]: 1})
    missing = replace(twice, delivered_slots=frozenset({dedup_slot(ids[0]), dedup_slot(ids[1])}))
    result = check(finish(history, [status(i, v) for i, v in sent], missing), logs)
    messages = sorted(x.message for x in result.anomalies if x.invariant == "outbox")
    assert len(messages) == 2, messages
    assert ids[1] in messages[0] and "more than once" in messages[0]
    assert ids[2] in messages[1] and "no record" in messages[1]


def test_a_trimmed_destination_log_still_catches_two_appends() -> None:
    history, logs, sent = build()
    ids = [i for i, _ in sent]
    dest = record(ids, appends={ids[0]: 2}, complete=False)
    result = check(finish(history, [status(i, v) for i, v in sent], dest), logs)
    assert [x.process for x in result.anomalies] == [SINK]


def test_a_run_that_sent_intents_without_an_outbox_status_is_inconclusive() -> None:
    history, logs, _ = build()
    result = check(history.events, logs)
    assert result.verdict == "inconclusive"
    assert [u.invariant for u in result.unverified] == ["outbox"]


def summary(first: int | None, committed: int = 3) -> OutboxSummary:
    return OutboxSummary(process_id=PID, stream=f"svit:{{{PID}}}:outbox", committed=committed,
                         retained=1, trimmed=committed - 1, first_retained_version=first,
                         pending=0, dead_lettered=0, delivered=committed)


def test_trimmed_intents_count_as_delivered_and_must_be_recorded_at_the_sink() -> None:
    """The dispatcher trims acknowledged outbox entries: intents below the
    first retained version are not listed, yet still checked at the destination."""
    history, logs, sent = build()
    ids = [i for i, _ in sent]
    (_, _), (_, _), (c, vc) = sent
    history.record("outbox", **outbox_event(SINK, [status(c, vc)], record(ids), drained=True,
                                            summaries=[summary(vc)]))
    result = check(history.events, logs)
    assert result.verdict == "pass", result.to_json()

    # Negative control: a trimmed intent the sink has no record of is still caught.
    history, logs, sent = build()
    history.record("outbox", **outbox_event(SINK, [status(c, vc)], record(ids[1:]),
                                            drained=True, summaries=[summary(vc)]))
    result = check(history.events, logs)
    assert result.verdict == "fail"
    assert [x.message for x in result.anomalies if ids[0] in x.message]

    # An intent missing *above* the trimmed prefix is still "not in the outbox".
    history, logs, sent = build()
    (a, va), _, _ = sent
    history.record("outbox", **outbox_event(SINK, [status(a, va)], record(ids), drained=True,
                                            summaries=[summary(va)]))
    result = check(history.events, logs)
    messages = [x.message for x in result.anomalies if x.invariant == "outbox"]
    assert sorted(m.split()[1] for m in messages) == sorted(ids[1:]), messages
    assert all("not in the sender's outbox" in m for m in messages)


def test_an_intent_trimmed_before_a_later_entry_of_its_own_commit_counts_as_trimmed() -> None:
    """One commit can stage a send (index 0) and a cancel (index 1); the trim keeps
    the stream's last entry, so index 0 goes and index 1 stays at the same version
    (a CI run of test_load_host_cluster reported such a send as not in the outbox)."""
    history, logs, sent = build()
    ids = [i for i, _ in sent]
    (_, _), (_, _), (c, vc) = sent
    cancel = IntentStatus(intent_id=f"{PID}:{vc}:1", source=PID, version=vc, to="",
                          entry_id=f"{vc}-1", state=DeliveryState.DELIVERED,
                          cancels=f"{PID}:1:1")
    history.record("outbox", **outbox_event(SINK, [cancel], record(ids), drained=True,
                                            summaries=[summary(vc)]))
    result = check(history.events, logs)
    assert not [x for x in result.anomalies if x.invariant == "outbox"], result.to_json()

    # Negative control: nothing of that commit after the send is listed, so the
    # send itself should have been: it is reported.
    history, logs, sent = build()
    history.record("outbox", **outbox_event(SINK, [], record(ids), drained=True,
                                            summaries=[summary(vc)]))
    result = check(history.events, logs)
    assert [x for x in result.anomalies
            if x.invariant == "outbox" and c in x.message and "not in the sender's" in x.message]
