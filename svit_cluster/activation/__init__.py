"""Activation: run one Lisp script against a process as one transaction.

Sits above :mod:`svit_cluster.process` (the versioned state it seals) and
:mod:`svit_cluster.lisp` (the interpreter it runs), and below
:mod:`svit_cluster.ports` (which implements the :class:`PortHost` contract
defined here) and :mod:`svit_cluster.control` (which commits the result through
the fenced store). See ``docs/architecture.md``, "A Svit process".

* :func:`prepare_activation` -- run and seal without committing;
  :func:`activate` -- prepare and commit in memory; :class:`ActivationResult`;
  :func:`wall_clock_ms`, the default clock that stamps timers.
* The port-call contract: :class:`PortContext`, :func:`idempotency_key`,
  :class:`PortHost`.
"""

from svit_cluster.activation._activation import (
    ActivationResult,
    activate,
    prepare_activation,
    wall_clock_ms,
)
from svit_cluster.activation._ports import PortContext, PortHost, idempotency_key

__all__ = [
    "ActivationResult",
    "PortContext",
    "PortHost",
    "activate",
    "idempotency_key",
    "prepare_activation",
    "wall_clock_ms",
]
