"""Pin the public surface of the store package and its test-only module."""

from __future__ import annotations

import svit_cluster.store as store
import svit_cluster.store.testing as store_testing


def test_store_exports() -> None:
    assert sorted(store.__all__) == [
        "ADD_SIGNAL", "ALLOW_UNVERIFIED_EVICTION_ENV", "AsyncRedisClient", "BackendFactory",
        "CLUSTER_ENV",
        "DEFAULT_PREFIX", "DEFAULT_SNAPSHOT_EVERY", "DEFAULT_TIMEOUT_S", "EVICTION_CHECK_ENV",
        "Head", "LAST_COMMIT_SCAN", "ListedProcess", "LogEntry", "MAX_LIST_LIMIT", "ProcessKeys",
        "ProcessListing",
        "QueuedPage", "RedisBackend", "RedisClient", "RedisFences", "RestoreStats", "StoreConfig",
        "StoredSnapshot", "allow_unverified_from_env", "async_connect", "cluster_from_env",
        "connect", "failure_reason", "last_commit_times", "list_processes", "list_queued",
        "load_backend_factory",
        "newest_entries",
        "redis_boundary", "require_noeviction", "stale_writes_key",
        "verify_eviction_policy",
    ]
    assert store_testing.__all__ == [
        "UNFENCED_BACKEND_FACTORY", "disable_fencing_for_negative_control", "unfenced_backend",
    ]


def test_fencing_switch_is_not_reachable_from_the_package() -> None:
    assert not hasattr(store, "disable_fencing_for_negative_control")
    assert "testing" not in store.__all__
