"""Pin the public surface of the ownership package."""

from __future__ import annotations

import svit_cluster.ownership as ownership


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
