"""Typed views of what the log stores: head, stream entries, snapshot, receipts.

Pure parsing, no I/O. Every parser refuses malformed stored bytes with
:class:`~svit_cluster.errors.CorruptData` (``corrupt_log``) naming the process
and, where it has one, the version.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from svit_cluster.control import Receipt
from svit_cluster.errors import CorruptData, InvalidInput

__all__ = [
    "Head",
    "LogEntry",
    "StoredSnapshot",
    "corrupt",
    "decode_receipt",
    "encode_receipt",
    "parse_entry",
    "parse_head",
    "parse_snapshot",
]

_ENTRY_ID = re.compile(rb"([1-9][0-9]{0,18})-0")
_HEX64 = re.compile(r"[0-9a-f]{64}")
_FINGERPRINT = re.compile(rb"[0-9a-f]{64}")


def corrupt(process_id: str, message: str, **fields: Any) -> CorruptData:
    """A ``corrupt_log`` error whose message and fields name the process."""
    return CorruptData(f"{message} in {process_id}", process_id=process_id, **fields)


def _int(process_id: str, what: str, raw: object, **fields: Any) -> int:
    if not isinstance(raw, bytes) or not raw.isdigit() or len(raw) > 19:
        raise corrupt(process_id, f"{what} is not a decimal integer", **fields)
    return int(raw)


def _hex(process_id: str, what: str, raw: object, **fields: Any) -> str:
    text = raw.decode("ascii", errors="replace") if isinstance(raw, bytes) else ""
    if not _HEX64.fullmatch(text):
        raise corrupt(process_id, f"{what} is not 64 lowercase hex characters", **fields)
    return text


@dataclass(frozen=True, slots=True)
class Head:
    """The durable head: the last committed version and its hashes.

    Attributes:
        version: process version after the last commit.
        chain_head: ``event_hash`` of the last record (genesis hash before any).
        root_hash: root hash at ``version``.
        position: transaction position of the last record.
        token: fencing token of the last writer.
    """

    version: int
    chain_head: str
    root_hash: str
    position: int
    token: int


def parse_head(process_id: str, reply: Mapping[Any, Any] | list[Any]) -> Head | None:
    """Parse ``HGETALL head`` (a dict or a flat array); None when the hash is
    empty (process never created).

    Raises:
        CorruptData: a field is missing or malformed.
    """
    raw: Mapping[Any, Any] = field_map(reply)
    if not raw:
        return None
    return Head(
        version=_int(process_id, "head version", raw.get(b"version")),
        chain_head=_hex(process_id, "head chain_head", raw.get(b"chain_head")),
        root_hash=_hex(process_id, "head root_hash", raw.get(b"root_hash")),
        position=_int(process_id, "head position", raw.get(b"position")),
        token=_int(process_id, "head token", raw.get(b"token")),
    )


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One stream entry: the version (entry id ``<version>-0``), token and record bytes.

    ``request`` names the committing request as its receipt field
    (``tenant\0client_id\0request_id``), ``b""`` for a host operation (no
    request), or None for an entry written before entries carried it.
    ``trace`` is the W3C ``traceparent`` of the commit span (ASCII), None when
    the commit was not traced or the entry predates the field.
    """

    version: int
    token: int
    record: bytes
    request: bytes | None = None
    trace: str | None = None


def field_map(raw: Any) -> Any:
    """A flat ``[k1, v1, k2, v2, ...]`` reply as a dict; anything else unchanged.

    redis-py parses ``HGETALL`` and stream entry fields into dicts, except in
    a Redis Cluster ``MULTI`` pipeline, which returns the raw flat arrays.
    """
    if isinstance(raw, list) and len(raw) % 2 == 0:
        return dict(zip(raw[::2], raw[1::2], strict=True))
    return raw


