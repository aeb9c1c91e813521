"""Durable timers on the dispatcher side: park, fire and cancel delayed intents.

A delayed intent (``"delay_ms"``/``"due_ms"`` in the outbox entry, see
``_intent.py``) must not be delivered before ``due_ms`` (Redis ``TIME``, one
clock for every worker). The runner of the owned outbox stream does not hold it
in the stream: it *parks* it, so later entries are never blocked behind a timer.

Keys (all under the process's hash tag ``{P}``, so every script below touches
one Redis Cluster slot):

| key | type | holds |
| --- | --- | --- |
| ``<prefix>:{P}:timers`` | zset | pending timer id -> ``due_ms`` |
| ``<prefix>:{P}:timers:intents`` | hash | pending timer id -> parked intent (JSON) |
| ``<prefix>:{P}:timers:firing`` | hash | timer id -> intent, between *take* and *done* |
| ``<prefix>:{P}:timers:done`` | zset | ``fired:<id>``/``cancelled:<id>`` -> Redis ms |
| ``<prefix>:{P}:timers:log`` | stream | timer events (``event``, ``id``, details) |

``done`` keeps the newest ``TIMER_DONE_KEEP`` outcomes. The log's events are
``armed``, ``fired``, ``dead_lettered`` and the cancel outcomes ``cancelled``,
``too_late``, ``already_cancelled``, ``unknown``; ``MAXLEN ~ TIMER_LOG_MAXLEN``.

Life of a timer, each step **one Lua script** (all-or-nothing):

1. **park** (fenced by the stream claim's token, like the fenced ``XACK``):
   ``ZADD`` the id with score ``due_ms``, store the intent, log ``armed`` and
   ``XACK`` the outbox entry. A crash before it leaves the entry pending (it is
   parked again by the next holder); after it, the timer is in the zset. An id
   already pending, firing or done is not parked again (the entry is only
   acknowledged), so a re-read entry never arms a second timer.
2. **take** (fenced): every id with score ``<=`` Redis ``TIME`` (up to a
   batch) leaves the zset and the intents hash for ``firing``, and is
   remembered as ``fired``. The reply names the new head of the zset and the
   Redis time, so the runner knows when to look next without reading the zset.
3. delivery through the ordinary sink path (retries, dead letters), with the
   timer id as idempotency key.
4. **done** (fenced): removes the id from ``firing`` (refused with ``settled``
   if it is no longer there: another holder finished it) and logs ``fired``
   (or ``dead_lettered``, recording the letter in ``<stream>:dead-settled``
   in the same script, as the settle of an ordinary dead letter does).

A new claim holder first redelivers everything in ``firing`` (same idempotency
key, so the sink dedups), so a worker killed between take and done loses
nothing.

**cancel**: ``ZREM`` decides. Removed -> ``cancelled``; else in ``firing`` or
remembered ``fired`` -> ``too_late``; remembered ``cancelled`` ->
``already_cancelled``; else ``unknown`` (never parked here, or its outcome is
older than the newest ``TIMER_DONE_KEEP``). Because take and cancel are both
single scripts over the same zset, a timer is never both fired and cancelled.
The runner's cancel (a committed cancel entry) is fenced and acknowledges the
entry in the same script; :func:`cancel_timer` (the operator's cancel) runs the
same script without a claim token and without an entry. A cancel entry always
follows its timer's arm in the outbox stream, so the arm has been parked
before the cancel is read; an operator's cancel of a timer whose arm is not
parked yet answers ``unknown``.

Bounds: the zset and the intents hash hold the process's pending timers (the
guest caps them); ``firing`` holds at most the batches being delivered;
``done`` keeps the newest ``TIMER_DONE_KEEP`` outcomes; the log is capped
with ``MAXLEN ~``. Deleting the process removes all five keys.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from svit_cluster.dispatch._claim import _FENCE
from svit_cluster.dispatch._intent import Intent
from svit_cluster.dispatch._keys import DispatchKeys
from svit_cluster.dispatch._redisutil import boundary, text
from svit_cluster.errors import InvalidInput
from svit_cluster.store import DEFAULT_PREFIX, AsyncRedisClient, ProcessKeys, RedisClient

__all__ = [
    "TIMER_DONE_KEEP",
    "TIMER_LOG_MAXLEN",
    "UNSAFE_IGNORE_CANCELS_ENV",
    "UNSAFE_IGNORING_CANCEL_SCRIPT",
    "CancelOutcome",
    "Taken",
    "Timer",
    "TimerPage",
    "TimerScripts",
    "cancel_timer",
    "list_timers",
    "timer_keys",
    "timer_log",
    "timer_view",
]

#: Outcomes (``fired``/``cancelled``) remembered per process, newest kept.
TIMER_DONE_KEEP = 1000
#: Approximate cap of the per-process timer event log (``MAXLEN ~``).
TIMER_LOG_MAXLEN = 1000


class CancelOutcome(StrEnum):
    """What a cancel did (decided atomically against the firing)."""

    CANCELLED = "cancelled"  #: removed before it fired; it will never be delivered
    TOO_LATE = "too_late"  #: already firing or fired; it is (being) delivered
    ALREADY_CANCELLED = "already_cancelled"  #: an earlier cancel removed it
    UNKNOWN = "unknown"  #: not parked here (never a timer, not parked yet, or forgotten)


# KEYS (every script): 1 outbox stream, 2 claim token, 3 timers zset,
# 4 intents hash, 5 firing hash, 6 done zset, 7 log stream, 8 dead-settled hash.
_HELPERS = f"""
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function fmt(n)
  return string.format('%.0f', n)
