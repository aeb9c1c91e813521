"""The :class:`Ownership` record a host holds (split out of ``_owner`` so that
``_owner`` (which starts watches) and ``_watch`` (which watches one record) do not
import each other)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Ownership"]


@dataclass(frozen=True, slots=True)
class Ownership:
    """This host's ownership of one process, with its fencing token.

    Valid while the record exists with this create ``revision``; see
    :class:`~svit_cluster.ownership.OwnershipWatch` and the host lease's state.
    """

    process_id: str
    token: int
    host: str
    address: str
    lease_id: int
    key: bytes
    revision: int
