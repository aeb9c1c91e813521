"""DELETE /v1/processes on a real local cluster (etcd, Redis, Ray hosts, gateway).

The owner's actor deletes under its fencing token, its agent releases the etcd
ownership record, every Redis key but the fence tombstone is gone, a later read
re-activates nothing (404), and the id can be created again by a newer owner.
"""

from __future__ import annotations

import time
import uuid

import pytest

from svit_cluster.client import SvitClient
from svit_cluster.errors import NotFound
from svit_cluster.local import LocalCluster
from svit_cluster.local._status import cluster_status
from svit_cluster.store import ProcessKeys, connect

pytestmark = pytest.mark.cluster


def test_delete_removes_log_and_owner_record(cluster: LocalCluster,
                                             gateway: tuple[str, str]) -> None:
    url, token = gateway
    pid = f"svit://local/del-{uuid.uuid4().hex[:10]}"
    with SvitClient(url, token) as client:
        client.create_process(pid, memory={"n": 1})
        client.inbox(pid, "hi")
        owner = cluster_status(cluster)["owners"][pid]
        result = client.delete_process(pid)
        assert result["deleted"] is True and result["version"] >= 1, result  # the loop may answer
        deadline = time.monotonic() + 10
        while pid in cluster_status(cluster)["owners"]:
            assert time.monotonic() < deadline, "the etcd ownership record stayed"
            time.sleep(0.1)
        redis = connect(cluster.doc["redis"]["url"], cluster=bool(
            cluster.doc["redis"].get("cluster")))
        keys = ProcessKeys(pid)
        assert {k for k in keys.all() if redis.exists(k)} == {keys.fence}
        assert int(redis.get(keys.fence)) >= int(owner["token"])
        with pytest.raises(NotFound):
            client.state(pid)
        with pytest.raises(NotFound):
            client.delete_process(pid)
        client.create_process(pid, memory={"n": 7})  # a newer owner may reuse the id
        assert client.state(pid, "/memory/n")[0] == 7
