"""Typed shapes of the agent's activation boundary.

The agent answers the gateway's router with an :class:`Activated` (inside an
:class:`~svit_cluster.cluster._results.Outcome`) and keeps a
:class:`ServedActor` per process it serves, so strict mypy sees the fields on
both sides of the Ray boundary.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from svit_cluster.cluster._results import Started
from svit_cluster.ownership import Owners, Ownership

__all__ = ["Activated", "ServeStatus", "ServedActor"]


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
