"""Reports: ``report.json``, ``report.md``, ``report.html`` with an embedded PNG timeline.

The timeline shows acknowledged commits per second and failed / unknown
operations per second over one lane per fault kind, each fault a bar with its
recovery marked (:mod:`svit_chaos.availability`). The ``availability`` section
gives per-process availability and, per fault kind, the time-to-recovery and
failover distributions; ``failover_breakdown`` cuts each failover into steps
(:mod:`svit_chaos.breakdown`) and ``failed_requests`` sorts the operations that
did not commit by cause (:mod:`svit_chaos.failed`). Failover
times are measured from each host fault that can move ownership (kill, pause,
etcd cut) to the first acknowledged commit, on each process, by an owner with a
higher token than the process had before the fault.
"""

from __future__ import annotations

import base64
import html
import io
import json
import statistics
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .availability import (
    DEFAULT_THRESHOLD_S,
    availability_report,
    fault_windows,
    markdown_tables,
    split_cells,
)
from .breakdown import STEPS, breakdown_markdown, breakdown_report
from .checker import CheckResult, build_context
from .failed import CAUSES, failed_markdown, failed_requests
from .history import Event
from .kinds import FAILOVER_KINDS
from .leases import leases_markdown, leases_report
from .logs import StoredLogs
from .ports import ports_figures
from .timers import timers_figures, timers_markdown

__all__ = ["build_report", "failover_times", "ports_markdown", "render_timeline",
           "timeline_figure", "write_html", "write_json", "write_markdown"]

_COLORS = {
    "kill-host": "#d62728", "pause-host": "#9467bd", "cut-etcd": "#ff7f0e",
    "cut-redis": "#8c564b", "slow-link": "#bcbd22", "kill-redis": "#e377c2",
    "kill-etcd": "#17becf", "stale-owner": "#7f7f7f", "pause-owner": "#2ca02c",
    "stop-raylet": "#393b79", "kill-agent": "#e7969c", "term-host": "#843c39",
    "pause-gcs": "#637939", "etcd-restart-dead-host": "#7b4173", "load-host": "#e6550d",
}
_PALETTE = ("#1f77b4", "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94",
            "#f7b6d2", "#dbdb8d", "#9edae5")


def _color(kind: str) -> str:
    return _COLORS.get(kind) or _PALETTE[sum(map(ord, kind)) % len(_PALETTE)]


def _tokens(logs: StoredLogs) -> dict[str, dict[int, int]]:
    out: dict[str, dict[int, int]] = {}
    for process, log in logs.processes.items():
        merged = {v: e.token for v, e in log.collected.items()}
        merged.update({v: e.token for v, e in log.entries.items()})
        out[process] = merged
    return out


def failover_times(history: Sequence[Event], logs: StoredLogs, *,
                   horizon_s: float = 60.0) -> list[dict[str, Any]]:
    """Seconds from each failover fault to the first commit by a newer owner, per process.

    A process counts as affected when the etcd ownership record (``owner``
    events) put it on the faulted host at the time of the fault. Without
    ownership events, a process counts when its token rose before the next
    fault was injected (and within ``horizon_s``).

    Returns:
        One dict per (fault, affected process): ``window``, ``kind``, ``host``,
        ``process``, ``t_fault``, ``token_before``, ``token_after``, ``seconds``,
        ``attributed`` (``"owner"`` or ``"timing"``).
    """
    tokens = _tokens(logs)
    oks: dict[str, list[tuple[float, int]]] = defaultdict(list)
    fences: dict[str, list[tuple[float, int]]] = defaultdict(list)
    owners: dict[str, list[tuple[float, str | None, int | None]]] = defaultdict(list)
    injects: list[Event] = []
    for ev in history:
        kind = ev.get("kind")
        if kind == "nemesis" and ev.get("phase") == "inject":
            injects.append(ev)
        process = ev.get("process")
        if not isinstance(process, str):
            continue
        if kind == "ok" and isinstance(ev.get("version"), int):
            token = ev.get("token")
            if not isinstance(token, int):
                token = tokens.get(process, {}).get(ev["version"])
            if isinstance(token, int):
                oks[process].append((float(ev["t"]), token))
        elif kind == "fence" and isinstance(ev.get("fence"), int):
            fences[process].append((float(ev["t"]), ev["fence"]))
        elif kind == "owner":
            owners[process].append((float(ev["t"]), ev.get("host"), ev.get("token")))
    out: list[dict[str, Any]] = []
    for i, ev in enumerate(injects):
        if ev.get("nemesis") not in FAILOVER_KINDS:
            continue
        t0 = float(ev["t"])
        # an owner fault names its host in the inject detail (picked at run time)
        host = (ev.get("spec") or {}).get("host") or (ev.get("detail") or {}).get("host")
        later = [float(e["t"]) for e in injects[i + 1:] if e.get("nemesis") != "stale-owner"]
        next_fault = min(later, default=float("inf"))
        for process in sorted(set(oks) | set(fences)):
            before = max([tok for t, tok in fences.get(process, ()) if t <= t0]
                         + [tok for t, tok in oks.get(process, ()) if t <= t0] + [0])
            records = owners.get(process)
            if records:
                current = [r for r in records if r[0] <= t0]
                if not current or current[-1][1] != host:
                    continue
                before = max(before, current[-1][2] or 0)
                until, how = t0 + horizon_s, "owner"
            else:
                until, how = min(t0 + horizon_s, next_fault), "timing"
            if before == 0:
                continue
            for t, tok in oks.get(process, ()):
                if t > until:
                    break
                if t > t0 and tok > before:
                    out.append({"window": ev.get("window"), "kind": ev.get("nemesis"),
                                "host": host, "process": process, "t_fault": round(t0, 3),
                                "token_before": before, "token_after": tok,
                                "seconds": round(t - t0, 3), "attributed": how})
                    break
    return out


