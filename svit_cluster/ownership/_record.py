"""The :class:`Ownership` record a host holds (see :mod:`svit_cluster.ownership._owner`)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Ownership"]


@dataclass(frozen=True, slots=True)
class Ownership:
    """This host's ownership of one process, with its fencing token.

    Valid while the record exists with this create ``revision`` and the host
    lease is held; the host self-fences on its lease state
    (``ProcessActor._guard``), the Redis fence checks ``token`` on every commit.
    """

    process_id: str
    token: int
    host: str
    address: str
    lease_id: int
    key: bytes
    revision: int
