"""Delivery status of committed intents, computed from Redis alone (read-only).

This is the public API for checkers (the chaos harness's "every committed
intent dispatched at least once and recorded once at a Svit destination").

:func:`delivery_status` classifies every intent in the given senders' outbox
streams:

* ``pending`` -- not yet acknowledged in the consumer group (never read, or
  read and in a pending list), or re-driven and not yet acknowledged again;
* ``delivered`` -- acknowledged after its sink confirmed (at least once);
* ``dead_lettered`` -- acknowledged after a dead letter was written, and not
  re-driven since (the dead letter's reason and error are included);
* ``cancelled`` -- a delayed intent (timer) that a cancel removed before it
  fired (known while its outcome is among the process's newest
  ``TIMER_DONE_KEEP``; older ones count as delivered).

A timer's outbox entry is acknowledged when the dispatcher parks it; while it
waits for its due time (``timer="parked"``, with ``due_ms``) or is being
delivered (``timer="firing"``) it is ``pending``. A cancel entry is listed
under its own id with ``cancels`` = the timer id, ``pending`` until the
dispatcher applied it and ``delivered`` after.

The rule, per outbox entry E with intent id I: E is *acknowledged* when the
group's last-delivered id is >= E and E is not pending. An unacknowledged E is
pending. Otherwise the newest of I's dead letter and I's re-drive entry (stream
ids share the Redis clock) decides (a dead letter counts only once its worker
settled it with the claim-fenced ``XACK``; a zombie worker's refused letter
never does): a newer dead letter means dead-lettered; a
newer re-drive entry means pending or delivered by that entry's own ack state;
neither means delivered.

:func:`destination_records` reads a Svit destination's committed state (a
read-only restore from its log) and reports, per intent id, how many
``inbox.append`` transactions appended it, how many copies ``/inbox`` still
holds, and whether the dedup record (``/thread/delivered``) has the key --
"recorded once" means recorded and appended exactly once.

Trimming (``DispatchConfig.trim_acked``, see ``_trim.py``) removes outbox
entries every consumer group acknowledged. :func:`delivery_status` then still
lists every intent that is pending or dead-lettered (a trimmed entry is never
pending; a dead-lettered or re-driven intent stays visible through its dead
letter or re-drive entry, which carry the intent), but not the individual
*delivered* intents of the trimmed prefix. Counts never come from counting
entries: :func:`outbox_summary` takes the number of intents ever committed
from the stream's own ``entries-added`` counter (``XINFO STREAM``, kept across
trims and restarts), so ``delivered = committed - pending - dead_lettered``,
and names the first retained version (every intent of an older version was
acknowledged). The rule assumes the group started at ``0`` (the dispatcher creates it so); an
operator moving the group's id forward (``XGROUP SETID``) makes the skipped
entries look delivered. So does a dead letter the dead-letter bounds removed
(count or age, see ``_deadbound.py``): with its letter gone, its intent counts
as delivered (``svit_dispatch_dead_trimmed_total`` counts such removals).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import redis

from svit_cluster.dispatch._deadletter import DeadLetter
from svit_cluster.dispatch._errors import PermanentDeliveryError
from svit_cluster.dispatch._intent import parse_cancel, parse_entry
from svit_cluster.dispatch._keys import DEFAULT_GROUP, DispatchKeys
from svit_cluster.dispatch._redisutil import boundary, text
from svit_cluster.dispatch._timers import timer_view
from svit_cluster.process import Transaction, dedup_slot
from svit_cluster.store import DEFAULT_PREFIX, RedisBackend, RedisClient, StoreConfig

__all__ = [
    "DeliveryState",
    "DestinationRecord",
    "IntentStatus",
    "OutboxSummary",
    "delivery_status",
    "destination_records",
    "outbox_summary",
]


class DeliveryState(StrEnum):
    """Where one committed intent stands (see the module docstring for the rule)."""

    PENDING = "pending"
    DELIVERED = "delivered"
    DEAD_LETTERED = "dead_lettered"
    CANCELLED = "cancelled"


@dataclass(frozen=True, slots=True)
class IntentStatus:
    """The status of one committed intent.

    Attributes:
        intent_id: ``<sender>:<version>:<index>`` (``entry:<stream id>`` if the
            stored intent does not decode).
        source: the sending process; version: its commit version.
        to: the destination address.
        entry_id: the entry id in the sender's outbox stream.
        state: :class:`DeliveryState`.
        redriven: the intent went through the re-drive stream at least once.
        dead_letter_id, reason, error: the current dead letter, when dead-lettered.
        timer: for a pending delayed intent, ``parked`` (waiting for ``due_ms``)
            or ``firing`` (being delivered); None otherwise.
        due_ms: a delayed intent's due time (ms since the epoch), else None.
        cancels: for a cancel entry, the id of the timer it cancels.
    """

    intent_id: str
    source: str
    version: int
    to: str
    entry_id: str
    state: DeliveryState
    redriven: bool = False
    dead_letter_id: str | None = None
    reason: str | None = None
    error: str | None = None
    timer: str | None = None
    due_ms: int | None = None
    cancels: str | None = None


@dataclass(frozen=True, slots=True)
class _Timers:
    """One process's timers, read in one ``MULTI`` (one slot, one moment)."""

    parked: dict[str, Any]  # timer id -> stored intent (see ``_timers.encode_parked``)
    firing: dict[str, Any]
    cancelled: frozenset[str]

    def statuses(self, pid: str) -> list[IntentStatus]:
        """The pending and the remembered cancelled timers as statuses (their
        outbox entries may be trimmed; a cancelled one's destination is not kept)."""
        out = []
        for state, stored in (("parked", self.parked), ("firing", self.firing)):
            for iid, raw in stored.items():
                try:
                    doc = json.loads(raw)
                    out.append(IntentStatus(
                        intent_id=iid, source=pid, version=int(doc.get("version") or 0),
                        to=str(doc.get("to", "")), entry_id=str(doc.get("entry_id", "")),
                        state=DeliveryState.PENDING, timer=state,
                        due_ms=int(doc.get("due_ms") or 0)))
                except (ValueError, TypeError, AttributeError):
                    continue
        for iid in self.cancelled:  # the entry is gone; the id names the version
            version = iid.rsplit(":", 2)[-2] if iid.count(":") >= 2 else "0"
            out.append(IntentStatus(
                intent_id=iid, source=pid, version=int(version) if version.isdigit() else 0,
                to="", entry_id="", state=DeliveryState.CANCELLED))
        return out


