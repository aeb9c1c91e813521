"""Stored commit logs as the checker sees them: dumped from Redis, kept as JSONL.

The checker runs offline on a run directory, so the harness copies what Redis
holds for every workload process into ``logs.jsonl`` after healing. Entries
come from two sources:

* ``final`` -- the stream, snapshot, head and fence read after healing, in one
  ``MULTI``/``EXEC`` view per process. This is the authority on what is stored.
* ``collected`` -- stream entries and snapshots the store observer copied
  *during* the run, before snapshots trimmed them. They let the checker verify
  versions below the final snapshot; where both sources hold a version, the
  bytes must be identical.

Line shapes (one JSON object per line, ``kind`` first)::

    {"kind": "entry", "process": P, "version": 7, "token": 12, "record": "<json>",
     "source": "final"}
    {"kind": "snapshot", "process": P, "version": 0, "position": 0, "chain_head": H,
     "root_hash": H, "token": 12, "data": "<json>", "source": "final"}
    {"kind": "head", "process": P, "version": 7, "chain_head": H, "root_hash": H,
     "position": 7, "token": 12}
    {"kind": "fence", "process": P, "fence": 12}
    {"kind": "problem", "process": P, "message": "..."}

Malformed stored data never makes a dump fail: it becomes a ``problem`` line
that the checker reports as an anomaly.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from svit_cluster.store import DEFAULT_PREFIX, ProcessKeys

from .errors import HistoryError

__all__ = [
    "HeadRecord",
    "ProcessLog",
    "SnapshotRecord",
    "StoredEntry",
    "StoredLogs",
    "dump_process",
    "dump_processes",
    "parse_snapshot_hash",
    "parse_stream_entry",
    "read_logs",
    "write_logs",
]

_ENTRY_ID = re.compile(r"([1-9][0-9]{0,18})-0")


@dataclass(frozen=True, slots=True)
class _ProcessRecord:
    """The first two fields of every stored record of one process, in this order
    (records are built positionally): the ``process`` id and the ``version``."""

    process: str
    version: int


@dataclass(frozen=True, slots=True)
class StoredEntry(_ProcessRecord):
    """One stream entry: ``version`` (entry id ``<version>-0``), owner ``token``, record bytes."""

    token: int
    record: bytes
    source: str = "final"


@dataclass(frozen=True, slots=True)
class SnapshotRecord(_ProcessRecord):
    """One stored snapshot (the process snapshot document plus where the chain continues)."""

    position: int
    chain_head: str
    root_hash: str
    token: int
    data: bytes
    source: str = "final"


@dataclass(frozen=True, slots=True)
class HeadRecord:
    """The stored head after healing: last version, its hashes and its writer's token."""

    version: int
    chain_head: str
    root_hash: str
    position: int
    token: int


@dataclass
class ProcessLog:
    """Everything stored about one process.

    Attributes:
        process: the process id.
        entries: final stream entries by version.
        collected: entries the observer copied during the run, by version.
        snapshots: final snapshot first (if any), then collected ones.
        head: the final head, or None if the process is not in the store.
        fence: the final fence (0 when never claimed).
        problems: malformed stored data, as messages.
    """

    process: str
    entries: dict[int, StoredEntry] = field(default_factory=dict)
    collected: dict[int, StoredEntry] = field(default_factory=dict)
    snapshots: list[SnapshotRecord] = field(default_factory=list)
    head: HeadRecord | None = None
    fence: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def final_snapshot(self) -> SnapshotRecord | None:
        for snap in self.snapshots:
            if snap.source == "final":
                return snap
        return None


@dataclass
class StoredLogs:
    """The logs of every process of a run, by process id."""

    processes: dict[str, ProcessLog] = field(default_factory=dict)

    def get(self, process: str) -> ProcessLog:
        """The log of ``process`` (an empty one is created when absent)."""
        log = self.processes.get(process)
        if log is None:
            log = self.processes[process] = ProcessLog(process)
        return log


def _text(raw: object) -> str:
    if isinstance(raw, bytes):
        return raw.decode("utf-8", errors="replace")
    return str(raw)


def _int(raw: object) -> int | None:
    text = _text(raw) if raw is not None else ""
    return int(text) if text.isdigit() and len(text) <= 19 else None


