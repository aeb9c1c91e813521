"""Report pieces: failover times from a history, JSON, PNG timeline, self-contained HTML."""

from __future__ import annotations

import json
from pathlib import Path

from svit_chaos.checker import check
from svit_chaos.clock import ManualClock
from svit_chaos.history import HistoryWriter
from svit_chaos.logs import StoredEntry, StoredLogs
from svit_chaos.report import build_report, failover_times, render_timeline, write_html, write_json

P = "svit://chaos/rep-p0"


async def history_with_a_failover() -> tuple[HistoryWriter, StoredLogs]:
    clock = ManualClock()
    h = HistoryWriter(clock=clock)
    logs = StoredLogs()
    log = logs.get(P)
    h.record("fence", process=P, fence=4, head=0)
    version = 0
    for step in range(20):
        await clock.advance(0.5)
        if step == 6:
            h.record("nemesis", phase="inject", nemesis="kill-host", window=0,
                     spec={"kind": "kill-host", "host": "h1"}, detail={})
        if step == 12:
            h.record("nemesis", phase="heal", nemesis="kill-host", window=0,
                     spec={"kind": "kill-host", "host": "h1"}, detail={"restarted": False})
        if 7 <= step < 10:  # unavailable while the lease runs out
            h.record("invoke", client="c0", process=P, rid=f"r{step}", expected=version)
            h.record("info", client="c0", process=P, rid=f"r{step}", error="503")
            continue
        token = 4 if step < 7 else 9
        version += 1
        log.entries[version] = StoredEntry(P, version, token, b"{}")
        h.record("invoke", client="c0", process=P, rid=f"r{step}", expected=version - 1)
        h.record("ok", client="c0", process=P, rid=f"r{step}", version=version)
    return h, logs


async def test_failover_is_measured_from_fault_to_first_commit_by_a_newer_owner() -> None:
    h, logs = await history_with_a_failover()
    failovers = failover_times(h.events, logs)
    assert failovers == [{"window": 0, "kind": "kill-host", "host": "h1", "process": P,
                          "t_fault": 3.5, "token_before": 4, "token_after": 9,
                          "seconds": 2.0, "attributed": "timing"}]


async def test_ownership_records_decide_which_processes_a_fault_affects() -> None:
    h, logs = await history_with_a_failover()
    events = h.events
    owner = {"line": 0, "t": 0.0, "kind": "owner", "process": P, "token": 4}
    on_h1 = check_failovers([{**owner, "host": "h1"}, *events], logs)
    assert [(f["process"], f["seconds"], f["attributed"]) for f in on_h1] == [(P, 2.0, "owner")]
    assert check_failovers([{**owner, "host": "h2"}, *events], logs) == []


def check_failovers(events: list[dict[str, object]], logs: StoredLogs) -> list[dict[str, object]]:
    return failover_times(events, logs)


async def test_report_json_png_and_html(tmp_path: Path) -> None:
    h, logs = await history_with_a_failover()
    result = check(h.events, StoredLogs())  # no stored state: acked commits are "lost"
    report = build_report(history=h.events, logs=logs, result=result,
                          run={"scenario": "t", "seed": 1, "hosts": 3, "clients": 1,
                               "processes": 1, "duration_s": 10},
                          controls={"negative": {"verdict": "pass", "expected": "fail",
                                                 "detail": "caught"}})
    assert report["verdict"] == "fail" and report["anomaly_count"] == len(result.anomalies)
    assert report["faults_injected"] == {"kill-host": 1}
    assert report["operations"]["info"] == 3 and report["acked_commits"] == 17
    assert report["failover"]["max_s"] == 2.0
    assert report["nemesis_windows"][0]["healed"] is True
    write_json(tmp_path / "report.json", report)
    assert json.loads((tmp_path / "report.json").read_text())["verdict"] == "fail"
    png = render_timeline(h.events, title="t")
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    write_html(tmp_path / "report.html", report, png)
    page = (tmp_path / "report.html").read_text()
    assert "FAIL" in page and "data:image/png;base64," in page and "kill-host h1" in page
    assert "<script" not in page
