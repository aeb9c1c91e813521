"""Everything in one Python process: a router and signals with no durability.

For tests, benchmarks and examples that need the gateway's contract without
Ray, etcd or Redis. No production path imports this package (import-linter
contract ``no-inprocess``).

Public names: :class:`InProcessRouter` (the gateway's ``Router`` contract,
one controller per process), :class:`MemorySignals` (signals and event logs
of many processes; a ``SignalSource``), :class:`MemoryEventLog` (one
process's event log, for its reasoning loop), :class:`SignalingMemoryBackend`
(a commit backend that appends ``committed``/``completion`` signals).
"""

from svit_cluster.inprocess._router import InProcessRouter
from svit_cluster.inprocess._signals import MemoryEventLog, MemorySignals, SignalingMemoryBackend

__all__ = ["InProcessRouter", "MemoryEventLog", "MemorySignals", "SignalingMemoryBackend"]