end
local function log_event(event, id, ...)
  redis.call('XADD', KEYS[7], 'MAXLEN', '~', {TIMER_LOG_MAXLEN}, '*', 'event', event,
    'id', id, ...)
end
local function remember(outcome, id, now)
  redis.call('ZADD', KEYS[6], fmt(now), outcome .. ':' .. id)
  redis.call('ZREMRANGEBYRANK', KEYS[6], 0, -{TIMER_DONE_KEEP + 1})
end
local function known(id)
  return redis.call('ZSCORE', KEYS[3], id) or redis.call('HEXISTS', KEYS[5], id) == 1
    or redis.call('ZSCORE', KEYS[6], 'fired:' .. id)
    or redis.call('ZSCORE', KEYS[6], 'cancelled:' .. id)
end
"""

# ARGV: token, group, then per timer: entry id, timer id, due_ms, intent JSON.
# Returns {'ok', redis ms, pending count, {'parked' | 'known', ...}} (one state
# per timer, in order). One script parks a whole run of a batch's timers.
PARK_SCRIPT = _FENCE + _HELPERS + """
local now = now_ms()
local states = {}
for i = 3, #ARGV, 4 do
  local eid, id, due, intent = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local state = 'known'
  if not known(id) then
    state = 'parked'
    redis.call('ZADD', KEYS[3], due, id)
    redis.call('HSET', KEYS[4], id, intent)
    log_event('armed', id, 'due_ms', due, 'entry', eid)
  end
  redis.call('XACK', KEYS[1], ARGV[2], eid)
  states[#states + 1] = state
end
return {'ok', fmt(now), redis.call('ZCARD', KEYS[3]), states}
"""

# ARGV: token, limit.  Returns {'ok', redis ms, head due_ms ('' = none),
# pending count, {id, intent, id, intent, ...}}.
TAKE_SCRIPT = _FENCE + _HELPERS + """
local now = now_ms()
local due = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', fmt(now), 'LIMIT', 0,
  tonumber(ARGV[2]))
