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

from svit_cluster.values import Value, canonical_json, encode_value

__all__ = ["PortContext", "PortHost", "idempotency_key"]


def idempotency_key(process_id: str, version: int, call_index: int, port: str,
                    input: Value) -> str:
    """``svit-<sha256 hex>`` of one port call: where it is made and what it asks.

    The digest covers the canonical JSON of ``[process id, version being
    computed, call index, port name, tagged input]`` (the input in its tagged
    wire form, :func:`~svit_cluster.values.encode_value`, so ``1`` and ``1.0``
    differ; keys sorted, :func:`~svit_cluster.values.canonical_json`).

    What the key proves: a retried activation of the same request (same
    version, deterministic guest code, same input) makes the same calls in the
    same order with the same inputs, so each call carries the same key and a
    deduplicating server does not repeat the effect. A *different* request that
    computes the same version after an attempt was fenced or its outcome left
    unknown gets a different key as soon as its call's input differs (the
    practice of e.g. Stripe: a key stands for one request's content), so it is
    never answered with the other request's stored answer.

    What it does not prove: two different requests that make byte-identical
    calls (same port, same input) at the same process, version and call index
    still share a key, and a deduplicating server answers the second with the
    first one's answer. A guest that needs them told apart puts something of
    its own request (e.g. a request id) into the input.

    Raises:
        InvalidInput: (``invalid_value``) ``input`` is not a storable value.
        LimitExceeded: ``input`` nests deeper than the values walk bound.
    """
    raw = canonical_json([process_id, version, call_index, port, encode_value(input)])
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
        idempotency_key: :func:`idempotency_key` of the three above plus the
            port name and the call's input.
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
