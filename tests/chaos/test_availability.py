"""Availability, time-to-recovery and failover from synthetic histories with known answers.

Every expected figure below is computed by hand from the history drawn in the
test (the arithmetic is in the comments), not read back from the code.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
from svit_chaos.availability import (
    availability_report,
    cluster_stalls,
    distribution,
    failovers,
    markdown_tables,
    one_member_stalls,
    process_availability,
    recoveries,
)
from svit_chaos.checker import check
from svit_chaos.history import SETTLE_CLIENT
from svit_chaos.logs import StoredLogs
from svit_chaos.report import (
    build_report,
    render_timeline,
    timeline_figure,
    write_html,
    write_markdown,
)

P, Q = "svit://chaos/av-p", "svit://chaos/av-q"
_rids = itertools.count()


def chain(process: str, client: str, start: float,
          oks: list[tuple[float, int | None]]) -> list[dict[str, Any]]:
    """Back-to-back operations of one client: invoke at ``start``, ok at ``oks[0]``,
    the next invoke at that same moment, and so on (demand never pauses)."""
    out: list[dict[str, Any]] = []
    t = start
    for at, token in oks:
        rid = f"r{next(_rids)}"
        out.append({"kind": "invoke", "t": t, "client": client, "process": process,
                    "rid": rid, "expected": 0})
        ok: dict[str, Any] = {"kind": "ok", "t": at, "client": client, "process": process,
                              "rid": rid, "version": 1, "replayed": False}
        if token is not None:
            ok["token"] = token
        out.append(ok)
        t = at
    return out


def steps(first: float, last: float, token: int | None, step: float = 0.5
          ) -> list[tuple[float, int | None]]:
    n = round((last - first) / step)
    return [(round(first + k * step, 3), token) for k in range(n + 1)]


def fault(kind: str, window: int, start: float, end: float, host: str | None = None
          ) -> list[dict[str, Any]]:
    spec = {"kind": kind, **({"host": host} if host else {})}
    return [{"kind": "nemesis", "t": start, "phase": "inject", "nemesis": kind,
             "window": window, "spec": spec, "detail": {}},
            {"kind": "nemesis", "t": end, "phase": "heal", "nemesis": kind,
             "window": window, "spec": spec, "detail": {}}]


def owner(t: float, process: str, host: str | None, token: int) -> dict[str, Any]:
    return {"kind": "owner", "t": t, "process": process, "host": host, "token": token}


def history(*parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    events = sorted((e for part in parts for e in part), key=lambda e: e["t"])
    return [{**e, "line": n} for n, e in enumerate(events, 1)]


# -- availability ----------------------------------------------------------------------


def test_a_known_five_second_gap_is_shown_and_a_gapless_run_is_fully_available() -> None:
    # one client, back to back, demand [0, 20]; commits every 0.5 s except that the
    # operation invoked at 5.0 commits only at 10.0: one 5 s outage
    gap = chain(P, "c0", 0.0, [*steps(0.5, 5.0, 4), *steps(10.0, 20.0, 4)])
    # negative control: the same client without the gap
    steady = chain(Q, "c1", 0.0, steps(0.5, 20.0, 4))
    rows = {r["process"]: r for r in process_availability(history(gap, steady))}
    p, q = rows[P], rows[Q]
    assert (p["demand_s"], p["outages"], p["unavailable_s"]) == (20.0, 1, 5.0)
    assert (p["longest_gap_s"], p["longest_gap_at"]) == (5.0, 5.0)
    assert p["availability"] == 0.75  # 1 - 5 / 20
    assert p["commits"] == 10 + 21
    assert (q["outages"], q["unavailable_s"], q["availability"]) == (0, 0.0, 1.0)
    assert q["longest_gap_s"] == 0.5


def test_a_cluster_stall_is_a_gap_of_every_process_at_once_and_names_its_faults() -> None:
    # P and Q commit every 0.5 s over [0, 20]; both wait from 10.0 to 13.0 (a kill-etcd
    # window 9.5..12.5 covers it): one 3 s stall. P alone waits 15.0 -> 17.0 while Q
    # keeps committing every 0.5 s: an outage of P, not a stall (negative control).
    p = chain(P, "c0", 0.0, [*steps(0.5, 10.0, 1), (13.0, 1), *steps(13.5, 15.0, 1),
                             *steps(17.0, 20.0, 1)])
    q = chain(Q, "c1", 0.0, [*steps(0.5, 10.0, 2), *steps(13.0, 20.0, 2)])
    events = history(p, q, fault("kill-etcd", 0, 9.5, 12.5))
    assert cluster_stalls(events) == [{"start": 10.0, "end": 13.0, "seconds": 3.0,
                                       "faults": ["kill-etcd"], "windows": [0]}]
    assert {r["process"]: r["outages"] for r in process_availability(events)} == {P: 2, Q: 1}
    section = availability_report(events)
    assert (section["stalls"]["count"], section["stalls"]["longest_s"]) == (1, 3.0)
    assert "| 10.0 | 3.0 | kill-etcd |" in markdown_tables(section)
    # the same stall without a fault window: it names none
    assert cluster_stalls(history(p, q))[0]["faults"] == []


def test_the_part_of_a_stall_while_only_one_etcd_member_is_down_is_its_own_figure() -> None:
    # P and Q both wait 10.0 -> 13.0 and 16.0 -> 19.0. A kill-etcd window 9.5..12.5
    # covers the first stall up to 12.5, a pause-host 11.0..14.0 overlaps it from
    # 11.0: only 10.0..11.0 has one member down and nothing else. The second
    # stall has kill-etcd alone throughout (15.5..20.0): 3.0 s.
    p = chain(P, "c0", 0.0, [*steps(0.5, 10.0, 1), *steps(13.0, 16.0, 1), *steps(19.0, 22.0, 1)])
    q = chain(Q, "c1", 0.0, [*steps(0.5, 10.0, 2), *steps(13.0, 16.0, 2), *steps(19.0, 22.0, 2)])
    config = [{"kind": "config", "t": 0.0, "config": {"etcd_members": "3"}}]
    faults = [*fault("kill-etcd", 0, 9.5, 12.5), *fault("pause-host", 1, 11.0, 14.0, "h1"),
              *fault("kill-etcd", 2, 15.5, 20.0)]
    events = history(config, p, q, faults)
    stalls = cluster_stalls(events)
    assert [(x["start"], x["seconds"]) for x in stalls] == [(10.0, 3.0), (16.0, 3.0)]
    assert one_member_stalls(events, stalls) == [
        {"start": 10.0, "end": 11.0, "seconds": 1.0, "windows": [0]},
        {"start": 16.0, "end": 19.0, "seconds": 3.0, "windows": [2]}]
    section = availability_report(events)
    assert section["stalls"]["one_etcd_member_down"]["longest_s"] == 3.0
    assert "While only one etcd member was down: 2 stall parts, longest 3.0 s." \
        in markdown_tables(section)
    # negative controls: with one etcd member, kill-etcd stops all of etcd (no
    # figure); and with no etcd fault open, no part counts
    single = history([{"kind": "config", "t": 0.0, "config": {"etcd_members": "1"}}],
                     p, q, faults)
    assert one_member_stalls(single, cluster_stalls(single)) == []
    other = history(config, p, q, fault("pause-host", 0, 9.5, 20.0, "h1"))
    assert one_member_stalls(other, cluster_stalls(other)) == []


def test_threshold_is_strict_and_an_outage_counts_whole() -> None:
    # demand [0, 4]; commits at 1.0, 2.0, 3.5, 4.0: gaps 1.0, 1.0, 1.0, 1.5, 0.5
    rows = process_availability(history(chain(P, "c0", 0.0, [(1.0, 4), (2.0, 4), (3.0, 4),
                                                              (4.5, 4), (5.0, 4)])))
    assert rows[0]["outages"] == 1 and rows[0]["unavailable_s"] == 1.5
    assert rows[0]["availability"] == 0.7  # 1 - 1.5 / 5
    # a higher threshold: no outage at all
    assert process_availability(history(chain(Q, "c0", 0.0, [(1.0, 4), (2.5, 4)])),
                                threshold_s=2.0)[0]["availability"] == 1.0


def test_time_nobody_asked_is_not_charged() -> None:
    # commits every 0.5 s on [0, 5] and [15, 20], no invoke in between: demand 10 s
    events = history(chain(P, "c0", 0.0, steps(0.5, 5.0, 4)),
                     chain(P, "c0", 15.0, steps(15.5, 20.0, 4)))
    row = process_availability(events)[0]
    assert (row["demand_s"], row["duration_s"], row["availability"]) == (10.0, 20.0, 1.0)


def test_the_harness_settle_commits_after_healing_are_not_workload_demand() -> None:
    # the loss control's settle commit 30 s after the run ends (a slow operation
    # of its own) neither stretches the span nor counts as an outage or a commit
    run = chain(P, "c0", 0.0, steps(0.5, 5.0, 4))
    settle = chain(P, SETTLE_CLIENT, 35.0, [(40.0, 4)])
    row = process_availability(history(run, settle))[0]
    assert (row["duration_s"], row["outages"], row["commits"]) == (5.0, 0, 10)


def test_an_operation_that_never_completes_is_unavailable_to_the_end() -> None:
    # commits every 0.5 s to 5.0; the op invoked at 5.0 ends as "info" at 12.0 (deadline)
    events = chain(P, "c0", 0.0, steps(0.5, 5.0, 4))
    events += [{"kind": "invoke", "t": 5.0, "client": "c0", "process": P, "rid": "lost",
                "expected": 10},
               {"kind": "info", "t": 12.0, "client": "c0", "process": P, "rid": "lost",
                "error": "unavailable"}]
    events += fault("kill-host", 0, 5.2, 9.0, "h1")
    events.append(owner(0.0, P, "h1", 4))
    h = history(events)
    row = process_availability(h)[0]
    assert row["unavailable_s"] == 7.0 and row["availability"] == round(1 - 7 / 12, 4)
    [rec] = recoveries(h)
    assert rec["seconds"] is None and rec["outage"] is True
    report = availability_report(h)
    assert report["recovery"]["by_kind"]["kill-host"] == {
        "count": 0, "p50": None, "p90": None, "max": None, "unrecovered": 1, "outages": 1}
    assert report["faults"][0]["recovered_at"] is None


# -- recovery and failover -------------------------------------------------------------


def run_with_faults() -> list[dict[str, Any]]:
    """P starts on h1 (token 4), Q on h2 (token 5); one client each, back to back.

    * kill-host h1 at 10 (heal 16): P's last commit 9.5, new owner (token 9) at 14.2.
    * kill-redis at 20 (heal 22): P commits 19.7 -> 23.0, Q 19.5 -> 22.5, same owners.
    * stale-owner 25..26: breaks nothing, ignored.
    * cut-etcd h2 at 30 (heal 38): Q keeps committing to 32.5, new owner (token 11) 35.0.
    * no fault: P changes owner (9 -> 12) between 44.5 and 46.0.
    * slow-link h2 at 50 (heal 52): P (on h2 since 45.5) commits at 50.5 as usual.
    """
    p = chain(P, "c0", 0.0, [*steps(0.5, 9.5, 4), *steps(14.2, 19.7, 9), (23.0, 9),
                             *steps(23.5, 44.5, 9), *steps(46.0, 60.0, 12)])
    q = chain(Q, "c1", 0.0, [*steps(0.5, 19.5, 5), *steps(22.5, 32.5, 5),
                             *steps(35.0, 60.0, 11)])
    owners = [owner(0.0, P, "h1", 4), owner(0.0, Q, "h2", 5), owner(13.5, P, "h3", 9),
              owner(34.5, Q, "h1", 11), owner(45.5, P, "h2", 12)]
    return history(p, q, owners, fault("kill-host", 0, 10.0, 16.0, "h1"),
                   fault("kill-redis", 1, 20.0, 22.0), fault("stale-owner", 2, 25.0, 26.0),
                   fault("cut-etcd", 3, 30.0, 38.0, "h2"),
                   fault("slow-link", 4, 50.0, 52.0, "h2"))


def test_time_to_recovery_per_fault_and_affected_process() -> None:
    got = {(r["kind"], r["process"]): (r["seconds"], r["outage"], r["token"])
           for r in recoveries(run_with_faults())}
    assert got == {
        ("kill-host", P): (4.2, True, 9),     # 14.2 - 10
        ("kill-redis", P): (3.0, True, 9),    # 23.0 - 20
        ("kill-redis", Q): (2.5, True, 5),    # 22.5 - 20
        ("cut-etcd", Q): (5.0, True, 11),     # 35.0 - 30: served to 32.5, then the outage
        ("slow-link", P): (0.5, False, 12),   # 50.5 - 50: never stopped
    }


def test_an_outage_on_the_new_owner_is_not_the_earlier_host_faults() -> None:
    """From the ten-minute chaos run of 2026-12-01 (seed 12): pause-host h1 open
    for 50 s while P moved to h2 (nobody asked P meanwhile: every client was held
    on other processes); a later outage on h2 was charged to the pause (56 s).

    P on h1 (token 4) commits to 10.0; pause-host h1 10.2..60 (heal); no demand
    until P's new owner h2 (record at 16.0, token 9) commits at 17.2; then an
    outage 40.0 -> 45.0 on h2 (caused by something else)."""
    p = chain(P, "c0", 0.0, steps(0.5, 10.0, 4))
    p += chain(P, "c0", 17.0, [*steps(17.2, 40.0, 9, step=0.4), *steps(45.0, 70.0, 9)])
    owners = [owner(0.0, P, "h1", 4), owner(12.0, P, None, 4), owner(16.0, P, "h2", 9)]
    h = history(p, owners, fault("pause-host", 0, 10.2, 60.0, "h1"))
    [rec] = recoveries(h)
    # no outage before P's first commit after the fault (17.2): recovered then
    assert (rec["seconds"], rec["outage"], rec["token"]) == (7.0, False, 9)  # 17.2 - 10.2
    [fo] = failovers(h)
    assert (fo["kind"], fo["seconds"]) == ("pause-host", 7.0)


def test_failover_from_owner_loss_to_the_new_owners_first_commit() -> None:
    got = [(f["process"], f["kind"], f["token_before"], f["token_after"], f["t_loss"],
            f["seconds"]) for f in failovers(run_with_faults())]
    assert got == [
        (P, "kill-host", 4, 9, 10.0, 4.2),       # fault on P's owner h1 at 10
        (Q, "cut-etcd", 5, 11, 30.0, 5.0),       # fault on Q's owner h2 at 30
        (P, "unattributed", 9, 12, 44.5, 1.5),   # no fault: from the old owner's last commit
    ]


def test_a_failover_during_a_fault_on_another_host_is_reported_apart() -> None:
    """P's owner h1 is killed at 10 while h2 is paused (8..12): P's failover
    (4.2 s) ran with one survivor and is ``overlapped``; Q's cut-etcd on h2 at
    30 ran alone, and so did P's unattributed owner change at 44.5."""
    h = history(run_with_faults(), fault("pause-host", 9, 8.0, 12.0, "h2"))
    got = {(f["process"], f["kind"]): f["overlapping"] for f in failovers(h)}
    assert got == {(P, "kill-host"): [9], (Q, "cut-etcd"): [], (P, "unattributed"): []}
    fo = availability_report(h)["failover"]["by_kind"]
    assert fo["kill-host"]["alone"]["count"] == 0
    assert fo["kill-host"]["overlapped"] == {"count": 1, "p50": 4.2, "p90": 4.2, "max": 4.2}
    assert fo["cut-etcd"]["alone"]["p90"] == 5.0 and fo["cut-etcd"]["overlapped"]["count"] == 0
    # the faults of the same host, or of no host, are not a second host fault
    assert [f["overlapping"] for f in failovers(run_with_faults())] == [[], [], []]
    assert "| kill-host | 1 | 4.2 | 4.2 | 4.2 | 0 | 0 / None | 1 / 4.2 / 4.2 |" in \
        markdown_tables(availability_report(h))


