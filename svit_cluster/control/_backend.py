"""Where the controller keeps receipts and commits: the commit backend contract.

The controller (control protocol: VAST) is the same in one process and in the
cluster. Only the backend differs:

* :class:`MemoryBackend` -- in-process: receipts in a bounded FIFO, commits
  applied directly. Loses everything with the process (reference behaviour).
* ``svit_cluster.store.RedisBackend`` -- the fenced Redis commit log: the
  transaction, receipt and outbox intents commit in one atomic script, only
  under the current fencing token.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from svit_cluster.errors import ConfigurationError, ErrorCode
from svit_cluster.process import Process, Transition

__all__ = [
    "DEFAULT_RECEIPTS",
    "DEFAULT_REQUEST_LOG",
    "MAX_RECEIPTS",
    "CommitBackend",
    "MemoryBackend",
    "Receipt",
    "RequestStatus",
    "validate_receipt_limit",
]

DEFAULT_RECEIPTS = 256
MAX_RECEIPTS = 4096
#: Committed versions whose committing request :class:`MemoryBackend` remembers.
DEFAULT_REQUEST_LOG = 1024


def validate_receipt_limit(limit: object) -> int:
    """Check a receipt bound: an int in ``1..4096``.

    Raises:
        ConfigurationError: (``invalid_control_configuration``) otherwise.
    """
    if type(limit) is not int or not 1 <= limit <= MAX_RECEIPTS:
        raise ConfigurationError(
            f"receipt limit must be an integer in 1..{MAX_RECEIPTS}, got {limit!r}",
            code=ErrorCode.INVALID_CONTROL_CONFIGURATION,
        )
    return limit


@dataclass(frozen=True, slots=True)
class Receipt:
    """A stored response for one idempotency key (control protocol: retry safety).

    Attributes:
        tenant: trusted tenant partition ("" in-process); never client-chosen.
        client_id, request_id: the idempotency key from the envelope.
        fingerprint: SHA-256 hex of the canonical JSON of the whole decoded
            request; an identical retry has the same fingerprint.
        response: canonical JSON bytes of the response with ``replayed: false``.
    """

    tenant: str
    client_id: str
    request_id: str
    fingerprint: str
    response: bytes


@dataclass(frozen=True, slots=True)
class RequestStatus:
    """Whether one request committed, as far as the retained log can tell.

    Attributes:
        committed: True iff a retained log entry (or the request's receipt)
            names the request as the committer of a version.
        version: the version it committed, when ``committed``; else None.
        retained_from_version: every version ``>= retained_from_version`` that
            was ever committed is retained and was searched, so
            ``committed=False`` is definitive for a request that could only have
            committed such a version (a request sent with ``expected_version = v``
            commits ``v + 1`` or nothing). Older versions are trimmed (or were
            written before entries named their request): unknown.
    """

    committed: bool
    version: int | None
    retained_from_version: int

    def to_json(self) -> dict[str, Any]:
        return {"committed": self.committed, "version": self.version,
                "retained_from_version": self.retained_from_version}


class CommitBackend(Protocol):
    """Receipt lookup and atomic commit, as the controller needs them.

    Every method either completes fully or raises and stores nothing.
    """

    def get_receipt(self, tenant: str, client_id: str, request_id: str) -> Receipt | None:
        """The stored receipt for the key, or None (never stored or evicted).

        A durable backend may answer from the owner's memory (``RedisBackend``
        loads the receipts on claim: one round trip per activation).

        Raises:
            FencedError: (durable backends) this owner was fenced out; it
                answers nothing, not even from memory.
            UnavailableError: the store cannot be reached.
        """
        ...

    def commit(
        self,
        transition: Transition,
        receipt: Receipt | None = None,
        intents: Sequence[dict[str, Any]] = (),
        *,
        completion: Mapping[str, Any] | None = None,
    ) -> None:
        """Durably commit ``transition`` with its receipt and outbox intents, atomically.

        ``receipt`` is None for host operations (inbox append/acknowledge).
        ``completion`` (a reasoning turn's end) is published as a ``completion``
        signal in the same step by a backend that keeps signals; one that
        keeps none (:class:`MemoryBackend`) publishes nothing.

        Raises:
            FencedError: a newer owner holds the process (durable backends).
            ConflictError: the durable head is not ``transition``'s base version.
            UnavailableError: the store failed; the outcome may be unknown.
        """
        ...

    def put_receipt(self, receipt: Receipt, *, version: int) -> None:
        """Store a conflict or rejected receipt observed at ``version``.

        Raises:
            FencedError, UnavailableError: as :meth:`commit`.
        """
        ...

    def catch_up(self, process: Process) -> Process:
        """``process`` brought up to the durable head: the tail after its version
        replayed with the hash chain verified (or a restore from the snapshot
        when that tail was trimmed). A backend without a durable head returns
        ``process`` as it is.

        Raises:
            UnavailableError: the store cannot be reached.
            CorruptData: the durable log does not continue ``process``.
        """
        ...

    def find_request(
        self, tenant: str, client_id: str, request_id: str, *, head_version: int
    ) -> RequestStatus:
        """Which retained version, if any, ``(tenant, client_id, request_id)`` committed.

        ``head_version`` is the caller's current version (used by backends that
        keep no durable head). Read-only.

        Raises:
            UnavailableError: the store cannot be reached.
            CorruptData: a stored entry is malformed.
        """
        ...


class MemoryBackend:
    """In-process backend: bounded FIFO receipts; commits are not durable.

    Args:
        max_receipts: receipt bound, ``1..4096`` (default 256). The oldest
            receipt is evicted first.
        request_log: how many of the latest committed versions keep the name
            of their committing request for :meth:`find_request` (default
            1024, at least 1; about 100 bytes each).

    Raises:
        ConfigurationError: ``max_receipts`` or ``request_log`` is out of range.
    """

    def __init__(self, max_receipts: int = DEFAULT_RECEIPTS,
                 request_log: int = DEFAULT_REQUEST_LOG) -> None:
        self.max_receipts = validate_receipt_limit(max_receipts)
        if type(request_log) is not int or request_log < 1:
            raise ConfigurationError(f"request_log must be a positive integer, "
                                     f"got {request_log!r}")
        self._receipts: OrderedDict[tuple[str, str, str], Receipt] = OrderedDict()
        # (version, (tenant, client_id, request_id) or None for a host operation)
        self._committers: deque[tuple[int, tuple[str, str, str] | None]] = deque(
            maxlen=request_log)
        self.outbox: list[dict[str, Any]] = []

    def get_receipt(self, tenant: str, client_id: str, request_id: str) -> Receipt | None:
        return self._receipts.get((tenant, client_id, request_id))

    def _store(self, receipt: Receipt) -> None:
        key = (receipt.tenant, receipt.client_id, receipt.request_id)
        self._receipts[key] = receipt
        while len(self._receipts) > self.max_receipts:
            self._receipts.popitem(last=False)

    def commit(
        self,
        transition: Transition,
        receipt: Receipt | None = None,
        intents: Sequence[dict[str, Any]] = (),
        *,
        completion: Mapping[str, Any] | None = None,
    ) -> None:
        key = None
        if receipt is not None:
            self._store(receipt)
            key = (receipt.tenant, receipt.client_id, receipt.request_id)
        self._committers.append((transition.record.process_version_after, key))
        self.outbox.extend(intents)

    def catch_up(self, process: Process) -> Process:
        """No durable head to re-read: ``process`` as it is."""
        return process

    def find_request(
        self, tenant: str, client_id: str, request_id: str, *, head_version: int
    ) -> RequestStatus:
        wanted = (tenant, client_id, request_id)
        for version, key in self._committers:
            if key == wanted:
                return RequestStatus(True, version, self._committers[0][0])
        oldest = self._committers[0][0] if self._committers else head_version + 1
        return RequestStatus(False, None, oldest)

    def put_receipt(self, receipt: Receipt, *, version: int) -> None:
        self._store(receipt)

    def __len__(self) -> int:
        return len(self._receipts)