def as_mapping(raw: Any) -> Mapping[Any, Any]:
    """A field/value reply as a mapping: a dict as it is, a flat ``[f1, v1, f2, v2...]``
    list as a dict (None as empty).

    A Redis Cluster client's ``MULTI`` pipeline (redis-py ``ClusterPipeline``
    with ``transaction=True``) returns ``HGETALL`` and the fields of ``XRANGE``
    entries unparsed, as flat lists; a single-node pipeline parses them.
    """
    if raw is None:
        return {}
    if isinstance(raw, Mapping):
        return raw
    items = list(raw)
    return dict(zip(items[0::2], items[1::2], strict=False))


def parse_stream_entry(
    process: str, entry_id: object, fields: Mapping[Any, Any] | list[Any], *,
    source: str = "final",
) -> StoredEntry | str:
    """Parse one ``XRANGE`` item into a :class:`StoredEntry`, or a problem message
    (``fields`` a mapping, or the flat list a cluster pipeline returns)."""
    fields = as_mapping(fields)
    eid = _text(entry_id)
    match = _ENTRY_ID.fullmatch(eid)
    if match is None:
        return f"stream entry id {eid[:40]!r} is not <version>-0"
    version = int(match[1])
    record = fields.get(b"record", fields.get("record"))
    token = _int(fields.get(b"token", fields.get("token")))
    stored = _int(fields.get(b"version", fields.get("version")))
    if not isinstance(record, bytes | str) or token is None:
        return f"stream entry {version} lacks a record or a token"
    if stored != version:
        return f"stream entry id {version} holds version field {stored}"
    data = record if isinstance(record, bytes) else record.encode()
    return StoredEntry(process, version, token, data, source)


def parse_snapshot_hash(
    process: str, raw: Mapping[Any, Any] | list[Any], *, source: str = "final"
) -> SnapshotRecord | str | None:
    """Parse ``HGETALL snapshot``; None when empty, a message when malformed."""
    raw = as_mapping(raw)
    if not raw:
        return None

    def get(name: str) -> Any:
        return raw.get(name.encode(), raw.get(name))

    nums = {k: _int(get(k)) for k in ("version", "position", "token")}
    data = get("data")
    if any(v is None for v in nums.values()) or not isinstance(data, bytes | str):
        return "snapshot hash is missing fields"
    return SnapshotRecord(
        process=process,
        version=nums["version"] or 0,
        position=nums["position"] or 0,
        chain_head=_text(get("chain_head")),
        root_hash=_text(get("root_hash")),
        token=nums["token"] or 0,
        data=data if isinstance(data, bytes) else data.encode(),
        source=source,
    )


def _parse_head(raw: Mapping[Any, Any] | list[Any]) -> HeadRecord | str | None:
    raw = as_mapping(raw)
    if not raw:
        return None

    def get(name: str) -> Any:
        return raw.get(name.encode(), raw.get(name))

    nums = {k: _int(get(k)) for k in ("version", "position", "token")}
    if any(v is None for v in nums.values()):
        return "head hash is missing fields"
    return HeadRecord(
        version=nums["version"] or 0,
        chain_head=_text(get("chain_head")),
        root_hash=_text(get("root_hash")),
        position=nums["position"] or 0,
        token=nums["token"] or 0,
    )


def dump_process(
    client: redis.Redis, process: str, *, prefix: str = DEFAULT_PREFIX
) -> ProcessLog:
    """Read one process's stream, snapshot, head and fence in one consistent view.

    Raises:
        redis.RedisError: Redis failed (the caller decides whether to retry).
    """
    keys = ProcessKeys(process, prefix)
    pipe = client.pipeline(transaction=True)
    pipe.xrange(keys.stream)
    pipe.hgetall(keys.snapshot)
    pipe.hgetall(keys.head)
    pipe.get(keys.fence)
    stream, snap_raw, head_raw, fence_raw = pipe.execute()
    log = ProcessLog(process)
    for eid, fields in stream or ():
        parsed = parse_stream_entry(process, eid, fields)
        if isinstance(parsed, str):
            log.problems.append(parsed)
        else:
            log.entries[parsed.version] = parsed
    snap = parse_snapshot_hash(process, snap_raw)
    if isinstance(snap, str):
        log.problems.append(snap)
    elif snap is not None:
        log.snapshots.append(snap)
    head = _parse_head(head_raw)
    if isinstance(head, str):
        log.problems.append(head)
    else:
        log.head = head
    fence = _int(fence_raw) if fence_raw is not None else 0
    if fence is None:
        log.problems.append(f"fence {_text(fence_raw)[:40]!r} is not an integer")
    log.fence = fence or 0
    return log


