"""Host leases: which host lost its etcd lease when, and which fault explains it.

Reads the ``host_lease`` events the store observer records
(:class:`~svit_chaos.observer.StoreObserver`) and the ``nemesis`` windows of a
history. Definitions (times are history ``t``):

**Loss**: the lease a host was registered under stops being its registration
(the key is gone, or carries another lease id), first seen by the read at
``t``; the previous read that still saw it was sent at ``since``, so the lease
ended in ``(since, t]``. A registration that comes back under the same lease
id withdraws the loss (the lease never ended). The first registration of a
host and a registration after its key was gone are not losses.

**Reach** of a window: from its inject (minus ``detail.lead_s``) to its heal
plus :func:`grace_s` = lease TTL + 2 s, because a host notices a lease lost
during a fault only once it runs and reaches etcd again (after a pause, a cut,
an etcd restart), and a lease left to lapse lives up to a TTL at etcd. A window
that never healed reaches to the end of the history.

**Explained**: a loss whose interval meets the reach of a deliberate fault on
that host's lease keeping -- :data:`HOST_LEASE_KINDS` on the host itself (a
``pause-owner`` names its host in the inject detail), ``slow-link`` on the
host's etcd link -- or on every host's (:data:`ALL_HOSTS_LEASE_KINDS`: etcd
restarted, its leader killed, a member isolated, Ray's GCS paused, after which
Ray may declare nodes dead and the gateway then revokes their leases). These
faults are expected to cost a lease; nothing else is.

**In a load window**: a loss whose interval meets the reach of a
``load-host`` window, on any host: on one machine the load takes the CPUs of
every host, not only the named one.

Verdict (invariant ``leases``): every loss in a load window that no deliberate
fault explains is an anomaly (the run **fails**): the load-host nemesis claims
that lease keeping survives a saturated CPU at normal priority, and such a
loss refutes it. A loss that no fault explains outside every load window is
**flagged** in the report (``host_leases.flags``) but does not fail the run:
no window names what caused it (another host's restart, the machine's own
noise), so it is a finding to look at, not a refuted claim. A run with a load
window whose history has no ``host_lease`` event although the cluster
registers hosts in etcd (``meta.host_leases``) cannot tell: unverified
(inconclusive).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .context import Anomaly, Context, Unverified
from .history import Event
from .logfiles import texts_with

__all__ = [
    "ALL_HOSTS_LEASE_KINDS",
    "HOST_LEASE_KINDS",
    "LeaseLoss",
    "Reach",
    "check_leases",
    "grace_s",
    "lease_loss_reasons",
    "lease_losses",
    "leases_markdown",
    "leases_report",
]

#: Faults expected to cost the faulted host its lease.
HOST_LEASE_KINDS = frozenset({"kill-host", "pause-host", "cut-etcd", "pause-owner",
                              "stop-raylet", "kill-agent", "term-host",
                              "etcd-restart-dead-host"})
#: Faults expected to cost any host its lease.
ALL_HOSTS_LEASE_KINDS = frozenset({"kill-etcd", "etcd-restart-dead-host", "kill-etcd-leader",
                                   "kill-etcd-majority",
                                   "partition-etcd-member", "pause-gcs"})
#: Lease TTL assumed when the history's ``meta`` event names none (the run default).
DEFAULT_TTL_S = 3.0


def grace_s(lease_ttl_s: float) -> float:
    """How long after its heal a window still explains a lease loss: TTL + 2 s."""
    return lease_ttl_s + 2.0


@dataclass(frozen=True)
class Reach:
    """A nemesis window and how far its effect on leases reaches (``start``..``end``)."""

    window: Any
    kind: str
    label: str
    host: str | None
    service: str | None
    start: float
    end: float
    line: int

    def meets(self, since: float | None, t: float) -> bool:
        return self.start <= t and (since is None or since <= self.end)

    def explains(self, host: str) -> bool:
        """True if this fault is expected to cost ``host`` its lease."""
        if self.kind in ALL_HOSTS_LEASE_KINDS:
            return True
        if self.host != host:
            return False
        return self.kind in HOST_LEASE_KINDS or (self.kind == "slow-link"
                                                 and self.service == "etcd")


@dataclass(frozen=True)
class LeaseLoss:
    """One lease a host lost.

    Attributes:
        host, lease: the host and the lost lease id.
        t: when a read first saw it gone; ``since``: when the last read that
            still saw it was sent (None: unknown); the loss is in ``(since, t]``.
        replaced_by: the lease id the host was registered under at ``t``
            (None: no registration then).
        explained_by: labels of the deliberate faults that explain it.
        load_windows: labels of the load-host windows it falls in.
        line: the history line of the ``host_lease`` event.
        reason: what the host agent logged about it (None: not found).
    """

    host: str
    lease: int
    t: float
    since: float | None
    replaced_by: int | None
    explained_by: tuple[str, ...]
    load_windows: tuple[str, ...]
    line: int
    reason: str | None = None

    @property
    def counts(self) -> bool:
        """A loss in a load window that no deliberate fault explains (an anomaly)."""
        return bool(self.load_windows) and not self.explained_by

    @property
    def flagged(self) -> bool:
        """A loss outside every load window that no deliberate fault explains."""
        return not self.load_windows and not self.explained_by

    def to_json(self) -> dict[str, Any]:
        return {"host": self.host, "lease": self.lease, "t": round(self.t, 3),
                "since": None if self.since is None else round(self.since, 3),
                "replaced_by": self.replaced_by, "explained_by": list(self.explained_by),
                "load_windows": list(self.load_windows), "line": self.line,
                "reason": self.reason, "counts": self.counts, "flagged": self.flagged}


def _meta(history: Sequence[Event]) -> Event:
    return next((ev for ev in history if ev.get("kind") == "meta"), {})


def _ttl(history: Sequence[Event]) -> float:
    ttl = _meta(history).get("lease_ttl_s")
    return float(ttl) if isinstance(ttl, int | float) and ttl > 0 else DEFAULT_TTL_S


def reaches(history: Sequence[Event], *, grace: float) -> list[Reach]:
    """Every nemesis window of ``history`` (``stale-owner`` excluded), by start."""
    opened: dict[Any, Event] = {}
    closed: list[tuple[Event, float]] = []
    end = max((float(ev["t"]) for ev in history), default=0.0)
    for ev in history:
        if ev.get("kind") != "nemesis" or ev.get("nemesis") == "stale-owner":
            continue
        key = ev.get("window")
        if ev.get("phase") == "inject" or (ev.get("phase") == "error" and key not in opened):
            opened.setdefault(key, ev)  # an inject that failed may have broken things
        elif ev.get("phase") in ("heal", "error") and key in opened:
            closed.append((opened.pop(key), float(ev["t"]) + grace))
    closed.extend((start, end) for start in opened.values())
    out = []
    for start, stop in closed:
        spec = start.get("spec") or {}
        detail = start.get("detail") or {}
        host = spec.get("host") or detail.get("host")
        lead = detail.get("lead_s")
        t0 = float(start["t"]) - (float(lead) if isinstance(lead, int | float) else 0.0)
        kind = str(start.get("nemesis"))
        label = " ".join(str(p) for p in (kind, spec.get("host"), spec.get("mode"),
                                          spec.get("service")) if p)
        if kind == "pause-owner" and isinstance(host, str):
            label = f"{kind} {host}"
        out.append(Reach(start.get("window"), kind, f"{label} (window {start.get('window')})",
                         host if isinstance(host, str) else None, spec.get("service"),
                         max(0.0, t0), stop, int(start.get("line", 0))))
    return sorted(out, key=lambda r: r.start)


def _reasons(history: Sequence[Event]) -> dict[str, str]:
    out: dict[str, str] = {}
    for ev in history:
        if ev.get("kind") == "lease_reasons" and isinstance(ev.get("reasons"), dict):
            out.update({str(k): str(v) for k, v in ev["reasons"].items()})
    return out


def lease_losses(history: Sequence[Event]) -> list[LeaseLoss]:
    """Every lease loss of ``history``, judged against its windows (see the module)."""
    windows = reaches(history, grace=grace_s(_ttl(history)))
    reasons = _reasons(history)
    held: dict[str, int | None] = {}  # host -> lease registered now (None: no key)
    pending: dict[str, LeaseLoss] = {}  # host -> a loss seen as a missing key
    out: list[LeaseLoss] = []
    for ev in history:
        if ev.get("kind") != "host_lease" or not isinstance(ev.get("host"), str):
            continue
        host, t = ev["host"], float(ev["t"])
        lease = ev.get("lease") if isinstance(ev.get("lease"), int) else None
        since = ev.get("since") if isinstance(ev.get("since"), int | float) else None
        before = held.get(host)
        held[host] = lease
        if before is None:
            gone = pending.pop(host, None)
            if gone is not None and lease == gone.lease:
                out.remove(gone)  # back under the same lease: it never ended
            continue
        if lease == before:
            continue
        loss = LeaseLoss(
            host, before, t, since, lease,
            tuple(w.label for w in windows if w.meets(since, t) and w.explains(host)),
            tuple(w.label for w in windows if w.meets(since, t) and w.kind == "load-host"),
            int(ev.get("line", 0)), reasons.get(str(before)))
        out.append(loss)
        if lease is None:
            pending[host] = loss
    return out


def _recorded(history: Sequence[Event]) -> bool:
    return any(ev.get("kind") == "host_lease" for ev in history)


def leases_report(history: Sequence[Event]) -> dict[str, Any]:
    """The report's ``host_leases`` section.

    Returns:
        ``recorded`` (False: the run read no host registration), ``grace_s``,
        ``load_windows``, per host in ``hosts``: ``leases`` (ids held, in
        order), ``lost``, ``lost_in_load_windows``, ``unexplained_in_load_windows``
        (anomalies), ``unexplained_outside_load_windows`` (flagged); the same
        four totals; ``losses`` (:meth:`LeaseLoss.to_json`) and ``flags``.
    """
    losses = lease_losses(history)
    grace = grace_s(_ttl(history))
    hosts: dict[str, dict[str, Any]] = {}
    for ev in history:
        if ev.get("kind") == "host_lease" and isinstance(ev.get("host"), str):
            row = hosts.setdefault(ev["host"], {"leases": [], "lost": 0,
                                                "lost_in_load_windows": 0,
                                                "unexplained_in_load_windows": 0,
                                                "unexplained_outside_load_windows": 0})
            lease = ev.get("lease")
            if isinstance(lease, int) and lease not in row["leases"]:
                row["leases"].append(lease)
    for loss in losses:
        row = hosts[loss.host]
        row["lost"] += 1
        row["lost_in_load_windows"] += bool(loss.load_windows)
        row["unexplained_in_load_windows"] += loss.counts
        row["unexplained_outside_load_windows"] += loss.flagged
    flags = [f"{loss.host} lost lease {loss.lease} in ({_s(loss.since)}, {loss.t:.1f} s] "
             "outside every load window, and no deliberate fault explains it"
             + (f" ({loss.reason})" if loss.reason else "") for loss in losses if loss.flagged]
    loads = [w for w in reaches(history, grace=grace) if w.kind == "load-host"]
    return {
        "recorded": _recorded(history),
        "grace_s": grace,
        "load_windows": [{"window": w.window, "label": w.label, "start": round(w.start, 3),
                          "reach_end": round(w.end, 3)} for w in loads],
        "hosts": dict(sorted(hosts.items())),
        "lost": len(losses),
        "lost_in_load_windows": sum(bool(x.load_windows) for x in losses),
        "unexplained_in_load_windows": sum(x.counts for x in losses),
        "unexplained_outside_load_windows": sum(x.flagged for x in losses),
        "losses": [x.to_json() for x in losses],
        "flags": flags,
    }


def _s(t: float | None) -> str:
    return "?" if t is None else f"{t:.1f}"


def check_leases(ctx: Context) -> Iterator[Anomaly]:
    """(9) No host loses its etcd lease in a load window unless a deliberate fault
    explains it (see the module docstring)."""
    history = ctx.history
    losses = lease_losses(history)
    grace = grace_s(_ttl(history))
    loads = [w for w in reaches(history, grace=grace) if w.kind == "load-host"]
    if loads and not _recorded(history) and _meta(history).get("host_leases"):
        ctx.unverified.append(Unverified(
            "leases", None, "no host registration was read from etcd during the run: "
            "whether a host lost its lease in a load window is unknown"))
    for loss in losses:
        if not loss.counts:
            continue
        reason = f"; the agent said: {loss.reason}" if loss.reason else ""
        lines = tuple(sorted({loss.line, *(w.line for w in loads
                                          if w.label in loss.load_windows)}))
        yield Anomaly("leases", None,
                      f"host {loss.host} lost its etcd lease {loss.lease} in "
                      f"({_s(loss.since)}, {loss.t:.1f} s], in load window "
                      f"{', '.join(loss.load_windows)}; no deliberate fault explains it"
                      f"{reason}", lines=lines)


def leases_markdown(section: dict[str, Any] | None) -> str:
    """The report's ``host_leases`` section as markdown ("" when absent)."""
    if not section:
        return ""
    if not section.get("recorded"):
        return ("## Host leases\n\nnot recorded (the cluster registers no hosts in etcd, "
                "or none could be read)\n\n")
    rows = "".join(
        f"| {host} | {len(row['leases'])} | {row['lost']} | {row['lost_in_load_windows']} | "
        f"{row['unexplained_in_load_windows']} | {row['unexplained_outside_load_windows']} |\n"
        for host, row in section["hosts"].items())
    out = ("## Host leases\n\n"
           f"A loss is explained by a deliberate fault on the host's lease keeping (or on "
           f"every host's) whose window, plus {section['grace_s']:g} s, it falls in; a loss "
           "in a load window that nothing explains fails the run, one outside is flagged.\n\n"
           "| host | leases held | lost | lost in a load window | unexplained, in a load "
           "window (fail) | unexplained, outside (flagged) |\n|---|---|---|---|---|---|\n"
           + rows + "\n")
    if section.get("load_windows"):
        out += "Load windows: " + "; ".join(
            f"{w['label']} {w['start']:.1f}..{w['reach_end']:.1f} s"
            for w in section["load_windows"]) + "\n\n"
    if section.get("losses"):
        out += ("| host | lease | lost in (s] | now under | load window | explained by | "
                "agent's reason |\n|---|---|---|---|---|---|---|\n")
        for loss in section["losses"]:
            out += (f"| {loss['host']} | {loss['lease']} | ({_s(loss['since'])}, "
                    f"{loss['t']:.1f}] | {loss['replaced_by'] or '-'} | "
                    f"{', '.join(loss['load_windows']) or '-'} | "
                    f"{', '.join(loss['explained_by']) or '-'} | "
                    f"{(loss['reason'] or '-').replace('|', '/')} |\n")
        out += "\n"
    return out


#: What a host agent logs when it finds its lease lost (``HostAgent._rejoin_loop``).
#: Matches ``svit_cluster.cluster.LEASE_LOST_LOG`` with the agent's reason
#: (``lease <id>: <why>``) in it.
_LOST = re.compile(r"lost its lease \(lease (\d+): (.*?)\); parking \d+ actors")


def lease_loss_reasons(root: Path, *, max_bytes: int = 64 * 1024 * 1024) -> dict[str, str]:
    """``{lease id: reason}`` from the host agents' log lines under ``root``.

    Best effort: files larger than ``max_bytes`` or unreadable are skipped, and
    a lease whose holder died with it (a killed host) has no such line.
    """
    found: dict[str, str] = {}
    for text in texts_with(root, "lost its lease", max_bytes=max_bytes):
        for m in _LOST.finditer(text):
            found[m.group(1)] = m.group(2)[:300]
    return found