def _windows(history: Sequence[Event]) -> list[dict[str, Any]]:
    opened: dict[Any, Event] = {}
    out: list[dict[str, Any]] = []
    end = max((float(ev["t"]) for ev in history), default=0.0)
    for ev in history:
        if ev.get("kind") != "nemesis":
            continue
        key = ev.get("window")
        if ev.get("phase") == "inject":
            opened[key] = ev
        elif ev.get("phase") in ("heal", "error") and key in opened:
            start = opened.pop(key)
            out.append({"window": key, "kind": start.get("nemesis"),
                        "label": _label(start), "start": float(start["t"]),
                        "end": float(ev["t"]), "healed": ev.get("phase") == "heal"})
    for key, start in opened.items():
        out.append({"window": key, "kind": start.get("nemesis"), "label": _label(start),
                    "start": float(start["t"]), "end": end, "healed": False})
    return sorted(out, key=lambda w: w["start"])


def _label(ev: Event) -> str:
    spec = ev.get("spec") or {}
    parts = [str(ev.get("nemesis"))]
    for key in ("host", "mode", "service"):
        if spec.get(key):
            parts.append(str(spec[key]))
    return " ".join(parts)


def build_report(
    *,
    history: Sequence[Event],
    logs: StoredLogs,
    result: CheckResult,
    run: dict[str, Any],
    controls: dict[str, Any] | None = None,
    verdict: str | None = None,
    threshold_s: float = DEFAULT_THRESHOLD_S,
) -> dict[str, Any]:
    """The ``report.json`` document of one run.

    Args:
        history, logs, result: the main run's history, dumped logs and check.
        run: parameters (scenario, seed, hosts, clients, processes, duration_s, ...).
        controls: outcomes of the negative and lost-commit controls, if run.
        verdict: the overall verdict (default: the check's).
        threshold_s: a gap between commits longer than this is an outage
            (:func:`~svit_chaos.availability.availability_report`).
    """
    faults = Counter(str(ev.get("nemesis")) for ev in history
                     if ev.get("kind") == "nemesis" and ev.get("phase") == "inject")
    failovers = failover_times(history, logs)
    seconds = [f["seconds"] for f in failovers]
    availability = availability_report(history, logs, threshold_s=threshold_s)
    return {
        "verdict": verdict or result.verdict,
        "run": run,
        "faults_injected": dict(sorted(faults.items())),
        "faults_total": sum(faults.values()),
        "nemesis_windows": _windows(history),
        "operations": {k: result.stats.get(k, 0)
                       for k in ("operations", "ok", "fail", "info", "pending")},
        "acked_commits": result.stats.get("ok", 0),
        "intents_checked": result.stats.get("intents", 0),
        "anomaly_count": len(result.anomalies),
        "anomalies_by_invariant": result.by_invariant(),
        "anomalies": [a.to_json() for a in result.anomalies],
        "unverified": [u.to_json() for u in result.unverified],
        "harness_errors": list(result.harness_errors),
        "failover": {
            "count": len(failovers),
            "max_s": max(seconds) if seconds else None,
            "median_s": statistics.median(seconds) if seconds else None,
            "events": failovers,
        },
        "availability": availability,
        "failover_breakdown": breakdown_report(history, logs),
        "failed_requests": failed_requests(history, availability["faults"]),
        "check": {"verdict": result.verdict, "stats": result.stats},
        "controls": controls or {},
        "ports": _ports(history, logs),
        "timers": _timers(history, logs),
        "host_leases": leases_report(history),
    }


