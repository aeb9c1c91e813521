"""In-memory signals and event log (:class:`InProcessRouter`, and tests).

Same semantics as the Redis adapter for one Python process and its lifetime:
one ordered, retention-capped signal list per process, a per-session event
log, ``committed``/``completion`` appended by the commit backend. Nothing is
durable and there is no fencing (one process, one owner).
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from svit_cluster.control import DEFAULT_RECEIPTS, MemoryBackend, Receipt
from svit_cluster.errors import ConflictError, InvalidInput
from svit_cluster.events import (
    DEFAULT_MAX_EVENTS,
    DEFAULT_SIGNAL_RETENTION,
    ORIGIN,
    EventRecord,
    ReadResult,
    Signal,
    SignalKind,
    Window,
    change_payload,
    cursor_key,
    session_for,
    validate_limit,
)
from svit_cluster.process import Transition

__all__ = ["MemoryEventLog", "MemorySignals", "SignalingMemoryBackend"]


@dataclass
class _Proc:
    signals: deque[Signal]
    added: int = 0
    events: dict[str, list[EventRecord]] = field(default_factory=dict)
    session: str | None = None
    dropped: str | None = None  # the newest signal id retention dropped


class MemorySignals:
    """Signals and event logs of many processes, in memory; a :class:`SignalSource`.

    Args:
        retention: signals kept per process (:data:`DEFAULT_SIGNAL_RETENTION`).
        max_events: canonical events kept per session (:data:`DEFAULT_MAX_EVENTS`).

    Thread-safe; waiting readers are woken from any thread.
    """

    def __init__(self, retention: int = DEFAULT_SIGNAL_RETENTION,
                 max_events: int = DEFAULT_MAX_EVENTS) -> None:
        self.retention = retention
        self.max_events = max_events
        self._procs: dict[str, _Proc] = {}
        self._lock = threading.Lock()
        self._seq = 0
        self._waiters: dict[str, list[tuple[asyncio.AbstractEventLoop, asyncio.Event]]] = {}

    def register(self, process_id: str) -> None:
        """Make ``process_id`` known (it exists, with no signals yet)."""
        with self._lock:
            self._procs.setdefault(process_id, _Proc(deque(maxlen=self.retention)))

    def _proc(self, process_id: str) -> _Proc:
        proc = self._procs.get(process_id)
        if proc is None:
            proc = self._procs[process_id] = _Proc(deque(maxlen=self.retention))
        return proc

    def add(self, process_id: str, kind: SignalKind, data: dict[str, Any],
            token: int | None = None) -> Signal:
        """Append one signal and wake the waiting readers."""
        with self._lock:
            return self._add_locked(process_id, kind, data, token)

    def _add_locked(self, process_id: str, kind: SignalKind, data: dict[str, Any],
                    token: int | None) -> Signal:
        self._seq += 1
        signal = Signal(f"{self._seq}-0", kind, data, token)
        proc = self._proc(process_id)
        if proc.signals.maxlen is not None and len(proc.signals) == proc.signals.maxlen:
            proc.dropped = proc.signals[0].id
        proc.signals.append(signal)
        proc.added += 1
        for loop, event in self._waiters.pop(process_id, []):
            loop.call_soon_threadsafe(event.set)
        return signal

    def append_events(self, process_id: str, token: int, session: str,
                      items: Sequence[tuple[dict[str, Any], dict[str, Any]]]) -> tuple[int, int]:
        """Append events and their ``canonical_event``/``message`` signals in one step."""
        with self._lock:
            proc = self._proc(process_id)
            log = proc.events.setdefault(session, [])
            seq = log[-1].seq if log else 0
            first = seq + 1
            for event, message in items:
                seq += 1
                log.append(EventRecord(session, seq, token, dict(event)))
                self._add_locked(process_id, SignalKind.CANONICAL_EVENT,
                                 {"session": session, "seq": seq, "event": dict(event)}, token)
                self._add_locked(process_id, SignalKind.MESSAGE,
                                 {"session": session, "seq": seq, "message": dict(message)},
                                 token)
            if len(log) > self.max_events:
                del log[: len(log) - self.max_events]
            proc.session = session
            return first, seq

    def fork_events(self, parent_id: str, child_id: str, *, upto_seq: int | None = None
                    ) -> int:
        """Store-level fork of the reasoning history (in-memory
        :func:`~svit_cluster.events.fork_events`): the child's first session
        (:func:`session_for` of the child) starts with the parent's current
        session events ``1..upto_seq`` (default: all), same sequence numbers and
        tokens, and becomes the child's current session. Safe to retry.

        Returns:
            The number of events copied.

        Raises:
            ConflictError: the child already has events beyond the copied prefix.
        """
        with self._lock:
            parent = self._procs.get(parent_id)
            if parent is None or parent.session is None:
                return 0
            prefix = [r for r in parent.events.get(parent.session, [])
                      if upto_seq is None or r.seq <= upto_seq]
            child = self._proc(child_id)
            session = session_for(child_id)
            log = child.events.setdefault(session, [])
            if log:
                if log[-1].seq > (prefix[-1].seq if prefix else 0):
                    raise ConflictError(f"{child_id} already has its own events",
                                        process_id=child_id)
                prefix = [r for r in prefix if r.seq > log[-1].seq]
            log.extend(EventRecord(session, r.seq, r.token, dict(r.event)) for r in prefix)
            child.session = session
            return len(prefix)

    # -- SignalSource ----------------------------------------------------------------

    async def exists(self, process_id: str) -> bool:
        with self._lock:
            return process_id in self._procs

    async def window(self, process_id: str) -> Window:
        with self._lock:
            proc = self._procs.get(process_id)
            if proc is None or not proc.signals:
                return Window(None, None, bool(proc and proc.added))
            return Window(proc.signals[0].id, proc.signals[-1].id,
                          proc.added > len(proc.signals))

    def _after(self, process_id: str, after: str, count: int) -> ReadResult:
        proc = self._procs.get(process_id)
        if proc is None or not proc.signals:
            return ReadResult(None, [])
        key = cursor_key(after)
        out = [s for s in proc.signals if cursor_key(s.id) > key][:count]
        return ReadResult(proc.signals[0].id, out, before_first=proc.dropped or ORIGIN)

    async def read(self, process_id: str, after: str, *, count: int, block_s: float
                   ) -> ReadResult:
        loop = asyncio.get_running_loop()
        with self._lock:
            got = self._after(process_id, after, count)
            if got.signals or block_s <= 0:
                return got
            event = asyncio.Event()
            self._waiters.setdefault(process_id, []).append((loop, event))
        try:
            await asyncio.wait_for(event.wait(), block_s)
        except TimeoutError:
            pass
        with self._lock:
            later = self._after(process_id, after, count)
        return ReadResult(got.first, later.signals, before_first=got.before_first)

    async def recent_events(self, process_id: str, limit: int, session: str | None = None
                            ) -> list[EventRecord]:
        validate_limit(limit)
        with self._lock:
            proc = self._procs.get(process_id)
            if proc is None:
                return []
            session = session or proc.session
            if session is None:
                return []
            return list(proc.events.get(session, [])[-limit:])


class MemoryEventLog:
    """The owner's writer for one process over :class:`MemorySignals`
    (same methods as :class:`~svit_cluster.events.RedisEventLog`)."""

    def __init__(self, store: MemorySignals, process_id: str, token: int = 1) -> None:
        self.store = store
        self.process_id = process_id
        self.token = token

    def append(self, session: str, items: Sequence[tuple[dict[str, Any], dict[str, Any]]]
               ) -> tuple[int, int]:
        if not items:
            raise InvalidInput("append needs at least one event")
        return self.store.append_events(self.process_id, self.token, session, items)

    def failed(self, payload: Mapping[str, Any]) -> str:
        return self.store.add(self.process_id, SignalKind.FAILED, dict(payload), self.token).id

    def last_seq(self, session: str) -> int:
        with self.store._lock:
            proc = self.store._procs.get(self.process_id)
            log = proc.events.get(session, []) if proc else []
            return log[-1].seq if log else 0

    def recent(self, session: str, limit: int) -> list[EventRecord]:
        validate_limit(limit)
        with self.store._lock:
            proc = self.store._procs.get(self.process_id)
            return list(proc.events.get(session, [])[-limit:]) if proc else []

    def signals(self, after: str = "0-0", count: int = 10_000) -> list[Signal]:
        with self.store._lock:
            return self.store._after(self.process_id, after, count).signals


class SignalingMemoryBackend(MemoryBackend):
    """A :class:`~svit_cluster.control.MemoryBackend` that appends ``committed``
    (and ``completion``) signals to :class:`MemorySignals` with every commit."""

    emits_signals = True

    def __init__(self, store: MemorySignals, process_id: str, max_receipts: int = DEFAULT_RECEIPTS,
                 token: int = 1) -> None:
        super().__init__(max_receipts)
        self.store = store
        self.process_id = process_id
        self.token = token
        store.register(process_id)

    def commit(
        self,
        transition: Transition,
        receipt: Receipt | None = None,
        intents: Sequence[dict[str, Any]] = (),
        *,
        completion: Mapping[str, Any] | None = None,
    ) -> None:
        super().commit(transition, receipt, intents)
        with self.store._lock:
            self.store._add_locked(self.process_id, SignalKind.COMMITTED,
                                   change_payload(transition.change), self.token)
            if completion is not None:
                self.store._add_locked(self.process_id, SignalKind.COMPLETION,
                                       dict(completion), self.token)
