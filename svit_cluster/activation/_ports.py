"""What an activation hands a port, and what it needs of the host's ports.

The activation defines the port-call contract; :mod:`svit_cluster.ports`
implements it (its ``PortRegistry`` is a :class:`PortHost`) and re-exports
:class:`PortContext` and :func:`idempotency_key`. Reference: docs/ports.md.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from svit_cluster.values import Value

__all__ = ["PortContext", "PortHost", "idempotency_key"]


def idempotency_key(process_id: str, version: int, call_index: int) -> str:
    """``svit-<sha256 hex>`` of ``(process id, version being computed, call index)``.

    A retried activation of the same version makes the same calls in the same
    order (guest code is deterministic), so each call carries the same key and
    a well-behaved server does not repeat the effect.
    """
    raw = f"{process_id}\n{version}\n{call_index}".encode()
    return "svit-" + hashlib.sha256(raw).hexdigest()


@dataclass(frozen=True, slots=True)
class PortContext:
    """What a port implementation may know about the calling activation.

    Attributes:
        process_id: the calling process.
        version: the version the activation is computing (committed + 1).
        call_index: 0-based index of this call within the activation.
        token: the owner's fencing token (0 outside the cluster).
        committed: the committed process (read only; ``spawn`` forks it).
        idempotency_key: :func:`idempotency_key` of the three above.
    """

    process_id: str
    version: int
    call_index: int
    token: int
    committed: Any
    idempotency_key: str


class PortHost(Protocol):
    """The ports one host grants, as an activation uses them (``ports.PortRegistry``)."""

    @property
    def fuel_per_call(self) -> int:
        """Fuel charged to the guest per port call."""
        ...

    @property
    def max_calls(self) -> int:
        """At most this many port calls per activation."""
        ...

    def grants(self, name: str) -> bool:
        """Whether a port ``name`` is granted by this host."""
        ...

    def call(self, name: str, input: Value, ctx: PortContext, *,
             record: Callable[[Any], None] | None = None) -> Value:
        """Run port ``name`` once; the call record goes to ``record``.

        Raises:
            ScriptFailed: no such port, or the port failed.
            LimitExceeded: the input or the result above its byte bound.
        """
        ...