def test_report_tables_per_fault_kind() -> None:
    report = availability_report(run_with_faults())
    rec = report["recovery"]["by_kind"]
    assert set(rec) == {"kill-host", "kill-redis", "cut-etcd", "slow-link"}
    # nearest rank over [2.5, 3.0]: p50 = rank 1, p90 = rank 2
    assert rec["kill-redis"] == {"count": 2, "p50": 2.5, "p90": 3.0, "max": 3.0,
                                 "unrecovered": 0, "outages": 2}
    assert rec["slow-link"]["outages"] == 0
    fo = report["failover"]["by_kind"]
    assert {k: v["max"] for k, v in fo.items()} == {"kill-host": 4.2, "cut-etcd": 5.0,
                                                    "unattributed": 1.5}
    rows = {r["process"]: r["availability"] for r in report["processes"]}
    # P: outages 4.7 + 3.3 + 1.5 = 9.5 of 60; Q: 3.0 + 2.5 = 5.5 of 60
    assert rows == {P: round(1 - 9.5 / 60, 4), Q: round(1 - 5.5 / 60, 4)}
    assert report["min"] == rows[P]
    assert {f["kind"]: f["recovered_at"] for f in report["faults"]} == {
        "kill-host": 14.2, "kill-redis": 23.0, "cut-etcd": 35.0, "slow-link": 50.5}
    text = markdown_tables(report)
    assert "| kill-redis | 2 | 2.5 | 3.0 | 3.0 | 0 |" in text
    assert "| unattributed | 1 | 1.5 | 1.5 | 1.5 | 0 |" in text
    assert f"| {P} | {rows[P]} |" in text


