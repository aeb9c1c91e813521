"""Failed requests explained: why operations that did not commit failed, per fault kind.

Reads the operation events of a history (:mod:`svit_chaos.history`). Every
``fail`` and ``info`` event of a workload client (the stale writer's deliberate
fenced writes are not requests) is one operation that did not commit (or whose
outcome is unknown), sorted into exactly one cause:

``conflict``
    ``fail`` with outcome ``conflict``: the owner answered that another client
    committed the expected version first. Clients racing for a version do this
    with no fault at all; it is expected.
``unavailable``
    The cluster said it could not serve: ``fail``/``info`` with error code
    ``unavailable``, or an ``info`` whose last error was an ``UnavailableError``
    (the workload retried until its deadline).
``timeout``
    An ``info`` whose last error was a transport timeout (``ReadTimeout``,
    ``ConnectTimeout``, ``WriteTimeout``, ``PoolTimeout``): no answer in time.
``ambiguous``
    An ``info`` for a conflict met by a retry after an attempt whose outcome is
    unknown (unavailable or lost in transit): it may have committed, and the
    conflict may be its own commit (the owner died or moved mid-request).
``transport``
    An ``info`` whose last error was another transport failure (connection
    refused or reset).
``rejected``
    ``fail`` with outcome ``rejected`` or another error code (the request itself
    was refused).
``other``
    Anything else (a conflict after an unknown outcome, a cancelled request).

Each failed operation is charged to one fault kind: the latest-started fault
(:func:`svit_chaos.availability.fault_windows`) whose window, extended to the
fault's recovery (the last affected process's first commit after it, see
:func:`~svit_chaos.availability.availability_report`), contains the event's
``t``; ``none`` when no fault covers it.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

from .availability import availability_report
from .history import Event
from .stale import STALE_CLIENT

__all__ = ["CAUSES", "cause_of", "failed_markdown", "failed_requests"]

#: The causes, in report order.
CAUSES = ("conflict", "unavailable", "timeout", "ambiguous", "transport", "rejected", "other")
_TIMEOUTS = ("ReadTimeout", "ConnectTimeout", "WriteTimeout", "PoolTimeout", "TimeoutException")


def cause_of(ev: Event) -> str:
    """The cause (one of :data:`CAUSES`) of a ``fail`` or ``info`` event."""
    error = str(ev.get("error") or "")
    code = str(ev.get("code") or "")
    if ev.get("kind") == "fail":
        if ev.get("outcome") == "conflict":
            return "conflict"
        return "unavailable" if code == "unavailable" else "rejected"
    if error.startswith("conflict (actual"):  # the workload's info after an unknown outcome
        return "ambiguous"
    if code == "unavailable" or error.startswith("UnavailableError"):
        return "unavailable"
    if error.startswith(_TIMEOUTS):
        return "timeout"
    if error.startswith(("ConnectError", "ReadError", "WriteError", "RemoteProtocolError",
                         "NetworkError", "TransportError", "ProtocolError")):
        return "transport"
    return "other"


def failed_requests(history: Sequence[Event],
                    faults: Sequence[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The ``failed_requests`` section of ``report.json``.

    Args:
        faults: the ``availability.faults`` rows (default: computed from ``history``).

    Returns:
        ``{"causes": [...], "total": {cause: n, "all": n}, "by_kind": {kind:
        {cause: n, "all": n}}}``; ``kind`` ``none`` holds failures outside every
        fault's window and recovery.
    """
    if faults is None:
        faults = availability_report(history)["faults"]
    spans = sorted(((float(f["start"]), max(float(f["end"]), float(f["recovered_at"] or 0.0)),
                     str(f["kind"])) for f in faults), reverse=True)
    by_kind: dict[str, Counter[str]] = defaultdict(Counter)
    for ev in history:
        if ev.get("kind") not in ("fail", "info") or "process" not in ev \
                or ev.get("client") == STALE_CLIENT:
            continue
        t = float(ev["t"])
        kind = next((k for start, end, k in spans if start <= t <= end), "none")
        by_kind[kind][cause_of(ev)] += 1
    total: Counter[str] = Counter()
    for counts in by_kind.values():
        total.update(counts)

    def row(counts: Counter[str]) -> dict[str, int]:
        return {**{c: counts.get(c, 0) for c in CAUSES}, "all": sum(counts.values())}

    return {"causes": list(CAUSES), "total": row(total),
            "by_kind": {k: row(v) for k, v in sorted(by_kind.items())}}


def failed_markdown(section: dict[str, Any] | None) -> str:
    """The failed requests per fault kind as a markdown table ("" when none)."""
    by_kind = (section or {}).get("by_kind") or {}
    if section is None or not by_kind:
        return ""
    cols = [*CAUSES, "all"]
    lines = ["### Failed requests per fault kind (operations; conflicts are clients racing "
             "for a version: expected)", "", "| kind | " + " | ".join(cols) + " |",
             "|---|" + "---|" * len(cols)]
    for kind, row in [*by_kind.items(), ("all kinds", section["total"])]:
        lines.append(f"| {kind} | " + " | ".join(str(row[c]) for c in cols) + " |")
    return "\n".join(lines) + "\n"
