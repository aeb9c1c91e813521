"""The dead-letter stream: what could not be delivered, and how to re-drive it.

An intent is dead-lettered when its sink refused it for good (unknown scheme,
host not allowed, oversized body, HTTP 4xx, ...), when ``max_attempts``
retryable failures were exhausted, or when workers kept dying on it
(``max_deliveries``). The worker writes the dead letter **before** it
acknowledges the source entry, so a crash in between can only produce a
second dead letter for the same intent id, never lose one.

Re-driving moves dead letters, in one Lua script per letter (all keys share the
``{dispatch}`` tag), to the re-drive stream, which workers consume like any
outbox stream: delivered with the same idempotency key, retried, and
dead-lettered again if it still fails. A re-driven intent is delivered after
later intents of its sender (ordering holds only for first deliveries).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from svit_cluster.dispatch._intent import Intent
from svit_cluster.dispatch._keys import DispatchKeys
from svit_cluster.dispatch._redisutil import boundary
from svit_cluster.errors import InvalidInput
from svit_cluster.store import AsyncRedisClient, RedisClient

__all__ = ["DeadLetter", "DeadLetters", "RedriveResult", "write_dead_letter"]

# KEYS: dead, redrive.  ARGV: dead-letter id, now ms.
_MOVE = """
local found = redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1])
if #found == 0 then
  return 0
end
local f = found[1][2]
local keep = {intent=1, version=1, source=1, stream=1, entry_id=1, committed_ms=1, intent_id=1}
local args = {}
for i = 1, #f, 2 do
  if keep[f[i]] then
    table.insert(args, f[i])
    table.insert(args, f[i + 1])
  end
end
table.insert(args, 'dead_letter_id')
table.insert(args, ARGV[1])
table.insert(args, 'redriven_ms')
table.insert(args, ARGV[2])
redis.call('XADD', KEYS[2], '*', unpack(args))
redis.call('XDEL', KEYS[1], ARGV[1])
return 1
"""


def _s(fields: dict[bytes, bytes], name: str, default: str = "") -> str:
    raw = fields.get(name.encode())
    return raw.decode("utf-8", errors="replace") if raw is not None else default


def _i(fields: dict[bytes, bytes], name: str) -> int:
    text = _s(fields, name, "0")
    return int(text) if text.isdigit() else 0


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One dead letter.

    Attributes:
        id: its id in the dead-letter stream (use it to re-drive).
        intent_id: the intent's id (its idempotency key); ``""`` if undecodable.
        to: destination address; source: the sender; version: sender version.
        stream, entry_id: the original outbox stream and entry.
        sink: the sink that failed (``svit``, ``webhook``, ``redis-stream``, ``none``).
        reason: ``exhausted``, ``unknown_scheme``, ``host_not_allowed``,
            ``body_too_large``, ``rejected``, ``malformed_intent``, ``poison``, ...
        error: the last error message.
        attempts: delivery attempts made by the worker that gave up.
        failed_ms: when it was dead-lettered (Redis-independent wall clock, ms).
        intent: the stored intent JSON, verbatim.
    """

    id: str
    intent_id: str
    to: str
    source: str
    version: int
    stream: str
    entry_id: str
    sink: str
    reason: str
    error: str
    attempts: int
    failed_ms: int
    intent: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_entry(cls, entry_id: bytes | str, fields: dict[bytes, bytes]) -> DeadLetter:
        eid = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
        return cls(
            id=eid, intent_id=_s(fields, "intent_id"), to=_s(fields, "to"),
            source=_s(fields, "source"), version=_i(fields, "version"),
            stream=_s(fields, "stream"), entry_id=_s(fields, "entry_id"),
            sink=_s(fields, "sink"), reason=_s(fields, "reason"), error=_s(fields, "error"),
            attempts=_i(fields, "attempts"), failed_ms=_i(fields, "failed_ms"),
            intent=_s(fields, "intent"),
        )


@dataclass(frozen=True, slots=True)
class RedriveResult:
    """Outcome of :meth:`DeadLetters.redrive`: ids moved, and ids not found."""

    redriven: tuple[str, ...]
    missing: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"redriven": list(self.redriven), "missing": list(self.missing)}