@pytest.mark.parametrize(("values", "expected"), [
    ([], (0, None, None, None)),
    ([7.0], (1, 7.0, 7.0, 7.0)),
    ([float(v) for v in range(1, 11)], (10, 5.0, 9.0, 10.0)),
    ([float(v) for v in range(1, 12)], (11, 6.0, 10.0, 11.0)),  # ceil(9.9) = 10
])
def test_nearest_rank_distribution(values: list[float], expected: tuple[Any, ...]) -> None:
    d = distribution(values)
    assert (d["count"], d["p50"], d["p90"], d["max"]) == expected


def test_build_report_carries_the_tables_into_json_markdown_and_html(tmp_path: Path) -> None:
    events = run_with_faults()
    report = build_report(history=events, logs=StoredLogs(), result=check(events, StoredLogs()),
                          run={"scenario": "t", "seed": 1})
    assert report["availability"]["recovery"]["by_kind"]["kill-host"]["max"] == 4.2
    write_markdown(tmp_path / "report.md", report)
    md = (tmp_path / "report.md").read_text()
    assert "Failover per fault kind" in md and "| cut-etcd | 1 | 5.0 | 5.0 | 5.0 | 0 |" in md
    write_html(tmp_path / "report.html", report, None)
    page = (tmp_path / "report.html").read_text()
    assert "Availability per process" in page and "Time to recovery per fault kind" in page


