"""Recent ownership changes, as one gateway's route cache saw them (in memory, bounded).

A change is a process's owner record naming a new fencing token after an
earlier one: the old record went (its host's lease ended, or the owner
released it at passivation or delete) and a new owner claimed it, or, rarely,
the record was replaced in one step. Each change keeps the old and new host
and token, when the old record went and the new one came, and the gap
between the two (the time the process had no owner).

What the log is and is not:

* it is this gateway's view since it started; another gateway keeps its own
  log. A change whose old record went before the gateway started is not in
  it. One that happened while the route watch was broken is found by the
  reload that follows (as ``replaced``, or, when the process has no owner
  then, as an end dated at the reload);
* ``cause`` is ``lease_ended`` when etcd deleted the old record with its
  host's registration in one revision (the host's lease expired or was
  revoked: a failover), ``released`` for a record deleted alone (passivation,
  delete, a rebind), ``replaced`` when a record with a new token arrived with
  no deletion seen between;
* bounded: the newest :data:`KEEP` changes, and the last owner of at most
  :data:`REMEMBER` processes whose record went and has not come back.
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["KEEP", "REMEMBER", "OwnerChange", "OwnerChanges"]

#: Changes kept (newest first when read).
KEEP = 256
#: Processes whose last owner is remembered while they have none.
REMEMBER = 4096

Cause = Literal["lease_ended", "released", "replaced"]


@dataclass(frozen=True, slots=True)
class OwnerChange:
    """One ownership change of ``process_id`` (times in unix seconds)."""

    process_id: str
    old_host: str
    old_token: int
    new_host: str
    new_token: int
    cause: Cause
    #: When the old record went (None for ``replaced``).
    ended_at: float | None
    #: When the new record was seen.
    acquired_at: float

    @property
    def gap_s(self) -> float | None:
        """Seconds without an owner (None for ``replaced``)."""
        return None if self.ended_at is None else max(0.0, self.acquired_at - self.ended_at)

    def to_json(self) -> dict[str, Any]:
        """``{process_id, old_host, old_token, new_host, new_token, cause,
        ended_at, acquired_at, gap_s}``."""
        return {"process_id": self.process_id, "old_host": self.old_host,
                "old_token": self.old_token, "new_host": self.new_host,
                "new_token": self.new_token, "cause": self.cause,
                "ended_at": self.ended_at, "acquired_at": self.acquired_at,
                "gap_s": None if self.gap_s is None else round(self.gap_s, 3)}


@dataclass(slots=True)
class _Ended:
    host: str
    token: int
    at: float
    cause: Cause


class OwnerChanges:
    """The bounded log of ownership changes the route cache feeds.

    Args:
        keep: changes kept (default :data:`KEEP`).
        remember: owner-less processes whose last owner is kept (default
            :data:`REMEMBER`; the oldest is forgotten first).
        clock: unix seconds (injectable for tests).
    """

    def __init__(self, *, keep: int = KEEP, remember: int = REMEMBER,
                 clock: Callable[[], float] = time.time) -> None:
        self._changes: deque[OwnerChange] = deque(maxlen=keep)
        self._ended: OrderedDict[str, _Ended] = OrderedDict()
        self._remember = remember
        self._clock = clock

    def ended(self, process_id: str, host: str, token: int) -> None:
        """The owner record of ``process_id`` (``host``, ``token``) was deleted."""
        self._ended[process_id] = _Ended(host, token, self._clock(), "released")
        self._ended.move_to_end(process_id)
        while len(self._ended) > self._remember:
            self._ended.popitem(last=False)

    def lease_ended(self, process_id: str) -> None:
        """The deletion just noted for ``process_id`` came with its host's lease."""
        found = self._ended.get(process_id)
        if found is not None:
            found.cause = "lease_ended"

    def acquired(self, process_id: str, host: str, token: int,
                 previous: tuple[str, int] | None = None) -> None:
        """An owner record (``host``, ``token``) of ``process_id`` arrived;
        ``previous``: the ``(host, token)`` it replaced in place, if any."""
        now = self._clock()
        gone = self._ended.pop(process_id, None)
        if previous is not None and previous[1] != token:
            self._changes.append(OwnerChange(process_id, previous[0], previous[1], host, token,
                                             "replaced", None, now))
        elif gone is not None and gone.token != token:
            self._changes.append(OwnerChange(process_id, gone.host, gone.token, host, token,
                                             gone.cause, gone.at, now))

    def recent(self, limit: int) -> list[OwnerChange]:
        """The newest ``limit`` changes, newest first."""
        out: list[OwnerChange] = []
        for change in reversed(self._changes):
            if len(out) >= limit:
                break
            out.append(change)
        return out