def parse_entry(process_id: str, entry_id: object, fields: object) -> LogEntry:
    """Parse one ``XRANGE`` entry (fields as a dict or a flat array).

    Raises:
        CorruptData: the id is not ``<version>-0``, a field is missing, or the
            ``version`` field disagrees with the id.
    """
    match = _ENTRY_ID.fullmatch(entry_id) if isinstance(entry_id, bytes) else None
    if match is None:
        raise corrupt(process_id, f"stream entry id {str(entry_id)[:40]!r} is not <version>-0")
    version = int(match[1])
    fields = field_map(fields)
    if not isinstance(fields, Mapping):
        raise corrupt(process_id, f"stream entry {version} has no fields", version=version)
    record = fields.get(b"record")
    if not isinstance(record, bytes):
        raise corrupt(process_id, f"stream entry {version} has no record", version=version)
    stored = _int(process_id, f"stream entry {version} version", fields.get(b"version"),
                  version=version)
    if stored != version:
        raise corrupt(process_id, f"stream entry id {version} holds version {stored}",
                      version=version)
    token = _int(process_id, f"stream entry {version} token", fields.get(b"token"),
                 version=version)
    request = fields.get(b"request")
    if request is not None and not isinstance(request, bytes):
        raise corrupt(process_id, f"stream entry {version} request is not bytes",
                      version=version)
    raw_trace = fields.get(b"trace")
    trace = (raw_trace.decode("ascii", "replace") if isinstance(raw_trace, bytes) and raw_trace
             else None)
    return LogEntry(version=version, token=token, record=record, request=request, trace=trace)


@dataclass(frozen=True, slots=True)
class StoredSnapshot:
    """A stored snapshot: the process snapshot bytes and where the chain continues."""

    data: bytes
    version: int
    position: int
    chain_head: str
    root_hash: str
    token: int


def parse_snapshot(process_id: str, reply: Mapping[Any, Any] | list[Any]
                   ) -> StoredSnapshot | None:
    """Parse ``HGETALL snapshot`` (a dict or a flat array); None when there is none.

    Raises:
        CorruptData: a field is missing or malformed.
    """
    raw: Mapping[Any, Any] = field_map(reply)
    if not raw:
        return None
    data = raw.get(b"data")
    if not isinstance(data, bytes):
        raise corrupt(process_id, "snapshot has no data")
    return StoredSnapshot(
        data=data,
        version=_int(process_id, "snapshot version", raw.get(b"version")),
        position=_int(process_id, "snapshot position", raw.get(b"position")),
        chain_head=_hex(process_id, "snapshot chain_head", raw.get(b"chain_head")),
        root_hash=_hex(process_id, "snapshot root_hash", raw.get(b"root_hash")),
        token=_int(process_id, "snapshot token", raw.get(b"token")),
    )


def encode_receipt(receipt: Receipt) -> bytes:
    """Stored receipt value: ``<fingerprint hex>\\n<response bytes>``.

    Raises:
        InvalidInput: the fingerprint is not 64 lowercase hex characters (SHA-256).
    """
    if not _HEX64.fullmatch(receipt.fingerprint):
        raise InvalidInput("receipt fingerprint must be 64 lowercase hex characters")
    return receipt.fingerprint.encode("ascii") + b"\n" + receipt.response


def decode_receipt(
    process_id: str, tenant: str, client_id: str, request_id: str, raw: object
) -> Receipt:
    """Rebuild a :class:`Receipt` from :func:`encode_receipt` bytes.

    Raises:
        CorruptData: the stored value is not ``<64 hex>\\n<bytes>``.
    """
    if not isinstance(raw, bytes):
        raise corrupt(process_id, "stored receipt is not bytes")
    fingerprint, sep, response = raw.partition(b"\n")
    if not sep or not _FINGERPRINT.fullmatch(fingerprint):
        raise corrupt(process_id, f"stored receipt for request {request_id[:128]!r} is malformed")
    return Receipt(tenant, client_id, request_id, fingerprint.decode("ascii"), response)
