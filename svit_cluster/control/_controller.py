"""The VAST controller: one serialization point for one process.

Order of checks (control protocol: retry safety; ``docs/architecture.md``, "Receipts and retries"):

1. receipt lookup on ``(tenant, client_id, request_id)`` (the Redis backend
   answers it from the owner's memory, loaded on claim: the activation's only
   round trip is the commit script): an identical request
   replays the stored response with ``replayed: true``; different content gets
   ``request_id_reused`` (not stored);
2. ``process_mismatch``, then command validation (neither stored);
3. the version check: ``conflict`` (stored);
4. the activation: ``committed`` or ``rejected`` (both stored).

Guarantee: for a process at version N, a request with ``expected_version == N``
either commits exactly one version N+1 or leaves the process at N. Every
response is safe to retry with the same ids: a retained receipt replays it, and
after eviction the version precondition still prevents a second commit.

Unknown outcomes: when a durable commit fails with ``unavailable`` (timeout,
connection reset, a lost reply) the entry may have been written. From then on
the in-memory process may be behind the durable head, so the controller is
*stale*: before it serves a read, decides a conflict or evaluates a request it
re-synchronises (:meth:`ProcessController._resync`): it re-reads the durable
head and, if the head moved, replays the verified tail (or restores). A
conflict receipt therefore never names a version older than one already
acknowledged, and a retry of the lost request replays its stored receipt.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar

from svit_cluster import tracing
from svit_cluster.activation import prepare_activation, wall_clock_ms
from svit_cluster.control._backend import CommitBackend, MemoryBackend, Receipt, RequestStatus
from svit_cluster.control._wire import (
    Activation,
    Committed,
    Conflict,
    ControlRequest,
    ControlResponse,
    Failure,
    LogRecord,
    Rejected,
    decode_response,
    wire,
    wire_message,
)
from svit_cluster.errors import (
    ConflictError,
    ErrorCode,
    FencedError,
    InvalidInput,
    SvitError,
    UnavailableError,
)
from svit_cluster.process import (
    Change,
    Process,
    Transition,
    WorkingCopy,
    canonical_json,
    node_from_value,
    prepare_inbox_ack,
    prepare_inbox_append,
    prepare_inbox_close,
    prepare_inbox_drop,
    to_plain_json,
    validate_script_name,
)

__all__ = ["ProcessController", "request_fingerprint"]

log = logging.getLogger(__name__)

T = TypeVar("T")


class _HeadMoved(Exception):
    """The commit script saw a durable head other than the transition's base."""

    def __init__(self, cause: ConflictError) -> None:
        super().__init__(cause.message)
        self.cause = cause


def request_fingerprint(request: ControlRequest) -> str:
    """SHA-256 hex of the canonical JSON of the decoded request.

    Two requests are identical iff their fingerprints are equal; typed values
    keep integer ``1`` and number ``1.0`` apart.
    """
    return hashlib.sha256(canonical_json(request.model_dump(mode="json"))).hexdigest()


