"""Ports: host-owned, typed integrations that Svit Lisp calls with ``port-call``.

See :mod:`svit_cluster.ports._registry` (registry, catalog, call records) and
:mod:`svit_cluster.ports._builtin` (``http``, ``llm``, ``spawn``); the
reference's semantics are in its docs/ports.md, ours in docs/conformance.md
("Ports").
"""

from svit_cluster.ports._builtin import (
    HttpPort,
    LlmPort,
    LocalSpawner,
    Spawner,
    SpawnPort,
    build_registry,
    child_id,
)
from svit_cluster.ports._config import (
    HttpPortConfig,
    LlmPortConfig,
    PortsConfig,
    SpawnPortConfig,
)
from svit_cluster.ports._registry import (
    CONTRACT_VERSION,
    DESCRIPTOR_FIELDS,
    Port,
    PortCall,
    PortCallRecord,
    PortContext,
    PortRegistry,
    idempotency_key,
)

__all__ = [
    "CONTRACT_VERSION",
    "DESCRIPTOR_FIELDS",
    "HttpPort",
    "HttpPortConfig",
    "LlmPort",
    "LlmPortConfig",
    "LocalSpawner",
    "Port",
    "PortCall",
    "PortCallRecord",
    "PortContext",
    "PortRegistry",
    "PortsConfig",
    "SpawnPort",
    "SpawnPortConfig",
    "Spawner",
    "build_registry",
    "child_id",
    "idempotency_key",
]