def _timers_view(client: RedisClient, prefix: str, pid: str) -> _Timers:
    parked, firing, done = timer_view(client, prefix, pid)
    return _Timers(parked, firing, frozenset(d[len("cancelled:"):] for d in done
                                             if d.startswith("cancelled:")))


@dataclass(frozen=True, slots=True)
class DestinationRecord:
    """What a Svit destination has committed about delivered intents.

    Attributes:
        process_id: the destination.
        version: its committed version (None if the process does not exist).
        appends: intent id -> ``inbox.append`` transactions in the stored log
            that appended an item with that id (the shape the ``svit`` sink
            appends: a map with a string ``id``).
        log_complete: the stored log still starts at version 1 (no snapshot
            trimmed it), so :attr:`appends` counts every append ever committed.
        inbox_copies: intent id -> copies currently in ``/inbox`` (the
            destination's own loop may have acknowledged some since).
        delivered_slots: the dedup record's keys (``sha256(intent id)[:32]``),
            bounded by the process's dedup window.
    """

    process_id: str
    version: int | None
    appends: dict[str, int]
    log_complete: bool
    inbox_copies: dict[str, int]
    delivered_slots: frozenset[str]

    def recorded(self, intent_id: str) -> bool:
        """True when the destination's dedup record holds ``intent_id``."""
        return dedup_slot(intent_id) in self.delivered_slots

    def recorded_once(self, intent_id: str) -> bool:
        """Recorded, and appended once: exactly once when :attr:`log_complete`,
        else at most once in the stored tail and at most one copy in ``/inbox``."""
        if not self.recorded(intent_id):
            return False
        appended = self.appends.get(intent_id, 0)
        if self.log_complete:
            return appended == 1
        return appended <= 1 and self.inbox_copies.get(intent_id, 0) <= 1


