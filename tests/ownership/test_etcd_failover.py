"""open_client over several etcd members fails over when the one in use stops.

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


async def test_a_request_in_flight_when_another_fails_over_fails_instead_of_being_cancelled(
    fresh_etcd: EtcdServer, second_etcd: EtcdServer,
) -> None:
    """A failover closes the old channel; gRPC then cancels the calls still on it and
    raises ``asyncio.CancelledError`` in tasks nobody cancelled, which would end a
    lease keepalive loop sharing the client silently. The call must fail
    with a connection error (retryable), and the caller's task must go on."""
    import asyncio

    import aetcd

    await _label(fresh_etcd, second_etcd)
    client: Any = open_client(f"{fresh_etcd.endpoint},{second_etcd.endpoint}",
                              request_timeout_s=10.0)
    try:
        assert await _who(client) == b"a"  # connected to A
        fresh_etcd.pause()  # A holds every request on the open connection
        try:
            call = asyncio.ensure_future(client.get(KEY))
            await asyncio.sleep(0.5)
            assert not call.done()
            # what a concurrent request's failure does: move to the next member
            client._fail_over(client._generation, "test: another request failed")
            with pytest.raises(aetcd.ConnectionFailedError, match="closed by a failover"):
                await asyncio.wait_for(call, 5)
            assert not call.cancelled()
            # ...and the next request goes to the next member, which answers
            assert await _who(client) == b"b"
        finally:
            fresh_etcd.resume()
    finally:
        await client.close()


async def test_the_keepalive_loop_survives_a_cancellation_nobody_asked_for() -> None:
    """Pure logic (a fake client): a keepalive whose call raises CancelledError
    although the loop's task was not cancelled is a failed round, not the end of
    the loop; the lease stays HELD."""
    import asyncio
    from types import SimpleNamespace

    class Flaky:
        def __init__(self) -> None:
            self.calls = 0

        async def lease(self, ttl: int) -> Any:
            return SimpleNamespace(id=7, ttl=ttl)

        async def refresh_lease(self, lease_id: int) -> Any:
            self.calls += 1
            if self.calls == 1:
                raise asyncio.CancelledError  # as gRPC does on a closed channel
            return SimpleNamespace(TTL=3)

    client = Flaky()
    lease = HostLease(client, ttl_s=3, safety_margin_s=0.5, keepalive_interval_s=0.3)
    await lease.grant()
    try:
        await asyncio.sleep(3.5)  # past the first local deadline (2.5 s)
        assert client.calls >= 3
        assert lease.state is LeaseState.HELD
        assert lease._task is not None and not lease._task.done()
    finally:
        await lease.close()
