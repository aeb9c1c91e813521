"""open_client over several etcd members fails over when the one in use stops (issue 19).

Two real, independent single-member etcd servers stand for two members of one
cluster: each holds a different value under the same key, so every read shows
which member answered. Member A is stopped (or paused), and the same client
must then be served by B. The failed request itself is not retried by the
client (its outcome may be unknown); the next one goes to B.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from svit_cluster.cluster._config import ClusterConfig
from svit_cluster.errors import ConfigurationError, UnavailableError
from svit_cluster.local import EtcdServer
from svit_cluster.ownership import HostLease, LeaseState, open_client
from svit_cluster.ownership._etcd import etcd_call

pytestmark = pytest.mark.servers

KEY = b"/svit-failover-test/who"


@pytest.fixture
def second_etcd(tmp_path: Path) -> Iterator[EtcdServer]:
    server = EtcdServer(tmp_path / "etcd-b", die_with_parent=True)
    server.start()
    try:
        yield server
    finally:
        server.stop()


async def _label(a: EtcdServer, b: EtcdServer) -> None:
    for server, value in ((a, b"a"), (b, b"b")):
        c = open_client(server.endpoint)
        try:
            await c.put(KEY, value)
        finally:
            await c.close()


async def _who(client: Any) -> bytes:
    got = await etcd_call("get", client.get(KEY), timeout_s=5)
    assert got is not None
    return bytes(got.value)


async def _who_after_failover(client: Any, attempts: int = 3) -> bytes:
    """Read; the first failures (the stopped member) are allowed, as callers retry."""
    errors = []
    for _ in range(attempts):
        try:
            return await _who(client)
        except UnavailableError as exc:
            errors.append(exc)
    raise AssertionError(f"no member answered: {errors}")


async def test_requests_move_to_the_next_member_when_the_first_stops(
    fresh_etcd: EtcdServer, second_etcd: EtcdServer
) -> None:
    await _label(fresh_etcd, second_etcd)
    client = open_client(f"{fresh_etcd.endpoint}, {second_etcd.endpoint}", request_timeout_s=1.0)
    try:
        assert await _who(client) == b"a"
        fresh_etcd.stop()
        assert await _who_after_failover(client) == b"b"
        assert client.endpoint == second_etcd.endpoint and client.failovers == 1
        assert await _who(client) == b"b"  # stays on the member that answers
    finally:
        await client.close()


async def test_a_member_down_at_start_and_a_hung_member(
    fresh_etcd: EtcdServer, second_etcd: EtcdServer
) -> None:
    await _label(fresh_etcd, second_etcd)
    second_etcd.stop()  # the first member in the list is down from the start
    client = open_client(f"{second_etcd.endpoint},{fresh_etcd.endpoint}", request_timeout_s=0.5)
    try:
        assert await _who_after_failover(client) == b"a"
        second_etcd.start()
        fresh_etcd.pause()  # hung: keeps its socket, answers nothing
        try:
            assert await _who_after_failover(client) == b"b"
        finally:
            fresh_etcd.resume()
        assert client.failovers == 2
    finally:
        await client.close()


async def test_host_lease_is_granted_through_the_member_that_answers(
    fresh_etcd: EtcdServer, second_etcd: EtcdServer
) -> None:
    fresh_etcd.stop()
    client = open_client(f"{fresh_etcd.endpoint},{second_etcd.endpoint}", request_timeout_s=1.0)
    lease = HostLease(client, ttl_s=3, safety_margin_s=0.5)
    try:
        await lease.grant()  # its retry lands on the second member
        assert lease.state is LeaseState.HELD
        info = await _lease_ttl_on(second_etcd, lease.lease_id)
        assert info > 0
    finally:
        await lease.close()
        await client.close()


async def _lease_ttl_on(server: EtcdServer, lease_id: int | None) -> int:
    assert lease_id is not None
    c = open_client(server.endpoint)
    try:
        info = await c.get_lease_info(lease_id)
        return int(info.TTL)
    finally:
        await c.close()


def test_cluster_config_keeps_every_etcd_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SVIT_ETCD_ENDPOINTS", "etcd-0:2379, etcd-1:2379,etcd-2:2379")
    assert ClusterConfig.from_env().etcd_endpoint == "etcd-0:2379,etcd-1:2379,etcd-2:2379"
    monkeypatch.setenv("SVIT_ETCD_ENDPOINTS", "etcd-0:2379,etcd-1")
    with pytest.raises(ConfigurationError, match="SVIT_ETCD_ENDPOINTS"):
        ClusterConfig.from_env()


def test_one_endpoint_is_a_plain_client_and_bad_lists_are_rejected() -> None:
    import aetcd

    from svit_cluster.ownership._failover import FailoverClient

    assert type(open_client("127.0.0.1:2379")) is aetcd.Client
    assert isinstance(open_client("a:1,b:2"), FailoverClient)
    for bad in ("", " , ", "a:1,b", "a:99999"):
        with pytest.raises(ValueError):
            open_client(bad)
