"""Failover breakdown: where the time of each failover went, from the history alone.

Each failover of :func:`svit_chaos.availability.failovers` (owner loss at
``t_loss`` -> the new owner's first acknowledged commit at ``t_new``) is cut at
the points the harness observes. All times are history ``t``; a point is when
the harness first *saw* the event, so it is late by at most the observer's read
period (ownership records and host registrations: every few tenths of a second;
the Redis fence: every 0.05 s). A sighting at ``t`` whose previous read was sent
at ``since`` (the change happened in ``(since, t]``) belongs to a failover when
``t`` is not before the fault and ``since`` (``t`` when unknown) is not after the
new owner's first commit.

Points, in order:

``fault``
    ``t_loss``: the fault's start (the old owner's last commit for an
    ``unattributed`` change).
``detected``
    The old owner's loss first seen: its ownership record in etcd gone or
    replaced (an ``owner`` event whose token is not the old one), or the old
    owner's host registration losing its etcd lease (a ``host_lease`` event on
    that host whose lease id changed or vanished). Only sightings after
    ``fault`` count; one after ``claimed`` counts as ``claimed`` (a replaced
    record is the loss and the claim in one read).
``claimed``
    The new owner's claim first seen: an ``owner`` record with the new token
    (or any token above the old one), or the Redis fence of the process at the
    new token (a ``fence`` event). One after ``committed`` counts as
    ``committed``: a commit under the new token proves the claim.
``routed``
    When the first request the new owner answered was sent: the ``sent`` of the
    earliest answered operation (``ok``, or ``fail`` with a ``token``) carrying
    the new token. A request sent before the claim (even before the fault, then
    held by the old owner or the gateway) reached the new owner no earlier than
    the claim, so it counts as routed at ``claimed`` (at ``fault`` when the claim
    was not seen).
``committed``
    ``t_new``.

Steps are the differences of consecutive points: ``detect`` (fault ->
detected), ``claim`` (detected -> claimed), ``route`` (claimed -> routed),
``commit`` (routed -> committed), and ``total`` = ``t_new - t_loss``, the
failover figure of the availability report. A point the harness cannot see is
None with a reason, and so are the two steps next to it; the steps add up to
the total when every point is known. ``to_claim`` (fault -> claimed, = detect +
claim) is given beside them, as it is known when only the loss was unseen.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

from .availability import _log_tokens, distribution, failovers
from .history import Event
from .logs import StoredLogs

__all__ = ["POINTS", "STEPS", "breakdown_markdown", "breakdown_report", "failover_breakdown"]

#: The points of a failover, in order.
POINTS = ("fault", "detected", "claimed", "routed", "committed")
#: Step name -> (from point, to point).
STEPS = {"detect": ("fault", "detected"), "claim": ("detected", "claimed"),
         "route": ("claimed", "routed"), "commit": ("routed", "committed")}

_NO_ETCD = ("no ownership record or host registration in the history: the cluster "
            "keeps none in etcd that the harness reads")


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


class _Seen:
    """The observations of one history, per process and per host, in time order."""

    def __init__(self, history: Sequence[Event], logs: StoredLogs | None) -> None:
        tokens = _log_tokens(logs)  # a commit's token from the logs when its event has none
        # (t, since, ...) per sighting
        self.owners: dict[str, list[tuple[float, float, str | None, int | None]]] = \
            defaultdict(list)
        self.fences: dict[str, list[tuple[float, float, int]]] = defaultdict(list)
        self.leases: dict[str, list[tuple[float, float, int | None, int | None]]] = \
            defaultdict(list)
        self.answers: dict[str, list[tuple[float, int]]] = defaultdict(list)
        self.sends_recorded = False
        for ev in history:
            kind, t = ev.get("kind"), float(ev["t"])
            since = float(ev["since"]) if isinstance(ev.get("since"), int | float) else t
            process = ev.get("process")
            if kind == "host_lease" and isinstance(ev.get("host"), str):
                self.leases[ev["host"]].append((t, since, ev.get("lease"), ev.get("previous")))
            if not isinstance(process, str):
                continue
            if kind == "owner":
                token = ev.get("token")
                self.owners[process].append((t, since, ev.get("host"),
                                             token if isinstance(token, int) else None))
            elif kind == "fence" and isinstance(ev.get("fence"), int):
                self.fences[process].append((t, since, ev["fence"]))
            elif kind in ("ok", "fail") and isinstance(ev.get("sent"), int | float):
                self.sends_recorded = True
                token = ev.get("token")
                if kind == "ok" and not isinstance(token, int):
                    token = tokens.get(process, {}).get(ev.get("version"))  # type: ignore[arg-type]
                if isinstance(token, int) and not ev.get("replayed"):
                    self.answers[process].append((float(ev["sent"]), token))
        self.etcd = bool(self.owners or self.leases)

    def old_host(self, process: str, token: int, fault_host: str | None) -> str | None:
        """The old owner's host: from its ownership record, else the fault's host."""
        hosts = [h for _, _, h, tok in self.owners.get(process, ()) if tok == token and h]
        return hosts[-1] if hosts else fault_host


def _first(times: Sequence[float]) -> float | None:
    return min(times) if times else None


def _earliest(sightings: Sequence[tuple[float, float]]) -> tuple[float | None, float | None]:
    """(t, since) of the earliest sighting, (None, None) without one."""
    return min(sightings) if sightings else (None, None)


def _points(seen: _Seen, f: dict[str, Any]
            ) -> tuple[dict[str, float | None], dict[str, float | None], dict[str, str]]:
    """The points of failover ``f`` (a :func:`failovers` row), the ``since`` of the
    sightings behind ``detected`` and ``claimed``, and why any point is None."""
    process, old, new = f["process"], f["token_before"], f["token_after"]
    t0, t_new = float(f["t_loss"]), float(f["t_new"])
    why: dict[str, str] = {}

    def belongs(t: float, since: float) -> bool:
        return t >= t0 and since <= t_new

    owners = [(t, since, tok) for t, since, _, tok in seen.owners.get(process, ())
              if belongs(t, since)]
    # claimed: the new record, else any record above the old token, or the fence
    records = ([(t, since) for t, since, tok in owners if tok == new]
               or [(t, since) for t, since, tok in owners if tok is not None and tok > old])
    fences = [(t, since) for t, since, tok in seen.fences.get(process, ())
              if belongs(t, since) and tok >= new]
    claimed, claimed_since = _earliest([*records[:1], *fences[:1]])
    if claimed is not None:
        claimed = min(claimed, t_new)
    elif seen.etcd or seen.fences:
        why["claimed"] = ("neither a new ownership record nor the Redis fence at the new "
                          "token was seen after the fault")
    else:
        why["claimed"] = "no ownership record and no fence reading in the history"
    # detected: the old record gone or replaced, or the old host's lease lost
    host = seen.old_host(process, old, f.get("host"))
    gone = [(t, since) for t, since, tok in owners if tok != old]
    lost = [(t, since) for t, since, lease, previous in seen.leases.get(host or "", ())
            if belongs(t, since) and previous is not None and lease != previous]
    detected, detected_since = _earliest([*gone[:1], *lost[:1]])
    if detected is not None:
        detected = min(detected, claimed if claimed is not None else t_new)
    elif not seen.etcd:
        why["detected"] = _NO_ETCD
    else:
        why["detected"] = ("the old owner's record and its host's lease were not seen to "
                           "change after the fault")
    # routed: the send of the first request the new owner answered
    sends = [s for s, tok in seen.answers.get(process, ()) if tok >= new and s <= t_new]
    routed = _first(sends)
    if routed is not None:
        routed = max(routed, claimed if claimed is not None else t0)
    elif not seen.sends_recorded:
        why["routed"] = "the history records no send times of answered requests"
    else:
        why["routed"] = "no answer under the new token was sent before its first commit"
    return ({"fault": t0, "detected": detected, "claimed": claimed, "routed": routed,
             "committed": t_new},
            {"detected": detected_since, "claimed": claimed_since}, why)


def failover_breakdown(history: Sequence[Event], logs: StoredLogs | None = None
                       ) -> list[dict[str, Any]]:
    """The breakdown of every failover (see the module docstring).

    Returns:
        One dict per :func:`~svit_chaos.availability.failovers` row, same order:
        ``process``, ``kind``, ``window``, ``host``, ``token_before``,
        ``token_after``; ``points`` (name -> run seconds or None); ``steps``
        (name -> seconds or None, names of :data:`STEPS`); ``to_claim`` (fault ->
        claimed, seconds or None); ``seen_after`` (``detected``/``claimed`` -> the
        ``since`` of the sighting behind it: the event happened after this, so a
        step of 0 between two points seen in one read means "within that read
        period"); ``total`` (seconds, equal to the failover's ``seconds``);
        ``unobserved`` (point or step name -> why it is None).
    """
    seen = _Seen(history, logs)
    out: list[dict[str, Any]] = []
    for f in failovers(history, logs):
        points, since, why = _points(seen, f)
        steps: dict[str, float | None] = {}
        for step, (a, b) in STEPS.items():
            pa, pb = points[a], points[b]
            steps[step] = _r(pb - pa) if pa is not None and pb is not None else None
            if steps[step] is None:
                why[step] = why.get(a) or why[b]
        claimed = points["claimed"]
        out.append({"process": f["process"], "kind": f["kind"], "window": f["window"],
                    "host": f["host"], "token_before": f["token_before"],
                    "token_after": f["token_after"],
                    "points": {k: _r(v) for k, v in points.items()}, "steps": steps,
                    "to_claim": None if claimed is None else _r(claimed - float(f["t_loss"])),
                    "seen_after": {k: _r(v) for k, v in since.items()},
                    "total": f["seconds"], "unobserved": why})
    return out


def breakdown_report(history: Sequence[Event], logs: StoredLogs | None = None
                     ) -> dict[str, Any]:
    """The ``failover_breakdown`` section of ``report.json``.

    Returns:
        ``{"by_kind": {kind: {"count": n, "total": dist, "to_claim": dist,
        "steps": {step: dist + "unobserved": {reason: count}}}}, "events": [...]}``
        where ``dist`` is
        :func:`~svit_chaos.availability.distribution` (``count``, ``p50``,
        ``p90``, ``max``, seconds) and ``events`` is :func:`failover_breakdown`.
    """
    events = failover_breakdown(history, logs)
    grouped: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        grouped[str(e["kind"])].append(e)
    by_kind: dict[str, Any] = {}
    for kind, rows in sorted(grouped.items()):
        steps: dict[str, Any] = {}
        for step in STEPS:
            values = [r["steps"][step] for r in rows if r["steps"][step] is not None]
            reasons = Counter(r["unobserved"][step] for r in rows
                              if r["steps"][step] is None)
            steps[step] = {**distribution(values), "unobserved": dict(reasons)}
        by_kind[kind] = {"count": len(rows),
                         "total": distribution([float(r["total"]) for r in rows]),
                         "to_claim": distribution([r["to_claim"] for r in rows
                                                   if r["to_claim"] is not None]),
                         "steps": steps}
    return {"by_kind": by_kind, "events": events}


def _cell(dist: dict[str, Any]) -> str:
    if not dist.get("count"):
        return "-"
    return f"{dist['p50']} / {dist['p90']} / {dist['max']}"


def breakdown_markdown(section: dict[str, Any] | None) -> str:
    """The breakdown per fault kind as a markdown table ("" when there is none).

    One row per kind: the count, then ``p50 / p90 / max`` seconds of each step and
    of the total; ``-`` for a step never observed, whose reasons follow the table.
    """
    by_kind = (section or {}).get("by_kind") or {}
    if not by_kind:
        return ""
    names = list(STEPS)
    lines = ["### Failover breakdown per fault kind (p50 / p90 / max, seconds)", "",
             "fault -> detect -> loss detected -> claim -> new owner claimed -> route -> "
             "first request to it sent -> commit -> first commit", "",
             "| kind | count | " + " | ".join(names) + " | fault -> claimed | total |",
             "|---|---|" + "---|" * (len(names) + 2)]
    notes: list[str] = []
    for kind, row in by_kind.items():
        cells = [_cell(row["steps"][s]) for s in names]
        lines.append(f"| {kind} | {row['count']} | " + " | ".join(cells)
                     + f" | {_cell(row['to_claim'])} | {_cell(row['total'])} |")
        for s in names:
            for reason, n in row["steps"][s].get("unobserved", {}).items():
                notes.append(f"- {kind}, {s}: not observed in {n} of {row['count']}: {reason}")
    return "\n".join(lines + (["", *notes] if notes else [])) + "\n"
