"""Typed answers of process-actor and host-agent calls across the Ray boundary.

Every request-path remote method returns an :class:`Outcome`: its value (one
of the small frozen types below, or a type of :mod:`svit_cluster.control`) or
a project error. An expected failure is returned, never raised: Ray logs an
"Unhandled error" for a raised one whose reference nobody awaits, and raising
costs more than returning on the hot path. The error travels as its wire form
(``SvitError.to_wire``) and is rebuilt on the caller's side
(``SvitError.from_wire``), so a caller gets the class registered for its code
whatever module defined the raised subclass, with the same JSON-safe fields the
gateway answers with.

The direct transport's frames (:mod:`svit_cluster.cluster._direct`) carry a
control answer as JSON meta plus the response bytes; :func:`control_frame` and
:func:`control_from_frame` convert between that frame and an :class:`Outcome`
without copying the bytes.

Nothing untyped crosses: the constructors and public methods of the Ray actors
(``ProcessActor``, ``HostAgent``) take and answer only declared shapes (frozen
dataclasses such as this module's and ``ClusterConfig``, the TypedDicts of the
status answers, ``Value`` and ``JsonValue``, scalars), never ``Any`` or a bare
container (``tests/cluster/test_boundary_types.py`` walks them); mypy checks
this module without explicit ``Any``.

These types are not versioned: a gateway and the hosts it calls run the same
release (a mixed-version cluster answers ``internal`` where the two sides'
answers differ), so an upgrade replaces the gateways and the hosts together.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Generic, TypedDict, TypeVar

from svit_cluster.cluster._direct import DirectEndpoint
from svit_cluster.control import ControlAnswer
from svit_cluster.errors import InternalError, SvitError
from svit_cluster.store import RestoreStats
from svit_cluster.values import JsonValue, Script, Value

__all__ = [
    "STALE_OWNER_CODES",
    "ActorInfo",
    "ActorUsage",
    "AgentStatus",
    "Appended",
    "CreateSpec",
    "Deleted",
    "Dropped",
    "ForkHistory",
    "HostResidency",
    "LoopInfo",
    "Outcome",
    "Read",
    "Residency",
    "ShutDown",
    "Snapshot",
    "Started",
    "Unbound",
    "control_frame",
    "control_from_frame",
]

T = TypeVar("T")
U = TypeVar("U")

#: Error codes with which an actor answers when it no longer serves the binding
#: the caller routed to (passivated, fenced out, its host's lease lost): the
#: caller may place the process again and resend once.
STALE_OWNER_CODES = frozenset({"unavailable", "fenced"})


@dataclass(frozen=True, slots=True)
class Outcome(Generic[T]):
    """A remote call's answer: a value, or a project error (never both).

    Build one with :meth:`ok` or :meth:`fail`.

    Attributes:
        value: the answer when the call succeeded, else None.
        _wire: the error's wire form ``{code, message, fields}``
            (``SvitError.to_wire``: JSON, its fields the error's JSON-safe
            ones) when it failed, else None (read it through :attr:`error` /
            :attr:`code`).
    """

    value: T | None = None
    _wire: dict[str, JsonValue] | None = field(default=None, repr=False)

    # Pickled as a plain tuple: every request-path answer crosses Ray this way,
    # and the generated slots-dataclass state functions cost several times more.
    def __getstate__(self) -> tuple[T | None, dict[str, JsonValue] | None]:
        return (self.value, self._wire)

    def __setstate__(self, state: tuple[T | None, dict[str, JsonValue] | None]) -> None:
        object.__setattr__(self, "value", state[0])
        object.__setattr__(self, "_wire", state[1])

    @classmethod
    def ok(cls, value: T) -> Outcome[T]:
        """A successful answer carrying ``value``."""
        return cls(value)

    @classmethod
    def fail(cls, exc: SvitError) -> Outcome[T]:
        """A failed answer carrying ``exc`` (as ``exc.to_wire()``)."""
        return cls(None, exc.to_wire())

    @property
    def failed(self) -> bool:
        """True iff the answer carries an error."""
        return self._wire is not None

    @property
    def error(self) -> SvitError | None:
        """The carried error, rebuilt as its registered class (a new instance
        each time), or None."""
        return None if self._wire is None else SvitError.from_wire(self._wire)

    @property
    def code(self) -> str | None:
        """The carried error's code (``internal`` when it names none), or None."""
        if self._wire is None:
            return None
        code = self._wire.get("code")
        return str(code) if code else "internal"

    @property
    def stale_owner(self) -> bool:
        """True iff the actor no longer serves the binding the caller routed to
        (code in :data:`STALE_OWNER_CODES`): place again, resend once."""
        return self.code in STALE_OWNER_CODES

    @property
    def route_moved(self) -> bool:
        """True iff the actor refused before running anything because the caller's
        route names another binding (``fields["route_moved"]``): resend to the
        current owner."""
        if self._wire is None:
            return False
        fields = self._wire.get("fields")
        return isinstance(fields, Mapping) and bool(fields.get("route_moved"))

    def failure(self) -> Outcome[U]:
        """This answer's error in an outcome of any value type (for a failed
        answer passed on as another call's answer)."""
        return Outcome(None, self._wire)

    def unwrap(self) -> T:
        """The value.

        Raises:
            SvitError: the carried error (its registered class, with its fields).
            InternalError: (``internal``) neither a value nor an error: a bug on
                the answering side.
        """
        if self._wire is not None:
            raise SvitError.from_wire(self._wire)
        if self.value is None:
            raise InternalError("a remote call answered neither a value nor an error")
        return self.value


