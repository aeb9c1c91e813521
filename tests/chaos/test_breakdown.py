"""Failover breakdown and failed-request causes from hand-built histories.

Every expected figure is worked out by hand from the history drawn in the test
(the arithmetic is in the comments).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from svit_chaos.availability import failovers
from svit_chaos.breakdown import breakdown_markdown, breakdown_report, failover_breakdown
from svit_chaos.checker import check
from svit_chaos.failed import cause_of, failed_markdown, failed_requests
from svit_chaos.logs import StoredLogs
from svit_chaos.report import build_report, write_html, write_markdown

P = "svit://chaos/bd-p"


def sort_t(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = sorted(events, key=lambda e: e["t"])
    for i, ev in enumerate(out, 1):
        ev["line"] = i
    return out


def op(t_invoke: float, t_done: float, token: int, rid: str, *, sent: float | None = None,
       kind: str = "ok", **extra: Any) -> list[dict[str, Any]]:
    done: dict[str, Any] = {"kind": kind, "t": t_done, "client": "c1", "process": P,
                            "rid": rid, "version": 1, "replayed": False, "token": token,
                            **extra}
    if sent is not None:
        done["sent"] = sent
    return [{"kind": "invoke", "t": t_invoke, "client": "c1", "process": P, "rid": rid,
             "expected": 0}, done]


def nemesis(kind: str, start: float, end: float, host: str) -> list[dict[str, Any]]:
    spec = {"kind": kind, "host": host}
    return [{"kind": "nemesis", "t": start, "phase": "inject", "nemesis": kind, "window": 0,
             "spec": spec, "detail": {}},
            {"kind": "nemesis", "t": end, "phase": "heal", "nemesis": kind, "window": 0,
             "spec": spec, "detail": {}}]


def kill_host_history(*, with_etcd: bool = True, with_sends: bool = True
                      ) -> list[dict[str, Any]]:
    """P on h1 (token 10) commits at 1..4; h1 is killed at 5.0 (healed at 9.0).

    etcd: the old record vanishes, seen at 8.1 (read before at 7.9); the record
    of h2 with token 20 is seen at 8.5 (since 8.3). h1's lease is seen gone at
    8.3. The Redis fence reaches 20 at 8.4. The first answer under token 20 is a
    conflict sent at 8.45 (answered 8.7); the first commit under token 20 is
    sent at 8.9 and answered at 9.0.
    """
    s = (lambda v: v) if with_sends else (lambda v: None)
    events: list[dict[str, Any]] = [{"kind": "meta", "t": 0.0, "lease_ttl_s": 3.0}]
    for i, t in enumerate((1.0, 2.0, 3.0, 4.0)):
        events += op(t - 0.5, t, 10, f"a{i}", sent=s(t - 0.5))
    events += nemesis("kill-host", 5.0, 9.0, "h1")
    events += op(8.45, 8.7, 20, "c0", sent=s(8.45), kind="fail", outcome="conflict", actual=4)
    events += op(8.9, 9.0, 20, "b0", sent=s(8.9))
    events += op(9.0, 9.5, 20, "b1", sent=s(9.0))
    if with_etcd:
        events += [
            {"kind": "owner", "t": 0.5, "process": P, "host": "h1", "token": 10, "since": None},
            {"kind": "owner", "t": 8.1, "process": P, "host": None, "token": None,
             "since": 7.9},
            {"kind": "owner", "t": 8.5, "process": P, "host": "h2", "token": 20, "since": 8.3},
            {"kind": "host_lease", "t": 0.4, "host": "h1", "lease": 111, "incarnation": 1,
             "previous": None, "since": None},
            {"kind": "host_lease", "t": 8.3, "host": "h1", "lease": None,
             "incarnation": None, "previous": 111, "since": 8.1},
        ]
    events += [{"kind": "fence", "t": 0.6, "process": P, "fence": 10, "head": 0},
               {"kind": "fence", "t": 8.4, "process": P, "fence": 20, "head": 4,
                "since": 8.35}]
    return sort_t(events)


def test_every_point_seen_gives_steps_that_add_up_to_the_failover() -> None:
    history = kill_host_history()
    (row,) = failover_breakdown(history)
    # fault 5.0; detected = first of (record gone 8.1, lease lost 8.3) = 8.1;
    # claimed = first of (record token 20 at 8.5, fence 20 at 8.4) = 8.4;
    # routed = first send under token 20: the conflict sent at 8.45; committed 9.0
    assert row["points"] == {"fault": 5.0, "detected": 8.1, "claimed": 8.4, "routed": 8.45,
                             "committed": 9.0}
    assert row["steps"] == {"detect": 3.1, "claim": 0.3, "route": 0.05, "commit": 0.55}
    assert row["unobserved"] == {}
    # the record vanished after the read at 7.9; the fence rose after the read at 8.35
    assert row["seen_after"] == {"detected": 7.9, "claimed": 8.35}
    (fo,) = failovers(history)
    assert row["total"] == fo["seconds"] == 4.0  # 9.0 - 5.0, the failover figure
    assert round(sum(row["steps"].values()), 3) == row["total"]


def test_a_request_sent_before_the_claim_counts_as_routed_at_the_claim() -> None:
    history = [ev for ev in kill_host_history() if ev.get("rid") != "c0"]
    history.append({"kind": "invoke", "t": 8.2, "client": "c2", "process": P, "rid": "w",
                    "expected": 4})
    history.append({"kind": "fail", "t": 8.8, "client": "c2", "process": P, "rid": "w",
                    "outcome": "conflict", "actual": 5, "token": 20, "sent": 8.2,
                    "replayed": False})
    (row,) = failover_breakdown(sort_t(history))
    # sent 8.2 < claimed 8.4: it waited at the gateway, routed = 8.4
    assert row["points"]["routed"] == 8.4
    assert row["steps"]["route"] == 0.0 and row["steps"]["commit"] == 0.6


def test_unobservable_points_are_null_with_a_reason_never_guessed() -> None:
    history = kill_host_history(with_etcd=False, with_sends=False)
    (row,) = failover_breakdown(history)
    assert row["points"]["detected"] is None and row["points"]["routed"] is None
    assert row["points"]["claimed"] == 8.4  # the Redis fence is still read
    assert row["steps"] == {"detect": None, "claim": None, "route": None, "commit": None}
    assert "keeps none in etcd" in row["unobserved"]["detect"]
    assert "keeps none in etcd" in row["unobserved"]["claim"]
    assert "no send times" in row["unobserved"]["route"]
    assert row["total"] == 4.0
    section = breakdown_report(history)
    kh = section["by_kind"]["kill-host"]
    assert kh["count"] == 1 and kh["total"]["p50"] == 4.0
    assert kh["steps"]["detect"]["count"] == 0
    assert list(kh["steps"]["detect"]["unobserved"].values()) == [1]
    md = breakdown_markdown(section)
    # fault 5.0 -> fence at 20 seen 8.4: 3.4 s to the claim, known without the loss
    assert row["to_claim"] == 3.4
    assert "| kill-host | 1 | - | - | - | - | 3.4 / 3.4 / 3.4 | 4.0 / 4.0 / 4.0 |" in md
    assert "kill-host, detect: not observed in 1 of 1" in md


def test_a_sighting_after_the_first_commit_belongs_only_if_its_read_interval_began_before() \
        -> None:
    base = [ev for ev in kill_host_history() if ev["kind"] not in ("owner", "host_lease",
                                                                   "fence")]
    late = [{"kind": "owner", "t": 0.5, "process": P, "host": "h1", "token": 10, "since": None},
            # replaced record seen at 9.1, previous read at 8.95 (< commit 9.0): counts
            {"kind": "owner", "t": 9.1, "process": P, "host": "h2", "token": 20, "since": 8.95}]
    (row,) = failover_breakdown(sort_t(base + late))
    # detected and claimed both capped at the commit (9.0): the commit proves the claim
    assert row["points"]["detected"] == row["points"]["claimed"] == 9.0
    assert row["steps"] == {"detect": 4.0, "claim": 0.0, "route": 0.0, "commit": 0.0}
    later = [late[0], {**late[1], "t": 12.0, "since": 11.8}]  # read began after the commit
    (row,) = failover_breakdown(sort_t(base + later))
    assert row["points"]["claimed"] is None and row["points"]["detected"] is None
    assert "were not seen to change" in row["unobserved"]["detect"]


def test_percentiles_per_kind_over_several_failovers() -> None:
    # three kill-host failovers of 3 processes; detect steps 1.0, 2.0, 4.0
    history: list[dict[str, Any]] = [{"kind": "meta", "t": 0.0}]
    for n, detect in enumerate((1.0, 2.0, 4.0)):
        proc = f"svit://chaos/bd-{n}"
        history += [{**e, "process": proc, "rid": f"{e.get('rid')}-{n}"}
                    for e in op(0.5, 1.0, 10, "x", sent=0.5) + op(12.0, 12.5, 20, "y", sent=12.0)]
        history += [{"kind": "owner", "t": 0.2, "process": proc, "host": "h1", "token": 10},
                    {"kind": "owner", "t": 2.0 + detect, "process": proc, "host": None,
                     "token": None, "since": 1.9 + detect},
                    {"kind": "owner", "t": 11.0, "process": proc, "host": "h2", "token": 20,
                     "since": 10.9}]
    history += nemesis("kill-host", 2.0, 6.0, "h1")
    section = breakdown_report(sort_t(history))
    steps = section["by_kind"]["kill-host"]["steps"]
    assert steps["detect"] == {"count": 3, "p50": 2.0, "p90": 4.0, "max": 4.0, "unobserved": {}}
    # claim = 11.0 - (2.0 + detect): 8.0, 7.0, 5.0 -> p50 7.0 (rank 2 of 3)
    assert steps["claim"] == {"count": 3, "p50": 7.0, "p90": 8.0, "max": 8.0, "unobserved": {}}
    assert section["by_kind"]["kill-host"]["total"]["p50"] == 10.5  # 12.5 - 2.0


def test_failed_requests_are_sorted_by_cause_and_charged_to_fault_kinds() -> None:
    history = kill_host_history()
    extra = [
        # during kill-host (5.0 .. recovery 9.0): unavailable, timeout, transport
        {"kind": "info", "t": 6.0, "process": P, "rid": "u1",
         "error": "UnavailableError: unavailable: no healthy host"},
        {"kind": "info", "t": 7.0, "process": P, "rid": "t1", "error": "ReadTimeout: timed out"},
        {"kind": "info", "t": 7.5, "process": P, "rid": "n1", "error": "ConnectError: refused"},
        {"kind": "info", "t": 7.6, "process": P, "rid": "m1",
         "error": "conflict (actual 9) after an unknown outcome: UnavailableError: x"},
        # outside every fault
        {"kind": "fail", "t": 3.5, "process": P, "rid": "x1", "outcome": "conflict", "actual": 2},
        {"kind": "fail", "t": 3.6, "process": P, "rid": "x2", "outcome": "rejected",
         "code": "fuel_exhausted"},
        {"kind": "info", "t": 3.7, "process": P, "rid": "x3", "error": "cancelled"},
    ]
    section = failed_requests(sort_t(history + extra))
    # kill-host: the conflict at 8.7 plus the four infos
    assert section["by_kind"]["kill-host"] == {"conflict": 1, "unavailable": 1, "timeout": 1,
                                               "ambiguous": 1, "transport": 1, "rejected": 0,
                                               "other": 0, "all": 5}
    assert section["by_kind"]["none"] == {"conflict": 1, "unavailable": 0, "timeout": 0,
                                          "ambiguous": 0, "transport": 0, "rejected": 1,
                                          "other": 1, "all": 3}
    assert section["total"]["all"] == 8
    assert "| kill-host | 1 | 1 | 1 | 1 | 1 | 0 | 0 | 5 |" in failed_markdown(section)
    assert cause_of({"kind": "fail", "outcome": "error", "code": "unavailable"}) == "unavailable"


def test_the_report_carries_the_breakdown_and_the_failed_requests(tmp_path: Path) -> None:
    history = kill_host_history()
    logs = StoredLogs()
    report = build_report(history=history, logs=logs, result=check(history, logs),
                          run={"scenario": "t"})
    bd = report["failover_breakdown"]["by_kind"]["kill-host"]
    assert bd["steps"]["detect"]["p50"] == 3.1
    assert bd["total"]["max"] == report["availability"]["failover"]["by_kind"]["kill-host"][
        "max"] == 4.0
    assert report["failed_requests"]["by_kind"]["kill-host"]["conflict"] == 1
    write_markdown(tmp_path / "report.md", report)
    md = (tmp_path / "report.md").read_text()
    assert "| kill-host | 1 | 3.1 / 3.1 / 3.1 | 0.3 / 0.3 / 0.3 | 0.05 / 0.05 / 0.05 | " \
           "0.55 / 0.55 / 0.55 | 3.4 / 3.4 / 3.4 | 4.0 / 4.0 / 4.0 |" in md
    assert "### Failed requests per fault kind" in md
    write_html(tmp_path / "report.html", report, None)
    assert "Failover breakdown per fault kind" in (tmp_path / "report.html").read_text()
    json.dumps(report, default=str)


def test_commit_tokens_come_from_the_logs_when_the_gateway_sent_none() -> None:
    from svit_chaos.logs import StoredEntry

    history = kill_host_history(with_etcd=False)
    logs = StoredLogs()
    for ev in history:
        if ev["kind"] == "ok":
            ev["version"] = int(ev["t"] * 10)  # 10, 20, 30, 40, 90, 95
            logs.get(P).entries[ev["version"]] = StoredEntry(P, ev["version"], ev.pop("token"),
                                                             b"")
        elif ev["kind"] == "fail":
            ev.pop("token")  # no X-Svit-Token: the conflict cannot be placed
    (row,) = failover_breakdown(history, logs)
    # the first commit under 20 (from the logs) was sent at 8.9, after the claim at 8.4
    assert row["points"]["routed"] == 8.9 and row["steps"]["commit"] == 0.1
    assert row["total"] == 4.0