def dump_processes(
    client: redis.Redis,
    processes: Iterable[str],
    *,
    prefix: str = DEFAULT_PREFIX,
    collected: StoredLogs | None = None,
) -> StoredLogs:
    """Dump every process, merging in what the observer ``collected`` during the run.

    Raises:
        redis.RedisError: Redis failed.
    """
    logs = StoredLogs()
    for process in processes:
        log = dump_process(client, process, prefix=prefix)
        if collected is not None and process in collected.processes:
            seen = collected.processes[process]
            log.collected = dict(seen.collected)
            log.snapshots.extend(s for s in seen.snapshots if s.source == "collected")
            log.problems.extend(seen.problems)
        logs.processes[process] = log
    return logs


# -- JSONL ------------------------------------------------------------------------------


def _lines(logs: StoredLogs) -> Iterator[dict[str, Any]]:
    for process in sorted(logs.processes):
        log = logs.processes[process]
        if log.head is not None:
            h = log.head
            yield {"kind": "head", "process": process, "version": h.version,
                   "chain_head": h.chain_head, "root_hash": h.root_hash,
                   "position": h.position, "token": h.token}
        yield {"kind": "fence", "process": process, "fence": log.fence}
        for snap in log.snapshots:
            yield {"kind": "snapshot", "process": process, "version": snap.version,
                   "position": snap.position, "chain_head": snap.chain_head,
                   "root_hash": snap.root_hash, "token": snap.token,
                   "data": snap.data.decode("utf-8", errors="surrogateescape"),
                   "source": snap.source}
        for source, entries in (("final", log.entries), ("collected", log.collected)):
            for version in sorted(entries):
                e = entries[version]
                yield {"kind": "entry", "process": process, "version": e.version,
                       "token": e.token,
                       "record": e.record.decode("utf-8", errors="surrogateescape"),
                       "source": source}
        for message in log.problems:
            yield {"kind": "problem", "process": process, "message": message}


def write_logs(path: Path, logs: StoredLogs) -> None:
    """Write ``logs`` as JSONL (see the module docstring)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8", errors="surrogateescape") as fh:
        for line in _lines(logs):
            fh.write(json.dumps(line, sort_keys=True, ensure_ascii=False) + "\n")


def _bytes(text: Any) -> bytes:
    return str(text).encode("utf-8", errors="surrogateescape")


def read_logs(path: Path) -> StoredLogs:
    """Read a ``logs.jsonl`` file written by :func:`write_logs`.

    Raises:
        HistoryError: a line is malformed (fields ``path``, ``line``).
        OSError: the file cannot be read.
    """
    logs = StoredLogs()
    with open(path, encoding="utf-8", errors="surrogateescape") as fh:
        for n, text in enumerate(fh, 1):
            if not text.strip():
                continue
            try:
                doc = json.loads(text)
                kind, process = doc["kind"], str(doc["process"])
                log = logs.get(process)
                if kind == "entry":
                    entry = StoredEntry(process, int(doc["version"]), int(doc["token"]),
                                        _bytes(doc["record"]), str(doc.get("source", "final")))
                    target = log.collected if entry.source == "collected" else log.entries
                    target[entry.version] = entry
                elif kind == "snapshot":
                    log.snapshots.append(SnapshotRecord(
                        process, int(doc["version"]), int(doc["position"]),
                        str(doc["chain_head"]), str(doc["root_hash"]), int(doc["token"]),
                        _bytes(doc["data"]), str(doc.get("source", "final"))))
                elif kind == "head":
                    log.head = HeadRecord(int(doc["version"]), str(doc["chain_head"]),
                                          str(doc["root_hash"]), int(doc["position"]),
                                          int(doc["token"]))
                elif kind == "fence":
                    log.fence = int(doc["fence"])
                elif kind == "problem":
                    log.problems.append(str(doc["message"]))
                else:
                    raise ValueError(f"unknown kind {kind!r}")
            except (ValueError, KeyError, TypeError) as exc:
                raise HistoryError(f"{path}:{n}: malformed log line: {exc}",
                                   path=str(path), line=n) from exc
    for log in logs.processes.values():
        log.snapshots.sort(key=lambda s: (s.source != "final", s.version))
    return logs