# -- the timeline at 100 faults --------------------------------------------------------

KINDS = ("kill-host", "pause-host", "cut-etcd", "kill-redis", "kill-etcd", "cut-redis")


def hundred_faults() -> tuple[list[dict[str, Any]], int]:
    """600 s, one process that always runs on h1, 100 faults of 6 kinds every 6 s.

    Host faults hit h1 (P's owner), the others are cluster-wide, so P is affected by
    every fault; its commits stop for 2 s after each (3 s after every 7th).
    Returns (history, number of faults P recovered from).
    """
    oks: list[tuple[float, int | None]] = []
    faults: list[dict[str, Any]] = []
    t = 0.0
    for i in range(100):
        start = 2.0 + 6.0 * i
        while t + 0.5 < start:
            t = round(t + 0.5, 3)
            oks.append((t, 4))
        down = 3.0 if i % 7 == 0 else 2.0
        t = round(start + down, 3)
        oks.append((t, 4))
        kind = KINDS[i % len(KINDS)]
        faults += fault(kind, i, start, start + 1.5,
                        "h1" if kind in ("kill-host", "pause-host", "cut-etcd",
                                         "cut-redis") else None)
    return history(chain(P, "c0", 0.0, oks), [owner(0.0, P, "h1", 4)], faults), 100


def test_timeline_at_100_faults_has_one_lane_per_kind_and_a_recovery_mark_each() -> None:
    import matplotlib.pyplot as plt

    events, recovered = hundred_faults()
    fig = timeline_figure(events, title="100 faults")
    try:
        rates, lanes = fig.axes
        assert [t.get_text() for t in lanes.get_yticklabels()] == list(KINDS)
        assert len(lanes.collections) == 100  # one bar per fault
        marks = [line for line in lanes.get_lines() if line.get_gid() == "recovery"]
        assert len(marks) == recovered
        # each recovery mark sits in its fault's lane, 2 or 3 s after the start
        assert sorted({round(float(m.get_xdata()[0]) - 2.0, 3) % 6.0 for m in marks}) == [
            2.0, 3.0]
        assert {int(m.get_ydata()[0]) for m in marks} == set(range(len(KINDS)))
        assert not rates.texts and not lanes.texts  # no per-fault labels to overlap
    finally:
        plt.close(fig)
    png = render_timeline(events)
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
