"""The history: one JSON object per line, every operation and fault, in time order.

Line shape (keys sorted)::

    {"line": 12, "t": 3.141593, "kind": "invoke", "client": "c1",
     "process": "svit://chaos/r1-p0", "rid": "r1.c1.7", "expected": 5}

Kinds and their fields:

* ``invoke`` -- an operation starts: ``client``, ``process``, ``rid`` (request
  id, also the idempotency key), ``expected`` (expected version).
* ``ok`` -- it committed: ``version`` (resulting), ``previous``, ``replayed``,
  ``attempts``; ``token`` when the writer knows it; ``sent``: ``t`` at which the
  answered attempt was sent.
* ``fail`` -- it definitely did not commit: ``outcome`` (``conflict`` or
  ``rejected``), ``actual`` (conflict) or ``code`` (rejected or error code);
  for an answer from an owner, ``sent`` and the owner's ``token`` when known.
* ``info`` -- unknown outcome (transport errors, ``unavailable`` until the
  deadline, or a conflict after an ambiguous attempt): ``error``.
* ``nemesis`` -- ``phase`` (``inject`` / ``heal`` / ``error``), ``nemesis``
  (kind), ``window`` (index in the schedule), ``spec`` and ``detail``.
* ``fence`` -- the store observer saw the fence of ``process`` at ``fence``
  while the head was at ``head``: no later entry may carry a smaller token;
  ``since``: ``t`` of the previous read of that process (the fence rose in
  ``(since, t]``; null for the first read).
* ``owner`` -- the ownership record of ``process`` in etcd changed: ``host``
  and ``token`` (its fencing token: epoch and create revision), both null when
  it disappeared; ``since``: ``t`` of the previous read (the change happened in
  ``(since, t]``; null for the first read).
* ``final`` -- state read through the gateway after healing: ``process``,
  ``version``, ``count``, ``last``.
* ``outbox`` -- after the dispatcher drained: ``sink``, ``drained``,
  ``intents`` (per intent: ``id``, ``source``, ``version``, ``to``, ``state``,
  ``reason``, ``error``) and ``destination`` (the sink's record: ``appends``,
  ``log_complete``, ``inbox_copies``, ``delivered_slots``); see
  ``checker.outbox_event``.
* ``ports`` -- in a ``--workload ports`` run, after healing: the test server's
  ``url``, ``dedup``, ``requests`` (key, token, body, applied, answer) and the
  owners' ``owner_logs`` (see ``svit_chaos.ports``).
* ``host_lease`` -- the registration ``/svit/<cluster>/hosts/<host>`` in etcd
  changed: ``host``, ``lease`` (the etcd lease id it is held under, null when
  the key is gone), ``incarnation``, ``previous`` (the lease id seen before,
  null for the first sighting or after a gap) and ``since`` (``t`` of the last
  read that still saw ``previous``); see ``svit_chaos.leases``.
* ``lease_reasons`` -- after healing: ``reasons``, lease id -> why the host
  agent said it lost that lease (from the cluster's log files).
* ``meta`` / ``note`` -- run parameters and free-form remarks.

``t`` is seconds since the writer started, from an injectable monotonic clock
(never decreasing). ``line`` is 1-based and equals the line number in the file,
so checker reports can point at lines.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from .clock import Clock, MonotonicClock
from .errors import HistoryError

__all__ = ["KINDS", "OP_KINDS", "SETTLE_CLIENT", "Event", "HistoryWriter", "read_history",
           "write_history"]

Event = dict[str, Any]

#: Kinds of operation events.
OP_KINDS = frozenset({"invoke", "ok", "fail", "info"})
#: The client of the operations the harness makes after healing (the loss
#: control's victim): checked like any operation, but not workload demand, so
#: availability leaves them out.
SETTLE_CLIENT = "settle"
#: Every kind a history may hold.
KINDS = OP_KINDS | frozenset({"nemesis", "fence", "owner", "final", "meta", "note",
                                    "outbox", "ports", "host_lease", "lease_reasons",
                                    "timers"})


class HistoryWriter:
    """Appends events to memory and (optionally) a JSONL file, flushing each line.

    Thread-safe: the workload, the nemesis runner and the store observer all
    record into one writer. A crash leaves every recorded line on disk.

    Args:
        path: the JSONL file to create (truncated), or None for memory only.
        clock: monotonic clock; ``t`` is measured from construction.
    """

    def __init__(self, path: Path | None = None, *, clock: Clock | None = None) -> None:
        self.clock: Clock = clock or MonotonicClock()
        self.path = path
        self._t0 = self.clock.now()
        self._last_t = 0.0
        self._lock = threading.Lock()
        self._events: list[Event] = []
        self._file: IO[str] | None = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(path, "w", encoding="utf-8")  # closed in close()

    def elapsed(self) -> float:
        """Seconds since the writer started (the ``t`` a record made now would get)."""
        return max(self._last_t, self.clock.now() - self._t0)

    def record(self, kind: str, **fields: Any) -> Event:
        """Append one event and return it (with ``line`` and ``t`` filled in).

        Raises:
            ValueError: unknown ``kind``, or a field named ``line``/``t``/``kind``.
        """
        if kind not in KINDS:
            raise ValueError(f"unknown history kind {kind!r}")
        if {"line", "t", "kind"} & fields.keys():
            raise ValueError("line, t and kind are set by the writer")
        with self._lock:
            t = max(self._last_t, self.clock.now() - self._t0)
            self._last_t = t
            event: Event = {"line": len(self._events) + 1, "t": round(t, 6), "kind": kind}
            event.update(fields)
            self._events.append(event)
            if self._file is not None:
                self._file.write(json.dumps(event, sort_keys=True, default=str) + "\n")
                self._file.flush()
        return event

    @property
    def events(self) -> list[Event]:
        """A copy of every event recorded so far, in order."""
        with self._lock:
            return list(self._events)

    def close(self) -> None:
        """Close the file (idempotent); the in-memory events stay readable."""
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    def __enter__(self) -> HistoryWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _parse_lines(lines: Iterable[str], path: str) -> Iterator[Event]:
    pending: list[tuple[int, str]] = [(n, s) for n, s in enumerate(lines, 1) if s.strip()]
    for idx, (n, text) in enumerate(pending):
        try:
            event = json.loads(text)
        except ValueError as exc:
            if idx == len(pending) - 1 and not text.endswith("\n"):
                return  # a line cut short by a crash: everything before it stands
            raise HistoryError(f"{path}:{n}: not JSON: {exc}", path=path, line=n) from exc
        if not isinstance(event, dict) or event.get("kind") not in KINDS:
            raise HistoryError(f"{path}:{n}: not a history event", path=path, line=n)
        if not isinstance(event.get("t"), int | float):
            raise HistoryError(f"{path}:{n}: event has no time t", path=path, line=n)
        event["line"] = n
        yield event


def read_history(path: Path) -> list[Event]:
    """Read a history JSONL file.

    ``line`` is reset to the physical line number. A last line cut short by a
    crash (no trailing newline, not JSON) is ignored.

    Raises:
        HistoryError: a line is not a JSON object with a known ``kind`` and a
            numeric ``t`` (fields ``path``, ``line``).
        OSError: the file cannot be read.
    """
    with open(path, encoding="utf-8") as fh:
        return list(_parse_lines(fh, str(path)))


def write_history(path: Path, events: Iterable[Event]) -> None:
    """Write ``events`` as JSONL (renumbering ``line``), e.g. to save a fixture."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        for n, event in enumerate(events, 1):
            fh.write(json.dumps({**event, "line": n}, sort_keys=True, default=str) + "\n")
