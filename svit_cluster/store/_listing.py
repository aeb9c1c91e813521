"""List the processes in one Redis, a page at a time, with bounded work per page.

A process exists in the store exactly while its head key
(``<prefix>:{<process>}:head``, :class:`ProcessKeys`) exists: ``create`` writes
it with version 0, every commit updates it, ``delete`` removes it (the fence
stays as a tombstone, so fences are no list of processes). :func:`list_processes`
walks the head keys with ``SCAN ... MATCH`` and reads each one's ``version``.

Why SCAN and not an index: every write path that makes a process (create,
fork, the ``spawn`` port) goes through the head key, so the walk cannot miss a
process that a forgotten index update would hide; and it needs no second key
outside the process's hash slot. The price is that a tenant filter does not
shorten the walk (the whole key space is visited, a bounded step at a time)
and the order is Redis's, not sorted.

What a listing guarantees (Redis's ``SCAN`` guarantees, per node): a process
that exists from the first page to the last is listed at least once (a
resize of Redis's hash table between two pages may list it twice); one created
or deleted meanwhile may or may not be listed. On a Redis Cluster each primary
is walked in turn (ordered by address); a failover or resharding during the
listing may skip or repeat processes of the slots that moved.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from svit_cluster.errors import InvalidInput
from svit_cluster.store._keys import DEFAULT_PREFIX, ProcessKeys
from svit_cluster.store._records import LogEntry, parse_entry
from svit_cluster.store._redis import RedisClient, redis_boundary

__all__ = [
    "LAST_COMMIT_SCAN",
    "MAX_LIST_LIMIT",
    "MAX_SCAN_STEPS",
    "ListedProcess",
    "ProcessListing",
    "QueuedPage",
    "last_commit_times",
    "list_processes",
    "list_queued",
    "newest_entries",
]

#: Largest ``limit`` of one page.
MAX_LIST_LIMIT = 1000
#: ``SCAN`` calls one page makes at most (each asks for about as many keys as the
#: page still has room for), so a page visits at most about
#: ``MAX_SCAN_STEPS * limit`` keys (Redis also stops each step after ten times its
#: ``COUNT`` empty buckets).
MAX_SCAN_STEPS = 64
_GLOB_SPECIAL = frozenset("*?[]\\")
#: Newest signals :func:`last_commit_times` reads per process to find the newest
#: ``committed`` one (a ``completion`` follows its commit, a reasoning session
#: adds ``message`` and ``canonical_event`` signals between commits).
LAST_COMMIT_SCAN = 4


@dataclass(frozen=True, slots=True)
class ListedProcess:
    """One process found by :func:`list_processes`.

    Attributes:
        process_id: the ``svit://`` id.
        version: its head version when it was read (it may have moved since).
    """

    process_id: str
    version: int


@dataclass(frozen=True, slots=True)
class ProcessListing:
    """One page: ``processes`` in Redis's order and the cursor of the next page
    (``next_cursor``; None when the walk is complete). A page may hold fewer
    than ``limit`` processes, even none, while ``next_cursor`` is not None."""

    processes: list[ListedProcess]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class QueuedPage:
    """One page of :func:`list_queued`: process ids (each once, Redis's order)
    and the cursor of the next page (``next_cursor``; None: the walk is complete)."""

    process_ids: list[str]
    next_cursor: str | None


def _glob_escape(text: str) -> str:
    return "".join("\\" + ch if ch in _GLOB_SPECIAL else ch for ch in text)


def _tenant_of(process_id: str) -> str:
    return process_id[len("svit://"):].split("/", 1)[0]


def _nodes(client: RedisClient) -> Sequence[Any]:
    """The nodes to walk: ``[None]`` (the one server) or the cluster's primaries
    ordered by name (``host:port``)."""
    get_primaries = getattr(client, "get_primaries", None)
    if get_primaries is None:
        return [None]
    return sorted(get_primaries(), key=lambda n: str(n.name))


def _parse_cursor(cursor: str | None, nodes: int) -> tuple[int, int]:
    """``(node index, SCAN cursor)`` of a cursor this module issued."""
    if cursor is None:
        return 0, 0
    node, sep, scan = cursor.partition(":")
    # ASCII decimals only (str.isdigit accepts "²", which int() refuses), and a
    # SCAN cursor Redis can take (an unsigned 64-bit integer).
    if (not sep or not _decimal(node) or not _decimal(scan) or int(node) >= max(nodes, 1)
            or int(scan) >= 2**64):
        raise InvalidInput("malformed process list cursor (pass the previous page's `next`)")
    return int(node), int(scan)


def _decimal(text: str) -> bool:
    return 0 < len(text) <= 20 and text.isascii() and text.isdigit()


def list_processes(client: RedisClient, *, prefix: str = DEFAULT_PREFIX,
                   tenant: str | None = None, limit: int = 100,
                   cursor: str | None = None) -> ProcessListing:
    """One page of the processes stored under ``prefix``.

    Args:
        client: a client from :func:`svit_cluster.store.connect` (one server or
            a Redis Cluster).
        prefix: the store's key prefix (default ``"svit"``).
        tenant: only processes ``svit://<tenant>`` and ``svit://<tenant>/...``;
            None: every tenant.
        limit: processes wanted, 1..:data:`MAX_LIST_LIMIT`. A page holds at
            most about ``limit``: a ``SCAN`` step is never split, and one step
            may return a few keys more than it was asked for.
        cursor: the previous page's ``next_cursor``; None: the first page.

    Returns:
        :class:`ProcessListing`. The page stops after :data:`MAX_SCAN_STEPS`
        ``SCAN`` calls even when it holds fewer than ``limit`` processes.

    Raises:
        InvalidInput: ``limit`` out of range, an empty tenant, or a cursor this
            function did not issue (or issued for another cluster layout).
        UnavailableError: Redis failed (reading is safe to retry).
    """
    if type(limit) is not int or not 1 <= limit <= MAX_LIST_LIMIT:
        raise InvalidInput(f"limit must be 1..{MAX_LIST_LIMIT}")
    if tenant is not None and (not tenant or "/" in tenant):
        raise InvalidInput("tenant must be a non-empty name without '/'")
    ProcessKeys("svit://x", prefix)  # validates the prefix
    rest = "svit://" + (_glob_escape(tenant) if tenant is not None else "") + "*"
    with redis_boundary("list_processes", "*"):
        found, next_cursor = _walk(
            client, prefix, "head", rest, limit, cursor,
            keep=lambda pid: tenant is None or _tenant_of(pid) == tenant)
        return ProcessListing(_versions(client, prefix, found), next_cursor)


def list_queued(client: RedisClient, *, prefix: str = DEFAULT_PREFIX, limit: int = 100,
                cursor: str | None = None) -> QueuedPage:
    """One page of the processes whose committed ``/inbox`` is non-empty.

    Walks the ``queued`` keys (:attr:`ProcessKeys.queued`, written by the
    commit and create scripts with the state they store) with ``SCAN ...
    MATCH``, with the same bounds and guarantees as :func:`list_processes`: a
    process queued from the first page to the last is listed at least once.

    Args:
        client: a client from :func:`svit_cluster.store.connect`.
        prefix: the store's key prefix (default ``"svit"``).
        limit: process ids wanted, 1..:data:`MAX_LIST_LIMIT`.
        cursor: the previous page's ``next_cursor``; None: the first page.

    Returns:
        :class:`QueuedPage` (at most :data:`MAX_SCAN_STEPS` ``SCAN`` calls).

    Raises:
        InvalidInput: ``limit`` out of range or a cursor this module did not issue.
        UnavailableError: Redis failed (reading is safe to retry).
    """
    if type(limit) is not int or not 1 <= limit <= MAX_LIST_LIMIT:
        raise InvalidInput(f"limit must be 1..{MAX_LIST_LIMIT}")
    ProcessKeys("svit://x", prefix)  # validates the prefix
    with redis_boundary("list_queued", "*"):
        found, next_cursor = _walk(client, prefix, "queued", "svit://*", limit, cursor)
    return QueuedPage(list(dict.fromkeys(found)), next_cursor)


def _walk(client: RedisClient, prefix: str, name: str, rest: str, limit: int,
          cursor: str | None, keep: Callable[[str], bool] = lambda _pid: True
          ) -> tuple[list[str], str | None]:
    """Process ids of the keys ``<prefix>:{<rest>}:<name>`` that ``keep``: at most
    :data:`MAX_SCAN_STEPS` ``SCAN`` steps, stopping once ``limit`` are found;
    returns them and the next cursor (None: the walk is complete)."""
    head, tail = f"{prefix}:{{", "}:" + name
    match = f"{_glob_escape(prefix)}:{{{rest}}}:{name}"
    nodes = _nodes(client)
    index, scan = _parse_cursor(cursor, len(nodes))
    found: list[str] = []
    for _ in range(MAX_SCAN_STEPS):
        count = max(1, limit - len(found))
        reply: Any
        if nodes[index] is None:
            reply = client.scan(cursor=scan, match=match, count=count)
            scan, keys = int(reply[0]), reply[1]
        else:  # a cluster client answers ({node name: cursor}, keys)
            reply = client.scan(cursor=scan, match=match, count=count,
                                target_nodes=nodes[index])
            cursors, keys = reply
            scan = int(next(iter(cursors.values()))) if cursors else 0
        for raw in keys:
            key = raw.decode() if isinstance(raw, bytes) else str(raw)
            if key.startswith(head) and key.endswith(tail) and keep(
                    pid := key[len(head):-len(tail)]):
                found.append(pid)
        if scan == 0:
            index, scan = index + 1, 0
            if index >= len(nodes):
                return found, None
        if len(found) >= limit:
            break
    return found, f"{index}:{scan}"


def _versions(client: RedisClient, prefix: str, pids: list[str]) -> list[ListedProcess]:
    """Each process's head version, in order; one deleted since the scan is left out."""
    heads: dict[str, str] = {}
    for pid in pids:  # a SCAN step may return a key twice
        try:
            heads.setdefault(pid, ProcessKeys(pid, prefix).head)
        except InvalidInput:
            continue  # not a key svit wrote (no valid process id in it)
    if not heads:
        return []
    pipe = client.pipeline(transaction=False)
    for key in heads.values():
        pipe.hget(key, "version")
    out: list[ListedProcess] = []
    for pid, raw in zip(heads, pipe.execute(), strict=True):
        text = raw.decode() if isinstance(raw, bytes) else raw
        if isinstance(text, str) and text.isdigit():
            out.append(ListedProcess(pid, int(text)))
    return out


def newest_entries(client: RedisClient, process_id: str, *, prefix: str = DEFAULT_PREFIX,
                   limit: int = 20) -> list[LogEntry] | None:
    """The newest ``limit`` retained commit-log entries of ``process_id``, newest first.

    Read-only, for observers (the gateway's ``GET /v1/processes/log``): it
    reads the stream with ``XREVRANGE ... COUNT limit``, never through the
    owner. Only the retained tail is there (the entries after the latest
    snapshot plus its margin). Two reads, not one view: an entry committed
    between them may or may not be included.

    Args:
        client: a redis-py client (single server or cluster).
        process_id: the ``svit://`` id.
        prefix: the store's key prefix.
        limit: at most this many entries (1..1000).

    Returns:
        The entries, or None when the process has no head (never created, or
        deleted).

    Raises:
        InvalidInput: ``limit`` out of range.
        UnavailableError: Redis failed (safe to retry).
        CorruptData: a malformed entry.
    """
    if type(limit) is not int or not 1 <= limit <= MAX_LIST_LIMIT:
        raise InvalidInput(f"limit must be an integer in 1..{MAX_LIST_LIMIT}")
    keys = ProcessKeys(process_id, prefix)
    with redis_boundary("newest_entries", process_id):
        if not client.exists(keys.head):
            return None
        raw = client.xrevrange(keys.stream, count=limit)
    return [parse_entry(process_id, eid, fields) for eid, fields in raw or ()]


def last_commit_times(client: RedisClient, process_ids: Sequence[str], *,
                      prefix: str = DEFAULT_PREFIX) -> dict[str, float | None]:
    """When each process last committed, in unix seconds on the Redis clock.

    The commit log's entry ids are ``<version>-0`` and hold no time; the
    ``committed`` signal the commit script appends in the same script has an
    id generated by Redis (``<ms>-<seq>``), so its ms part is the commit's
    time. One non-transactional pipeline (``XREVRANGE ... COUNT``
    :data:`LAST_COMMIT_SCAN` per process; a cluster client splits it per
    node), so the cost is bounded by the number of processes asked about.

    Args:
        client: a redis-py client (single server or cluster).
        process_ids: the ``svit://`` ids (at most :data:`MAX_LIST_LIMIT`).
        prefix: the store's key prefix.

    Returns:
        process id -> time, or None when none of its newest
        :data:`LAST_COMMIT_SCAN` signals is a ``committed`` one (never
        committed since creation, or a reasoning session's signals came since).

    Raises:
        InvalidInput: too many ids, or an invalid one.
        UnavailableError: Redis failed (safe to retry).
    """
    pids = list(dict.fromkeys(process_ids))
    if len(pids) > MAX_LIST_LIMIT:
        raise InvalidInput(f"at most {MAX_LIST_LIMIT} processes per call")
    keys = [ProcessKeys(pid, prefix).signals for pid in pids]
    if not keys:
        return {}
    with redis_boundary("last_commit_times", "*"):
        pipe = client.pipeline(transaction=False)
        for key in keys:
            pipe.xrevrange(key, count=LAST_COMMIT_SCAN)
        replies = pipe.execute()
    out: dict[str, float | None] = {}
    for pid, reply in zip(pids, replies, strict=True):
        out[pid] = None
        for eid, fields in reply or ():
            if (fields or {}).get(b"kind") == b"committed":
                raw = eid.decode() if isinstance(eid, bytes) else str(eid)
                ms = raw.partition("-")[0]
                out[pid] = int(ms) / 1000 if ms.isdigit() else None
                break
    return out
