"""``svit-cluster-transaction@1`` records: one per commit, hash-chained, replayable.

A record states *what changed* as typed mutations, so that replaying the
records from a base state re-creates the exact root hash **without running any
guest code**.

This is svit_cluster's own record format, **not** the reference's
``svit-transaction@1`` (README "Formats", docs/conformance.md): the field
names (``format``, ``op``), ``append`` carrying one value, ``remove_front``
without an expected value hash, the first record's ``position`` and
``previous_hash``, and the hash encoding all differ. Records this project wrote
before the rename say ``format: "svit-transaction@1"`` (:data:`LEGACY_TRANSACTION_FORMAT`);
they are still read and verified exactly as they were written (a script
without documentation hashed as ``"documentation": null``), and never written.

Wire shape (canonical JSON, keys sorted)::

    {"format": "svit-cluster-transaction@1", "address": "svit://...", "position": 8,
     "previous_hash": "<64 hex>", "process_version_before": 7,
     "process_version_after": 8,
     "mutations": [{"op": "set", "path": "/memory/x", "value": <tagged>},
                   {"op": "remove", "path": "/memory/y"},
                   {"op": "append", "path": "/inbox", "value": <tagged>},
                   {"op": "remove_front", "path": "/inbox"}],
     "touched_paths": ["/memory/x", ...], "source": "activation",
     "resulting_root_hash": "<64 hex>", "event_hash": "<64 hex>"}

``event_hash`` is SHA-256 over the canonical JSON of every other field;
``previous_hash`` is the previous record's ``event_hash`` (:data:`GENESIS_HASH`
for the first record of a chain). ``source`` is any non-empty string of at
most :data:`MAX_SOURCE_BYTES` UTF-8 bytes (the reference's rule); this project
writes the values in :data:`SOURCES`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from svit_cluster.errors import ErrorCode, InvalidInput, SvitError
from svit_cluster.values import (
    Value,
    canonical_json,
    decode_value,
    encode_value,
    parse_path,
    strict_json_loads,
    validate_process_id,
)

__all__ = [
    "GENESIS_HASH",
    "LEGACY_TRANSACTION_FORMAT",
    "MAX_SOURCE_BYTES",
    "SOURCES",
    "TRANSACTION_FORMAT",
    "Mutation",
    "Transaction",
]

#: The record format this project writes (not the reference's format).
TRANSACTION_FORMAT = "svit-cluster-transaction@1"
#: The earlier name of this project's record format: read, never written.
LEGACY_TRANSACTION_FORMAT = "svit-transaction@1"
_FORMATS = frozenset({TRANSACTION_FORMAT, LEGACY_TRANSACTION_FORMAT})
GENESIS_HASH = "0" * 64
#: The longest ``source``, in UTF-8 bytes (the reference's bound).
MAX_SOURCE_BYTES = 4096
#: The ``source`` values svit_cluster writes (any other valid source is read).
SOURCES = frozenset(
    {"activation", "host.write", "host.remove", "inbox.append", "inbox.ack", "host.event",
     "ports.refresh", "mounts.refresh"}
)
#: ``mount_write``/``mount_remove`` record a write below ``/mounts/<name>``: the
#: root does not change; the owner applies it to the mount after the commit.
_OPS_WITH_VALUE = frozenset({"set", "append", "mount_write"})
_OPS = frozenset({"set", "remove", "append", "remove_front", "mount_write", "mount_remove"})
_FIELDS = frozenset(
    {
        "format",
        "address",
        "position",
        "previous_hash",
        "process_version_before",
        "process_version_after",
        "mutations",
        "touched_paths",
        "source",
        "resulting_root_hash",
        "event_hash",
    }
)


def _bad(msg: str) -> InvalidInput:
    return InvalidInput(msg, code=ErrorCode.INVALID_TRANSACTION)


def _check_source(source: object) -> str:
    if type(source) is not str or not source or len(source.encode("utf-8")) > MAX_SOURCE_BYTES:
        raise _bad(f"source must be a non-empty string of at most {MAX_SOURCE_BYTES} bytes")
    return source


def _is_hex64(v: object) -> bool:
    return (
        type(v) is str
        and len(v) == 64
        and all(c in "0123456789abcdef" for c in v)
    )


@dataclass(frozen=True, slots=True)
class Mutation:
    """One typed change: ``op`` in ``set|remove|append|remove_front`` (the root),
    or ``mount_write|mount_remove`` (a write below ``/mounts/<name>``, applied to
    the mount after the commit; the root is unchanged).

    ``value`` is set for ``set``, ``append`` and ``mount_write`` only.
    """

    op: str
    path: str
    value: Value = None

    def to_json(self, *, null_documentation: bool = False) -> dict[str, Any]:
        """The mutation's JSON (``null_documentation``: the legacy script encoding)."""
        out: dict[str, Any] = {"op": self.op, "path": self.path}
        if self.op in _OPS_WITH_VALUE:
            out["value"] = encode_value(self.value, null_documentation=null_documentation)
        return out


