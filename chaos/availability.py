"""Availability, time-to-recovery and failover, computed from a history alone.

Everything here reads the JSONL history (:mod:`svit_chaos.history`); the stored
logs are optional and only fill in the owner token of acknowledged commits
whose ``ok`` event carries none (a replayed receipt).

Definitions (all times are history ``t``, seconds since the writer started):

**Acknowledged commit** of a process: an ``ok`` event of that process that is
not ``replayed`` (a replayed receipt proves an earlier commit, not that one was
possible at the time of the answer).

**Demand**: the union of the intervals during which an operation on the
process was outstanding (from its ``invoke`` to the ``ok``/``fail``/``info``
with the same ``rid``; an operation never completed stays outstanding to the
process's last operation event) -- the time clients were issuing requests to
it. Its maximal intervals are the *demand intervals*; **span** is from the
first ``invoke`` to the last operation event.

**Gaps**: inside each demand interval, the intervals between consecutive
points of ``interval start, acknowledged commits in it (time order), interval
end``. A gap longer than ``threshold_s`` (default 1 s, strictly longer) is an
*outage*. Time nobody asked is neither available nor unavailable.

**Availability** of a process = ``1 - (sum of outage lengths) / (demand
length)``, each outage counted whole (not only its part beyond the
threshold). A process that never commits while clients keep asking for longer
than the threshold has availability 0; no demand gives None.

**Fault**: a ``nemesis`` ``inject`` event (``stale-owner`` excluded: it only
attempts a fenced write and breaks nothing), open until its ``heal``/``error``
event (or the end of the history). It starts at the event's ``t`` minus
``detail.lead_s`` when given (a compound fault recorded once complete). A
fault names a host (``spec.host``, or ``detail.host`` for ``pause-owner``) or
none (cluster-wide: ``kill-redis``, ``kill-etcd``, ``pause-gcs``, ...).

**Affected processes** of a fault injected at ``t0``: for a host fault, the
processes whose etcd ownership record (``owner`` events) names that host at
``t0``; a process without any ownership record counts when an outage is found
for it (below). For a cluster-wide fault, every process whose span contains
``t0``. A fault outside a process's span does not affect it.

**Time-to-recovery** (fault, affected process): walk the gaps of the process
that end after ``t0``; the first outage whose last acknowledged commit before
it (or the span start) is no later than the fault's heal is the outage the
fault caused (an outage may begin in a demand interval after the heal when
clients were busy elsewhere meanwhile), except that for a host fault an outage
that begins while the ownership records name another host is never this
fault's (the process had moved; a long fault window otherwise took a later
fault's outage on the new owner), and the first acknowledged commit at
or after its end is the recovery. Without such an outage the recovery is the
first acknowledged commit after ``t0`` (the process never stopped). TTR =
recovery time - ``t0``, on any owner. No commit after ``t0`` within the span:
unrecovered (TTR None).

**Failover**: every change of owner seen in the acknowledged owner tokens
(``ok.token``, the gateway's ``X-Svit-Token``) -- the first acknowledged commit
whose token is above every earlier one, after the process's first commit.
Owner loss is the inject time of the fault that caused it: a fault injected
after the old owner's first commit and before the new owner's first commit,
whose window had not healed before the old owner's last commit, preferring the
earliest host fault on the old owner's host (ownership records at ``t0``; any
host fault when the process has none) over the earliest cluster-wide fault.
Without such a fault the change is ``unattributed`` and owner loss is the old
owner's last acknowledged commit. Failover = new owner's first commit - owner
loss.

**Cluster stall**: a gap longer than ``threshold_s`` in the acknowledged
commits of *all* processes together, inside the union of every process's
demand: clients were asking and no process committed. Each stall names the
fault windows it overlaps (none: a stall no deliberate fault explains).

**One etcd member down**: the parts of cluster stalls during which the only
open faults take one etcd member down (``kill-etcd`` on several members, and
the scaled topology's ``kill-etcd-leader`` and ``partition-etcd-member``):
etcd keeps its quorum, so every host should keep its lease and every process
keep committing. A stall there is the cluster's own doing, not the fault's.

**Distributions** use the nearest-rank percentile: ``pN`` of ``n`` sorted
values is the value at rank ``ceil(N/100 * n)`` (1-based).
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from .history import SETTLE_CLIENT, Event
from .logs import StoredLogs

__all__ = [
    "DEFAULT_THRESHOLD_S",
    "IGNORED_KINDS",
    "Fault",
    "availability_report",
    "cluster_stalls",
    "distribution",
    "failovers",
    "fault_windows",
    "markdown_tables",
    "one_member_stalls",
    "process_availability",
    "recoveries",
    "second_host_faults",
    "split_cells",
]

#: A gap between acknowledged commits longer than this (seconds) is an outage.
DEFAULT_THRESHOLD_S = 1.0
#: Nemesis kinds that break nothing (not faults for availability).
IGNORED_KINDS = frozenset({"stale-owner"})

_OPS = frozenset({"invoke", "ok", "fail", "info"})
#: Kinds that take one etcd member down (with several members: the quorum stays).
ONE_MEMBER_KINDS = frozenset({"kill-etcd", "kill-etcd-leader", "partition-etcd-member"})


@dataclass(frozen=True)
class Fault:
    """One injected fault: ``window`` index, ``kind``, ``host`` (None: cluster-wide),
    ``start``/``end`` run seconds (``end``: heal, error or end of history)."""

    window: Any
    kind: str
    host: str | None
    start: float
    end: float
    healed: bool


def fault_windows(history: Sequence[Event]) -> list[Fault]:
    """Every fault of the history (``stale-owner`` excluded), sorted by start."""
    opened: dict[Any, Event] = {}
    end_of_history = max((float(ev["t"]) for ev in history), default=0.0)
    out: list[Fault] = []

    def make(start: Event, end: float, healed: bool) -> Fault:
        host = (start.get("spec") or {}).get("host") or (start.get("detail") or {}).get("host")
        lead = (start.get("detail") or {}).get("lead_s")  # the fault began before its record
        t0 = float(start["t"]) - (float(lead) if isinstance(lead, int | float) else 0.0)
        return Fault(start.get("window"), str(start.get("nemesis")),
                     host if isinstance(host, str) else None, max(0.0, t0), end, healed)

    for ev in history:
        if ev.get("kind") != "nemesis" or ev.get("nemesis") in IGNORED_KINDS:
            continue
        key = ev.get("window")
        if ev.get("phase") == "inject":
            opened[key] = ev
        elif ev.get("phase") in ("heal", "error") and key in opened:
            out.append(make(opened.pop(key), float(ev["t"]), ev.get("phase") == "heal"))
    out.extend(make(start, end_of_history, False) for start in opened.values())
    return sorted(out, key=lambda f: f.start)


@dataclass
class _Process:
    span: tuple[float, float]
    demand: list[tuple[float, float]]  # maximal intervals with an operation outstanding
    acks: list[tuple[float, int | None]]  # (t, owner token or None), time order
    owners: list[tuple[float, str | None]]  # ownership records, time order

    def gaps(self) -> list[tuple[float, float]]:
        """Gaps between consecutive points of each demand interval, in time order."""
        times = [t for t, _ in self.acks]
        out: list[tuple[float, float]] = []
        for start, end in self.demand:
            inside = times[bisect_left(times, start):bisect_right(times, end)]
            points = [start, *inside, end]
            out.extend(pairwise(points))
        return out

    def owner_at(self, t: float) -> str | None:
        current = [host for at, host in self.owners if at <= t]
        return current[-1] if current else None


def _log_tokens(logs: StoredLogs | None) -> dict[str, dict[int, int]]:
    out: dict[str, dict[int, int]] = {}
    if logs is None:
        return out
    for process, log in logs.processes.items():
        merged = {v: e.token for v, e in log.collected.items()}
        merged.update({v: e.token for v, e in log.entries.items()})
        out[process] = merged
    return out


def _merge(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for start, end in sorted(intervals):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def _processes(history: Sequence[Event], logs: StoredLogs | None) -> dict[str, _Process]:
    tokens = _log_tokens(logs)
    first: dict[str, float] = {}
    last: dict[str, float] = {}
    opened: dict[tuple[str, Any], float] = {}
    intervals: dict[str, list[tuple[float, float]]] = defaultdict(list)
    acks: dict[str, list[tuple[float, int | None]]] = defaultdict(list)
    owners: dict[str, list[tuple[float, str | None]]] = defaultdict(list)
    for ev in history:
        process = ev.get("process")
        if not isinstance(process, str):
            continue
        kind, t = ev.get("kind"), float(ev["t"])
        if kind == "owner":
            host = ev.get("host")
            owners[process].append((t, host if isinstance(host, str) else None))
            continue
        if kind not in _OPS or ev.get("client") == SETTLE_CLIENT:
            continue
        if kind == "invoke":
            first.setdefault(process, t)
            opened[(process, ev.get("rid"))] = t
        if process not in first:
            continue  # a completion without any invoke: not a workload operation
        last[process] = max(last.get(process, t), t)
        if kind == "invoke":
            continue
        began = opened.pop((process, ev.get("rid")), None)
        if began is not None:
            intervals[process].append((began, t))
        if kind == "ok" and not ev.get("replayed"):
            token = ev.get("token")
            if not isinstance(token, int) and isinstance(ev.get("version"), int):
                token = tokens.get(process, {}).get(ev["version"])
            acks[process].append((t, token if isinstance(token, int) else None))
    for (process, _), began in opened.items():  # never completed: outstanding to the end
        intervals[process].append((began, last[process]))
    return {p: _Process((first[p], last[p]), _merge(intervals.get(p, [])),
                        sorted(acks.get(p, [])), owners.get(p, []))
            for p in sorted(first)}


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def process_availability(history: Sequence[Event], *,
                         threshold_s: float = DEFAULT_THRESHOLD_S) -> list[dict[str, Any]]:
    """Availability of each process (see the module docstring).

    Returns:
        One dict per process (sorted by id): ``process``, ``start``, ``end``
        (span), ``duration_s`` (span length), ``demand_s``, ``commits``,
        ``outages`` (count), ``unavailable_s``, ``longest_gap_s``,
        ``longest_gap_at`` (its start), ``availability`` (0..1, None without
        demand).
    """
    out: list[dict[str, Any]] = []
    for process, proc in _processes(history, None).items():
        gaps = [(b - a, a) for a, b in proc.gaps()]
        outages = [g for g in gaps if g[0] > threshold_s]
        down = sum(g for g, _ in outages)
        demand = sum(end - start for start, end in proc.demand)
        longest = max(gaps, default=(0.0, proc.span[0]))
        out.append({
            "process": process, "start": _r(proc.span[0]), "end": _r(proc.span[1]),
            "duration_s": _r(proc.span[1] - proc.span[0]), "demand_s": _r(demand),
            "commits": len(proc.acks), "outages": len(outages),
            "unavailable_s": _r(down), "longest_gap_s": _r(longest[0]),
            "longest_gap_at": _r(longest[1]),
            "availability": round(1.0 - down / demand, 4) if demand > 0 else None,
        })
    return out


def _recovery(proc: _Process, fault: Fault, threshold_s: float
              ) -> tuple[float | None, bool, int | None]:
    """(recovery time or None, whether an outage was found, token of the recovery commit)."""
    times = [t for t, _ in proc.acks]
    after = fault.start
    outage = False
    for a, b in proc.gaps():
        if b <= fault.start:
            continue
        k = bisect_right(times, a)
        if (times[k - 1] if k else proc.span[0]) > fault.end:
            break  # the process committed after the heal before this gap began
        if fault.host is not None and proc.owners \
                and proc.owner_at(a) not in (fault.host, None):
            break  # it began on another owner: another fault's outage, not this one's
        if b - a > threshold_s:
            after, outage = b, True
            break
    i = bisect_left(times, after) if outage else bisect_right(times, fault.start)
    if i < len(times):
        return times[i], outage, proc.acks[i][1]
    return None, outage, None


def recoveries(history: Sequence[Event], logs: StoredLogs | None = None, *,
               threshold_s: float = DEFAULT_THRESHOLD_S) -> list[dict[str, Any]]:
    """Time-to-recovery per (fault, affected process) (see the module docstring).

    Returns:
        One dict per pair: ``window``, ``kind``, ``host``, ``process``,
        ``t_fault``, ``t_recovered`` (None: never), ``seconds`` (None: never),
        ``outage`` (an outage was found), ``token`` (of the recovery commit),
        ``attributed`` (``"owner"``, ``"cluster"`` or ``"outage"``).
    """
    procs = _processes(history, logs)
    out: list[dict[str, Any]] = []
    for fault in fault_windows(history):
        for process, proc in procs.items():
            if not proc.span[0] <= fault.start <= proc.span[1]:
                continue
            if fault.host is None:
                how = "cluster"
            elif proc.owners:
                if proc.owner_at(fault.start) != fault.host:
                    continue
                how = "owner"
            else:
                how = "outage"
            t_rec, outage, token = _recovery(proc, fault, threshold_s)
            if how == "outage" and not outage:
                continue
            out.append({"window": fault.window, "kind": fault.kind, "host": fault.host,
                        "process": process, "t_fault": _r(fault.start),
                        "t_recovered": _r(t_rec),
                        "seconds": _r(None if t_rec is None else t_rec - fault.start),
                        "outage": outage, "token": token, "attributed": how})
    return out


def second_host_faults(faults: Sequence[Fault], cause: Fault | None, start: float,
                       end: float) -> list[Any]:
    """The windows of the faults on a host other than ``cause``'s that are open
    at some moment of ``(start, end)``, healing included (a restarted host is
    back once its heal ended), in the order the faults began.

    A failover that overlaps one ran with one survivor fewer than the cluster
    was sized for: with 3 hosts, one host takes over alone, and beyond its warm
    spares each activation first starts a worker. The availability report keeps
    these apart (``alone`` and ``overlapped`` in :func:`_by_kind`), so a figure
    of one fault at a time is not mixed with one of two.
    """
    own = cause.host if cause is not None else None
    return [f.window for f in faults
            if f is not cause and f.host is not None and f.host != own
            and f.start < end and f.end > start]


def failovers(history: Sequence[Event], logs: StoredLogs | None = None
              ) -> list[dict[str, Any]]:
    """Every owner change seen in acknowledged tokens, timed from owner loss.

    Returns:
        One dict per change: ``process``, ``kind`` (of the causing fault, or
        ``"unattributed"``), ``window``, ``host`` (the fault's), ``token_before``,
        ``token_after``, ``t_loss``, ``t_last_old`` (old owner's last commit),
        ``t_new`` (new owner's first commit), ``seconds`` (``t_new - t_loss``),
        ``overlapping``: the windows of faults on *other* hosts open at some
        moment of ``(t_loss, t_new)`` (:func:`second_host_faults`).
    """
    faults = fault_windows(history)
    out: list[dict[str, Any]] = []
    for process, proc in _processes(history, logs).items():
        best: int | None = None
        tenure = last_old = 0.0
        for t, token in proc.acks:
            if token is None:
                continue
            if best is None:
                best, tenure, last_old = token, t, t
                continue
            if token < best:  # an old owner's answer (fenced writes never ack): ignore
                continue
            if token == best:
                last_old = t
                continue
            candidates = [f for f in faults if tenure <= f.start < t and last_old <= f.end]
            on_host = [f for f in candidates if f.host is not None
                       and (not proc.owners or proc.owner_at(f.start) == f.host)]
            cluster = [f for f in candidates if f.host is None]
            chosen = on_host or cluster
            cause = chosen[0] if chosen else None
            loss = cause.start if cause is not None else last_old
            out.append({"process": process,
                        "kind": cause.kind if cause is not None else "unattributed",
                        "window": cause.window if cause is not None else None,
                        "host": cause.host if cause is not None else None,
                        "token_before": best, "token_after": token, "t_loss": _r(loss),
                        "t_last_old": _r(last_old), "t_new": _r(t),
                        "seconds": _r(t - loss),
                        "overlapping": second_host_faults(faults, cause, loss, t)})
            best, tenure, last_old = token, t, t
    return sorted(out, key=lambda f: (f["t_new"], f["process"]))


def cluster_stalls(history: Sequence[Event], *,
                   threshold_s: float = DEFAULT_THRESHOLD_S) -> list[dict[str, Any]]:
    """Every cluster stall (see the module docstring), in time order.

    Returns:
        One dict per stall: ``start``, ``end``, ``seconds``, ``faults`` (the
        kinds of the fault windows it overlaps, sorted), ``windows`` (their
        indexes).
    """
    procs = _processes(history, None).values()
    demand = _merge([interval for proc in procs for interval in proc.demand])
    acks = sorted(t for proc in procs for t, _ in proc.acks)
    faults = fault_windows(history)
    out: list[dict[str, Any]] = []
    for start, end in demand:
        inside = acks[bisect_left(acks, start):bisect_right(acks, end)]
        for a, b in pairwise([start, *inside, end]):
            if b - a > threshold_s:
                during = [f for f in faults if f.start < b and f.end > a]
                out.append({"start": _r(a), "end": _r(b), "seconds": _r(b - a),
                            "faults": sorted({f.kind for f in during}),
                            "windows": [f.window for f in during]})
    return out


def _etcd_members(history: Sequence[Event]) -> int:
    for ev in history[:5]:
        config = ev.get("config")
        if isinstance(config, dict):
            try:
                return int(config.get("etcd_members", 1))
            except (TypeError, ValueError):
                return 1
    return 1


def one_member_stalls(history: Sequence[Event], stalls: Sequence[dict[str, Any]]
                      ) -> list[dict[str, Any]]:
    """The parts of ``stalls`` (:func:`cluster_stalls`) during which the only open
    faults take one etcd member down (see the module docstring); none when the
    run's etcd has a single member (its ``kill-etcd`` stops all of etcd).

    Returns:
        One dict per part: ``start``, ``end``, ``seconds``, ``windows`` (the
        etcd faults open then).
    """
    if _etcd_members(history) < 3:
        return []
    faults = fault_windows(history)
    out: list[dict[str, Any]] = []
    for stall in stalls:
        a, b = float(stall["start"]), float(stall["end"])
        during = [f for f in faults if f.start < b and f.end > a]
        cuts = sorted({a, b, *(t for f in during for t in (f.start, f.end) if a < t < b)})
        for x, y in pairwise(cuts):
            open_now = [f for f in during if f.start <= x and f.end >= y]
            if open_now and all(f.kind in ONE_MEMBER_KINDS for f in open_now):
                if out and out[-1]["end"] == _r(x):  # contiguous: one part
                    out[-1]["end"] = _r(y)
                    out[-1]["seconds"] = _r(y - float(out[-1]["start"]))
                    out[-1]["windows"] = sorted({*out[-1]["windows"],
                                                 *(f.window for f in open_now)})
                else:
                    out.append({"start": _r(x), "end": _r(y), "seconds": _r(y - x),
                                "windows": sorted(f.window for f in open_now)})
    return out


def distribution(values: Sequence[float]) -> dict[str, Any]:
    """``count``, ``p50``, ``p90``, ``max`` (nearest rank; None when empty)."""
    ordered = sorted(values)
    n = len(ordered)

    def rank(p: float) -> float | None:
        return ordered[max(1, math.ceil(p / 100 * n)) - 1] if n else None

    return {"count": n, "p50": rank(50), "p90": rank(90), "max": ordered[-1] if n else None}


def _by_kind(events: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    grouped: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        grouped[str(e["kind"])].append(e)
    out: dict[str, dict[str, Any]] = {}
    for kind, rows in sorted(grouped.items()):
        done = [float(r["seconds"]) for r in rows if r["seconds"] is not None]
        out[kind] = {**distribution(done), "unrecovered": len(rows) - len(done),
                     "outages": sum(bool(r.get("outage")) for r in rows)}
        if any("overlapping" in r for r in rows):  # failovers: one host fault or two
            alone = [float(r["seconds"]) for r in rows
                     if r["seconds"] is not None and not r.get("overlapping")]
            twice = [float(r["seconds"]) for r in rows
                     if r["seconds"] is not None and r.get("overlapping")]
            out[kind]["alone"] = distribution(alone)
            out[kind]["overlapped"] = distribution(twice)
    return out


def split_cells(row: dict[str, Any]) -> dict[str, str]:
    """The ``alone`` and ``overlapped`` figures of a failover row as table cells."""
    if "alone" not in row:
        return {}
    a, o = row["alone"], row["overlapped"]
    return {"alone: n / p90": f"{a['count']} / {a['p90']}",
            "with a second host fault: n / p90 / max":
                f"{o['count']} / {o['p90']} / {o['max']}"}


def availability_report(history: Sequence[Event], logs: StoredLogs | None = None, *,
                        threshold_s: float = DEFAULT_THRESHOLD_S) -> dict[str, Any]:
    """The ``availability`` section of ``report.json``.

    Returns:
        ``threshold_s``; ``processes`` (:func:`process_availability`) with
        ``min``/``mean`` availability and total ``unavailable_s``; ``recovery``
        and ``failover``, each ``{"by_kind": {kind: {count, p50, p90, max,
        unrecovered, outages}}, "events": [...]}``; ``faults``: per fault
        ``window``, ``kind``, ``start``, ``end``, ``recovered_at`` (the last
        affected process's recovery; None if one never recovered or none was
        affected), ``affected``; ``stalls``: ``count``, ``longest_s``,
        ``total_s``, ``events`` (:func:`cluster_stalls`) and
        ``one_etcd_member_down`` (``longest_s``, ``events``:
        :func:`one_member_stalls`).
    """
    procs = process_availability(history, threshold_s=threshold_s)
    rec = recoveries(history, logs, threshold_s=threshold_s)
    fail = failovers(history, logs)
    stalls = cluster_stalls(history, threshold_s=threshold_s)
    one = one_member_stalls(history, stalls)
    values = [p["availability"] for p in procs if p["availability"] is not None]
    per_fault: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for r in rec:
        per_fault[r["window"]].append(r)
    faults = []
    for f in fault_windows(history):
        rows = per_fault.get(f.window, [])
        done = [r["t_recovered"] for r in rows]
        faults.append({"window": f.window, "kind": f.kind, "host": f.host,
                       "start": _r(f.start), "end": _r(f.end), "affected": len(rows),
                       "recovered_at": max(done) if rows and None not in done else None})
    return {
        "threshold_s": threshold_s,
        "processes": procs,
        "min": min(values) if values else None,
        "mean": round(sum(values) / len(values), 4) if values else None,
        "unavailable_s": _r(sum(p["unavailable_s"] for p in procs)),
        "recovery": {"by_kind": _by_kind(rec), "events": rec},
        "failover": {"by_kind": _by_kind(fail), "events": fail},
        "faults": faults,
        "stalls": {"count": len(stalls),
                   "longest_s": max((x["seconds"] for x in stalls), default=None),
                   "total_s": _r(sum(x["seconds"] for x in stalls)),
                   "events": stalls,
                   "one_etcd_member_down": {
                       "longest_s": max((x["seconds"] for x in one), default=None),
                       "events": one}},
    }


def _md(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    def cell(v: Any) -> str:
        if v is None:
            return "-"
        return str(round(v, 4) if isinstance(v, float) else v)

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(r.get(c)) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


def markdown_tables(section: dict[str, Any], *, max_processes: int | None = None) -> str:
    """Markdown tables of an :func:`availability_report` section.

    Args:
        max_processes: show only the least available processes (None: all).
    """
    procs = sorted(section.get("processes", []),
                   key=lambda p: (p["availability"] is None, p["availability"] or 0.0))
    shown = procs if max_processes is None else procs[:max_processes]
    thr = section.get("threshold_s")
    parts = [
        f"### Availability per process (outage: no commit for more than {thr} s)",
        f"min {section.get('min')}, mean {section.get('mean')}, "
        f"unavailable {section.get('unavailable_s')} s in total"
        + (f"; {len(shown)} least available of {len(procs)} shown"
           if len(shown) < len(procs) else ""),
        "",
        _md(shown, ["process", "availability", "demand_s", "unavailable_s", "outages",
                    "longest_gap_s", "longest_gap_at", "commits"]),
    ]
    for title, key in (("Time to recovery per fault kind (fault start -> first commit on "
                        "any owner), seconds", "recovery"),
                       ("Failover per fault kind (owner loss -> first commit on the new "
                        "owner), seconds", "failover")):
        rows = [{"kind": k, **v, **split_cells(v)}
                for k, v in (section.get(key, {}).get("by_kind") or {}).items()]
        columns = ["kind", "count", "p50", "p90", "max", "unrecovered"]
        if any("alone" in v for v in (section.get(key, {}).get("by_kind") or {}).values()):
            columns += ["alone: n / p90", "with a second host fault: n / p90 / max"]
        parts += ["", f"### {title}", "", _md(rows, columns)]
    stalls = section.get("stalls") or {}
    events = sorted(stalls.get("events") or [], key=lambda x: -x["seconds"])
    parts += ["", f"### Cluster stalls (no process committed for more than {thr} s "
                  "while clients asked)",
              f"{stalls.get('count', 0)} stalls, longest {stalls.get('longest_s')} s, "
              f"{stalls.get('total_s')} s in total" + ("; the 10 longest:" if len(events) > 10
                                                        else "")]
    if events:
        rows = [{**x, "faults": ", ".join(x["faults"]) or "none"} for x in events[:10]]
        parts += ["", _md(rows, ["start", "seconds", "faults"])]
    one = stalls.get("one_etcd_member_down") or {}
    if one.get("events") is not None:
        parts += ["", f"While only one etcd member was down: {len(one['events'])} stall "
                      f"parts, longest {one.get('longest_s')} s."]
    return "\n".join(parts) + "\n"
