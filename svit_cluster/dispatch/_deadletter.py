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

The stream is bounded (``_deadbound.py``): at most ``max_count`` letters, none
older than ``max_age_s``; every append enforces both. A letter the bounds
removed cannot be re-driven: :meth:`DeadLetters.redrive` reports it under
``trimmed``, apart from the ``missing`` ids (already re-driven, or unknown).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from redis.exceptions import RedisError

from svit_cluster.defaults import (
    DEAD_LETTER_PAGE_MAX,
    DEFAULT_DEAD_LETTER_PAGE,
    DEFAULT_REDRIVE_LIMIT,
)
from svit_cluster.dispatch._deadbound import (
    PRUNE_ONE_SCRIPT,
    WRITE_SCRIPT,
    DeadLetterBound,
    Trimmed,
    id_below,
)
from svit_cluster.dispatch._intent import Intent
from svit_cluster.dispatch._keys import DispatchKeys
from svit_cluster.dispatch._redisutil import boundary, text
from svit_cluster.errors import InvalidInput
from svit_cluster.store import AsyncRedisClient, RedisClient

__all__ = ["DeadLetter", "DeadLetters", "RedriveResult", "write_dead_letter"]

log = logging.getLogger(__name__)

# KEYS: dead, redrive.  ARGV: dead-letter id, now ms.  Returns {} when the
# letter is not there, else {settle_stream, settle_entry} ('' for a letter
# written without a claim token), so the caller can prune ``:dead-settled``.
_MOVE = """
local found = redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1])
if #found == 0 then
  return {}
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
local settle = {'', ''}
for i = 1, #f, 2 do
  if f[i] == 'settle_stream' then settle[1] = f[i + 1] end
  if f[i] == 'settle_entry' then settle[2] = f[i + 1] end
end
return settle
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
    """Outcome of :meth:`DeadLetters.redrive`.

    Attributes:
        redriven: ids moved to the re-drive stream.
        missing: ids not there that no bound removed: already re-driven (a
            retry), refused, or unknown. Nothing to do.
        trimmed: ids the dead-letter bounds removed (below the highest id they
            trimmed; a letter re-driven before the bounds passed it is reported
            here too): gone for good, nothing was re-driven for them.
        trimmed_reason: one sentence naming the bounds in force when letters
            were last removed; ``""`` when ``trimmed`` is empty.
    """

    redriven: tuple[str, ...]
    missing: tuple[str, ...]
    trimmed: tuple[str, ...] = ()
    trimmed_reason: str = ""

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"redriven": list(self.redriven), "missing": list(self.missing),
                               "trimmed": list(self.trimmed)}
        if self.trimmed:
            doc["trimmed_reason"] = self.trimmed_reason
        return doc


async def write_dead_letter(
    client: AsyncRedisClient, keys: DispatchKeys, *, intent: Intent | None,
    fields: dict[bytes, bytes], stream: str, entry_id: str, source: str, sink: str,
    reason: str, error: str, attempts: int, worker: str, claim_token: int = 0,
    bound: DeadLetterBound | None = None,
) -> tuple[str, Trimmed]:
    """Append one dead letter and enforce ``bound`` in the same script (async;
    used by workers).

    Returns:
        ``(letter id, what the bound removed)``. The new letter is the newest,
        so the bound never removes it.

    ``intent`` is None when the entry could not be decoded; then the raw
    ``fields`` are kept. The original stream and entry come from the re-drive
    fields when the entry was itself a re-drive.

    With ``claim_token`` (>= 1) the letter is *provisional* until the worker
    settles it (``StreamClaims.settle_dead`` records it in
    ``<stream>:dead-settled`` with the fenced ``XACK``); it carries ``token``,
    ``settle_stream`` (= ``stream``, the source stream read) and
    ``settle_entry`` (= ``entry_id``) so readers can check that.

    ``bound`` defaults to :class:`DeadLetterBound` () (10 000 letters, 7 days).

    Raises:
        redis.exceptions.RedisError: the write failed (the caller must not ack).
    """
    def field(name: str, default: str) -> str:
        raw = fields.get(name.encode())
        return raw.decode("utf-8", errors="replace") if raw is not None else default

    record: Any = {
        "intent": fields.get(b"intent", b""),
        "intent_id": intent.id if intent else "",
        "to": intent.to if intent else "",
        "source": intent.source if intent else source,
        "version": field("version", "0"),
        "stream": field("stream", stream),
        "entry_id": intent.origin_entry_id if intent else field("entry_id", entry_id),
        "committed_ms": str(intent.committed_ms) if intent else field("committed_ms", "0"),
        "sink": sink,
        "reason": reason,
        "error": error[:1024],
        "attempts": attempts,
        "failed_ms": int(time.time() * 1000),
        "worker": worker,
    }
    if claim_token:
        record.update(token=claim_token, settle_stream=stream, settle_entry=entry_id)
    args: list[Any] = list((bound or DeadLetterBound()).args)
    for name, value in record.items():
        args.extend((name, value))
    script: Any = client.register_script(WRITE_SCRIPT)
    reply = await script(keys=[keys.dead, keys.dead_trim], args=args)
    return text(reply[0]), Trimmed.from_reply(reply[1:])


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
        self._prune_one = client.register_script(PRUNE_ONE_SCRIPT)

    def count(self) -> int:
        """Number of dead letters. Raises UnavailableError."""
        with boundary("dead_letters.count"):
            return int(self._client.xlen(self.keys.dead))

    def list(self, *, limit: int = DEFAULT_DEAD_LETTER_PAGE,
             after: str | None = None) -> list[DeadLetter]:
        """Dead letters, oldest first.

        Args:
            limit: at most this many (1..``defaults.DEAD_LETTER_PAGE_MAX``;
                ``defaults.DEFAULT_DEAD_LETTER_PAGE``).
            after: only letters with an id greater than this one (paging).

        Raises:
            InvalidInput: bad limit or id.  UnavailableError: Redis failed.
        """
        if not 1 <= limit <= DEAD_LETTER_PAGE_MAX:
            raise InvalidInput(f"limit must be in 1..{DEAD_LETTER_PAGE_MAX}")
        if after and not _valid_id(after):
            raise InvalidInput(f"bad dead-letter id {after[:64]!r}")
        start = f"({after}" if after else "-"
        with boundary("dead_letters.list"):
            raw: Any = self._client.xrange(self.keys.dead, min=start, max="+", count=limit)
        return [DeadLetter.from_entry(eid, fields) for eid, fields in raw]

    def redrive(self, ids: Sequence[str] | None = None, *,
                limit: int = DEFAULT_REDRIVE_LIMIT) -> RedriveResult:
        """Move dead letters back to delivery (the re-drive stream).

        Args:
            ids: dead-letter ids; None re-drives the oldest ``limit`` letters.
            limit: cap when ``ids`` is None (``defaults.DEFAULT_REDRIVE_LIMIT``).

        Returns:
            The ids moved, the ids the dead-letter bounds removed (``trimmed``:
            gone for good) and the other ids not there (``missing``: already
            re-driven, or unknown). Safe to retry: a letter moves at most once.
            A moved letter's ``<stream>:dead-settled`` field is deleted (it is
            needed only while its letter is in the dead-letter stream; if that
            fails, the workers' sweep deletes it once the bounds pass it).

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
                settle: Any = self._move(keys=[self.keys.dead, self.keys.redrive],
                                         args=[dead_id, now])
            if not settle:
                missing.append(dead_id)
                continue
            moved.append(dead_id)
            stream, entry = text(settle[0]), text(settle[1])
            if stream and entry:
                try:
                    self._prune_one(keys=[DispatchKeys.dead_settled(stream)],
                                    args=[entry, dead_id])
                except RedisError as exc:  # the workers' sweep deletes it later
                    log.debug("pruning the settle of %s failed: %s", dead_id, exc)
        if not missing:
            return RedriveResult(tuple(moved), ())
        trimmed, reason = self._trimmed(missing)
        return RedriveResult(tuple(moved), tuple(i for i in missing if i not in trimmed),
                             tuple(i for i in missing if i in trimmed), reason)

    def _trimmed(self, missing: Sequence[str]) -> tuple[set[str], str]:
        """The ids of ``missing`` below what the bounds removed, and why they went."""
        with boundary("dead_letters.trimmed"):
            raw: Any = self._client.hgetall(self.keys.dead_trim)
        meta = {text(k): text(v) for k, v in (raw or {}).items()}
        below = meta.get("below", "")
        gone = {i for i in missing if below and id_below(i, below)}
        if not gone:
            return set(), ""
        age_ms = meta.get("max_age_ms", "")
        age = f"{int(age_ms) / 1000:g} s" if age_ms.isdigit() else "its maximum age"
        reason = (f"removed by the dead-letter bounds (every letter below {below} is gone; "
                  f"the dispatcher keeps at most {meta.get('max_count', '?')} letters, "
                  f"none older than {age}); nothing to re-drive")
        return gone, reason


def _valid_id(text: str) -> bool:
    """``text`` is a stream id ``<ms>-<seq>``: ASCII decimals, each a u64 (as Redis
    parses it; anything else would be refused by Redis, not by us)."""
    ms, sep, seq = text.partition("-")
    return (bool(sep) and len(text) <= 41 and text.isascii() and ms.isdigit()
            and seq.isdigit() and int(ms) < 2**64 and int(seq) < 2**64)