def _sid(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return (int(ms) if ms.isdigit() else 0, int(seq) if seq.isdigit() else 0)


@dataclass(frozen=True, slots=True)
class _GroupView:
    last: tuple[int, int] | None
    pending: frozenset[str]

    def acked(self, entry_id: str) -> bool:
        return (self.last is not None and _sid(entry_id) <= self.last
                and entry_id not in self.pending)


def _group_view(client: RedisClient, stream: str, group: str) -> _GroupView:
    try:
        groups: Any = client.xinfo_groups(stream)
    except redis.ResponseError:  # no such stream
        return _GroupView(None, frozenset())
    for g in groups:
        if text(g.get("name")) == group:
            count = int(g.get("pending") or 0)
            pending: frozenset[str] = frozenset()
            if count:
                rows: Any = client.xpending_range(stream, group, min="-", max="+", count=count)
                pending = frozenset(text(r["message_id"]) for r in rows)
            last: Any = g.get("last-delivered-id")
            return _GroupView(_sid(text(last, "0-0")), pending)
    return _GroupView(None, frozenset())


def delivery_status(
    client: RedisClient,
    process_ids: Iterable[str],
    *,
    prefix: str = DEFAULT_PREFIX,
    group: str = DEFAULT_GROUP,
) -> dict[str, IntentStatus]:
    """Per-intent delivery status of every intent the given senders committed.

    Args:
        client: a redis-py client (``svit_cluster.store.connect``).
        process_ids: the *sending* processes to inspect.
        prefix: the store's key prefix (default ``"svit"``).
        group: the dispatcher's consumer group (default ``"svit-dispatch"``).

    Returns:
        intent id -> :class:`IntentStatus`, in no particular order. Read-only;
        safe to call while workers run: each intent's state is one it held
        during the call (a concurrent ack moves it from pending to delivered
        or dead-lettered between two calls, never a dead letter to delivered).

    Raises:
        InvalidInput: a malformed process id or prefix.
        UnavailableError: Redis failed.
    """
    keys = DispatchKeys(prefix)
    with boundary("delivery_status"):
        # Read order matters: Redis gives no snapshot across these keys, and
        # each write below is one script, so reading in the order the writes
        # depend on each other makes every answer true at some moment:
        # 1. acknowledgement states (outbox groups, then the re-drive group):
        #    a dead letter is settled in the same script as its XACK, so an
        #    entry seen acknowledged has its settled letter visible in step 2
        #    (read the other way round, a letter settled between the two reads
        #    made a dead-lettered intent look delivered);
        # 2. dead letters, before 3. re-drive entries: a re-drive moves a
        #    letter (XADD to the re-drive stream, XDEL from the dead letters)
        #    in one script, so a moved letter is seen in 2 or in 3, never in
        #    neither.
        # A timer's entry is acknowledged by the script that parks it, so its
        # timers are read after its group: a timer parked in between is seen
        # parked (or fired/cancelled later), never missed.
        outboxes: list[tuple[str, str, _GroupView, Any, _Timers]] = []
        for pid in process_ids:
            stream = keys.outbox(pid)
            view = _group_view(client, stream, group)
            entries = client.xrange(stream)
            outboxes.append((pid, stream, view, entries, _timers_view(client, prefix, pid)))
        redrive_view = _group_view(client, keys.redrive, group)
        dead: dict[str, DeadLetter] = {}
        dead_raw: Any = _settled_letters(client, client.xrange(keys.dead))
        for eid, fields in dead_raw:
            letter = DeadLetter.from_entry(eid, fields)
            key = letter.intent_id or f"entry:{letter.entry_id}"
            dead[key] = letter  # later ids overwrite earlier ones
        redrive_raw: Any = client.xrange(keys.redrive)
        redriven: dict[str, str] = {}
        for eid, fields in redrive_raw:
            iid = text(fields.get(b"intent_id")) or _intent_id(fields)
            redriven[iid or f"entry:{text(fields.get(b'entry_id'))}"] = text(eid)
        trimmed_known = _trimmed_candidates(dead, redrive_raw)
        out: dict[str, IntentStatus] = {}
        for pid, stream, view, entries, timers in outboxes:
            for raw_id, fields in entries:
                entry_id = text(raw_id)
                status = _classify(stream, pid, entry_id, fields, view, dead, redriven,
                                   redrive_view, timers)
                out[status.intent_id] = status
            # Pending timers whose outbox entry was trimmed after it was parked.
            for status in timers.statuses(pid):
                out.setdefault(status.intent_id, status)
            # Intents whose outbox entry was trimmed (so acknowledged by every
            # group) but that a dead letter or re-drive entry still names.
            for iid, (to, version, entry_id) in trimmed_known.get(stream, {}).items():
                if iid not in out:
                    base: dict[str, Any] = {"intent_id": iid, "source": pid,
                                            "version": version, "to": to,
                                            "entry_id": entry_id}
                    out[iid] = _decide(base, iid, dead, redriven, redrive_view)
    return out


def _trimmed_candidates(dead: dict[str, DeadLetter], redrive_raw: Any
                        ) -> dict[str, dict[str, tuple[str, int, str]]]:
    """outbox stream -> intent id -> (to, version, entry id), from dead letters
    and re-drive entries (both keep the original stream and entry)."""
    out: dict[str, dict[str, tuple[str, int, str]]] = {}
    for iid, letter in dead.items():
        if letter.stream and letter.intent_id:
            out.setdefault(letter.stream, {})[iid] = (letter.to, letter.version,
                                                      letter.entry_id)
    for eid, fields in redrive_raw or ():
        try:
            intent = parse_entry("-", text(eid), fields, "-")
        except PermanentDeliveryError:
            continue
        stream = text(fields.get(b"stream"))
        if stream:
            out.setdefault(stream, {})[intent.id] = (intent.to, intent.version,
                                                     intent.origin_entry_id)
    return out


def _settled_letters(client: RedisClient, raw: Any) -> list[Any]:
    """The dead letters that count: those without a claim token (written before
    fencing existed) and those their worker settled (``<stream>:dead-settled``
    names them). A provisional letter whose settle was refused or not yet run
    is left out, so it never overrides a delivery."""
    out: list[Any] = []
    check: list[tuple[Any, Any]] = []
    pipe = client.pipeline(transaction=False)
    for eid, fields in raw or ():
        if not fields.get(b"token"):
            out.append((eid, fields))
            continue
        pipe.hget(DispatchKeys.dead_settled(text(fields.get(b"settle_stream"))),
                  text(fields.get(b"settle_entry")))
        check.append((eid, fields))
    if check:
        for (eid, fields), settled in zip(check, pipe.execute(), strict=True):
            if settled is not None and text(settled) == text(eid):
                out.append((eid, fields))
    return sorted(out, key=lambda e: _sid(text(e[0])))


def _intent_id(fields: dict[bytes, bytes]) -> str:
    try:
        return parse_entry("-", "0-0", fields, "-").id
    except PermanentDeliveryError:
        return ""


def _classify(stream: str, pid: str, entry_id: str, fields: dict[bytes, bytes],
              view: _GroupView, dead: dict[str, DeadLetter], redriven: dict[str, str],
              redrive_view: _GroupView, timers: _Timers) -> IntentStatus:
    due_ms: int | None = None
    cancel = parse_cancel(entry_id, fields)
    if cancel is not None:
        version_raw = text(fields.get(b"version"), "0")
        state = DeliveryState.DELIVERED if view.acked(entry_id) else DeliveryState.PENDING
        return IntentStatus(intent_id=cancel.id, source=pid,
                            version=int(version_raw) if version_raw.isdigit() else 0,
                            to="", entry_id=entry_id, state=state, cancels=cancel.timer_id)
    try:
        intent = parse_entry(stream, entry_id, fields, pid)
        iid, to, version, due_ms = intent.id, intent.to, intent.version, intent.due_ms
    except PermanentDeliveryError:
        iid, to, version = f"entry:{entry_id}", "", 0
    base: dict[str, Any] = {"intent_id": iid, "source": pid, "version": version, "to": to,
                            "entry_id": entry_id, "due_ms": due_ms}
    if not view.acked(entry_id):
        return IntentStatus(state=DeliveryState.PENDING, **base)
    if due_ms is not None:
        if iid in timers.parked:  # parked: its outbox entry was acknowledged
            return IntentStatus(state=DeliveryState.PENDING, timer="parked", **base)
        if iid in timers.firing:
            return IntentStatus(state=DeliveryState.PENDING, timer="firing", **base)
        if iid in timers.cancelled:
            return IntentStatus(state=DeliveryState.CANCELLED, **base)
    return _decide(base, iid, dead, redriven, redrive_view)


def _decide(base: dict[str, Any], iid: str, dead: dict[str, DeadLetter],
            redriven: dict[str, str], redrive_view: _GroupView) -> IntentStatus:
    """The state of an intent whose outbox entry is acknowledged (or trimmed)."""
    letter, rd = dead.get(iid), redriven.get(iid)
    if letter is not None and (rd is None or _sid(letter.id) > _sid(rd)):
        return IntentStatus(state=DeliveryState.DEAD_LETTERED, redriven=rd is not None,
                            dead_letter_id=letter.id, reason=letter.reason,
                            error=letter.error, **base)
    if rd is not None:
        state = DeliveryState.DELIVERED if redrive_view.acked(rd) else DeliveryState.PENDING
        return IntentStatus(state=state, redriven=True, **base)
    return IntentStatus(state=DeliveryState.DELIVERED, **base)


@dataclass(frozen=True, slots=True)
class OutboxSummary:
    """Counts of one sender's outbox, valid after trimming (never counted from entries).

    Attributes:
        process_id: the sender; stream: its outbox stream key.
        committed: intents ever committed: the stream's ``entries-added``
            counter (``XINFO STREAM``; survives trims and restarts). 0 when the
            stream does not exist.
        retained: entries still in the stream (``XLEN``); trimmed:
            ``committed - retained`` (removed after every group acknowledged them).
        first_retained_version: the sender version of the oldest retained
            entry (None if none is retained); every intent committed at an
            older version was acknowledged by every consumer group.
        pending, dead_lettered: intents in those states (:func:`delivery_status`,
            which keeps both visible after trimming).
        delivered: ``committed - pending - dead_lettered - cancelled``.
        cancelled: timers cancelled before they fired (among the retained
            entries; counted from the process's remembered outcomes).
    """

    process_id: str
    stream: str
    committed: int
    retained: int
    trimmed: int
    first_retained_version: int | None
    pending: int
    dead_lettered: int
    delivered: int
    cancelled: int = 0


def outbox_summary(
    client: RedisClient,
    process_ids: Iterable[str],
    *,
    prefix: str = DEFAULT_PREFIX,
    group: str = DEFAULT_GROUP,
) -> dict[str, OutboxSummary]:
    """Per-sender counts of committed, pending, delivered and dead-lettered intents.

    Args:
        client: a redis-py client.
        process_ids: the sending processes.
        prefix, group: as for :func:`delivery_status`.

    Returns:
        process id -> :class:`OutboxSummary`. Safe while senders commit: each
        stream's counters are read first and only intents committed by then
        are counted, so a fresh commit is never counted as delivered.

    Raises:
        InvalidInput: a malformed process id or prefix.
        UnavailableError: Redis failed.
    """
    return status_and_summary(client, process_ids, prefix=prefix, group=group)[1]


def status_and_summary(
    client: RedisClient,
    process_ids: Iterable[str],
    *,
    prefix: str = DEFAULT_PREFIX,
    group: str = DEFAULT_GROUP,
) -> tuple[dict[str, IntentStatus], dict[str, OutboxSummary]]:
    """:func:`delivery_status` and :func:`outbox_summary` from one pass (the CLI's
    ``dispatcher status``). Same arguments and errors as those two."""
    pids = list(process_ids)
    keys = DispatchKeys(prefix)
    infos: dict[str, Any] = {}
    with boundary("outbox_summary"):
        # The counters first, the states second: an intent committed after its
        # stream's counter was read is left out of this summary's counts (its
        # entry id is above the counter's last-generated-id) instead of adding
        # to ``committed - pending - dead_lettered`` as if delivered.
        for pid in pids:
            try:
                infos[pid] = client.xinfo_stream(keys.outbox(pid))
            except redis.ResponseError:  # no such stream: nothing committed
                infos[pid] = None
    statuses = delivery_status(client, pids, prefix=prefix, group=group)
    by_state: Counter[tuple[str, DeliveryState]] = Counter()
    for s in statuses.values():
        info = infos.get(s.source)
        if info and _sid(s.entry_id) <= _sid(text(info.get("last-generated-id"), "0-0")):
            by_state[(s.source, s.state)] += 1
    out: dict[str, OutboxSummary] = {}
    for pid in pids:
        info = infos[pid]
        committed = int(info.get("entries-added") or 0) if info else 0
        retained = int(info.get("length") or 0) if info else 0
        first: Any = info.get("first-entry") if info else None
        first_version: int | None = None
        if first:
            raw = (first[1] or {}).get(b"version", b"")
            first_version = int(raw) if raw.isdigit() else None
        pending = by_state[(pid, DeliveryState.PENDING)]
        dead = by_state[(pid, DeliveryState.DEAD_LETTERED)]
        cancelled = by_state[(pid, DeliveryState.CANCELLED)]
        out[pid] = OutboxSummary(
            process_id=pid, stream=keys.outbox(pid), committed=committed, retained=retained,
            trimmed=max(0, committed - retained), first_retained_version=first_version,
            pending=pending, dead_lettered=dead,
            delivered=max(0, committed - pending - dead - cancelled), cancelled=cancelled)
    return statuses, out


def destination_records(
    client: RedisClient, process_id: str, *, prefix: str = DEFAULT_PREFIX
) -> DestinationRecord:
    """Read a Svit destination's committed inbox and dedup record (read-only restore).

    Args:
        client: a redis-py client.
        process_id: the destination process.
        prefix: the store's key prefix.

    Raises:
        CorruptData: the destination's log does not verify.
        UnavailableError: Redis failed.
    """
    backend = RedisBackend(client, process_id, 1, StoreConfig(prefix=prefix))
    process = backend.restore()
    if process is None:
        return DestinationRecord(process_id, None, {}, True, {}, frozenset())
    entries = backend.entries()
    appends: Counter[str] = Counter()
    for entry in entries:
        record = Transaction.decode(entry.record)
        if record.source != "inbox.append":
            continue
        for mutation in record.mutations:
            if mutation.op == "append" and mutation.path == "/inbox":
                iid = _item_id(mutation.value)
                if iid is not None:
                    appends[iid] += 1
    complete = (entries[0].version == 1) if entries else process.version == 0
    copies: Counter[str] = Counter()
    inbox = process.read("/inbox")
    for item in inbox if isinstance(inbox, list) else ():
        iid = _item_id(item)
        if iid is not None:
            copies[iid] += 1
    delivered = process.read("/thread/delivered")
    slots = frozenset(delivered) if isinstance(delivered, dict) else frozenset()
    return DestinationRecord(process_id, process.version, dict(appends), complete,
                             dict(copies), slots)


def _item_id(item: object) -> str | None:
    iid = item.get("id") if isinstance(item, dict) else None
    return iid if isinstance(iid, str) else None
