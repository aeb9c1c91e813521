"""The fenced, durable commit log of Svit processes on Redis (``docs/architecture.md``).

Public names, by importance:

* :class:`RedisBackend` -- one process's log for one owner token: ``claim``,
  ``create``, ``commit`` (the controller's ``CommitBackend``), ``get_receipt``,
  ``put_receipt``, ``find_request``, ``snapshot``, ``restore``, ``head``, ``entries``.
* :class:`StoreConfig` -- key prefix, receipt bound, snapshot cadence, trim margin.
* :func:`connect` -- a redis-py client with client-side retries disabled,
  whose every connection refuses a Redis that may evict keys;
  :func:`require_noeviction` (before every write) reads the policy again once
  its verdict is older than :data:`EVICTION_CHECK_ENV` seconds (default 2);
  :func:`verify_eviction_policy` checks it eagerly at start-up
  (:data:`ALLOW_UNVERIFIED_EVICTION_ENV` is the override where ``CONFIG`` is disabled).
* :class:`RedisFences` -- claim or read any process's fence (for ownership
  claims) and scan every fence (for ``svit-cluster etcd-restored``).
* :class:`ProcessKeys` -- the Redis keys of one process (hash tag ``{<process>}``).
* :func:`list_processes` -- one bounded page of the stored processes (``SCAN``
  over head keys; :class:`ProcessListing` of :class:`ListedProcess`);
  :func:`newest_entries` -- a process's newest retained log entries (observers);
  :func:`list_queued` -- one bounded page of the processes whose committed
  inbox is non-empty (``SCAN`` over ``queued`` keys; :class:`QueuedPage`).
* :class:`Head`, :class:`LogEntry`, :class:`StoredSnapshot`, :class:`RestoreStats`
  -- typed views of stored data.

* :class:`BackendFactory`, :func:`load_backend_factory` -- how a process actor
  builds its backend (``ClusterConfig.backend_factory``: an import path; the empty
  default is the fenced :class:`RedisBackend`).

The test-only fencing-off switch (and its unfenced backend factory) lives in
:mod:`svit_cluster.store.testing`.
Durability under other Redis settings: see ``README.md`` in this package.
"""

# First: redis-py loads through _redispy (without OpenTelemetry's metrics SDK)
# before any module below imports it.
from svit_cluster.store import _redispy  # noqa: F401
from svit_cluster.store._factory import BackendFactory, load_backend_factory
from svit_cluster.store._fences import RedisFences
from svit_cluster.store._keys import DEFAULT_PREFIX, ProcessKeys
from svit_cluster.store._listing import (
    LAST_COMMIT_SCAN,
    MAX_LIST_LIMIT,
    ListedProcess,
    ProcessListing,
    QueuedPage,
    last_commit_times,
    list_processes,
    list_queued,
    newest_entries,
)
from svit_cluster.store._log import RedisBackend
from svit_cluster.store._log_config import DEFAULT_SNAPSHOT_EVERY, StoreConfig
from svit_cluster.store._records import Head, LogEntry, StoredSnapshot
from svit_cluster.store._redis import ALLOW_UNVERIFIED_ENV as ALLOW_UNVERIFIED_EVICTION_ENV
from svit_cluster.store._redis import (
    CLUSTER_ENV,
    DEFAULT_TIMEOUT_S,
    EVICTION_CHECK_ENV,
    AsyncRedisClient,
    RedisClient,
    allow_unverified_from_env,
    async_connect,
    cluster_from_env,
    connect,
    failure_reason,
    redis_boundary,
    require_noeviction,
    verify_eviction_policy,
)
from svit_cluster.store._scripts import ADD_SIGNAL
from svit_cluster.store._snapshots import RestoreStats
from svit_cluster.store._stale_writes import stale_writes_key

__all__ = [
    "ADD_SIGNAL",
    "ALLOW_UNVERIFIED_EVICTION_ENV",
    "CLUSTER_ENV",
    "DEFAULT_PREFIX",
    "DEFAULT_SNAPSHOT_EVERY",
    "DEFAULT_TIMEOUT_S",
    "EVICTION_CHECK_ENV",
    "LAST_COMMIT_SCAN",
    "MAX_LIST_LIMIT",
    "AsyncRedisClient",
    "BackendFactory",
    "Head",
    "ListedProcess",
    "LogEntry",
    "ProcessKeys",
    "ProcessListing",
    "QueuedPage",
    "RedisBackend",
    "RedisClient",
    "RedisFences",
    "RestoreStats",
    "StoreConfig",
    "StoredSnapshot",
    "allow_unverified_from_env",
    "async_connect",
    "cluster_from_env",
    "connect",
    "failure_reason",
    "last_commit_times",
    "list_processes",
    "list_queued",
    "load_backend_factory",
    "newest_entries",
    "redis_boundary",
    "require_noeviction",
    "stale_writes_key",
    "verify_eviction_policy",
]