@dataclass(frozen=True, slots=True)
class ForkHistory:
    """The parent's event prefix a history fork copies into the child's session
    (``events.fork_events``) before the child exists in the store.

    Attributes:
        parent: the parent's process id.
        upto_seq: the sequence number of the last event of the parent's
            acknowledged prefix (``ProcessActor.fork_snapshot``), inclusive.
    """

    parent: str
    upto_seq: int


@dataclass(frozen=True, slots=True)
class CreateSpec:
    """What an activation creates: the process's first state, sent by the router
    (``RayRouter.create``: ``memory`` and ``scripts``; ``RayRouter.fork``:
    ``snapshot``, with ``history`` for a history fork) or by the spawner
    (``RaySpawner.spawn``: ``snapshot``) through ``HostAgent.activate`` to the
    process actor's ``start``. An activation without one restores the
    process from the store.

    Either ``snapshot`` is set (a fork: the child's state as
    ``Process.snapshot`` bytes, which name the child's id; ``memory`` and
    ``scripts`` stay empty) or it is None (a new process at version 0 from
    ``memory`` and ``scripts``); ``history`` only with a ``snapshot``.

    Attributes:
        memory: the new process's ``/memory`` (None: ``Process.create``'s default).
        scripts: the new process's scripts by name.
        snapshot: a fork's child state, else None.
        history: the parent's event prefix to copy first (history fork only).

    Raises:
        ValueError: ``history`` without ``snapshot``, or ``snapshot`` with
            ``memory`` or ``scripts``.
    """

    memory: Value = None
    scripts: Mapping[str, Script] = field(default_factory=dict)
    snapshot: bytes | None = None
    history: ForkHistory | None = None

    def __post_init__(self) -> None:
        if self.snapshot is None and self.history is not None:
            raise ValueError("a create's history needs its fork snapshot")
        if self.snapshot is not None and (self.memory is not None or self.scripts):
            raise ValueError("a fork's create carries its snapshot only")


@dataclass(frozen=True, slots=True)
class Started:
    """A process actor's successful ``start`` (or ``bind_start_serve``).

    Attributes:
        version: the process's version once restored or created.
        root_hash: its state's root hash (hex).
        restore: what the restore read (snapshot version and size, tail
            entries replayed, ``duration_s`` in seconds); None after a create.
        direct: the actor's direct-transport endpoint when it listens
            (``bind_start_serve`` only), else None.
        pid: the actor's worker process id (``bind_start_serve`` only), else None.
    """

    version: int
    root_hash: str
    restore: RestoreStats | None = None
    direct: DirectEndpoint | None = None
    pid: int | None = None


@dataclass(frozen=True, slots=True)
class Unbound:
    """A process actor's answer to ``unbind``.

    Attributes:
        unbound: True iff the binding ended (the actor is a spare again).
        busy: the binding is in use (a request in flight or a turn running).
        token: the actor's current token when it was not bound to the one named.
    """

    unbound: bool
    busy: bool = False
    token: int | None = None


@dataclass(frozen=True, slots=True)
class ActorUsage:
    """What a process actor's ``residency`` tells its agent's least-recently-used
    choice, without waking anything.

    Attributes:
        token: the binding's token (0 for a spare).
        process_id: the bound process ("" for a spare).
        idle_s: seconds since the last request ended or a reasoning turn ran
            (0.0 while a turn runs).
        inflight: requests running now.
        busy: a reasoning turn runs now.
        pid: the worker's OS process id.
        bindings: bindings this worker has served.
    """

    token: int
    process_id: str
    idle_s: float
    inflight: int
    busy: bool
    pid: int
    bindings: int


@dataclass(frozen=True, slots=True)
class Appended:
    """An inbox append: ``appended`` False for a deduplicated message;
    ``version`` the process's version after it."""

    appended: bool
    version: int

    def to_json(self) -> dict[str, JsonValue]:
        """``{"appended", "version"}`` (the gateway's answer)."""
        return {"appended": self.appended, "version": self.version}


@dataclass(frozen=True, slots=True)
class Dropped:
    """An inbox head dead-lettered: ``dropped`` the dead letter as plain JSON
    ``{inbox_hash, message_id, message, reason, version}``
    (``ProcessController.drop_inbox_head``), ``version`` the version after it."""

    dropped: dict[str, JsonValue]
    version: int

    def to_json(self) -> dict[str, JsonValue]:
        """``{"dropped", "version"}`` (the gateway's answer)."""
        return {"dropped": self.dropped, "version": self.version}