class ProcessController:
    """Thread-safe svit-control@1 controller for one :class:`Process`.

    Args:
        process: the process this controller serializes. Nothing else may
            change it while the controller is in use.
        backend: receipts and commits; default :class:`MemoryBackend` (256
            receipts, in memory).
        clock: monotonic seconds for the activation wall-clock limit.
        wall_clock: the host's wall clock in ms since the epoch, read once per
            activation to stamp timers (default
            :func:`~svit_cluster.activation.wall_clock_ms`).
        ports: the host's :class:`~svit_cluster.ports.PortRegistry` (None: no
            port is granted; ``port-call`` fails).
        token: the owner's fencing token, recorded with every port call.
    """

    def __init__(
        self,
        process: Process,
        backend: CommitBackend | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        ports: Any = None,
        token: int = 0,
        wall_clock: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self._process = process
        self._ports = ports
        self._token = token
        self._backend: CommitBackend = backend if backend is not None else MemoryBackend()
        self._lock = threading.Lock()
        self._clock = clock
        self._wall_clock = wall_clock
        #: True after a commit whose outcome is unknown, until :meth:`_resync` succeeds.
        self._stale = False
        #: Host mutations added to every inbox append (set by the reasoning
        #: loop: its ``/thread`` metadata); called under the lock.
        self.append_stage: Callable[[WorkingCopy], None] | None = None

    @property
    def process(self) -> Process:
        """The controlled process. Read it only inside :meth:`locked`, which first
        re-synchronises it after an unknown commit outcome."""
        return self._process

    @property
    def stale(self) -> bool:
        """True while the in-memory process may be behind the durable head (a
        commit outcome is unknown and no re-synchronisation has succeeded yet)."""
        return self._stale

    @property
    def backend(self) -> CommitBackend:
        return self._backend

    @property
    def token(self) -> int:
        """The owner's fencing token (0 outside the cluster), recorded with port calls."""
        return self._token

    @property
    def ports(self) -> Any:
        """The host's :class:`~svit_cluster.ports.PortRegistry`, or None (no port granted)."""
        return self._ports

    def observe(self) -> tuple[int, str]:
        """``(version, root_hash)`` from one observation.

        Raises:
            UnavailableError, CorruptData: re-synchronisation after an unknown
                commit outcome failed (see :meth:`_resync`).
        """
        with self.locked():
            return self._process.version, self._process.root_hash

    def read_versioned(self, path: str) -> tuple[Any, int]:
        """``(value, version)`` of ``path`` from one observation.

        Raises:
            UnavailableError, CorruptData: as :meth:`observe`.
        """
        with self.locked():
            return self._process.read_versioned(path)

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the serialization lock (for host operations that must not interleave).

        On entry the process is re-synchronised if a commit outcome is unknown;
        an ``UnavailableError`` raised inside the block (for example by a host
        commit made there) marks the process stale again.

        Raises:
            UnavailableError, CorruptData: on entry, as :meth:`observe`.
        """
        with self._lock:
            self._ensure_synced()
            try:
                yield
            except UnavailableError:
                self._stale = True
                raise

    # -- re-synchronisation after an unknown outcome ----------------------------------

    def _ensure_synced(self) -> None:
        """Call :meth:`_resync` if a commit outcome is unknown (lock held)."""
        if self._stale:
            self._resync()

    def _resync(self) -> None:
        """Re-synchronise the in-memory process with the durable head (lock held).

        The one step that makes an unknown commit outcome safe: the backend
        re-reads the durable head and, if it moved past the in-memory version,
        replays the tail after it, verifying the hash chain (or restores from
        the snapshot when that tail was trimmed). Backends without a durable
        head (``MemoryBackend``) have nothing to re-read. Clears :attr:`stale`
        only on success.

        Raises:
            UnavailableError: the store cannot be reached; still stale, so the
                next call retries.
            CorruptData: the durable log does not continue the served state.
        """
        self._process = self._backend.catch_up(self._process)
        self._stale = False

    def _at_durable_head(self, step: Callable[[], T]) -> T:
        """Run ``step`` on a synchronised process; if its commit finds that the
        durable head moved (our own earlier write, whose reply was lost, landed
        late), re-synchronise and run it once more (lock held).

        Raises:
            FencedError: the head moved again on the second attempt.
        """
        self._ensure_synced()
        try:
            return step()
        except _HeadMoved:
            self._stale = True
            self._ensure_synced()
        try:
            return step()
        except _HeadMoved as exc:
            raise FencedError(f"durable head moved: {exc.cause.message}", code=ErrorCode.FENCED,
                              **exc.cause.fields) from exc.cause

    def execute(self, request: ControlRequest, *, tenant: str = "") -> ControlResponse:
        """Evaluate one decoded request at the serialization point.

        Args:
            request: a decoded request (see ``decode_request``).
            tenant: trusted receipt partition, set by the gateway from the
                authenticated token and never from the envelope; ``""`` in-process.

        When a trace context is current (:mod:`svit_cluster.tracing`), the
        activation runs as span ``svit.activation`` and its commit as its child
        ``svit.commit``.

        Returns:
            The response; ``outcome.status`` is ``committed``, ``conflict`` or
            ``rejected``.

        Raises:
            FencedError: the durable backend refused the commit because a newer
                owner holds the process; this controller must stop serving.
            UnavailableError: the backend failed; the outcome may be unknown,
                so retry with the same ids. The controller re-synchronises
                with the durable head before it serves anything else.
            CorruptData: re-synchronisation found a log that does not continue
                the served state.
        """
        with tracing.span("svit.activation", attributes={
                "svit.process_id": request.process_id, "svit.client_id": request.client_id,
                "svit.request_id": request.request_id}) as hop, self._lock:
            response = self._at_durable_head(lambda: self._execute(request, tenant))
            if hop is not None:
                hop.set_attribute("svit.outcome", response.outcome.status)
            return response

    def _execute(self, request: ControlRequest, tenant: str) -> ControlResponse:
        proc = self._process
        backend = self._backend
        fingerprint = request_fingerprint(request)
        stored = backend.get_receipt(tenant, request.client_id, request.request_id)
        if stored is not None:
            if stored.fingerprint == fingerprint:
                replay = decode_response(stored.response)
                return replay.model_copy(update={"replayed": True})
            return self._rejected(
                request,
                ErrorCode.REQUEST_ID_REUSED,
                "request id was already used for a different request",
            )
        if request.process_id != proc.id:
            return self._rejected(
                request, ErrorCode.PROCESS_MISMATCH, "request addressed a different process"
            )
        try:
            self._validate(request)
        except SvitError as exc:
            return self._rejected(request, exc.code, exc.message)

        if request.expected_version != proc.version:
            response = self._response(
                request,
                Conflict(
                    status="conflict",
                    expected_version=request.expected_version,
                    actual_version=proc.version,
                    root_hash=proc.root_hash,
                ),
            )
            backend.put_receipt(self._receipt(tenant, request, fingerprint, response),
                                version=proc.version)
            return response

        cmd = request.command
        previous = proc.version
        try:
            result = prepare_activation(proc, cmd.script, cmd.input, clock=self._clock,
                                        ports=self._ports, token=self._token,
                                        wall_clock=self._wall_clock,
                                        input_checked=True)  # by _validate, above
        except SvitError as exc:
            response = self._rejected(request, exc.code, exc.message)
            backend.put_receipt(self._receipt(tenant, request, fingerprint, response),
                                version=proc.version)
            return response
        activation = Activation(
            output=wire(result.output),
            logs=[
                LogRecord(
                    message=rec["message"],
                    fields={k: wire(v) for k, v in rec["fields"].items()},
                )
                for rec in result.logs
            ],
            messages=[wire_message(m) for m in result.messages],
            version=result.version,
            root_hash=result.root_hash,
            changed=list(result.changed),
        )
        response = self._response(
            request,
            Committed(status="committed", previous_version=previous, activation=activation),
        )
        receipt = self._receipt(tenant, request, fingerprint, response)
        try:
            self._durable_commit(result.transition, receipt, result.messages)
        except (FencedError, UnavailableError) as exc:
            if result.port_calls:
                # The port effects already happened outside the commit: make a
                # superseded (or cut-off) owner's calls visible, with its token.
                log.warning(
                    "port calls not committed (%s): process=%s version=%d token=%d keys=%s",
                    "fenced" if isinstance(exc, FencedError) else "outcome unknown",
                    proc.id, result.version, self._token,
                    ",".join(c.idempotency_key for c in result.port_calls))
            raise
        return response

    def request_status(self, client_id: str, request_id: str, *, tenant: str = ""
                       ) -> RequestStatus:
        """Did ``(tenant, client_id, request_id)`` commit, even after its receipt was evicted?

        Asks the backend which retained log entry names the request (each
        commit records its committing request) and, if none does, the
        request's receipt while it is retained. Runs at the serialization
        point, so no commit of this owner interleaves. Used by the SDK after an
        unknown outcome followed by ``conflict`` (see
        ``SvitClient.activate_until_committed``).

        Args:
            client_id, request_id: the idempotency key from the envelope.
            tenant: trusted receipt partition (the gateway's principal), as
                for :meth:`execute`.

        Returns:
            :class:`~svit_cluster.control.RequestStatus`. ``committed=False``
            is definitive only for versions ``>= retained_from_version`` (a
            stored ``conflict`` receipt is no proof: after eviction, a retry
            of a committed request stores one).

        Raises:
            UnavailableError: the backend failed (safe to retry; read-only).
            CorruptData: a stored entry or receipt is malformed.
            FencedError: the durable backend knows this owner was fenced out.
        """
        with self._lock:
            status = self._backend.find_request(tenant, client_id, request_id,
                                                head_version=self._process.version)
            if status.committed:
                return status
            stored = self._backend.get_receipt(tenant, client_id, request_id)
            if stored is None:
                return status
            # Only a committed receipt is evidence. A conflict or rejected
            # receipt proves nothing: the key may have committed, been evicted,
            # and then been stored again by a retry that met ``conflict``.
            outcome = decode_response(stored.response).outcome
            if isinstance(outcome, Committed):
                return RequestStatus(True, outcome.activation.version,
                                     status.retained_from_version)
            return status

    def _durable_commit(
        self, transition: Transition, receipt: Receipt | None, intents: Any,
        completion: Mapping[str, Any] | None = None,
    ) -> Change:
        """The one place that commits: the fenced backend write, then memory.

        ``completion``: a reasoning turn's end, published by the backend in the
        same step (:meth:`CommitBackend.commit`).
        """
        try:
            with tracing.span("svit.commit", attributes={
                    "svit.process_id": self._process.id, "svit.token": self._token,
                    "svit.version": transition.record.process_version_after}):
                self._backend.commit(transition, receipt, intents, completion=completion)
        except FencedError:
            raise
        except UnavailableError:
            # The entry may or may not have been written: serve nothing from
            # memory until the durable head has been re-read.
            self._stale = True
            raise
        except ConflictError as exc:
            # The durable head moved under us. Every higher token fails the
            # fence check first, so this is our own earlier commit whose reply
            # was lost; the caller re-synchronises and evaluates again.
            self._stale = True
            raise _HeadMoved(exc) from exc
        return self._process.commit(transition)

    # -- host operations (not part of svit-control@1) ---------------------------------

    def grant_ports(self) -> Change | None:
        """Replace ``/ports`` by this host's catalog (one ``ports.refresh`` commit, if it differs).

        Called once after every restore or create, before serving: a stale
        catalog from a snapshot or another host never stays (and never grants:
        dispatch uses the registry only).

        Returns:
            The change, or None when ``/ports`` already matched.

        Raises:
            FencedError, UnavailableError: as :meth:`execute`.
        """
        catalog = {} if self._ports is None else self._ports.catalog()
        with self._lock:
            transition = self._process.ports_transition(catalog)
            if transition is None:
                return None
            return self._durable_commit(transition, None, ())

    def grant_mounts(self, descriptors: Mapping[str, Any]) -> Change | None:
        """Replace ``/mounts`` by the operator's grants for this process (one
        ``mounts.refresh`` commit, if it differs).

        Args:
            descriptors: name -> :class:`~svit_cluster.mounts.MountDescriptor`.

        Returns:
            The change, or None when ``/mounts`` already matched.

        Raises:
            FencedError, UnavailableError: as :meth:`execute`.
        """
        with self._lock:
            transition = self._process.mounts_transition(dict(descriptors))
            if transition is None:
                return None
            return self._durable_commit(transition, None, ())

    def append_inbox(self, message: Any, *, dedup_key: str | None = None
                     ) -> tuple[bool, int, Change | None]:
        """Commit ``message`` to ``/inbox`` at the serialization point.

        Args:
            message: a plain value, validated against the process limits.
            dedup_key: when given and already delivered, nothing is committed.

        Returns:
            ``(appended, version, change)``; ``change`` is None for a duplicate.

        Raises:
            InvalidInput, LimitExceeded: the message is invalid or too big.
            FencedError, UnavailableError: as :meth:`execute`.
        """
        def step() -> tuple[bool, int, Change | None]:
            transition = prepare_inbox_append(self._process, message, dedup_key=dedup_key,
                                              stage=self.append_stage)
            if transition is None:
                return False, self._process.version, None
            change = self._durable_commit(transition, None, ())
            return True, self._process.version, change

        with tracing.span("svit.inbox", attributes={"svit.process_id": self._process.id}), \
                self._lock:
            return self._at_durable_head(step)

    def ack_inbox(self, expected_head_hash: str) -> Change:
        """Acknowledge the exact inbox head (``remove_front``) at the serialization point.

        Raises:
            ConflictError: (``inbox_conflict``) the head is not ``expected_head_hash``.
            FencedError, UnavailableError: as :meth:`execute`.
        """
        def step() -> Change:
            transition = prepare_inbox_ack(self._process, expected_head_hash)
            return self._durable_commit(transition, None, ())

        with self._lock:
            return self._at_durable_head(step)

    def complete_turn(
        self, expected_head_hash: str, *, stage: Callable[[WorkingCopy], None],
        completion: Callable[[Transition], Mapping[str, Any]],
    ) -> Change:
        """Acknowledge the inbox head and publish a turn's completion, in one commit.

        The reasoning loop's end of turn (``svit_cluster.reasoning``): the head
        is removed (``inbox.ack``), ``stage`` adds the host's writes (the
        ``/thread/session`` record), and the backend stores the ``completion``
        signal (``completion(transition)``: its payload, which names the
        version) atomically with the entry, so a completion exists if and only
        if its acknowledge committed. The backend must accept ``completion``
        (``emits_signals``).

        Unlike :meth:`ack_inbox`, a moved durable head is not retried: the turn
        was built on the head it saw, so the caller stops as fenced.

        Raises:
            ConflictError: (``inbox_conflict``) the head is not ``expected_head_hash``.
            FencedError: a newer owner holds the process, or the durable head moved.
            UnavailableError: as :meth:`execute`.
        """
        with self._lock:
            self._ensure_synced()
            transition = prepare_inbox_ack(self._process, expected_head_hash, stage)
            try:
                return self._durable_commit(transition, None, (), completion(transition))
            except _HeadMoved as exc:
                raise FencedError(f"durable head moved: {exc.cause.message}",
                                  **exc.cause.fields) from exc.cause

    def close_inbox(self) -> tuple[bool, int]:
        """Close ``/inbox`` for good (reference: a closed inbox refuses new messages).

        Items already committed stay and are still processed; every later
        :meth:`append_inbox` raises ``inbox_closed`` and commits nothing. The
        mark is process state (``/thread/inbox_closed``), so it survives
        failover, snapshot and restore.

        Returns:
            ``(closed_now, version)``; ``closed_now`` is False when it was
            already closed (nothing committed).

        Raises:
            FencedError, UnavailableError: as :meth:`execute`.
        """
        def step() -> tuple[bool, int]:
            transition = prepare_inbox_close(self._process)
            if transition is None:
                return False, self._process.version
            self._durable_commit(transition, None, ())
            return True, self._process.version

        with self._lock:
            return self._at_durable_head(step)

    def drop_inbox_head(self, *, reason: str, message_id: str | None = None,
                        head_hash: str | None = None) -> tuple[int, dict[str, Any]]:
        """Dead-letter the inbox head: move it to ``/thread/dead_letters`` in one fenced commit.

        The operator's way out of a head whose turn never succeeds (it blocks
        every later message). See :func:`svit_cluster.process._inbox.prepare_inbox_drop`
        for how the head is named and what the dead letter holds.

        Returns:
            ``(version, dead_letter)`` (plain JSON).

        Raises:
            InvalidInput: no message id or hash given, or a bad reason.
            ConflictError: (``inbox_conflict``) empty inbox or another head.
            FencedError, UnavailableError: as :meth:`execute`.
        """
        def step() -> tuple[int, dict[str, Any]]:
            transition, letter = prepare_inbox_drop(self._process, reason=reason,
                                                    message_id=message_id,
                                                    head_hash=head_hash)
            self._durable_commit(transition, None, ())
            return self._process.version, to_plain_json(letter)

        with self._lock:
            return self._at_durable_head(step)

    def commit_host(self, source: str, stage: Callable[[WorkingCopy], None]) -> Change:
        """Commit one host-built transition at the serialization point.

        ``stage`` gets a fresh working copy of the current (durable-head) state
        and stages its mutations (guest rules apply when it calls
        ``write``/``remove``); the result is sealed with ``source`` (e.g.
        ``reasoning.write``) and committed through the same fenced backend
        commit as every request. Used by the reasoning loop's tools and its
        ``/thread`` metadata.

        Raises:
            InvalidInput, LimitExceeded: ``stage`` refused the change (nothing
                committed).
            FencedError, UnavailableError: as :meth:`execute`.
        """
        def step() -> Change:
            wc = self._process.working_copy()
            stage(wc)
            transition = self._process.seal(wc, source)
            return self._durable_commit(transition, None, ())

        with self._lock:
            return self._at_durable_head(step)

    def _validate(self, request: ControlRequest) -> None:
        cmd = request.command
        validate_script_name(cmd.script)
        lim = self._process.limits
        node_from_value(
            cmd.input,
            max_depth=lim.max_value_depth,
            max_entries=lim.max_value_entries,
            max_text_bytes=lim.max_text_bytes,
        )

    def _response(self, request: ControlRequest, outcome: Any) -> ControlResponse:
        return ControlResponse(
            protocol="svit-control@1",
            client_id=request.client_id,
            request_id=request.request_id,
            process_id=self._process.id,
            replayed=False,
            outcome=outcome,
        )

    def _rejected(self, request: ControlRequest, code: str, message: str) -> ControlResponse:
        failure = InvalidInput(message)  # sanitizes and caps the message
        return self._response(
            request,
            Rejected(
                status="rejected",
                version=self._process.version,
                root_hash=self._process.root_hash,
                failure=Failure(code=str(code), message=failure.message),
            ),
        )

    @staticmethod
    def _receipt(
        tenant: str, request: ControlRequest, fingerprint: str, response: ControlResponse
    ) -> Receipt:
        return Receipt(
            tenant=tenant,
            client_id=request.client_id,
            request_id=request.request_id,
            fingerprint=fingerprint,
            # pydantic-core's encoder, as the answer's: a receipt is decoded, never hashed
            response=response.model_dump_json().encode(),
        )
