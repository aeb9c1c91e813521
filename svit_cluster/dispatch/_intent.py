"""One committed outbox intent, decoded from a source-stream entry.

The commit script writes each intent as ``XADD <prefix>:{P}:outbox * intent
<canonical JSON {"body","message_id","to"}> version <N>`` (``svit_cluster/store``); the
re-drive stream adds ``source``, ``stream``, ``entry_id`` and ``committed_ms``
fields that point back at the original entry.

Two more shapes of the ``intent`` field carry durable timers:

* a *delayed intent* adds ``"delay_ms": N`` and ``"due_ms": D`` (ms since the
  epoch, stamped by the host at commit); it must not be delivered before ``D``
  (:attr:`Intent.due_ms`);
* a *cancel entry* ``{"message_id", "cancel": "<timer id>"}`` has no ``to`` and
  no ``body``; it cancels the pending timer with that id (:class:`CancelEntry`,
  :func:`parse_cancel`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from svit_cluster.dispatch._errors import PermanentDeliveryError
from svit_cluster.process import canonical_json

__all__ = ["CancelEntry", "Intent", "entry_ms", "parse_cancel", "parse_entry"]


def entry_ms(entry_id: str) -> int:
    """The millisecond timestamp of an auto-generated stream id ``<ms>-<seq>`` (0 if none)."""
    head = entry_id.split("-", 1)[0]
    return int(head) if head.isdigit() else 0


@dataclass(frozen=True, slots=True)
class Intent:
    """A committed intent as the dispatcher sees it.

    Attributes:
        id: ``<sender>:<version>:<index>``; the idempotency key on every sink.
        to: destination address (``svit://…``, ``https://…``, ``redis-stream://…``).
        body: the plain JSON value the script sent.
        source: the sending process id.
        version: the sender's version that committed it.
        stream, entry_id: where this copy was read (outbox or re-drive stream).
        origin_entry_id: the entry id in the sender's outbox stream.
        committed_ms: Redis time of the commit, ms since the epoch.
        raw: the stored intent bytes (kept verbatim in dead letters).
        due_ms: for a delayed intent (a timer), the time before which it must
            not be delivered, ms since the epoch (compared with Redis ``TIME``);
            None for an ordinary intent.
    """

    id: str
    to: str
    body: Any
    source: str
    version: int
    stream: str
    entry_id: str
    origin_entry_id: str
    committed_ms: int
    raw: bytes
    due_ms: int | None = None

    @property
    def scheme(self) -> str:
        """The lower-cased address scheme (``""`` when there is none)."""
        scheme, sep, _ = self.to.partition("://")
        return scheme.lower() if sep else ""

    def body_bytes(self) -> int:
        """Size of the body as canonical JSON, in bytes."""
        return len(canonical_json(self.body))


def _text(fields: dict[bytes, bytes], name: str) -> str | None:
    raw = fields.get(name.encode())
    return raw.decode("utf-8", errors="replace") if raw is not None else None


def parse_entry(stream: str, entry_id: str, fields: dict[bytes, bytes],
                default_source: str | None) -> Intent:
    """Decode one source-stream entry.

    Args:
        stream: the stream key it came from.
        entry_id: its stream id.
        fields: the entry's raw fields.
        default_source: the sender when the entry has no ``source`` field
            (the process of an outbox stream).

    Raises:
        PermanentDeliveryError: (reason ``malformed_intent``) the entry is not
            a decodable intent; the message says what is wrong.
    """
    raw = fields.get(b"intent", b"")

    def bad(why: str) -> PermanentDeliveryError:
        return PermanentDeliveryError(f"malformed intent in {stream} {entry_id}: {why}",
                                      reason="malformed_intent")

    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise bad("not JSON") from exc
    if not isinstance(doc, dict):
        raise bad("not a JSON object")
    # New entries carry ``message_id`` (the reference's name); legacy entries
    # carry ``id``. Either is the idempotency key.
    intent_id = doc.get("message_id", doc.get("id"))
    to = doc.get("to")
    if not isinstance(intent_id, str) or not intent_id or len(intent_id) > 512:
        raise bad("missing or oversized id")
    if not isinstance(to, str) or not to:
        raise bad("missing destination")
    due_ms = doc.get("due_ms")
    if "delay_ms" in doc or due_ms is not None:
        if type(due_ms) is not int or due_ms < 0:
            raise bad("a delayed intent without an integer due_ms")
    source = _text(fields, "source") or default_source
    if not source:
        raise bad("unknown sender")
    version_text = _text(fields, "version") or "0"
    origin = _text(fields, "entry_id") or entry_id
    committed = _text(fields, "committed_ms")
    return Intent(
        id=intent_id,
        to=to,
        body=doc.get("body"),
        source=source,
        version=int(version_text) if version_text.isdigit() else 0,
        stream=stream,
        entry_id=entry_id,
        origin_entry_id=origin,
        committed_ms=int(committed) if committed and committed.isdigit() else entry_ms(origin),
        raw=raw,
        due_ms=due_ms,
    )


@dataclass(frozen=True, slots=True)
class CancelEntry:
    """A committed cancel of a pending timer (an outbox entry without ``to``).

    Attributes:
        id: the cancel's own ``<sender>:<version>:<index>``.
        timer_id: the id of the delayed intent it cancels.
        entry_id: its outbox entry id.
    """

    id: str
    timer_id: str
    entry_id: str


def parse_cancel(entry_id: str, fields: dict[bytes, bytes]) -> CancelEntry | None:
    """The cancel entry in ``fields``, or None when the entry is anything else
    (an intent, or undecodable: :func:`parse_entry` then says what is wrong)."""
    raw = fields.get(b"intent", b"")
    if b'"cancel"' not in raw:
        return None
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    if not isinstance(doc, dict) or "to" in doc:
        return None
    cid, timer = doc.get("message_id"), doc.get("cancel")
    if not isinstance(cid, str) or not isinstance(timer, str) or not timer or len(timer) > 512:
        return None
    return CancelEntry(cid, timer, entry_id)
