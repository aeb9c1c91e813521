"""Signals and the paged canonical event log on Redis.

Keys (all with the process's hash tag, see :class:`~svit_cluster.store.ProcessKeys`):

* ``<prefix>:{P}:signals`` -- the one ordered signal stream of the process,
  ``MAXLEN ~ retention``. ``committed`` (and ``completion``) entries are added
  by the commit script itself; this module adds ``canonical_event``,
  ``message`` and ``failed``.
* ``<prefix>:{P}:events:<session>`` -- one session's canonical events, entry
  id ``<seq>-0``; a page is an ``XRANGE`` over sequence numbers.
* ``<prefix>:{P}:session`` -- the current session id.

Writers (:class:`RedisEventLog`) are fenced like every commit: a token below
the stored fence appends nothing. Readers (:class:`RedisSignalSource`) are
async and used by the gateway; they never take the owner's path.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from redis.exceptions import RedisError, ResponseError

from svit_cluster.errors import (
    ConflictError,
    CorruptData,
    FencedError,
    InvalidInput,
    UnavailableError,
)
from svit_cluster.events._model import (
    DEFAULT_MAX_EVENTS,
    DEFAULT_SIGNAL_RETENTION,
    OLD_SESSION_TTL_S,
    EventRecord,
    Signal,
    SignalKind,
    dumps,
    parse_cursor,
    session_for,
    validate_limit,
)
from svit_cluster.events._source import ReadResult, Window
from svit_cluster.store import (
    ADD_SIGNAL,
    DEFAULT_PREFIX,
    AsyncRedisClient,
    ProcessKeys,
    RedisClient,
    async_connect,
    failure_reason,
    redis_boundary,
    require_noeviction,
)

__all__ = ["RedisEventLog", "RedisSignalSource", "fork_events", "parse_signal"]

_FENCE = """
local fence = redis.call('GET', KEYS[1]) or '0'
if tonumber(ARGV[1]) < tonumber(fence) then
  return {'fenced', fence}
end
"""

# KEYS: fence, events, signals, session
# ARGV: token, session, signal_retention, max_events, (event_json, message_json)...
APPEND_EVENTS = _FENCE + ADD_SIGNAL + """
for _, k in ipairs({KEYS[2], KEYS[3]}) do
  local t = redis.call('TYPE', k).ok
  if t ~= 'none' and t ~= 'stream' then
    return {'corrupt', k .. ' is a ' .. t}
  end
end
local last = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', 1)
local seq = 0
if #last > 0 then
  seq = tonumber(string.match(last[1][1], '^(%d+)'))
end
local first = seq + 1
for i = 5, #ARGV, 2 do
  seq = seq + 1
  local id = string.format('%d-0', seq)
  redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[4], id, 'event', ARGV[i], 'token', ARGV[1])
  add_signal(KEYS[3], ARGV[3], 'kind', 'canonical_event',
    'token', ARGV[1], 'session', ARGV[2], 'seq', seq, 'data', ARGV[i])
  add_signal(KEYS[3], ARGV[3], 'kind', 'message',
    'token', ARGV[1], 'session', ARGV[2], 'seq', seq, 'data', ARGV[i + 1])
