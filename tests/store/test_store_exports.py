"""Pin the public surface of the store, ownership and local packages."""

from __future__ import annotations

import svit_cluster.local as local
import svit_cluster.ownership as ownership
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


def test_ownership_exports() -> None:
    assert sorted(ownership.__all__) == [
        "DEFAULT_REQUEST_TIMEOUT_S", "DEFAULT_TTL_S", "EPOCH_SHIFT", "Fences", "HostLease",
        "KeptLease", "KeptLeaseCollector",
        "LeaseMetrics", "LeaseState", "MAX_EPOCH", "MAX_REVISION", "OwnerRecord", "Owners",
        "Ownership", "RestoreReport", "cluster_prefix", "epoch_key", "etcd_call", "fencing_token",
        "host_key", "hosts_prefix", "judge_state", "open_client", "owner_key", "owners_prefix",
        "parse_endpoints",
        "parse_key", "read_epoch", "record_token", "recover_after_restore", "revoke_lease_id",
        "split_token",
    ]
    assert [s.value for s in ownership.LeaseState] == ["held", "suspended", "lost"]


def test_local_exports_include_the_server_launchers() -> None:
    assert {"EtcdServer", "RedisServer", "ServerError", "free_port"} <= set(local.__all__)


def test_fencing_switch_is_not_reachable_from_the_package() -> None:
    assert not hasattr(store, "disable_fencing_for_negative_control")
    assert "testing" not in store.__all__