@dataclass(frozen=True, slots=True)
class Read:
    """One observation of a state path: its ``value`` at ``version``."""

    value: Value
    version: int


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A process snapshot (``Process.snapshot`` bytes); ``upto_seq``: for a
    history fork, the last event of the acknowledged prefix, else None."""

    snapshot: bytes
    upto_seq: int | None = None


@dataclass(frozen=True, slots=True)
class Residency:
    """A process's idle timeout once set: ``passivate_after_s`` seconds in
    effect; ``default`` True when that is the cluster's setting."""

    passivate_after_s: float
    default: bool


@dataclass(frozen=True, slots=True)
class Deleted:
    """A fenced store delete: ``version`` the head version deleted (None when
    none was stored), ``removed_keys`` the Redis keys removed, ``host`` and
    ``token`` the owner that deleted."""

    version: int | None
    removed_keys: int
    host: str
    token: int


@dataclass(frozen=True, slots=True)
class ShutDown:
    """A host agent's ``shutdown``: ``released`` processes it released;
    ``revoked`` False when etcd could not be reached to revoke the host lease
    (it then expires after its TTL)."""

    released: int
    revoked: bool


class HostResidency(TypedDict):
    """A host agent's residency figures (``HostAgent.residency``; no actor is asked).

    ``max_active``, ``max_actors_pss_mib`` (MiB), ``max_starting`` and
    ``budget_basis``: the budget; ``starting``: workers starting now;
    ``pss_mib``: the actors' summed PSS at the last reading (MiB), ``pss_age_s``
    its age (None before the first); ``lru_idle_s``: idle seconds of the least
    recently used served process (None when none); counters ``evictions``,
    ``worker_starts``, ``worker_reuses``, ``host_full`` (activations answered
    full), ``dropped_at_lease_loss`` (workers stopped instead of kept when a
    lease was lost); ``keeper_pid``: the lease keeper's process id.
    """

    max_active: int
    max_actors_pss_mib: float
    max_starting: int
    budget_basis: str
    starting: int
    pss_mib: float
    pss_age_s: float | None
    lru_idle_s: float | None
    evictions: int
    worker_starts: int
    worker_reuses: int
    host_full: int
    dropped_at_lease_loss: int
    keeper_pid: int | None


class AgentStatus(HostResidency):
    """A host agent's ``status``: its residency figures and its lease.

    Lags and round trips in seconds (None without a lease); ``lost_leases``:
    why each earlier lease was lost, the last 10; ``unhealthy``: why the host
    cannot serve (None: healthy); ``lease_state``: ``held``, ``suspended`` or
    ``lost`` (None without a lease); ``actors``: processes served, named in
    ``processes``; ``spares``: warm spares now, ``spare_target`` the spares it
    keeps (``svit_cluster.cluster._headroom``); ``niceness``: the agent
    worker's scheduling niceness.
    """

    keepalive_lag_s: float | None
    max_keepalive_lag_s: float | None
    max_keepalive_rtt_s: float | None
    lost_leases: list[str]
    unhealthy: str | None
    inflight_activations: int
    shed_activations: int
    host: str
    lease_state: str | None
    lease_id: int | None
    incarnation: int
    actors: int
    processes: list[str]
    activations: int
    spares: int
    spare_target: int
    niceness: int


class LoopInfo(TypedDict):
    """A process actor's reasoning loop: ``state``, turns completed and failed."""

    state: str
    turns_completed: int
    turns_failed: int


class ActorInfo(TypedDict):
    """A process actor's ``info``: its binding (``process_id``, ``host``,
    ``token``; ``closed``: why it left, None while serving), the process
    ``version`` (None before a start), ``idle_s`` (seconds), its reasoning
    ``loop`` (None before ``serve``) and ``niceness``."""

    process_id: str
    host: str
    token: int
    closed: str | None
    version: int | None
    niceness: int
    idle_s: float
    loop: LoopInfo | None


def control_frame(outcome: Outcome[ControlAnswer]) -> tuple[dict[str, JsonValue], bytes]:
    """A control outcome as a direct-transport answer frame: ``(meta, payload)``,
    meta ``{"status", "code", "token", "host"}`` and payload the response bytes
    (not copied), or meta ``{"error": wire}`` and an empty payload."""
    if outcome._wire is not None:
        return {"error": outcome._wire}, b""
    answer = outcome.unwrap()
    return ({"status": answer.status, "code": answer.code, "token": answer.token,
             "host": answer.host}, answer.body)


def control_from_frame(meta: dict[str, object], payload: bytes) -> Outcome[ControlAnswer]:
    """The inverse of :func:`control_frame` (the gateway's side; ``payload``
    is not copied). An ``error`` that is not a wire map becomes ``internal``.

    Raises:
        InvalidInput: a frame without ``status`` whose payload does not decode.
    """
    err = meta.get("error")
    if err is not None:
        wire = err if isinstance(err, dict) else {"code": "internal", "message": str(err)}
        return Outcome(None, wire)
    meta["response"] = payload
    return Outcome.ok(ControlAnswer.from_result(meta))