end
-- A new session: the previous session's log expires (bounded history; the
-- key is this process's, so it is in the same hash slot as KEYS). The
-- current session's log never expires, even when a session comes back.
local previous = redis.call('GET', KEYS[4])
if previous and previous ~= ARGV[2] then
  local base = string.sub(KEYS[2], 1, #KEYS[2] - #ARGV[2])
  redis.call('EXPIRE', base .. previous, OLD_SESSION_TTL_S)
end
redis.call('PERSIST', KEYS[2])
redis.call('SET', KEYS[4], ARGV[2])
return {'ok', string.format('%d', first), string.format('%d', seq)}
""".replace("OLD_SESSION_TTL_S", str(OLD_SESSION_TTL_S))

# KEYS: fence, signals
# ARGV: token, signal_retention, data
APPEND_FAILED = _FENCE + ADD_SIGNAL + """
local t = redis.call('TYPE', KEYS[2]).ok
if t ~= 'none' and t ~= 'stream' then
  return {'corrupt', 'signals key is a ' .. t}
end
local id = add_signal(KEYS[2], ARGV[2], 'kind', 'failed', 'token', ARGV[1], 'data', ARGV[3])
return {'ok', id}
"""

Guard = Callable[[], None]


def _s(raw: Any) -> str:
    return raw.decode() if isinstance(raw, bytes | bytearray) else str(raw)


def parse_signal(process_id: str, entry_id: Any, fields: Mapping[Any, Any]) -> Signal:
    """One stream entry as a :class:`Signal`.

    Raises:
        CorruptData: the entry is malformed.
    """
    f = {_s(k): v for k, v in fields.items()}
    try:
        kind = SignalKind(_s(f["kind"]))
        payload = json.loads(f["data"])
        token = int(f["token"]) if "token" in f else None
        if kind is SignalKind.CANONICAL_EVENT:
            data = {"session": _s(f["session"]), "seq": int(f["seq"]), "event": payload}
        elif kind is SignalKind.MESSAGE:
            data = {"session": _s(f["session"]), "seq": int(f["seq"]), "message": payload}
        else:
            data = dict(payload)
    except (KeyError, ValueError, TypeError) as exc:
        raise CorruptData(f"malformed signal {_s(entry_id)[:40]} of {process_id}: "
                          f"{type(exc).__name__}", process_id=process_id) from None
    return Signal(_s(entry_id), kind, data, token)


def _record(process_id: str, session: str, entry_id: Any, fields: Mapping[Any, Any]
            ) -> EventRecord:
    f = {_s(k): v for k, v in fields.items()}
    try:
        seq = int(_s(entry_id).split("-")[0])
        return EventRecord(session, seq, int(f["token"]), dict(json.loads(f["event"])))
    except (KeyError, ValueError, TypeError) as exc:
        raise CorruptData(f"malformed event {_s(entry_id)[:40]} of {process_id}: "
                          f"{type(exc).__name__}", process_id=process_id) from None


class RedisEventLog:
    """The owner's writer (and reader) of one process's signals and event log.

    Args:
        client: a sync redis-py client (``svit_cluster.store.connect``).
        process_id: the process.
        token: the owner's fencing token, >= 1.
        prefix: key prefix (default ``"svit"``).
        signal_retention: signals kept (``MAXLEN ~``; :data:`DEFAULT_SIGNAL_RETENTION`).
        max_events: canonical events kept per session (``MAXLEN ~``;
            :data:`DEFAULT_MAX_EVENTS`). Older pages are dropped first.
        guard: optional check run before every write; raises to refuse.

    Thread-safe (redis-py pools connections).
    """

    def __init__(self, client: RedisClient, process_id: str, token: int, *,
                 prefix: str = DEFAULT_PREFIX,
                 signal_retention: int = DEFAULT_SIGNAL_RETENTION,
                 max_events: int = DEFAULT_MAX_EVENTS,
                 guard: Guard | None = None) -> None:
        if type(token) is not int or token < 1:
            raise InvalidInput(f"fencing token must be a positive integer, got {token!r}")
        self.keys = ProcessKeys(process_id, prefix)
        self.process_id = process_id
        self.token = token
        self.signal_retention = signal_retention
        self.max_events = max_events
        self._client = client
        self._guard = guard
        self._append = client.register_script(APPEND_EVENTS)
        self._failed = client.register_script(APPEND_FAILED)

    def _check(self, reply: Any, op: str) -> list[bytes]:
        status = _s(reply[0])
        if status == "fenced":
            raise FencedError(
                f"{op} refused for {self.process_id}: token {self.token} is below the fence "
                f"{int(reply[1])}", token=self.token, fence=int(reply[1]),
                process_id=self.process_id)
        if status != "ok":
            raise CorruptData(f"{op} refused for {self.process_id}: {_s(reply[1])[:200]}",
                              process_id=self.process_id)
        return list(reply[1:])

    def append(self, session: str, items: Sequence[tuple[dict[str, Any], dict[str, Any]]]
               ) -> tuple[int, int]:
        """Append canonical events and their derived messages, atomically and fenced.

        Each item is ``(event, message)``; the log gets ``event`` at the next
        sequence number, and the signal stream gets ``canonical_event`` then
        ``message`` for it, in one step.

        Returns:
            ``(first_seq, last_seq)`` assigned.

        Raises:
            FencedError: a newer owner holds the process; nothing appended.
            UnavailableError: Redis failed (``outcome`` unknown: the events
                may or may not be stored); or (``reason`` ``eviction_policy``,
                ``outcome`` none) a node may evict keys
                (``svit_cluster.store.require_noeviction``): nothing sent.
            CorruptData: a key has the wrong type.
        """
        if not items:
            raise InvalidInput("append needs at least one event")
        if self._guard is not None:
            self._guard()
        k = self.keys
        args: list[Any] = [self.token, session, self.signal_retention, self.max_events]
        for event, message in items:
            args.extend((dumps(event), dumps(message)))
        require_noeviction(self._client, k.fence, op="append_events", process_id=self.process_id)
        with redis_boundary("append_events", self.process_id, outcome="unknown"):
            reply = self._append(keys=[k.fence, k.events(session), k.signals, k.session],
                                 args=args)
        rest = self._check(reply, "append_events")
        return int(rest[0]), int(rest[1])

    def failed(self, payload: Mapping[str, Any]) -> str:
        """Append a ``failed`` signal (fenced). Returns its signal id.

        Raises:
            FencedError, UnavailableError, CorruptData: as :meth:`append`.
        """
        if self._guard is not None:
            self._guard()
        require_noeviction(self._client, self.keys.fence, op="append_failed",
                           process_id=self.process_id)
        with redis_boundary("append_failed", self.process_id, outcome="unknown"):
            reply = self._failed(keys=[self.keys.fence, self.keys.signals],
                                 args=[self.token, self.signal_retention, dumps(dict(payload))])
        return _s(self._check(reply, "append_failed")[0])

    def last_seq(self, session: str) -> int:
        """The highest sequence number in ``session`` (0 when empty). Raises UnavailableError."""
        with redis_boundary("last_seq", self.process_id):
            got: Any = self._client.xrevrange(self.keys.events(session), count=1)
        return int(_s(got[0][0]).split("-")[0]) if got else 0

    def recent(self, session: str, limit: int) -> list[EventRecord]:
        """The newest ``limit`` (1..4096) events of ``session``, oldest first."""
        validate_limit(limit)
        with redis_boundary("recent_events", self.process_id):
            got: Any = self._client.xrevrange(self.keys.events(session), count=limit)
        return [_record(self.process_id, session, eid, f) for eid, f in reversed(got or [])]

    def signals(self, after: str = "0-0", count: int = 10_000) -> list[Signal]:
        """Retained signals after ``after`` (tests and tools)."""
        with redis_boundary("signals", self.process_id):
            got: Any = self._client.xrange(self.keys.signals, min=f"({after}", count=count)
        return [parse_signal(self.process_id, eid, f) for eid, f in got or []]


def fork_events(client: RedisClient, parent_id: str, child_id: str, *,
                prefix: str = DEFAULT_PREFIX, upto_seq: int | None = None) -> int:
    """Store-level fork of the reasoning history: share the parent's immutable prefix.

    Copies the parent's current session events ``1..upto_seq`` (default: all)
    into the child's first session (:func:`session_for` of the child), with
    the same sequence numbers and tokens, and makes it the child's current
    session; the child's own events then continue at ``upto_seq + 1``. A
    process-only fork skips this and begins a fresh session.

    Call it before the child serves. Not atomic across the two hash slots;
    safe to retry (it refuses only a child log that has events of its own).
    Until the child is created (``RedisBackend.create`` keeps them for good),
    the copied events and the child's session pointer expire
    ``OLD_SESSION_TTL_S`` (one day) after the last copy, so a fork that fails
    after the copy and is never retried leaves nothing behind for longer.

    Returns:
        The number of events copied.

    Raises:
        ConflictError: the child already has events beyond the copied prefix.
        UnavailableError: Redis failed.
    """
    pk, ck = ProcessKeys(parent_id, prefix), ProcessKeys(child_id, prefix)
    child_session = session_for(child_id)
    with redis_boundary("fork_events", child_id, outcome="unknown"):
        raw = client.get(pk.session)
        if raw is None:
            return 0
        parent_session = _s(raw)
        top = "+" if upto_seq is None else f"{upto_seq}-0"
        entries: Any = client.xrange(pk.events(parent_session), min="-", max=top)
        existing: Any = client.xrevrange(ck.events(child_session), count=1)
        if existing:
            last = int(_s(existing[0][0]).split("-")[0])
            prefix_last = int(_s(entries[-1][0]).split("-")[0]) if entries else 0
            if last > prefix_last:
                raise ConflictError(f"{child_id} already has its own events",
                                    process_id=child_id)
            entries = [e for e in entries if int(_s(e[0]).split("-")[0]) > last]
        require_noeviction(client, ck.session, op="fork_events", process_id=child_id)
        pipe = client.pipeline(transaction=True)
        for eid, fields in entries:
            pipe.xadd(ck.events(child_session), dict(fields), id=eid)
        pipe.set(ck.session, child_session, ex=OLD_SESSION_TTL_S)
        pipe.expire(ck.events(child_session), OLD_SESSION_TTL_S)
        pipe.execute()
    return len(entries)


class RedisSignalSource:
    """Async reads of signals and history for observers (the gateway side).

    Args:
        client: a ``redis.asyncio`` client whose socket timeout exceeds the
            longest blocking read (see :func:`connect_async`).
        prefix: key prefix (default ``"svit"``).
    """

    def __init__(self, client: AsyncRedisClient, prefix: str = DEFAULT_PREFIX) -> None:
        self.client = client
        self.prefix = prefix

    @classmethod
    def from_url(cls, url: str, prefix: str = DEFAULT_PREFIX, *,
                 timeout_s: float = 30.0, cluster: bool | None = None) -> RedisSignalSource:
        """A source over a new pooled asyncio client for ``url``
        (``svit_cluster.store`` ``async_connect``: a Redis Cluster client when
        ``cluster``, or, when None, ``SVIT_REDIS_CLUSTER``, says so).

        Args:
            timeout_s: socket read timeout, longer than any blocking read (30 s).
        """
        client = async_connect(url, timeout_s=timeout_s, connect_timeout_s=5.0,
                               cluster=cluster)
        return cls(client, prefix)

    async def aclose(self) -> None:
        await self.client.aclose()

    def _keys(self, process_id: str) -> ProcessKeys:
        return ProcessKeys(process_id, self.prefix)

    async def exists(self, process_id: str) -> bool:
        """Whether the process was ever created in the store. Raises UnavailableError."""
        try:
            return bool(await self.client.exists(self._keys(process_id).head))
        except RedisError as exc:
            raise _unavailable("exists", process_id, exc) from exc

    async def window(self, process_id: str) -> Window:
        """First and last retained signal ids, and whether any signal was trimmed."""
        key = self._keys(process_id).signals
        try:
            info = await self.client.xinfo_stream(key)
        except ResponseError:
            return Window(None, None, False)
        except RedisError as exc:
            raise _unavailable("window", process_id, exc) from exc
        first = info.get("first-entry")
        last = info.get("last-generated-id")
        return Window(_s(first[0]) if first else None, _s(last) if last else None,
                      int(info.get("entries-added", 0)) > int(info.get("length", 0)))

    async def read(self, process_id: str, after: str, *, count: int, block_s: float
                   ) -> ReadResult:
        """Signals with id > ``after`` (at most ``count``), waiting up to ``block_s``."""
        key = self._keys(process_id).signals
        try:
            pipe = self.client.pipeline(transaction=False)
            pipe.xrange(key, "-", "+", count=1)
            pipe.xread({key: after}, count=count)
            first_raw, got = await pipe.execute()
            first = _s(first_raw[0][0]) if first_raw else None
            before = _prev(first_raw[0][1]) if first_raw else None
            if not got and block_s > 0:
                got = await self.client.xread({key: after}, count=count,
                                              block=max(1, int(block_s * 1000)))
        except RedisError as exc:
            raise _unavailable("read_signals", process_id, exc) from exc
        entries = got[0][1] if got else []
        return ReadResult(first, [parse_signal(process_id, eid, f) for eid, f in entries],
                          before_first=before)

    async def current_session(self, process_id: str) -> str | None:
        try:
            raw = await self.client.get(self._keys(process_id).session)
        except RedisError as exc:
            raise _unavailable("session", process_id, exc) from exc
        return None if raw is None else _s(raw)

    async def recent_events(self, process_id: str, limit: int, session: str | None = None
                            ) -> list[EventRecord]:
        """The newest ``limit`` canonical events (oldest first) of ``session``
        (default: the current session; none yet gives ``[]``)."""
        validate_limit(limit)
        session = session or await self.current_session(process_id)
        if session is None:
            return []
        try:
            got: Any = await self.client.xrevrange(self._keys(process_id).events(session),
                                                   count=limit)
        except RedisError as exc:
            raise _unavailable("recent_events", process_id, exc) from exc
        return [_record(process_id, session, eid, f) for eid, f in reversed(got or [])]


def _prev(fields: Mapping[Any, Any]) -> str | None:
    """The ``prev`` id a signal entry carries (None for entries written without it)."""
    raw = fields.get(b"prev", fields.get("prev"))
    if raw is None:
        return None
    try:
        return parse_cursor(_s(raw))
    except InvalidInput:
        return None


def _unavailable(op: str, process_id: str, exc: Exception) -> UnavailableError:
    return UnavailableError(f"redis {op} failed for {process_id[:200]}: {type(exc).__name__}",
                            op=op, process_id=process_id, reason=failure_reason(exc))
