"""The read side every observer needs, whatever stores the signals."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from svit_cluster.events._model import EventRecord, Signal

__all__ = ["ReadResult", "SignalSource", "Window"]


@dataclass(frozen=True, slots=True)
class Window:
    """The retained part of one process's signal stream.

    Attributes:
        first: oldest retained signal id (None when empty).
        last: newest signal id ever added (None when none was).
        trimmed: True once any signal was dropped by retention.
    """

    first: str | None
    last: str | None
    trimmed: bool


@dataclass(frozen=True, slots=True)
class ReadResult:
    """One read: the oldest retained id *before* reading, and the signals read.

    Attributes:
        first: oldest retained signal id (None when the stream is empty).
        signals: the signals read, oldest first.
        before_first: the id of the signal just before ``first`` -- the newest
            one retention trimmed, or the origin ``"0-0"`` when nothing was ever
            before it; None when the source cannot tell. A cursor at or after it
            has lost nothing (:func:`~svit_cluster.events.observe`).
    """

    first: str | None
    signals: list[Signal] = field(default_factory=list)
    before_first: str | None = None


class SignalSource(Protocol):
    """Async, read-only access to signals and canonical history (gateway side).

    Every method raises ``UnavailableError`` when the store cannot be reached.
    """

    async def exists(self, process_id: str) -> bool:
        """Whether the process exists."""
        ...

    async def window(self, process_id: str) -> Window:
        """The retained window of the signal stream."""
        ...

    async def read(self, process_id: str, after: str, *, count: int, block_s: float
                   ) -> ReadResult:
        """Up to ``count`` signals with id > ``after``, oldest first; waits up to
        ``block_s`` seconds when there is none yet (then returns an empty list)."""
        ...

    async def recent_events(self, process_id: str, limit: int, session: str | None = None
                            ) -> list[EventRecord]:
        """The newest ``limit`` (1..4096) canonical events, oldest first."""
        ...
