"""Cheap, bounded reads for observers (the gateway's console routes).

:func:`worker_health` -- the workers' heartbeats (``<prefix>:{dispatch}:workers``);
:func:`undelivered` -- one sender's outbox intents the dispatcher's group has not
acknowledged yet. Both read a bounded number of entries whatever the sizes of the
streams, unlike :func:`~svit_cluster.dispatch.delivery_status`, which reads the
whole outbox, dead-letter and re-drive streams to classify every intent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import redis

from svit_cluster.dispatch._errors import PermanentDeliveryError
from svit_cluster.dispatch._intent import parse_entry
from svit_cluster.dispatch._keys import DEFAULT_GROUP, DispatchKeys
from svit_cluster.dispatch._redisutil import boundary, text
from svit_cluster.errors import InvalidInput
from svit_cluster.store import DEFAULT_PREFIX, RedisClient

__all__ = ["MAX_OBSERVED", "OutboxPage", "UndeliveredIntent", "WorkerHealth",
           "undelivered", "worker_health"]

#: Largest ``limit`` of :func:`worker_health` and :func:`undelivered`.
MAX_OBSERVED = 200


@dataclass(frozen=True, slots=True)
class WorkerHealth:
    """The dispatcher workers' heartbeats, on the Redis clock.

    Attributes:
        live: workers whose heartbeat has not expired.
        expired: workers still listed whose heartbeat expired (a worker that
            died; the next worker scan removes it).
        workers: up to ``limit`` of them, ``{"worker", "live", "expires_in_s"}``
            (negative when expired), latest expiry first.
    """

    live: int
    expired: int
    workers: list[dict[str, Any]]


def worker_health(client: RedisClient, *, prefix: str = DEFAULT_PREFIX,
                  limit: int = 16) -> WorkerHealth:
    """Read the dispatcher workers' heartbeats (``ZCOUNT`` twice, one ``ZRANGE``).

    Each worker keeps its member in the workers sorted set scored with its
    heartbeat expiry (ms, Redis clock); this reads that set against Redis's
    ``TIME``, so the answer does not depend on the caller's clock.

    Raises:
        InvalidInput: ``limit`` outside 1..:data:`MAX_OBSERVED`.
        UnavailableError: Redis failed.
    """
    if type(limit) is not int or not 1 <= limit <= MAX_OBSERVED:
        raise InvalidInput(f"limit must be an integer in 1..{MAX_OBSERVED}")
    key = DispatchKeys(prefix).workers
    with boundary("worker_health"):
        seconds, micros = client.time()
        now_ms = int(seconds) * 1000 + int(micros) // 1000
        live = int(client.zcount(key, now_ms, "+inf"))
        expired = int(client.zcount(key, "-inf", f"({now_ms}"))
        rows: Any = client.zrevrange(key, 0, limit - 1, withscores=True)
    workers = [{"worker": text(name), "live": score >= now_ms,
                "expires_in_s": round((score - now_ms) / 1000, 3)} for name, score in rows]
    return WorkerHealth(live, expired, workers)


@dataclass(frozen=True, slots=True)
class UndeliveredIntent:
    """One outbox intent the dispatcher's group has not acknowledged.

    Attributes:
        id: the intent id (``entry:<stream id>`` when the entry does not decode
            as an intent, e.g. a timer cancel).
        to: its destination address (None when it does not decode).
        version: the sender's commit version that wrote it (None likewise).
        entry_id: its outbox stream id.
        state: ``delivering`` (a worker read it and has not acknowledged it)
            or ``queued`` (no worker has read it yet).
        deliveries: how many times a worker read it (0 while queued).
    """

    id: str
    to: str | None
    version: int | None
    entry_id: str
    state: str
    deliveries: int


@dataclass(frozen=True, slots=True)
class OutboxPage:
    """:func:`undelivered`'s answer.

    Attributes:
        committed: intents ever committed to the outbox (``entries-added``,
            kept across trims); retained: entries still in the stream.
        group: whether the dispatcher's consumer group exists (no worker has
            run yet when it does not: every retained entry is queued).
        intents: at most ``limit`` unacknowledged intents, the ones being
            delivered first, then the queued ones, each in stream order.
        more: more unacknowledged intents exist than are listed.
    """

    committed: int
    retained: int
    group: bool
    intents: list[UndeliveredIntent]
    more: bool


def _intent(stream: str, pid: str, eid: str, fields: dict[bytes, bytes], state: str,
            deliveries: int) -> UndeliveredIntent:
    try:
        intent = parse_entry(stream, eid, fields, pid)
    except PermanentDeliveryError:
        return UndeliveredIntent(f"entry:{eid}", None, None, eid, state, deliveries)
    return UndeliveredIntent(intent.id, intent.to, intent.version, eid, state, deliveries)


def undelivered(client: RedisClient, process_id: str, *, prefix: str = DEFAULT_PREFIX,
                group: str = DEFAULT_GROUP, limit: int = 50) -> OutboxPage:
    """One sender's outbox intents that the dispatcher has not acknowledged yet.

    Reads the outbox stream's counters and its group's view (``XINFO``), at most
    ``limit`` entries of the group's pending list (``XPENDING``, then those
    entries in one pipeline), and at most ``limit`` entries after the group's last-delivered id.
    An acknowledged intent is delivered, dead-lettered (see the dead letters)
    or parked as a timer (see the timers), so it is not listed; nor is an
    intent being re-driven from a dead letter (it is in the re-drive stream).
    Not one snapshot: an intent acknowledged between two reads may be listed.

    Raises:
        InvalidInput: a malformed process id, or ``limit`` outside
            1..:data:`MAX_OBSERVED`.
        UnavailableError: Redis failed.
    """
    if type(limit) is not int or not 1 <= limit <= MAX_OBSERVED:
        raise InvalidInput(f"limit must be an integer in 1..{MAX_OBSERVED}")
    stream = DispatchKeys(prefix).outbox(process_id)
    with boundary("undelivered"):
        try:
            info: Any = client.xinfo_stream(stream)
            groups: Any = client.xinfo_groups(stream)
        except redis.ResponseError:  # no such stream: nothing committed
            return OutboxPage(0, 0, False, [], False)
        committed = int(info.get("entries-added") or 0)
        retained = int(info.get("length") or 0)
        mine = next((g for g in groups if text(g.get("name")) == group), None)
        out: list[UndeliveredIntent] = []
        more = False
        last = "-"
        if mine is not None:
            last = "(" + text(mine.get("last-delivered-id"), "0-0")
            if int(mine.get("pending") or 0):
                rows: Any = client.xpending_range(stream, group, min="-", max="+",
                                                  count=limit + 1)
                more = len(rows) > limit
                pipe = client.pipeline(transaction=False)  # one slot: the stream's
                for r in rows[:limit]:
                    pipe.xrange(stream, text(r["message_id"]), text(r["message_id"]))
                for r, got in zip(rows[:limit], pipe.execute(), strict=True):
                    if got:  # trimmed since: acknowledged meanwhile
                        out.append(_intent(stream, process_id, text(r["message_id"]),
                                           got[0][1], "delivering",
                                           int(r.get("times_delivered") or 0)))
        room = limit - len(out)
        if room > 0:
            queued: Any = client.xrange(stream, last, "+", count=room + 1)
            more = more or len(queued) > room
            out.extend(_intent(stream, process_id, text(eid), fields, "queued", 0)
                       for eid, fields in queued[:room])
        elif mine is not None:  # the page is full of pending ones: any queued left?
            more = more or text(mine.get("last-delivered-id"), "0-0") != text(
                info.get("last-generated-id"), "0-0")
    return OutboxPage(committed, retained, mine is not None, out, more)
