"""Typed shapes of the agent's activation boundary.

Ray carries plain dicts between the gateway's router and a host agent (so a
router and an agent of neighbouring versions still understand each other during
a rolling upgrade); these types are what each side builds and checks on its own
side of that boundary, so strict mypy sees the fields and a malformed answer is
refused in one place.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from svit_cluster.errors import InternalError
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
    """An agent's successful answer to ``activate`` (errors travel as ``{"error"}``).

    Attributes:
        status: :class:`ServeStatus`.
        host: the serving host (None when an ``owned`` record did not say).
        token: the owner's fencing token (None as for ``host``).
        actor: the Ray name of the process actor (None as for ``host``).
        extra: any further fields the actor's start reported (``version``,
            ``root_hash``, ``restore``).
    """

    status: ServeStatus
    host: str | None
    token: int | None
    actor: str | None
    extra: Mapping[str, Any] | None = None

    def to_answer(self) -> dict[str, Any]:
        """The dict sent over Ray."""
        return {**(self.extra or {}), "status": self.status.value, "host": self.host,
                "token": self.token, "actor": self.actor}

    @classmethod
    def from_answer(cls, answer: Mapping[str, Any]) -> Activated:
        """Check and type an answer received over Ray.

        Raises:
            InternalError: (``internal``) an unknown status or a field of the
                wrong type: a bug on one side of the boundary, never retried.
        """
        try:
            status = ServeStatus(answer["status"])
            host, token, actor = answer.get("host"), answer.get("token"), answer.get("actor")
            if host is not None and type(host) is not str:
                raise TypeError("host")
            if token is not None and type(token) is not int:
                raise TypeError("token")
            if actor is not None and type(actor) is not str:
                raise TypeError("actor")
        except (KeyError, ValueError, TypeError) as exc:
            raise InternalError(f"malformed activation answer ({exc!r})") from None
        extra = {k: v for k, v in answer.items() if k not in ("status", "host", "token",
                                                              "actor")}
        return cls(status, host, token, actor, extra or None)


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
