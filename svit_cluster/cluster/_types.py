"""Typed shapes of the agent's activation boundary.

A placement that creates the process carries a :class:`CreateSpec` from the
router (or the spawner) through the agent to the process actor; the agent
answers the gateway's router with an :class:`Activated` (inside an
:class:`~svit_cluster.cluster._results.Outcome`) and keeps a
:class:`ServedActor` per process it serves, so strict mypy sees the fields on
both sides of the Ray boundary.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from svit_cluster.cluster._results import Started
from svit_cluster.ownership import Owners, Ownership
from svit_cluster.values import Script, Value

__all__ = ["Activated", "CreateSpec", "ForkHistory", "ServeStatus", "ServedActor"]


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


class ServeStatus(StrEnum):
    """How an agent answered ``activate``."""

    #: this host serves the process (it claimed the ownership record and the fence)
    SERVING = "serving"
    #: another host owns it (the record names that host and its actor)
    OWNED = "owned"


@dataclass(frozen=True, slots=True)
class Activated:
    """An agent's successful answer to ``activate`` (the value of its
    :class:`~svit_cluster.cluster._results.Outcome`; errors travel in that outcome).

    Attributes:
        status: :class:`ServeStatus`.
        host: the serving host (None when an ``owned`` record did not say).
        token: the owner's fencing token (None as for ``host``).
        actor: the Ray name of the process actor (None as for ``host``).
        started: the actor's :class:`~svit_cluster.cluster._results.Started`
            (version, root hash, restore figures, direct endpoint) when this
            call started it; None when it was served already, or ``owned``.
    """

    status: ServeStatus
    host: str | None
    token: int | None
    actor: str | None
    started: Started | None = None


@dataclass(frozen=True, slots=True)
class ServedActor:
    """One process this host serves: its token, actor handle and ownership.

    Attributes:
        token: the fencing token the actor serves under.
        handle: the Ray actor handle.
        owners: the ``Owners`` that acquired the record (to release it).
        ownership: the ``Ownership`` record held.
    """

    token: int
    handle: Any
    owners: Owners
    ownership: Ownership
