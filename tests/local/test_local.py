"""The dev cluster's own logic: spec validation, port allocation, the etcd view of
``svit-cluster status`` (on the real etcd the fixtures start), the defaults it
shares with production, and what counts as a live process."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import uuid
from pathlib import Path

import psutil
import pytest

from svit_cluster.errors import ConfigurationError, UnavailableError
from svit_cluster.gateway import DEFAULT_MAX_REQUEST_BYTES
from svit_cluster.local import ClusterSpec, EtcdServer, PortAllocator
from svit_cluster.local._servers import pid_alive, wait_exited
from svit_cluster.local._status import _etcd_view
from svit_cluster.ownership import epoch_key, host_key, open_client, owner_key, record_token
from svit_cluster.store import DEFAULT_SNAPSHOT_EVERY


def test_the_spec_defaults_are_the_production_defaults(tmp_path: Path) -> None:
    spec = ClusterSpec(state_dir=tmp_path)
    assert spec.snapshot_every == DEFAULT_SNAPSHOT_EVERY
    assert spec.max_request_bytes == DEFAULT_MAX_REQUEST_BYTES == 1024 * 1024
    assert spec.validate() is spec


@pytest.mark.parametrize("bad", [
    {"hosts": 0}, {"hosts": 17}, {"lease_ttl_s": 0}, {"snapshot_every": 0},
    {"dispatchers": 17}, {"etcd_members": 2}, {"redis_masters": 2},
    {"redis_replicas": 1}, {"reasoner": {"api_key": "sk-x"}},
])
def test_the_spec_refuses_out_of_range_values(tmp_path: Path, bad: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError):
        ClusterSpec(state_dir=tmp_path, **bad).validate()  # type: ignore[arg-type]


def test_the_port_allocator_never_hands_out_a_port_twice_nor_a_busy_one() -> None:
    alloc = PortAllocator(base=28000, span=200)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 28000))
        ports = [alloc.take() for _ in range(5)]
    assert 28000 not in ports and len(set(ports)) == 5
    first, last = alloc.take_range(3)
    assert last - first == 2 and first > max(ports)


def test_the_port_allocator_reports_an_exhausted_range() -> None:
    alloc = PortAllocator(base=28300, span=2)
    got = []
    with pytest.raises(UnavailableError):
        while True:
            got.append(alloc.take())
    assert len(got) <= 2


@pytest.mark.servers
async def test_status_reads_hosts_and_owners_and_skips_the_fence_epoch(
        etcd_server: EtcdServer) -> None:
    cluster = f"st{uuid.uuid4().hex[:8]}"
    client = open_client(etcd_server.endpoint)
    try:
        lease = await client.lease(30)
        await client.put(host_key(cluster, "h1"), json.dumps({"host": "h1"}).encode(),
                         lease=lease.id)
        owner = json.dumps({"host": "h1", "address": "svit:h1:1"}).encode()
        await client.put(owner_key(cluster, "svit://t/p"), owner, lease=lease.id)
        await client.put(epoch_key(cluster), b"2")  # not a host nor an owner
        view = await _etcd_view(etcd_server.endpoint, cluster)
        got = await client.get(owner_key(cluster, "svit://t/p"))
        assert view["hosts"] == {"h1": {"host": "h1", "lease": lease.id}}
        assert view["owners"] == {"svit://t/p": {
            "host": "h1", "address": "svit:h1:1",
            "token": record_token(owner, int(got.create_revision))}}
        await client.revoke_lease(lease.id)
    finally:
        await client.close()


def test_a_killed_process_nobody_reaped_counts_as_exited() -> None:
    """A SIGKILLed process whose parent never waits for it stays in the process
    table as a zombie; ``pid_exists`` still sees it, liveness must not."""
    proc = subprocess.Popen(["sleep", "60"])
    try:
        assert pid_alive(proc.pid)
        os.kill(proc.pid, signal.SIGKILL)
        wait_exited([proc.pid], timeout_s=5.0)
        assert psutil.pid_exists(proc.pid)  # a zombie: we have not reaped it
        assert not pid_alive(proc.pid)
    finally:
        proc.kill()
        proc.wait(5)
    assert not pid_alive(proc.pid) and not pid_alive(None)


def test_waiting_for_a_process_that_goes_on_running_is_unavailable() -> None:
    proc = subprocess.Popen(["sleep", "60"])
    try:
        with pytest.raises(UnavailableError, match=f"pid {proc.pid} still runs"):
            wait_exited([proc.pid], timeout_s=0.2)
    finally:
        proc.kill()
        proc.wait(5)