async def write_dead_letter(
    client: AsyncRedisClient, keys: DispatchKeys, *, intent: Intent | None,
    fields: dict[bytes, bytes], stream: str, entry_id: str, source: str, sink: str,
    reason: str, error: str, attempts: int, worker: str, claim_token: int = 0,
) -> str:
    """Append one dead letter (async; used by workers). Returns its id.

    ``intent`` is None when the entry could not be decoded; then the raw
    ``fields`` are kept. The original stream and entry come from the re-drive
    fields when the entry was itself a re-drive.

    With ``claim_token`` (>= 1) the letter is *provisional* until the worker
    settles it (``StreamClaims.settle_dead`` records it in
    ``<stream>:dead-settled`` with the fenced ``XACK``); it carries ``token``,
    ``settle_stream`` (= ``stream``, the source stream read) and
    ``settle_entry`` (= ``entry_id``) so readers can check that.

    Raises:
        redis.exceptions.RedisError: the write failed (the caller must not ack).
    """
    def text(name: str, default: str) -> str:
        raw = fields.get(name.encode())
        return raw.decode("utf-8", errors="replace") if raw is not None else default

    record: Any = {
        "intent": fields.get(b"intent", b""),
        "intent_id": intent.id if intent else "",
        "to": intent.to if intent else "",
        "source": intent.source if intent else source,
        "version": text("version", "0"),
        "stream": text("stream", stream),
        "entry_id": intent.origin_entry_id if intent else text("entry_id", entry_id),
        "committed_ms": str(intent.committed_ms) if intent else text("committed_ms", "0"),
        "sink": sink,
        "reason": reason,
        "error": error[:1024],
        "attempts": attempts,
        "failed_ms": int(time.time() * 1000),
        "worker": worker,
    }
    if claim_token:
        record.update(token=claim_token, settle_stream=stream, settle_entry=entry_id)
    new_id = await client.xadd(keys.dead, record)
    return new_id.decode() if isinstance(new_id, bytes) else str(new_id)


class DeadLetters:
    """List and re-drive dead letters (sync; CLI and gateway use it).

    Args:
        client: a redis-py client (``svit_cluster.store.connect``).
        prefix: the store's key prefix (default ``"svit"``).
    """

    def __init__(self, client: RedisClient, prefix: str = "svit") -> None:
        self.keys = DispatchKeys(prefix)
        self._client = client
        self._move = client.register_script(_MOVE)

    def count(self) -> int:
        """Number of dead letters. Raises UnavailableError."""
        with boundary("dead_letters.count"):
            return int(self._client.xlen(self.keys.dead))

    def list(self, *, limit: int = 100, after: str | None = None) -> list[DeadLetter]:
        """Dead letters, oldest first.

        Args:
            limit: at most this many (1..10000).
            after: only letters with an id greater than this one (paging).

        Raises:
            InvalidInput: bad limit or id.  UnavailableError: Redis failed.
        """
        if not 1 <= limit <= 10_000:
            raise InvalidInput("limit must be in 1..10000")
        if after and not _valid_id(after):
            raise InvalidInput(f"bad dead-letter id {after[:64]!r}")
        start = f"({after}" if after else "-"
        with boundary("dead_letters.list"):
            raw: Any = self._client.xrange(self.keys.dead, min=start, max="+", count=limit)
        return [DeadLetter.from_entry(eid, fields) for eid, fields in raw]

    def redrive(self, ids: Sequence[str] | None = None, *, limit: int = 1000) -> RedriveResult:
        """Move dead letters back to delivery (the re-drive stream).

        Args:
            ids: dead-letter ids; None re-drives the oldest ``limit`` letters.
            limit: cap when ``ids`` is None.

        Returns:
            The ids moved and the ids that were not (or no longer) there.
            Safe to retry: a letter moves at most once.

        Raises:
            InvalidInput: malformed id.  UnavailableError: Redis failed (some
                letters may have moved; listing shows which remain).
        """
        if ids is None:
            ids = [d.id for d in self.list(limit=limit)]
        moved: list[str] = []
        missing: list[str] = []
        now = int(time.time() * 1000)
        for dead_id in ids:
            if not isinstance(dead_id, str) or not _valid_id(dead_id):
                raise InvalidInput(f"bad dead-letter id {str(dead_id)[:64]!r}")
            with boundary("dead_letters.redrive", outcome="unknown"):
                done = self._move(keys=[self.keys.dead, self.keys.redrive], args=[dead_id, now])
            (moved if int(done) else missing).append(dead_id)
        return RedriveResult(tuple(moved), tuple(missing))


def _valid_id(text: str) -> bool:
    ms, sep, seq = text.partition("-")
    return bool(sep) and ms.isdigit() and seq.isdigit() and len(text) <= 41
