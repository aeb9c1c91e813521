"""The commit script's KEYS and ARGV, named (``COMMIT`` in ``_scripts``).

:class:`CommitArgs` names every argument the commit script reads; only
:meth:`CommitArgs.as_args` knows their positions (``ARGV[1]`` .. ``ARGV[16]``,
then one per outbox intent), so no caller indexes the script's arguments by
number. :meth:`CommitArgs.of` is the one builder, used by
``RedisBackend.commit`` and by ``benchmarks/bench_store`` (which times the bare
script with exactly these arguments). :func:`commit_keys` is the script's KEYS,
in their order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from svit_cluster import tracing
from svit_cluster.control import Receipt
from svit_cluster.process import Transition, canonical_json, get_node
from svit_cluster.store._keys import ProcessKeys, receipt_field
from svit_cluster.store._records import encode_receipt

__all__ = ["CommitArgs", "commit_keys"]


def commit_keys(keys: ProcessKeys) -> tuple[str, ...]:
    """The commit script's KEYS: stream, head, fence, receipts, receipts order,
    outbox, signals, queued (one process, one hash slot)."""
    return (keys.stream, keys.head, keys.fence, keys.receipts, keys.receipts_order,
            keys.outbox, keys.signals, keys.queued)


@dataclass(frozen=True, slots=True)
class CommitArgs:
    """The commit script's arguments for one transition.

    Attributes:
        token: the committing owner's fencing token.
        base_version: the head version the transition applies to.
        base_hash: the head's chain hash (the record's ``previous_hash``).
        record: the encoded transaction record (canonical bytes).
        event_hash: the record's hash, the new chain head.
        root_hash: the new state's root hash.
        position: the record's position in the chain.
        receipt_field: ``tenant\\0client_id\\0request_id``; ``b""`` for no receipt.
        receipt_value: the encoded receipt; ``b""`` for none.
        max_receipts: receipts kept per process (FIFO bound).
        new_version: the version after the commit.
        signal_retention: observer signals kept per process (``MAXLEN ~``).
        change: the ``committed`` signal's data (canonical JSON: version,
            changed paths, content hashes).
        completion: the ``completion`` signal's data (canonical JSON); ``b""`` for none.
        traceparent: the commit span's W3C ``traceparent``; ``b""`` when untraced.
        queued: ``b"1"`` when the new state's ``/inbox`` is non-empty, else ``b"0"``.
        intents: the outbox intents, each canonical JSON.
    """

    token: int
    base_version: int
    base_hash: str
    record: bytes
    event_hash: str
    root_hash: str
    position: int
    receipt_field: bytes
    receipt_value: bytes
    max_receipts: int
    new_version: int
    signal_retention: int
    change: bytes
    completion: bytes
    traceparent: bytes
    queued: bytes
    intents: tuple[bytes, ...]

    @classmethod
    def of(
        cls,
        transition: Transition,
        receipt: Receipt | None,
        intents: Sequence[dict[str, Any]],
        completion: Mapping[str, Any] | None,
        *,
        token: int,
        max_receipts: int,
        signal_retention: int,
    ) -> CommitArgs:
        """The arguments committing ``transition`` under ``token``, with its
        receipt (or None), outbox ``intents`` and ``completion`` signal data (or
        None); ``traceparent`` is the current span's (:mod:`svit_cluster.tracing`).
        """
        rec = transition.record
        trace = tracing.current()  # the commit span's context, when traced
        if receipt is None:
            field, value = b"", b""
        else:
            field = receipt_field(receipt.tenant, receipt.client_id, receipt.request_id)
            value = encode_receipt(receipt)
        change = transition.change
        return cls(
            token=token,
            base_version=rec.process_version_before,
            base_hash=rec.previous_hash,
            record=rec.encode(),
            event_hash=rec.event_hash,
            root_hash=rec.resulting_root_hash,
            position=rec.position,
            receipt_field=field,
            receipt_value=value,
            max_receipts=max_receipts,
            new_version=rec.process_version_after,
            signal_retention=signal_retention,
            change=canonical_json({"version": change.version, "paths": list(change.paths),
                                   "hashes": dict(change.hashes)}),
            completion=b"" if completion is None else canonical_json(dict(completion)),
            traceparent=b"" if trace is None else trace.traceparent.encode(),
            queued=b"1" if get_node(transition.root, ("inbox", "0")) is not None else b"0",
            intents=tuple(canonical_json(intent) for intent in intents),
        )

    def as_args(self) -> list[Any]:
        """The script's ARGV, in the order ``COMMIT`` reads it."""
        return [
            self.token,
            self.base_version,
            self.base_hash,
            self.record,
            self.event_hash,
            self.root_hash,
            self.position,
            self.receipt_field,
            self.receipt_value,
            self.max_receipts,
            self.new_version,
            self.signal_retention,
            self.change,
            self.completion,
            self.traceparent,
            self.queued,
            *self.intents,
        ]
