"""The signal model: kinds, the wire shape of one signal, cursors, projections.

Three ordering domains are kept apart (reference: events.md "History and
snapshots"):

* the **process version** orders committed roots (``committed.data.version``);
* the **transaction position** orders durable process envelopes (the commit
  log's ``position``; not exposed on signals);
* the **event sequence** orders canonical reasoning records within one session
  (``canonical_event.data.seq``, 1, 2, ...).

The **signal id** (a Redis stream id ``<ms>-<n>``) orders the signals of one
process across all kinds; it is the observer cursor and is identical for every
observer on every gateway.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from svit_cluster.defaults import DEFAULT_MAX_EVENTS, DEFAULT_SIGNAL_RETENTION
from svit_cluster.errors import ErrorCode, InvalidInput
from svit_cluster.process import Change, canonical_json

__all__ = [
    "DEFAULT_MAX_EVENTS",
    "DEFAULT_SIGNAL_RETENTION",
    "EVENT_FORMAT",
    "MAX_RECENT",
    "ORIGIN",
    "EventRecord",
    "Lagged",
    "Signal",
    "SignalKind",
    "change_payload",
    "cursor_key",
    "parse_cursor",
    "project_message",
    "session_for",
    "validate_limit",
]

#: Seconds a previous session's event log is kept once a new session starts
#: (``EXPIRE`` set by the first append of the new session; one day), so the
#: events a process keeps in Redis stay bounded however many sessions it has.
OLD_SESSION_TTL_S = 86_400
#: Largest ``limit`` of ``recent_events`` / ``recent_messages``.
MAX_RECENT = 4096
#: Format tag of one canonical event document.
EVENT_FORMAT = "svit-event@1"
#: The cursor before every signal ("from the oldest retained signal").
ORIGIN = "0-0"


class SignalKind(StrEnum):
    """What one signal means (reference: events.md, "Signal" table).

    * ``committed`` -- the process state changed: ``{version, paths, hashes}``
      (no values; an invalidation). Durable source: the transaction stream.
    * ``canonical_event`` -- one reason/act record was appended to the paged
      event log: ``{session, seq, event}``.
    * ``message`` -- the presentation message derived from the canonical event
      with the same ``seq``, always published right after it: ``{session, seq,
      message}``; rebuildable with :func:`project_message`.
    * ``completion`` -- one turn completed (the outbox message), published in
      the same atomic step as, and right after, the ``committed`` signal of
      the acknowledge of its inbox item.
    * ``failed`` -- the reasoning loop stopped: a bounded sanitized diagnostic
      ``{code, message, ...}``.
    """

    COMMITTED = "committed"
    CANONICAL_EVENT = "canonical_event"
    MESSAGE = "message"
    COMPLETION = "completion"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class Signal:
    """One signal of one process, as every observer sees it.

    Attributes:
        id: the signal id ``<ms>-<n>`` (the observer cursor).
        kind: see :class:`SignalKind`.
        data: the kind's payload (plain JSON).
        token: the fencing token of the owner that appended it.
    """

    id: str
    kind: SignalKind
    data: dict[str, Any]
    token: int | None = None

    def to_json(self) -> dict[str, Any]:
        """``{"id", "kind", "token", "data"}``."""
        return {"id": self.id, "kind": str(self.kind), "token": self.token, "data": self.data}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Signal:
        """Inverse of :meth:`to_json`.

        Raises:
            InvalidInput: (``decode_error``) an unknown kind or a wrong shape.
        """
        try:
            token = doc.get("token")
            return cls(str(doc["id"]), SignalKind(doc["kind"]), dict(doc["data"]),
                       None if token is None else int(token))
        except (KeyError, ValueError, TypeError) as exc:
            raise InvalidInput(f"malformed signal: {type(exc).__name__}",
                               code=ErrorCode.DECODE_ERROR) from None


@dataclass(frozen=True, slots=True)
class Lagged:
    """The observer missed signals; the live stream is incomplete.

    Recover with ``recent_events``/``recent_messages`` and ``read_versioned``,
    then keep following the live stream (which continues after ``resume``).

    Attributes:
        resume: the cursor after which the live stream continues.
        oldest: the oldest retained signal id (server-side lag), if known.
        missed: how many signals were dropped (client-side lag), if known.
        source: ``"server"`` (cursor out of retention) or ``"client"`` (the
            subscription's bounded buffer overflowed).
    """

    resume: str
    oldest: str | None = None
    missed: int | None = None
    source: str = "server"

    def to_json(self) -> dict[str, Any]:
        return {"resume": self.resume, "oldest": self.oldest, "missed": self.missed,
                "source": self.source}


@dataclass(frozen=True, slots=True)
class EventRecord:
    """One stored canonical event: session, sequence, appending token, document."""

    session: str
    seq: int
    token: int
    event: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"session": self.session, "seq": self.seq, "token": self.token,
                "event": self.event}


#: Largest part of a Redis stream id (each of ``<ms>`` and ``<n>`` is a u64).
_U64_MAX = 2**64 - 1


def _u64_text(text: str) -> bool:
    """``text`` is an ASCII decimal of at most 20 digits whose value fits a u64."""
    return 0 < len(text) <= 20 and text.isascii() and text.isdigit() and int(text) <= _U64_MAX


def parse_cursor(text: str) -> str:
    """Normalize a client cursor: ``"$"`` (now), ``"0"`` (origin) or ``<ms>-<n>``.

    ``<ms>`` and ``<n>`` are ASCII decimals in ``0..2**64-1`` (a Redis stream
    id's parts); ``<ms>`` alone means ``<ms>-0``.

    Raises:
        InvalidInput: (``decode_error``) anything else.
    """
    if text == "$":
        return "$"
    if text in ("0", ORIGIN):
        return ORIGIN
    ms, sep, n = text.partition("-")
    if not (_u64_text(ms) and (not sep or _u64_text(n))):
        raise InvalidInput("cursor must be '$', '0' or a signal id <ms>-<n> "
                           "(decimal, each part below 2**64)", code=ErrorCode.DECODE_ERROR)
    return f"{int(ms)}-{int(n) if sep else 0}"


def cursor_key(cursor: str) -> tuple[int, int]:
    """Sort key of a normalized cursor / signal id."""
    ms, _, n = cursor.partition("-")
    return int(ms), int(n or 0)


def validate_limit(limit: object) -> int:
    """A ``recent_*`` limit: an int in ``1..4096``.

    Raises:
        InvalidInput: otherwise.
    """
    if type(limit) is not int or not 1 <= limit <= MAX_RECENT:
        raise InvalidInput(f"limit must be an integer in 1..{MAX_RECENT}")
    return limit


def change_payload(change: Change) -> dict[str, Any]:
    """The ``committed`` payload of a :class:`Change`: version, paths, hashes (no values)."""
    return {"version": change.version, "paths": list(change.paths),
            "hashes": dict(change.hashes)}


def session_for(process_id: str) -> str:
    """The session id a process starts its reasoning history with (``s-<16 hex>``).

    Derived from the process id, so a process-only fork (a new id) begins a
    fresh session and a new owner after a failover continues the same one.
    """
    return "s-" + hashlib.sha256(process_id.encode("utf-8")).hexdigest()[:16]


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return canonical_json(value).decode("utf-8")


def project_message(event: dict[str, Any]) -> dict[str, Any]:
    """The presentation message derived from one canonical event (pure, rebuildable).

    Roles: ``user`` (kind ``user``), ``assistant`` (``reason`` with its tool
    calls, and ``reply``), ``tool`` (``act``: the tool result as JSON text).
    The ``message`` signal and ``recent_messages`` carry it as
    ``{session, seq, message}``, with the event's session and sequence.

    Returns:
        ``{turn, role, content}`` plus ``tool_calls`` (reason) or
        ``call_id``/``name`` (act).
    """
    kind = event.get("kind")
    data = event.get("data") or {}
    msg: dict[str, Any] = {"turn": event.get("turn")}
    if kind == "user":
        msg.update(role="user", content=_text(data.get("content", "")))
    elif kind == "reason":
        msg.update(role="assistant", content=_text(data.get("content") or ""),
                   tool_calls=list(data.get("tool_calls") or []))
    elif kind == "act":
        msg.update(role="tool", content=_text(data.get("result")),
                   call_id=data.get("call_id"), name=data.get("name"))
    else:
        msg.update(role="assistant", content=_text(data.get("content", "")))
    return msg


def dumps(doc: Any) -> bytes:
    """Compact JSON bytes for stored payloads (not hashed, so not canonical)."""
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode("utf-8")
