"""One real local cluster (etcd, Redis, Ray head + 3 hosts, gateway) per test session."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from svit_cluster.local import ClusterSpec, LocalCluster

os.environ.setdefault("RAY_AUTH_MODE", "disabled")


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    state: Path = tmp_path_factory.mktemp("cluster")
    lc = LocalCluster.up(ClusterSpec(state_dir=state, hosts=3, lease_ttl_s=3,
                                     snapshot_every=20, passivate_after_s=4.0))
    try:
        yield lc
    finally:
        lc.down()


@pytest.fixture(scope="session")
def gateway(cluster: LocalCluster) -> tuple[str, str]:
    return cluster.doc["gateway"]["url"], cluster.doc["tokens"]["admin"]