def _ports(history: Sequence[Event], logs: StoredLogs) -> dict[str, Any] | None:
    """The port-call figures of a ``--workload ports`` run (None for other workloads)."""
    if not any(ev.get("kind") == "ports" for ev in history):
        return None
    return ports_figures(build_context(history, logs))


def _timers(history: Sequence[Event], logs: StoredLogs) -> dict[str, Any] | None:
    """The timer figures of a run that armed timers (None otherwise)."""
    if not any(ev.get("kind") == "timers" for ev in history):
        return None
    return timers_figures(build_context(history, logs))


def ports_markdown(ports: dict[str, Any] | None) -> str:
    """The port-call figures as a markdown table ("" when there are none)."""
    if not ports:
        return ""
    rows = "".join(f"| {k} | {_cell(v)} |\n" for k, v in ports.items())
    return "## Port calls\n\n| figure | value |\n|---|---|\n" + rows + "\n"


def timeline_figure(history: Sequence[Event], *, title: str = "",
                    faults: Sequence[dict[str, Any]] | None = None) -> Any:
    """A matplotlib ``Figure``: operation rates above, one lane per fault kind below.

    The lower axes has one horizontal lane per fault kind (y tick labels, in
    order of first injection); each fault is a bar from inject to heal, a black
    tick marks when the last affected process recovered (a line joins it to
    the start), a red ``x`` at the bar's end a fault some process never
    recovered from. No per-fault text, so 100 faults stay readable.

    Args:
        faults: the ``availability.faults`` rows (default: computed from ``history``).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if faults is None:
        faults = availability_report(history)["faults"]
    end = max((float(ev["t"]) for ev in history), default=1.0)
    bins = max(1, int(end) + 1)
    ok = [0] * bins
    bad = [0] * bins
    unknown = [0] * bins
    for ev in history:
        kind = ev.get("kind")
        slot = min(bins - 1, int(float(ev["t"])))
        if kind == "ok":
            ok[slot] += 1
        elif kind == "fail":
            bad[slot] += 1
        elif kind == "info":
            unknown[slot] += 1
    kinds = list(dict.fromkeys(str(f.kind) for f in fault_windows(history)))
    xs = list(range(bins))
    fig, (ax, lanes) = plt.subplots(
        2, 1, sharex=True, figsize=(12, 3.4 + 0.32 * max(1, len(kinds))), dpi=100,
        gridspec_kw={"height_ratios": [3.0, max(1.0, 0.45 * len(kinds))]})
    try:
        _draw(ax, lanes, xs, ok, bad, unknown, kinds, faults, title, end)
    except BaseException:
        plt.close(fig)
        raise
    return fig


def _draw(ax: Any, lanes: Any, xs: list[int], ok: list[int], bad: list[int],
          unknown: list[int], kinds: list[str], faults: Sequence[dict[str, Any]],
          title: str, end: float) -> None:
    lane = {k: i for i, k in enumerate(kinds)}
    ax.plot(xs, ok, color="#2ca02c", linewidth=1.2, label="commits/s")
    ax.plot(xs, bad, color="#1f77b4", linewidth=0.9, label="failed/s (conflict, rejected)")
    ax.plot(xs, unknown, color="#d62728", linewidth=0.9, linestyle="--", label="unknown/s")
    ax.set_ylabel("operations per second")
    ax.set_ylim(bottom=0)
    ax.legend(loc="lower right", bbox_to_anchor=(1.0, 1.0), fontsize=7, ncol=3,
              frameon=False)
    if title:
        ax.set_title(title, fontsize=10, loc="left")
    for f in faults:
        kind = str(f["kind"])
        if kind not in lane:
            continue
        y = lane[kind]
        start, stop = float(f["start"]), float(f["end"])
        lanes.broken_barh([(start, max(stop - start, 0.2))], (y - 0.3, 0.6),
                          facecolors=_color(kind), alpha=0.55)
        if f.get("recovered_at") is not None:
            rec = float(f["recovered_at"])
            lanes.plot([start, rec], [y, y], color="#222222", linewidth=0.6)
            lanes.plot([rec], [y], marker="|", markersize=9, color="#000000",
                       linestyle="none", gid="recovery")
        elif f.get("affected"):
            lanes.plot([stop], [y], marker="x", markersize=6, color="#d62728",
                       linestyle="none", gid="unrecovered")
    lanes.set_yticks(range(len(kinds)), kinds, fontsize=8)
    lanes.set_ylim(-0.6, max(0.6, len(kinds) - 0.4))
    lanes.invert_yaxis()
    lanes.grid(axis="x", color="#eeeeee")
    lanes.set_xlabel("run time (s); bar: fault inject..heal, |: last affected process "
                     "recovered, x: not recovered")
    lanes.set_xlim(0, max(1.0, end))
    ax.figure.tight_layout()


def render_timeline(history: Sequence[Event], *, title: str = "",
                    faults: Sequence[dict[str, Any]] | None = None) -> bytes:
    """A PNG of :func:`timeline_figure`."""
    import matplotlib.pyplot as plt

    fig = timeline_figure(history, title=title, faults=faults)
    try:
        buf = io.BytesIO()
        fig.savefig(buf, format="png")
        return buf.getvalue()
    finally:
        plt.close(fig)


def write_json(path: Path, report: dict[str, Any]) -> None:
    """Write ``report.json`` (sorted keys, indented)."""
    path.write_text(json.dumps(report, indent=2, sort_keys=True, default=str) + "\n")


def write_markdown(path: Path, report: dict[str, Any]) -> None:
    """Write ``report.md``: the verdict line, the host leases and the availability tables."""
    leases = report.get("host_leases") or {}
    lost = (f", host leases lost {leases.get('lost', 0)} (in load windows "
            f"{leases.get('lost_in_load_windows', 0)}, unexplained there "
            f"{leases.get('unexplained_in_load_windows', 0)})" if leases.get("recorded")
            else "")
    flags = "".join(f"- FLAG: {f}\n" for f in leases.get("flags", []))
    head = (f"# svit-chaos report: {str(report.get('verdict')).upper()}\n\n"
            f"faults {report.get('faults_total', 0)}, acked commits "
            f"{report.get('acked_commits', 0)}, anomalies {report.get('anomaly_count', 0)}"
            f"{lost}\n\n" + (flags + "\n" if flags else ""))
    body = markdown_tables(report["availability"]) if report.get("availability") else ""
    for extra in (breakdown_markdown(report.get("failover_breakdown")),
                  failed_markdown(report.get("failed_requests"))):
        body += "\n" + extra if extra else ""
    path.write_text(head + ports_markdown(report.get("ports"))
                    + timers_markdown(report.get("timers")) + leases_markdown(leases)
                    + body, encoding="utf-8")


def _table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    if not rows:
        return "<p><em>none</em></p>"
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(_cell(r.get(c)))}</td>" for c in columns) + "</tr>"
        for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _dist(dist: dict[str, Any]) -> str:
    """``p50 / p90 / max`` of a distribution, with the unobserved count when any."""
    shown = f"{dist['p50']} / {dist['p90']} / {dist['max']}" if dist.get("count") else "-"
    missing = sum((dist.get("unobserved") or {}).values())
    return shown + (f" ({missing} unobserved)" if missing else "")


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value)
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True)
    return str(value)


def write_html(path: Path, report: dict[str, Any], png: bytes | None) -> None:
    """Write a self-contained ``report.html`` (the PNG is embedded as base64)."""
    verdict = str(report.get("verdict"))
    color = {"pass": "#2ca02c", "fail": "#d62728"}.get(verdict, "#ff7f0e")
    run = report.get("run", {})
    failover = report.get("failover", {})
    availability = report.get("availability", {})
    summary = [
        {"item": "scenario", "value": run.get("scenario")},
        {"item": "seed", "value": run.get("seed")},
        {"item": "hosts / clients / processes",
         "value": f"{run.get('hosts')} / {run.get('clients')} / {run.get('processes')}"},
        {"item": "duration (s)", "value": run.get("duration_s")},
        {"item": "faults injected", "value": report.get("faults_total")},
        {"item": "operations", "value": report.get("operations")},
        {"item": "acknowledged commits", "value": report.get("acked_commits")},
        {"item": "outbox intents checked", "value": report.get("intents_checked")},
        {"item": "anomalies", "value": report.get("anomaly_count")},
        {"item": "failover max / median (s)",
         "value": f"{failover.get('max_s')} / {failover.get('median_s')}"},
        {"item": "availability min / mean (outage: no commit for more than "
                 f"{availability.get('threshold_s')} s)",
         "value": f"{availability.get('min')} / {availability.get('mean')}"},
    ]
    controls = [{"control": k, **v} for k, v in sorted(report.get("controls", {}).items())]
    image = (f'<img alt="timeline" src="data:image/png;base64,{base64.b64encode(png).decode()}">'
             if png else "<p><em>no timeline</em></p>")
    sections = "\n".join(f"<h2>{html.escape(title)}</h2>{body}" for title, body in (
        ("Summary", _table(summary, ["item", "value"])),
        ("Timeline", image),
        ("Faults", _table(report.get("nemesis_windows", []),
                          ["window", "label", "start", "end", "healed"])),
        ("Anomalies", _table(report.get("anomalies", []),
                             ["invariant", "process", "message", "versions", "tokens",
                              "lines"])),
        ("Not verified", _table(report.get("unverified", []),
                                ["invariant", "process", "message"])),
        ("Availability per process", _table(
            availability.get("processes", []),
            ["process", "availability", "demand_s", "unavailable_s", "outages",
             "longest_gap_s", "longest_gap_at", "commits"])),
        ("Time to recovery per fault kind (s)", _table(
            [{"kind": k, **v} for k, v in availability.get("recovery", {}).get(
                "by_kind", {}).items()], ["kind", "count", "p50", "p90", "max", "unrecovered"])),
        ("Failover per fault kind (s); alone: no fault on another host meanwhile", _table(
            [{"kind": k, **v, **split_cells(v)} for k, v in availability.get(
                "failover", {}).get("by_kind", {}).items()],
            ["kind", "count", "p50", "p90", "max", "unrecovered", "alone: n / p90",
             "with a second host fault: n / p90 / max"])),
        ("Failover breakdown per fault kind (p50 / p90 / max, s)", _table(
            [{"kind": k, "count": v["count"],
              **{s: _dist(v["steps"][s]) for s in STEPS},
              "fault -> claimed": _dist(v["to_claim"]), "total": _dist(v["total"])}
             for k, v in (report.get("failover_breakdown") or {}).get("by_kind", {}).items()],
            ["kind", "count", *STEPS, "fault -> claimed", "total"])),
        ("Failed requests per fault kind", _table(
            [{"kind": k, **v} for k, v in
             (report.get("failed_requests") or {}).get("by_kind", {}).items()],
            ["kind", *CAUSES, "all"])),
        ("Failovers", _table(availability.get("failover", {}).get("events", []),
                             ["kind", "host", "process", "t_loss", "t_new", "token_before",
                              "token_after", "seconds"])),
        ("Host leases per host", _table(
            [{"host": h, **{k: v for k, v in row.items() if k != "leases"},
              "leases held": len(row["leases"])}
             for h, row in (report.get("host_leases") or {}).get("hosts", {}).items()],
            ["host", "leases held", "lost", "lost_in_load_windows",
             "unexplained_in_load_windows", "unexplained_outside_load_windows"])),
        ("Host lease losses", _table(
            (report.get("host_leases") or {}).get("losses", []),
            ["host", "lease", "since", "t", "replaced_by", "load_windows", "explained_by",
             "reason"])),
        ("Controls", _table(controls, ["control", "verdict", "expected", "detail"])),
        ("Port calls", _table([{"figure": k, "value": v} for k, v in
                               (report.get("ports") or {}).items()], ["figure", "value"])),
        ("Harness errors", _table([{"error": e} for e in report.get("harness_errors", [])],
                                  ["error"])),
    ))
    doc = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>svit-chaos {html.escape(str(run.get('scenario')))}</title>
<style>
body {{ font-family: sans-serif; margin: 2em; color: #222; }}
.verdict {{ display: inline-block; padding: .3em 1em; color: #fff; background: {color};
           font-size: 1.4em; border-radius: 4px; }}
table {{ border-collapse: collapse; margin: .5em 0 1.5em; font-size: .9em; }}
td, th {{ border: 1px solid #ccc; padding: .25em .6em; text-align: left; vertical-align: top; }}
th {{ background: #f3f3f3; }}
img {{ max-width: 100%; border: 1px solid #ddd; }}
</style></head><body>
<h1>svit-chaos report</h1>
<p class="verdict">{html.escape(verdict.upper())}</p>
{sections}
</body></html>
"""
    path.write_text(doc, encoding="utf-8")
