"""Invariant 10 (``timers``): every acknowledged arm is delivered once at the sink,
not before due, unless a cancel won; hand-made histories, logs and timer logs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from svit_chaos.checker import check, outbox_event
from svit_chaos.history import Event, HistoryWriter, read_history, write_history
from svit_chaos.logs import StoredLogs
from svit_chaos.report import build_report
from svit_chaos.timers import TIMER_PATH, timers_figures

from svit_cluster.dispatch import DeliveryState, DestinationRecord, IntentStatus
from svit_cluster.process import Process, Transition
from svit_cluster.process._inbox import dedup_slot
from tests.chaos._support import Clients, MemoryLog, logs_of, new_process

PID = "svit://chaos/tm-p0"
SINK = "svit://chaos/tm-sink"
BASE = 1_800_000_000_000  # due times: BASE + 1000 * version (ms)


class Clock:
    """A settable clock (the history's ``t``)."""

    def __init__(self) -> None:
        self.t = 0.0

    def now(self) -> float:
        return self.t


def tid(version: int) -> str:
    return f"{PID}:{version}:0"


def seal(process: Process, rid: str, timer: str | None) -> Transition:
    wc = process.working_copy()
    count = process.read("/memory/count")
    wc.write("/memory/last", rid)
    wc.write("/memory/count", (count if isinstance(count, int) else 0) + 1)
    if timer is not None:
        wc.write(TIMER_PATH, timer)
    return process.seal(wc, "activation")


class Run:
    """Six acknowledged activations: versions 2, 4 and 6 arm a timer (due
    ``BASE + 1000 * v``), version 5 cancels the timer of version 4."""

    def __init__(self, *, extra_timer_at: int | None = None) -> None:
        self.clock = Clock()
        self.history = HistoryWriter(clock=self.clock)
        self.history.record("meta", leg="main", sink=SINK, send_every=0, timer_every=2)
        clients = Clients(self.history)
        proc = new_process(PID)
        log = MemoryLog(PID, 5, new_process(PID))
        for v in range(1, 7):
            self.clock.t = float(v)
            rid = clients.invoke(PID, proc.version)
            armed = v % 2 == 0 or v == extra_timer_at
            t = seal(proc, rid, tid(v) if armed else None)
            log.commit(t, 5)
            proc.commit(t)
            extra: dict[str, Any] = {}
            if v % 2 == 0:
                extra["timers"] = [{"id": tid(v), "due_ms": BASE + 1000 * v}]
            if v == 5:
                extra["cancels"] = [tid(4)]
            clients.ok(PID, rid, proc.version, token=5, **extra)
        self.logs: StoredLogs = logs_of(log.to_log(proc))
        # the clean outcome: 2 and 6 fired 300 ms late, 4 cancelled
        self.log: list[dict[str, Any]] = [
            {"event": "armed", "id": tid(2), "at_ms": str(BASE + 1000)},
            {"event": "armed", "id": tid(4), "at_ms": str(BASE + 3000)},
            {"event": "fired", "id": tid(2), "at_ms": str(BASE + 2300)},
            {"event": "cancelled", "id": tid(4), "by": "guest", "at_ms": str(BASE + 4200)},
            {"event": "armed", "id": tid(6), "at_ms": str(BASE + 5000)},
            {"event": "fired", "id": tid(6), "at_ms": str(BASE + 6300)},
        ]
        self.done = {f"fired:{tid(2)}": BASE + 2100, f"cancelled:{tid(4)}": BASE + 4200,
                     f"fired:{tid(6)}": BASE + 6100}
        self.pending: list[dict[str, Any]] = []
        self.sink_ids = [tid(2), tid(6)]
        self.appends: dict[str, int] | None = None

    def finish(self) -> list[Event]:
        # at history t = 20 s the wall clock reads BASE + 20 s: due_t = 1000 * v ms in
        self.clock.t = 20.0
        self.history.record("timers", drained=not self.pending, wall_ms=BASE + 20_000,
                            processes={PID: {"log": self.log, "done": self.done,
                                             "pending": self.pending}})
        statuses = [IntentStatus(intent_id=tid(v), source=PID, version=v, to=SINK,
                                 entry_id=f"{v}-0", due_ms=BASE + 1000 * v,
                                 state=DeliveryState.DELIVERED) for v in (2, 6)]
        # a remembered cancelled timer whose entry was trimmed: no due_ms, no destination
        statuses.append(IntentStatus(intent_id=tid(4), source=PID, version=4, to="",
                                     entry_id="", state=DeliveryState.CANCELLED))
        statuses.append(IntentStatus(intent_id=f"{PID}:5:0", source=PID, version=5, to="",
                                     entry_id="5-0", state=DeliveryState.DELIVERED,
                                     cancels=tid(4)))
        dest = DestinationRecord(SINK, 10, self.appends or dict.fromkeys(self.sink_ids, 1),
                                 True, {}, frozenset(dedup_slot(i) for i in self.sink_ids))
        self.history.record("outbox", **outbox_event(SINK, statuses, dest, drained=True))
        return self.history.events


def timer_anomalies(events: list[Event], logs: StoredLogs) -> list[str]:
    result = check(events, logs)
    assert {a.invariant for a in result.anomalies} <= {"timers"}, result.to_json()
    return [a.message for a in result.anomalies]


def test_delivered_timers_and_a_winning_cancel_pass_and_lateness_is_per_fault_kind(
        tmp_path: Path) -> None:
    run = Run()
    run.clock.t = 5.5  # a kill-host window over timer 6's due time (6 s) and firing
    run.history.record("nemesis", nemesis="kill-host", phase="inject", window=0,
                       spec={"host": "h1"})
    run.clock.t = 7.0
    run.history.record("nemesis", nemesis="kill-host", phase="heal", window=0)
    events = run.finish()
    write_history(tmp_path / "history.jsonl", events)  # `svit-chaos check` sees the same
    result = check(read_history(tmp_path / "history.jsonl"), run.logs)
    assert result.verdict == "pass", result.to_json()
    assert "timers" in result.stats["invariants"]
    figures = build_report(history=events, logs=run.logs, result=result, run={})["timers"]
    assert figures == timers_figures_of(events, run.logs)
    assert (figures["armed_acked"], figures["cancels_acked"], figures["fired"]) == (3, 1, 2)
    assert figures["cancel_outcomes"] == {"cancelled": 1}
    assert figures["lateness_ms"] == {
        "kill-host": {"count": 1, "p50": 300.0, "p99": 300.0, "max": 300.0},
        "none": {"count": 1, "p50": 300.0, "p99": 300.0, "max": 300.0}}


def timers_figures_of(events: list[Event], logs: StoredLogs) -> dict[str, Any] | None:
    from svit_chaos.checker import build_context

    return timers_figures(build_context(events, logs))


def test_a_timer_reported_cancelled_and_delivered_is_an_anomaly() -> None:
    """What the negative control's dispatcher (ignoring cancels) produces."""
    run = Run()
    run.log.append({"event": "fired", "id": tid(4), "at_ms": str(BASE + 4400)})
    run.done[f"fired:{tid(4)}"] = BASE + 4300
    run.sink_ids.append(tid(4))
    [message] = timer_anomalies(run.finish(), run.logs)
    assert tid(4) in message and "reported cancelled and also delivered" in message


def test_a_timer_never_fired_is_an_anomaly_pending_or_not() -> None:
    run = Run()
    run.log = [e for e in run.log if not (e["event"] == "fired" and e["id"] in (tid(2),
                                                                                tid(6)))]
    run.pending = [{"id": tid(6), "due_ms": BASE + 6000, "state": "pending"}]
    run.sink_ids = []
    messages = sorted(timer_anomalies(run.finish(), run.logs))
    assert len(messages) == 2, messages
    assert tid(2) in messages[0] and "neither pending nor cancelled" in messages[0]
    assert tid(6) in messages[1] and "still pending" in messages[1]


def test_a_timer_fired_before_its_due_time_is_an_anomaly() -> None:
    run = Run()
    run.done[f"fired:{tid(6)}"] = BASE + 5900  # taken 100 ms early
    [message] = timer_anomalies(run.finish(), run.logs)
    assert tid(6) in message and "100 ms before its due time" in message


def test_a_redelivery_under_the_same_key_is_allowed_two_appends_are_not() -> None:
    run = Run()
    run.log.append({"event": "fired", "id": tid(2), "at_ms": str(BASE + 9000)})
    events = run.finish()
    assert timer_anomalies(events, run.logs) == []  # the sink recorded it once
    assert (timers_figures_of(events, run.logs) or {})["fired_same_key_again"] == 1
    twice = Run()
    twice.appends = {tid(2): 2, tid(6): 1}
    [message] = timer_anomalies(twice.finish(), twice.logs)
    assert tid(2) in message and "more than once" in message


def test_a_fired_timer_missing_at_the_sink_is_an_anomaly() -> None:
    run = Run()
    run.sink_ids = [tid(2)]
    [message] = timer_anomalies(run.finish(), run.logs)
    assert tid(6) in message and "no record" in message


def test_a_fire_under_a_key_no_commit_armed_is_an_anomaly() -> None:
    """Version 3 armed nothing: a ``fired`` for ``<p>:3:0`` is a delivery under a
    key no commit made; version 1's committed but unacknowledged timer is fine."""
    run = Run(extra_timer_at=1)
    run.log += [{"event": "fired", "id": tid(3), "at_ms": str(BASE + 9000)},
                {"event": "fired", "id": tid(1), "at_ms": str(BASE + 9000)}]
    [message] = timer_anomalies(run.finish(), run.logs)
    assert tid(3) in message and "no stored entry" in message


def test_an_acknowledged_cancel_never_applied_is_an_anomaly() -> None:
    run = Run()
    run.log = [e for e in run.log if e["event"] != "cancelled"]
    del run.done[f"cancelled:{tid(4)}"]
    run.log.append({"event": "fired", "id": tid(4), "at_ms": str(BASE + 4300)})
    run.sink_ids.append(tid(4))
    [message] = timer_anomalies(run.finish(), run.logs)
    assert tid(4) in message and "never applied" in message


def test_a_run_that_armed_timers_without_a_timers_status_is_inconclusive() -> None:
    run = Run()
    result = check(run.history.events, run.logs)
    assert result.verdict == "inconclusive"
    assert "timers" in {u.invariant for u in result.unverified}


def test_the_negative_timers_control_passes_only_when_the_checker_catches_it() -> None:
    from svit_chaos.run import LegResult, _negative_timers_verdict

    def leg(run: Run) -> LegResult:
        events = run.finish()
        return LegResult("negative", Path("."), events, run.logs, check(events, run.logs))

    fired_anyway = Run()  # the ignoring dispatcher fired the timer whose cancel won
    fired_anyway.log.append({"event": "fired", "id": tid(4), "at_ms": str(BASE + 4400)})
    fired_anyway.sink_ids.append(tid(4))
    assert _negative_timers_verdict(leg(fired_anyway))["verdict"] == "pass"
    missed = leg(Run())  # a cancel won and nothing fired: the switch was not on
    missed.result.anomalies.clear()
    assert _negative_timers_verdict(missed)["verdict"] == "fail"
    no_win = Run()
    no_win.log = [{**e, "event": "too_late"} if e["event"] == "cancelled" else e
                  for e in no_win.log]
    no_win.log.append({"event": "fired", "id": tid(4), "at_ms": str(BASE + 4100)})
    no_win.sink_ids.append(tid(4))
    verdict = _negative_timers_verdict(leg(no_win))
    assert verdict["verdict"] == "inconclusive", verdict
