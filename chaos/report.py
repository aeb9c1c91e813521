"""Reports: ``report.json``, ``report.html`` with an embedded PNG timeline.

The timeline shows acknowledged commits per second and failed / unknown
operations per second, with every nemesis window shaded and labelled. Failover
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

from .checker import CheckResult
from .history import Event
from .logs import StoredLogs
from .nemesis import FAILOVER_KINDS

__all__ = ["build_report", "failover_times", "render_timeline", "write_html", "write_json"]

_COLORS = {
    "kill-host": "#d62728", "pause-host": "#9467bd", "cut-etcd": "#ff7f0e",
    "cut-redis": "#8c564b", "slow-link": "#bcbd22", "kill-redis": "#e377c2",
    "kill-etcd": "#17becf", "stale-owner": "#7f7f7f", "pause-owner": "#2ca02c",
}


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
) -> dict[str, Any]:
    """The ``report.json`` document of one run.

    Args:
        history, logs, result: the main run's history, dumped logs and check.
        run: parameters (scenario, seed, hosts, clients, processes, duration_s, ...).
        controls: outcomes of the negative and lost-commit controls, if run.
        verdict: the overall verdict (default: the check's).
    """
    faults = Counter(str(ev.get("nemesis")) for ev in history
                     if ev.get("kind") == "nemesis" and ev.get("phase") == "inject")
    failovers = failover_times(history, logs)
    seconds = [f["seconds"] for f in failovers]
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
        "check": {"verdict": result.verdict, "stats": result.stats},
        "controls": controls or {},
    }


def render_timeline(history: Sequence[Event], *, title: str = "") -> bytes:
    """A PNG: commits/s and failures/s over time, nemesis windows shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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
    xs = list(range(bins))
    fig, ax = plt.subplots(figsize=(11, 4.2), dpi=100)
    try:
        seen: set[str] = set()
        for i, w in enumerate(_windows(history)):
            kind = str(w["kind"])
            color = _COLORS.get(kind, "#cccccc")
            ax.axvspan(w["start"], max(w["end"], w["start"] + 0.2), color=color, alpha=0.18,
                       label=kind if kind not in seen else None)
            seen.add(kind)
            ax.text(w["start"], 1.0 - 0.07 * (i % 4), w["label"],
                    transform=ax.get_xaxis_transform(), fontsize=7, color=color, va="top")
        ax.plot(xs, ok, color="#2ca02c", linewidth=1.4, label="commits/s")
        ax.plot(xs, bad, color="#1f77b4", linewidth=1.0, label="failed/s (conflict, rejected)")
        ax.plot(xs, unknown, color="#d62728", linewidth=1.0, linestyle="--",
                label="unknown/s")
        ax.set_xlabel("run time (s)")
        ax.set_ylabel("operations per second")
        ax.set_xlim(0, max(1, end))
        ax.set_ylim(bottom=0)
        if title:
            ax.set_title(title, fontsize=10)
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), fontsize=7, ncol=6,
                  frameon=False)
        fig.tight_layout()
        buf = io.BytesIO()
        fig.savefig(buf, format="png")
        return buf.getvalue()
    finally:
        plt.close(fig)


def write_json(path: Path, report: dict[str, Any]) -> None:
    """Write ``report.json`` (sorted keys, indented)."""
    path.write_text(json.dumps(report, indent=2, sort_keys=True, default=str) + "\n")


def _table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    if not rows:
        return "<p><em>none</em></p>"
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(_cell(r.get(c)))}</td>" for c in columns) + "</tr>"
        for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


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
        ("Failovers", _table(report.get("failover", {}).get("events", []),
                             ["kind", "host", "process", "t_fault", "token_before",
                              "token_after", "seconds"])),
        ("Controls", _table(controls, ["control", "verdict", "expected", "detail"])),
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
