"""Default values shared by the settings and the data path, without pydantic-settings.

:mod:`svit_cluster.settings` re-exports them; modules that every process actor
loads (the store) import them from here, so a Ray worker serving one process
does not load pydantic-settings and dotenv for a constant (each active
process is its own Ray worker, which must stay light).
"""

from __future__ import annotations

__all__ = [
    "DEFAULT_EVICTION_CHECK_S",
    "DEFAULT_MAX_EVENTS",
    "DEFAULT_SIGNAL_RETENTION",
    "DEFAULT_SNAPSHOT_EVERY",
    "DEFAULT_WAIT_REPLICAS",
    "DEFAULT_WAIT_TIMEOUT_MS",
]

#: Commits between snapshots (``SVIT_SNAPSHOT_EVERY``); re-exported by ``settings``
#: and ``store``.
DEFAULT_SNAPSHOT_EVERY = 100

#: Replicas a write script waits for (``SVIT_REDIS_WAIT_REPLICAS``; 0: no ``WAIT``),
#: the default of ``StoreSettings.redis_wait_replicas`` and ``StoreConfig.wait_replicas``.
DEFAULT_WAIT_REPLICAS = 0

#: That ``WAIT``'s deadline in milliseconds (``SVIT_REDIS_WAIT_TIMEOUT_MS``), the
#: default of ``StoreSettings.redis_wait_timeout_ms`` and ``StoreConfig.wait_timeout_ms``.
DEFAULT_WAIT_TIMEOUT_MS = 1000

#: Seconds a node's ``maxmemory-policy`` verdict stays valid before the next write
#: to it reads the policy again (``SVIT_REDIS_EVICTION_CHECK_S``), the default of
#: ``StoreSettings.redis_eviction_check_s`` and of ``store.connect``'s
#: ``eviction_check_s``.
DEFAULT_EVICTION_CHECK_S = 2.0

#: Observer signals kept per process (``XADD MAXLEN ~``; ``SVIT_SIGNAL_RETENTION``),
#: re-exported by ``events``.
DEFAULT_SIGNAL_RETENTION = 10_000

#: Canonical reasoning events kept per session of a process (``XADD MAXLEN ~``;
#: ``SVIT_MAX_EVENTS``), re-exported by ``events``.
DEFAULT_MAX_EVENTS = 100_000