local out = {}
for _, id in ipairs(due) do
  local intent = redis.call('HGET', KEYS[4], id)
  redis.call('ZREM', KEYS[3], id)
  redis.call('HDEL', KEYS[4], id)
  if intent then
    redis.call('HSET', KEYS[5], id, intent)
    remember('fired', id, now)
    out[#out + 1] = id
    out[#out + 1] = intent
  end
end
local head = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
return {'ok', fmt(now), head[2] or '', redis.call('ZCARD', KEYS[3]), out}
"""

# ARGV: token, timer id, outcome ('fired' | 'dead_lettered'), outbox entry id,
# dead-letter id ('' unless dead_lettered), lateness ms.
# Returns {'ok', pending count} or {'settled'} (no longer firing: nothing written).
DONE_SCRIPT = _FENCE + _HELPERS + """
if redis.call('HDEL', KEYS[5], ARGV[2]) == 0 then
  return {'settled'}
end
if ARGV[3] == 'dead_lettered' then
  redis.call('HSET', KEYS[8], ARGV[4], ARGV[5])
end
log_event(ARGV[3], ARGV[2], 'late_ms', ARGV[6])
return {'ok', redis.call('ZCARD', KEYS[3])}
"""

# Read-only, one moment. Returns {redis ms, head due_ms ('' = none), pending
# count, {firing id, intent, ...}, {parked id, intent, ...}, {done members}};
# ARGV[1] = '1' adds the parked intents and the done members (the status API).
VIEW_SCRIPT = _HELPERS + """
local head = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
local parked, done = {}, {}
if ARGV[1] == '1' then
  parked = redis.call('HGETALL', KEYS[4])
  done = redis.call('ZRANGE', KEYS[6], 0, -1)
end
return {fmt(now_ms()), head[2] or '', redis.call('ZCARD', KEYS[3]),
  redis.call('HGETALL', KEYS[5]), parked, done}
"""

# ARGV: token ('' = an operator's cancel: no fence, no entry), group, cancel
# entry id ('' = none), timer id, who ('guest' | 'operator').
# Returns {'ok', outcome, pending count}.
_CANCEL_BODY = _HELPERS + """
local now = now_ms()
local id = ARGV[4]
local outcome
if redis.call('ZREM', KEYS[3], id) == 1 then
  redis.call('HDEL', KEYS[4], id)
  remember('cancelled', id, now)
  outcome = 'cancelled'
elseif redis.call('HEXISTS', KEYS[5], id) == 1
    or redis.call('ZSCORE', KEYS[6], 'fired:' .. id) then
  outcome = 'too_late'
elseif redis.call('ZSCORE', KEYS[6], 'cancelled:' .. id) then
  outcome = 'already_cancelled'
else
  outcome = 'unknown'
end
log_event(outcome, id, 'by', ARGV[5])
if ARGV[3] ~= '' then
  redis.call('XACK', KEYS[1], ARGV[2], ARGV[3])
end
return {'ok', outcome, redis.call('ZCARD', KEYS[3])}
"""
CANCEL_SCRIPT = "if ARGV[1] ~= '' then\n" + _FENCE + "end\n" + _CANCEL_BODY

#: TEST-ONLY (the chaos harness's negative control; public face:
#: ``svit_cluster.dispatch.testing``): when this environment variable is ``1``
#: in a dispatcher worker's environment, that worker applies committed cancels
#: with :data:`UNSAFE_IGNORING_CANCEL_SCRIPT`, so a timer reported ``cancelled``
#: still fires. Only the worker reads it (``DispatchWorker.run``);
#: :func:`cancel_timer` ignores it. It breaks the rule that a timer is never
#: both cancelled and fired.
UNSAFE_IGNORE_CANCELS_ENV = "SVIT_DISPATCH_UNSAFE_IGNORE_CANCELS"
_REMOVE = "if redis.call('ZREM', KEYS[3], id) == 1 then\n  redis.call('HDEL', KEYS[4], id)\n"
assert _REMOVE in CANCEL_SCRIPT
#: The cancel script of :data:`UNSAFE_IGNORE_CANCELS_ENV`: it answers, logs and
#: remembers ``cancelled`` for a parked timer but leaves it parked, so *take*
#: fires it when due (fired and reported cancelled: what ``timers`` must catch).
UNSAFE_IGNORING_CANCEL_SCRIPT = CANCEL_SCRIPT.replace(
    _REMOVE, "if redis.call('ZSCORE', KEYS[3], id) then\n")


def timer_keys(prefix: str, process_id: str) -> list[str]:
    """KEYS of every timer script for ``process_id`` (one slot: ``{P}``)."""
    pk = ProcessKeys(process_id, prefix)
    stream = pk.outbox
    return [stream, DispatchKeys.claim_token(stream), pk.timers, pk.timer_intents,
            pk.timer_firing, pk.timer_done, pk.timer_log, DispatchKeys.dead_settled(stream)]


def encode_parked(intent: Intent) -> str:
    """The stored form of a parked intent (what firing needs to deliver it)."""
    return json.dumps({"intent": intent.raw.decode("utf-8", errors="replace"),
                       "version": intent.version, "entry_id": intent.origin_entry_id,
                       "due_ms": intent.due_ms, "to": intent.to},
                      separators=(",", ":"), sort_keys=True)


def decode_parked(raw: Any) -> tuple[dict[bytes, bytes], str, int]:
    """``(outbox-entry fields, entry id, due_ms)`` of a stored parked intent."""
    doc = json.loads(raw)
    fields = {b"intent": str(doc["intent"]).encode(),
              b"version": str(doc.get("version", 0)).encode()}
    return fields, str(doc.get("entry_id") or "0-0"), int(doc.get("due_ms") or 0)


@dataclass(frozen=True, slots=True)
class Taken:
    """Reply of the take script."""

    redis_ms: int
    head_ms: int | None
    pending: int
    timers: list[tuple[str, bytes]]


class TimerScripts:
    """The timer scripts registered on a worker's async client (``EVALSHA``)."""

    def __init__(self, client: AsyncRedisClient, *, unsafe_ignore_cancels: bool = False) -> None:
        """``unsafe_ignore_cancels``: TEST-ONLY, see :data:`UNSAFE_IGNORE_CANCELS_ENV`."""
        self._park = client.register_script(PARK_SCRIPT)
        self._take = client.register_script(TAKE_SCRIPT)
        self._done = client.register_script(DONE_SCRIPT)
        self._cancel = client.register_script(
            UNSAFE_IGNORING_CANCEL_SCRIPT if unsafe_ignore_cancels else CANCEL_SCRIPT)
        self._view = client.register_script(VIEW_SCRIPT)

    async def load(self, keys: list[str]) -> tuple[int, int | None, int, list[tuple[str, Any]]]:
        """``(redis ms, head due_ms, pending count, firing timers)`` (read-only)."""
        reply = await self._view(keys=keys, args=["0"])
        head = text(reply[1])
        flat = reply[3] or []
        return (int(reply[0]), int(head) if head else None, int(reply[2]),
                [(text(flat[i]), flat[i + 1]) for i in range(0, len(flat), 2)])

    async def park(self, keys: list[str], token: int, group: str, entry_id: str,
                   intent: Intent) -> tuple[str, int, int]:
        """Park one ``intent`` and ``XACK`` its entry (see :meth:`park_many`).

        Returns:
            ``(state, redis ms, pending)``: state ``parked``, ``known`` (already
            pending, firing or done: only acknowledged) or ``fenced`` (a newer
            claim holder exists; nothing written).
        """
        states, redis_ms, pending = await self.park_many(keys, token, group,
                                                         [(entry_id, intent)])
        return (states[0] if states else "fenced"), redis_ms, pending

    async def park_many(self, keys: list[str], token: int, group: str,
                        items: list[tuple[str, Intent]]) -> tuple[list[str], int, int]:
        """Park every ``(entry id, intent)`` and ``XACK`` its entry, in one
        script fenced by ``token`` (all or nothing).

        Returns:
            ``(states, redis ms, pending)``: one state per item, ``parked`` or
            ``known``; ``states`` is empty when fenced (a newer claim holder
            exists; nothing written).
        """
        args: list[Any] = [token, group]
        for entry_id, intent in items:
            args += [entry_id, intent.id, intent.due_ms, encode_parked(intent)]
        reply = await self._park(keys=keys, args=args)
        if text(reply[0]) != "ok":
            return [], 0, 0
        return [text(s) for s in reply[3] or []], int(reply[1]), int(reply[2])

    async def take(self, keys: list[str], token: int, limit: int) -> Taken | None:
        """Move up to ``limit`` due timers to ``firing`` (fenced; None if fenced)."""
        reply = await self._take(keys=keys, args=[token, limit])
        if text(reply[0]) != "ok":
            return None
        flat = reply[4] or []
        head = text(reply[2])
        return Taken(int(reply[1]), int(head) if head else None, int(reply[3]),
                     [(text(flat[i]), flat[i + 1]) for i in range(0, len(flat), 2)])

    async def done(self, keys: list[str], token: int, timer_id: str, outcome: str,
                   entry_id: str, dead_id: str, late_ms: int) -> str:
        """Finish a firing timer: ``ok``, ``settled`` or ``fenced`` (nothing written)."""
        reply = await self._done(keys=keys, args=[token, timer_id, outcome, entry_id,
                                                  dead_id, late_ms])
        return text(reply[0])

    async def cancel(self, keys: list[str], token: int, group: str, entry_id: str,
                     timer_id: str) -> tuple[str, int]:
        """Cancel ``timer_id`` for a committed cancel entry and ``XACK`` it (fenced).

        Returns:
            ``(outcome, pending)``; outcome ``fenced`` when a newer claim holder
            exists (nothing written).
        """
        reply = await self._cancel(keys=keys, args=[token, group, entry_id, timer_id, "guest"])
        if text(reply[0]) != "ok":
            return "fenced", 0
        return text(reply[1]), int(reply[2])


@dataclass(frozen=True, slots=True)
class Timer:
    """One pending timer of a process.

    Attributes:
        id: the delayed intent's id (its idempotency key).
        to: destination address.
        due_ms: not delivered before this time (ms since the epoch, Redis clock).
        state: ``pending`` (parked) or ``firing`` (being delivered now).
        version: the sender version that committed it.
    """

    id: str
    to: str
    due_ms: int
    state: str
    version: int


@dataclass(frozen=True, slots=True)
class TimerPage:
    """A page of :func:`list_timers`: ``timers`` and the cursor of the next page
    (``next_after``, None on the last page)."""

    timers: list[Timer]
    next_after: str | None


def _timer(timer_id: str, raw: Any, state: str, due_ms: int | None = None) -> Timer:
    doc = json.loads(raw) if raw is not None else {}
    return Timer(timer_id, str(doc.get("to", "")),
                 int(due_ms if due_ms is not None else doc.get("due_ms") or 0), state,
                 int(doc.get("version") or 0))


def list_timers(client: RedisClient, prefix: str = DEFAULT_PREFIX, process_id: str = "",
                limit: int = 100, after: str | None = None) -> TimerPage:
    """The pending timers of ``process_id``, in due order, one bounded page.

    The first page (``after`` None) starts with the timers being delivered
    right now (``state="firing"``), then the parked ones by ``(due_ms, id)``.

    Args:
        client: a redis-py client (single server or cluster).
        prefix: the store's key prefix.
        process_id: the process.
        limit: at most this many parked timers per page (1..1000).
        after: the previous page's ``next_after`` (opaque).

    Returns:
        :class:`TimerPage`. Read-only; a timer that fires or is cancelled
        between two pages is simply not listed again.

    Raises:
        InvalidInput: bad process id, prefix, limit or cursor.
        UnavailableError: Redis failed.
    """
    if type(limit) is not int or not 1 <= limit <= 1000:
        raise InvalidInput("limit must be an integer in 1..1000")
    pk = ProcessKeys(process_id, prefix)
    start_ms, start_id = 0, ""
    if after is not None:
        head, sep, start_id = after.partition("/")
        if not sep or not head.isascii() or not head.isdigit() or len(head) > 20:
            raise InvalidInput("malformed timer cursor")
        start_ms = int(head)
    out: list[Timer] = []
    with boundary("list_timers"):
        if after is None:
            firing: Any = client.hgetall(pk.timer_firing)
            out.extend(_timer(text(k), v, "firing") for k, v in sorted(firing.items()))
        parked: list[tuple[str, int]] = []
        offset = 0
        while len(parked) < limit + 1:
            page: Any = client.zrangebyscore(pk.timers, start_ms, "+inf", start=offset,
                                             num=limit + 1, withscores=True)
            if not page:
                break
            offset += len(page)
            for member, score in page:
                tid, due = text(member), int(score)
                if (due, tid) > (start_ms, start_id) or after is None:
                    parked.append((tid, due))
        parked = parked[: limit + 1]
        intents: Any = client.hmget(pk.timer_intents, [t for t, _ in parked[:limit]]) \
            if parked else []
    for (tid, due), raw in zip(parked[:limit], intents, strict=False):
        out.append(_timer(tid, raw, "pending", due))
    more = len(parked) > limit
    next_after = f"{parked[limit - 1][1]}/{parked[limit - 1][0]}" if more else None
    return TimerPage(out, next_after)


def cancel_timer(client: RedisClient, prefix: str = DEFAULT_PREFIX, process_id: str = "",
                 timer_id: str = "") -> CancelOutcome:
    """Cancel a pending timer from outside (an operator or the process's tenant).

    Runs the same script as a committed cancel, without a claim token: it races
    the firing the same way (``ZREM`` decides), so the answer is never
    ``cancelled`` for a timer that is delivered. Authorization is the caller's.

    Args:
        client: a redis-py client.
        prefix: the store's key prefix.
        process_id: the process that armed the timer.
        timer_id: the delayed intent's id.

    Returns:
        :class:`CancelOutcome`. Safe to retry: a retry of a cancel that applied
        answers ``already_cancelled``.

    Raises:
        InvalidInput: bad process id, prefix or timer id.
        UnavailableError: Redis failed (the cancel may or may not be applied).
    """
    if type(timer_id) is not str or not timer_id or len(timer_id) > 512:
        raise InvalidInput("timer id must be a non-empty string of at most 512 characters")
    keys = timer_keys(prefix, process_id)
    with boundary("cancel_timer", outcome="unknown"):
        script: Any = client.register_script(CANCEL_SCRIPT)
        reply = script(keys=keys, args=["", "", "", timer_id, "operator"])
    return CancelOutcome(text(reply[1]))


def timer_view(client: RedisClient, prefix: str, process_id: str
               ) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    """``(parked id -> intent, firing id -> intent, done members)`` of one
    process, read at one moment (one read-only script in its slot)."""
    script: Any = client.register_script(VIEW_SCRIPT)
    reply = script(keys=timer_keys(prefix, process_id), args=["1"])

    def pairs(flat: Any) -> dict[str, Any]:
        return {text(flat[i]): flat[i + 1] for i in range(0, len(flat or []), 2)}

    return pairs(reply[4]), pairs(reply[3]), [text(m) for m in reply[5] or []]


def timer_log(client: RedisClient, prefix: str = DEFAULT_PREFIX, process_id: str = ""
              ) -> list[dict[str, str]]:
    """The process's timer events, oldest first (at most about
    ``TIMER_LOG_MAXLEN``): each ``{"event", "id", ...}`` plus ``at_ms``.

    Raises:
        InvalidInput: bad process id or prefix.
        UnavailableError: Redis failed.
    """
    pk = ProcessKeys(process_id, prefix)
    with boundary("timer_log"):
        rows: Any = client.xrange(pk.timer_log)
    out = []
    for eid, fields in rows:
        doc = {text(k): text(v) for k, v in fields.items()}
        doc["at_ms"] = text(eid).split("-", 1)[0]
        out.append(doc)
    return out
