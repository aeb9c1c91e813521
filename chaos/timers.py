"""Durable timers in the chaos run: the ``timers`` history event, invariant and figures.

The workload (``WorkloadConfig.timer_every``) arms timers to the run's sink and
cancels some of them; each acknowledged activation's ``ok`` event names the
timers it armed (``timers``: ``[{id, due_ms}]``, from the committed intents in
its answer) and the cancels it staged (``cancels``: ``[timer id]``). After
healing, once no timer is pending, the harness records a ``timers`` event
(:func:`timers_event`): per sender, its timer log (``svit_cluster.dispatch.timer_log``:
``armed``, ``fired``, ``dead_lettered`` and the cancel outcomes, each with
``at_ms``), its remembered outcomes (the ``done`` zset: ``fired:<id>`` scored
with the Redis time the timer was *taken* for delivery, ``cancelled:<id>``)
and what is still pending; plus ``wall_ms``, the harness's clock when the
event was written, to place due times on the history's time axis.

Invariant ``timers`` (:func:`check_timers`), for every acknowledged arm:

* **cancelled means never delivered**: a timer whose cancel outcome was
  ``cancelled`` is never fired and never recorded at the sink;
* otherwise it is **delivered**: fired (logged ``fired``) and recorded at the
  sink under its own id (the sink, a Svit process, dedups by idempotency key:
  a redelivery with the same key is allowed, two appends of it are not),
  never dead-lettered, not still pending;
* **not before due**: neither its take time nor its ``fired`` time is below
  its ``due_ms`` (one machine clock for the host that stamped ``due_ms`` and
  for Redis, on a local cluster);
* every acknowledged **cancel** was applied (the log holds an outcome for it);
* every fired id is a timer its sender **committed** (``/memory/timer`` in a
  stored entry): a delivery under a key no commit armed is a second delivery
  of some timer under a different key.

Lateness (fired ``at_ms`` - ``due_ms``: the delivery was confirmed by then) is
reported per fault kind whose window overlaps ``[due, fired]`` (``none`` when
no fault does), as count / p50 / p99 / max in ms (:func:`timers_figures`).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from svit_cluster.dispatch import list_timers, timer_log
from svit_cluster.process import DEDUP_WINDOW
from svit_cluster.store import ProcessKeys

from .availability import fault_windows
from .context import Anomaly, Context, Unverified, destination_record

__all__ = ["CANCEL_OUTCOMES", "TIMER_PATH", "check_timers", "timers_event", "timers_figures",
           "timers_markdown"]

#: Where the workload script writes the id of the timer an activation armed.
TIMER_PATH = "/memory/timer"
#: The timer log's cancel outcome events.
CANCEL_OUTCOMES = ("cancelled", "too_late", "already_cancelled", "unknown")


def timers_event(client: Any, processes: Sequence[str], *, prefix: str, drained: bool,
                 wall_ms: int) -> dict[str, Any]:
    """The fields of the ``timers`` history event (read-only; raises on Redis errors).

    Args:
        client: a redis-py client of the cluster's store.
        processes: the senders.
        prefix: the store's key prefix.
        drained: no timer was pending when the harness stopped waiting.
        wall_ms: ``time.time()`` in ms, taken when the event is recorded.
    """
    out: dict[str, Any] = {}
    for pid in processes:
        done = client.zrange(ProcessKeys(pid, prefix).timer_done, 0, -1, withscores=True)
        page = list_timers(client, prefix, pid, limit=1000)
        out[pid] = {
            "log": timer_log(client, prefix, pid),
            "done": {_text(m): int(s) for m, s in done},
            "pending": [{"id": t.id, "due_ms": t.due_ms, "state": t.state}
                        for t in page.timers],
        }
    return {"drained": drained, "wall_ms": wall_ms, "processes": out}


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class _Timers:
    """The ``timers`` event and the ``ok`` events, indexed."""

    def __init__(self, ctx: Context) -> None:
        events = [ev for ev in ctx.history if ev.get("kind") == "timers"]
        self.event: dict[str, Any] | None = events[-1] if events else None
        self.line = int(self.event.get("line", 0)) if self.event else 0
        #: acknowledged arms: timer id -> (process, due_ms, ok line)
        self.arms: dict[str, tuple[str, int, int]] = {}
        #: acknowledged cancels: timer id -> ok lines
        self.cancels: dict[str, list[int]] = defaultdict(list)
        for ev in ctx.history:
            if ev.get("kind") != "ok":
                continue
            line = int(ev.get("line", 0))
            for t in ev.get("timers") or ():
                if isinstance(t, dict) and isinstance(t.get("id"), str) \
                        and isinstance(t.get("due_ms"), int):
                    self.arms[t["id"]] = (str(ev.get("process")), int(t["due_ms"]), line)
            for cid in ev.get("cancels") or ():
                if isinstance(cid, str):
                    self.cancels[cid].append(line)
        self.fired: dict[str, list[int]] = defaultdict(list)  # id -> fired at_ms
        self.outcomes: dict[str, list[str]] = defaultdict(list)  # id -> cancel outcomes
        self.dead: set[str] = set()
        self.armed_logged: set[str] = set()
        self.taken: dict[str, int] = {}
        self.pending: dict[str, dict[str, Any]] = {}
        self.log_sizes: dict[str, int] = {}
        self.fired_by: dict[str, str] = {}
        procs = (self.event or {}).get("processes") or {}
        for pid, doc in procs.items():
            if not isinstance(doc, dict):
                continue
            log = [e for e in doc.get("log") or () if isinstance(e, dict)]
            self.log_sizes[pid] = len(log)
            for e in log:
                tid, kind = str(e.get("id")), e.get("event")
                at = int(e.get("at_ms") or 0)
                if kind == "fired":
                    self.fired[tid].append(at)
                    self.fired_by[tid] = pid
                elif kind == "dead_lettered":
                    self.dead.add(tid)
                elif kind == "armed":
                    self.armed_logged.add(tid)
                elif kind in CANCEL_OUTCOMES:
                    self.outcomes[tid].append(str(kind))
            for member, score in (doc.get("done") or {}).items():
                outcome, _, tid = str(member).partition(":")
                if outcome == "fired":
                    self.taken[tid] = int(score)
            for p in doc.get("pending") or ():
                if isinstance(p, dict):
                    self.pending[str(p.get("id"))] = p

    def cancelled(self, tid: str) -> bool:
        return "cancelled" in self.outcomes.get(tid, ())


def _committed_timers(ctx: Context) -> dict[str, dict[str, int]]:
    """Per process: timer id -> version, for every stored entry that armed one."""
    out: dict[str, dict[str, int]] = {}
    for process in ctx.processes:
        found: dict[str, int] = {}
        for version, entry in ctx.chain(process).items():
            if entry.record is None:
                continue
            for m in entry.record.mutations:
                if m.op == "set" and m.path == TIMER_PATH and isinstance(m.value, str) \
                        and m.value:
                    found[m.value] = version
        out[process] = found
    return out


def _version_of(timer_id: str) -> int | None:
    """The sender version in a timer id ``<sender>:<version>:<index>``."""
    parts = timer_id.rsplit(":", 2)
    return int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else None


def check_timers(ctx: Context) -> Iterator[Anomaly]:
    """(10) Timers: see the module docstring. Skipped when the run armed no timer
    and recorded no ``timers`` event."""
    tm = _Timers(ctx)
    if tm.event is None:
        if tm.arms:
            ctx.unverified.append(Unverified("timers", None, "the run armed timers but "
                                             "recorded no timers status"))
        return
    line = tm.line
    outbox = [ev for ev in ctx.history if ev.get("kind") == "outbox"]
    record = destination_record(outbox[-1].get("destination")) if outbox else None
    if record is None and tm.arms:
        ctx.unverified.append(Unverified("timers", None, "the sink's record was not read",
                                         lines=(line,)))
    window_full = record is not None and len(record.delivered_slots) >= DEDUP_WINDOW
    for tid, (process, due, ok_line) in sorted(tm.arms.items()):
        lines = (ok_line, line)
        version = _version_of(tid)
        versions = (version,) if version is not None else ()
        fired = tm.fired.get(tid, [])
        at_sink = record is not None and record.recorded(tid)
        if tm.cancelled(tid):
            if fired or at_sink or (record is not None and record.appends.get(tid)):
                yield Anomaly("timers", process,
                              f"timer {tid} was reported cancelled and also delivered "
                              f"(fired {len(fired)} time(s), "
                              f"{'recorded' if at_sink else 'not recorded'} at the sink)",
                              versions=versions, lines=(*lines, *tm.cancels.get(tid, ())))
            continue
        if tid in tm.dead:
            yield Anomaly("timers", process, f"timer {tid} was dead-lettered",
                          versions=versions, lines=lines)
            continue
        if not fired:
            if tid in tm.pending:
                yield Anomaly("timers", process,
                              f"timer {tid} (due {due}) was never fired: still "
                              f"{tm.pending[tid].get('state')} after the dispatcher "
                              f"{'drained' if tm.event.get('drained') else 'had time to drain'}",
                              versions=versions, lines=lines)
            elif tid not in tm.armed_logged and tm.log_sizes.get(process, 0) >= 900:
                ctx.unverified.append(Unverified(
                    "timers", process, f"timer {tid}: its events left the capped timer log",
                    lines=lines))
            else:
                yield Anomaly("timers", process,
                              f"acknowledged timer {tid} (due {due}) was never fired and is "
                              "neither pending nor cancelled", versions=versions, lines=lines)
            continue
        early = [at for at in (*fired, tm.taken.get(tid, due)) if at < due]
        if early:
            yield Anomaly("timers", process,
                          f"timer {tid} fired {due - min(early)} ms before its due time "
                          f"{due}", versions=versions, lines=lines)
        if record is None:
            continue
        if not at_sink:
            if window_full and record.appends.get(tid, 0) <= 1:
                if not record.log_complete and not record.appends.get(tid):
                    ctx.unverified.append(Unverified(
                        "timers", record.process_id, f"timer {tid} left the sink's dedup "
                        "window and its append was trimmed from the stored log", lines=lines))
                continue
            yield Anomaly("timers", record.process_id,
                          f"timer {tid} from {process} fired but the sink has no record of it",
                          versions=versions, lines=lines)
        elif not record.recorded_once(tid):
            yield Anomaly("timers", record.process_id,
                          f"timer {tid} from {process} is recorded more than once at the sink "
                          f"({record.appends.get(tid, 0)} appends, "
                          f"{record.inbox_copies.get(tid, 0)} in /inbox)",
                          versions=versions, lines=lines)
    for tid, ok_lines in sorted(tm.cancels.items()):
        if not tm.outcomes.get(tid):
            arm = tm.arms.get(tid)
            yield Anomaly("timers", arm[0] if arm else None,
                          f"an acknowledged cancel of timer {tid} was never applied (no "
                          "cancel outcome in the timer log)", lines=(*ok_lines, line))
    committed = _committed_timers(ctx)
    for tid, process in sorted(tm.fired_by.items()):
        version = _version_of(tid)
        chain = ctx.chain(process)
        if tid in committed.get(process, {}) or tid in tm.arms:
            continue
        if version is None or version in chain:
            yield Anomaly("timers", process,
                          f"the dispatcher fired {tid}, a timer no stored entry of "
                          f"{process} armed (a delivery under a key nothing committed)",
                          versions=(version,) if version is not None else (), lines=(line,))


def _dist(values: Sequence[float]) -> dict[str, Any]:
    ordered = sorted(values)
    n = len(ordered)

    def rank(p: float) -> float | None:
        return ordered[max(1, math.ceil(p / 100 * n)) - 1] if n else None

    return {"count": n, "p50": rank(50), "p99": rank(99), "max": ordered[-1] if n else None}


def timers_figures(ctx: Context) -> dict[str, Any] | None:
    """Counts and lateness per fault kind (None when the run recorded no ``timers`` event)."""
    tm = _Timers(ctx)
    if tm.event is None:
        return None
    wall_ms = tm.event.get("wall_ms")
    t_event = float(tm.event.get("t", 0.0))
    faults = fault_windows(ctx.history)
    late: dict[str, list[float]] = defaultdict(list)
    for tid, (_process, due, _line) in tm.arms.items():
        fired = tm.fired.get(tid)
        if not fired or tm.cancelled(tid):
            continue
        at = min(fired)
        kinds: set[str] = set()
        if isinstance(wall_ms, int):
            due_t = t_event + (due - wall_ms) / 1000.0
            fired_t = t_event + (at - wall_ms) / 1000.0
            kinds = {f.kind for f in faults if f.start <= fired_t and f.end >= due_t}
        for kind in kinds or {"none"}:
            late[kind].append(float(at - due))
    outcomes: Counter[str] = Counter()
    for tid in tm.cancels:
        for o in tm.outcomes.get(tid, ()):
            outcomes[o] += 1
    refired = sum(len(v) > 1 for v in tm.fired.values())
    return {
        "armed_acked": len(tm.arms),
        "cancels_acked": sum(len(v) for v in tm.cancels.values()),
        "cancel_outcomes": dict(sorted(outcomes.items())),
        "fired": sum(1 for t in tm.arms if tm.fired.get(t)),
        "fired_same_key_again": refired,
        "pending_after_drain": len(tm.pending),
        "lateness_ms": {k: _dist(v) for k, v in sorted(late.items())},
    }


def timers_markdown(figures: dict[str, Any] | None) -> str:
    """The timer figures as markdown ("" when there are none)."""
    if not figures:
        return ""
    head = "".join(f"| {k} | {figures[k]} |\n" for k in (
        "armed_acked", "cancels_acked", "cancel_outcomes", "fired", "fired_same_key_again",
        "pending_after_drain"))
    rows: Iterable[str] = (
        f"| {kind} | {d['count']} | {d['p50']} | {d['p99']} | {d['max']} |\n"
        for kind, d in figures.get("lateness_ms", {}).items())
    return ("## Timers\n\n| figure | value |\n|---|---|\n" + head
            + "\n### Lateness per fault kind (fired - due), ms\n\n"
            "| kind | count | p50 | p99 | max |\n|---|---|---|---|---|\n" + "".join(rows) + "\n")