@dataclass(frozen=True, slots=True)
class Transaction:
    """An immutable transaction record. Build with :meth:`seal`.

    ``format`` is :data:`TRANSACTION_FORMAT` for every record this version
    writes, or :data:`LEGACY_TRANSACTION_FORMAT` for an older record read back.
    """

    address: str
    position: int
    previous_hash: str
    process_version_before: int
    process_version_after: int
    mutations: tuple[Mutation, ...]
    touched_paths: tuple[str, ...]
    source: str
    resulting_root_hash: str
    event_hash: str
    format: str = TRANSACTION_FORMAT

    def _body(self) -> dict[str, Any]:
        legacy = self.format == LEGACY_TRANSACTION_FORMAT
        return {
            "format": self.format,
            "address": self.address,
            "position": self.position,
            "previous_hash": self.previous_hash,
            "process_version_before": self.process_version_before,
            "process_version_after": self.process_version_after,
            "mutations": [m.to_json(null_documentation=legacy) for m in self.mutations],
            "touched_paths": list(self.touched_paths),
            "source": self.source,
            "resulting_root_hash": self.resulting_root_hash,
        }

    @classmethod
    def seal(
        cls,
        *,
        address: str,
        position: int,
        previous_hash: str,
        version_before: int,
        mutations: tuple[Mutation, ...],
        touched_paths: tuple[str, ...],
        source: str,
        resulting_root_hash: str,
        format: str = TRANSACTION_FORMAT,
    ) -> Transaction:
        """Build a record and compute its ``event_hash``.

        The version after is always ``version_before + 1``. ``format`` is only
        ever :data:`LEGACY_TRANSACTION_FORMAT` when re-sealing an old record.

        Raises:
            InvalidInput: (``invalid_transaction``) an unknown ``format``, or a
                ``source`` that is empty or longer than :data:`MAX_SOURCE_BYTES`.
        """
        if format not in _FORMATS:
            raise _bad(f"unknown transaction format {str(format)[:64]!r}")
        _check_source(source)
        tmp = cls(
            address,
            position,
            previous_hash,
            version_before,
            version_before + 1,
            mutations,
            touched_paths,
            source,
            resulting_root_hash,
            "",
            format,
        )
        body = tmp._body()
        digest = hashlib.sha256(canonical_json(body)).hexdigest()
        return cls(
            address,
            position,
            previous_hash,
            version_before,
            version_before + 1,
            mutations,
            touched_paths,
            source,
            resulting_root_hash,
            digest,
            format,
        )

    def verify(self) -> Transaction:
        """Check this record is internally consistent (what :meth:`from_json` checks).

        A record built by :meth:`seal` or :meth:`decode` always passes; one built
        with the plain constructor may not.

        Returns:
            ``self``, for chaining.

        Raises:
            InvalidInput: (``invalid_transaction``) a version step other than +1,
                touched paths that are not the sorted paths of the mutations, or
                an ``event_hash`` that does not match the other fields.
        """
        for n in (self.position, self.process_version_before, self.process_version_after):
            if type(n) is not int or n < 0:
                raise _bad("position and versions must be non-negative integers")
        if self.process_version_after != self.process_version_before + 1:
            raise _bad("version step must be exactly +1")
        if (
            type(self.mutations) is not tuple
            or type(self.touched_paths) is not tuple
            or any(type(m) is not Mutation or type(m.path) is not str for m in self.mutations)
        ):
            raise _bad("mutations and touched_paths must be tuples of the right types")
        if list(self.touched_paths) != sorted({m.path for m in self.mutations}):
            raise _bad("touched_paths must be the sorted paths of the mutations")
        try:
            resealed = Transaction.seal(
                address=self.address,
                position=self.position,
                previous_hash=self.previous_hash,
                version_before=self.process_version_before,
                mutations=self.mutations,
                touched_paths=self.touched_paths,
                source=self.source,
                resulting_root_hash=self.resulting_root_hash,
                format=self.format,
            )
        except SvitError as exc:
            raise _bad(f"record does not encode: {exc.message}") from None
        if resealed.event_hash != self.event_hash:
            raise _bad(f"event_hash mismatch at position {self.position}")
        return self

    def to_json(self) -> dict[str, Any]:
        """The full record as a JSON-ready ``dict`` (includes ``event_hash``)."""
        body = self._body()
        body["event_hash"] = self.event_hash
        return body

    def encode(self) -> bytes:
        """Canonical JSON bytes of :meth:`to_json`."""
        return canonical_json(self.to_json())

    @classmethod
    def decode(cls, data: bytes | str) -> Transaction:
        """Strictly decode and verify one record.

        Raises:
            InvalidInput: (``invalid_transaction``) malformed JSON, duplicate,
                unknown or missing fields, wrong types, a version step other
                than +1, an unknown format or mutation, an empty or oversized
                source, an invalid address or
                path, touched paths that are not the sorted mutation paths, a
                mutation value that does not decode, or an ``event_hash`` that
                does not match the other fields.
        """
        try:
            raw = strict_json_loads(data, what="transaction")
        except InvalidInput as exc:
            raise _bad(exc.message) from None
        return cls.from_json(raw)

    @classmethod
    def from_json(cls, raw: Any) -> Transaction:
        """Like :meth:`decode`, from already-parsed JSON."""
        if type(raw) is not dict or set(raw) != _FIELDS:
            raise _bad(f"transaction must have exactly the {TRANSACTION_FORMAT} fields")
        if type(raw["format"]) is not str or raw["format"] not in _FORMATS:
            raise _bad(f"unknown transaction format {str(raw['format'])[:64]!r}")
        for name in ("position", "process_version_before", "process_version_after"):
            if type(raw[name]) is not int or raw[name] < 0:
                raise _bad(f"{name} must be a non-negative integer")
        if raw["process_version_after"] != raw["process_version_before"] + 1:
            raise _bad("version step must be exactly +1")
        for name in ("previous_hash", "resulting_root_hash", "event_hash"):
            if not _is_hex64(raw[name]):
                raise _bad(f"{name} must be 64 lowercase hex characters")
        _check_source(raw["source"])
        try:
            validate_process_id(raw["address"])
        except InvalidInput as exc:
            raise _bad(exc.message) from None
        touched = raw["touched_paths"]
        if type(touched) is not list or any(type(p) is not str for p in touched):
            raise _bad("touched_paths must be a list of strings")
        muts_raw = raw["mutations"]
        if type(muts_raw) is not list:
            raise _bad("mutations must be a list")
        muts: list[Mutation] = []
        for m in muts_raw:
            if type(m) is not dict or type(m.get("op")) is not str or m["op"] not in _OPS:
                raise _bad("bad mutation")
            want = {"op", "path", "value"} if m["op"] in _OPS_WITH_VALUE else {"op", "path"}
            if set(m) != want:
                raise _bad(f"mutation {m['op']} has the wrong fields")
            try:
                parse_path(m["path"])
                value = decode_value(m["value"]) if "value" in m else None
            except SvitError as exc:
                raise _bad(f"bad mutation: {exc.message}") from None
            muts.append(Mutation(m["op"], m["path"], value))
        if touched != sorted({m.path for m in muts}):
            raise _bad("touched_paths must be the sorted paths of the mutations")
        record = cls.seal(
            address=raw["address"],
            position=raw["position"],
            previous_hash=raw["previous_hash"],
            version_before=raw["process_version_before"],
            mutations=tuple(muts),
            touched_paths=tuple(touched),
            source=raw["source"],
            resulting_root_hash=raw["resulting_root_hash"],
            format=raw["format"],
        )
        if record.event_hash != raw["event_hash"]:
            raise _bad(f"event_hash mismatch at position {raw['position']}")
        return record

