"""A host agent's join whose lease is granted but whose host record cannot be
written (etcd reachable for the keeper, not for the agent's own client): the
join fails with ``UnavailableError`` naming etcd, as its contract says, and the
new lease is closed; the rejoin loop then logs one warning and tries again,
instead of a traceback for an expected outage. Real etcd, a real lease keeper;
the agent's client points at a loopback port nobody listens on.
"""

from __future__ import annotations

import asyncio
import json
import socket
from typing import Any

import pytest

from svit_cluster.cluster import _host_lease
from svit_cluster.cluster._config import ClusterConfig
from svit_cluster.cluster._host_lease import AgentLease
from svit_cluster.errors import UnavailableError
from svit_cluster.local import EtcdServer
from svit_cluster.ownership import host_key, open_client
from tests._support import unique, wait_for

pytestmark = pytest.mark.servers


def _closed_port() -> int:
    with socket.socket() as s:  # bound, never listening: connections are refused
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _spied(client: Any, closed: list[object]) -> Any:
    """``client`` whose ``close`` also appends it to ``closed``."""
    real_close = client.close

    async def close() -> None:
        closed.append(client)
        await real_close()

    client.close = close
    return client


async def test_a_lost_lease_is_retired_with_its_etcd_client(
        etcd_server: EtcdServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each lease has an etcd client of its own; a host that loses its lease now
    and then for months must not keep one open connection per loss."""
    closed: list[object] = []
    monkeypatch.setattr(_host_lease, "open_client",
                        lambda endpoint: _spied(open_client(endpoint), closed))
    monkeypatch.setattr(_host_lease, "RETIRED_CLIENT_CLOSE_S", 0.2)
    cfg = ClusterConfig(cluster=unique("retire"), etcd_endpoint=etcd_server.endpoint,
                        lease_ttl_s=3)
    leases = AgentLease(cfg, "h1", on_state=lambda state: None)
    try:
        await leases.join()
        first = leases.lease
        await leases.retire(leases.note_lost())
        assert first.status().exited and not closed  # the keeper now, the client later
        await leases.join()
        await asyncio.sleep(0.5)
        assert closed == [first.client]  # the current lease's client stays open
        assert leases.lease.client is not first.client
    finally:
        leases.stop_health()
        if leases.lease is not None:
            await leases.lease.revoke()


async def test_a_host_record_says_warm_once_the_spares_are_up(
        etcd_server: EtcdServer) -> None:
    """A host joins not warm (its spares still starting); the pool's refill end
    marks its record warm, once per lease, and the record keeps its fields."""
    cfg = ClusterConfig(cluster=unique("warm"), etcd_endpoint=etcd_server.endpoint,
                        lease_ttl_s=3)
    leases = AgentLease(cfg, "h1", on_state=lambda state: None)
    client = open_client(etcd_server.endpoint)

    async def record() -> dict[str, Any]:
        got = await client.get(host_key(cfg.cluster, "h1"))
        return dict(json.loads(got.value))

    try:
        await leases.join(warm=False)
        first = await record()
        assert first["warm"] is False and first["incarnation"] == 1
        assert await leases.publish_warm() and await leases.publish_warm()
        assert await record() == {**first, "warm": True}
        await leases.retire(leases.note_lost())
        assert not await leases.publish_warm()  # no lease: nothing to mark
        await leases.join(warm=True)
        assert (await record())["warm"] is True
    finally:
        leases.stop_health()
        if leases.lease is not None:
            await leases.lease.revoke()
        await client.close()


async def test_a_join_whose_host_record_cannot_be_written_is_unavailable_and_closes_its_lease(
        etcd_server: EtcdServer, monkeypatch: pytest.MonkeyPatch) -> None:
    dead = f"127.0.0.1:{_closed_port()}"
    closed: list[object] = []
    monkeypatch.setattr(_host_lease, "open_client", lambda endpoint: _spied(
        open_client(dead, request_timeout_s=0.5), closed))
    cfg = ClusterConfig(cluster=unique("join"), etcd_endpoint=etcd_server.endpoint,
                        lease_ttl_s=3)
    leases = AgentLease(cfg, "h1", on_state=lambda state: None)
    granted: list[Any] = []
    real = _host_lease.KeptLease

    def keep(*args: Any, **kwargs: Any) -> Any:
        granted.append(real(*args, **kwargs))
        return granted[-1]

    monkeypatch.setattr(_host_lease, "KeptLease", keep)
    try:
        with pytest.raises(UnavailableError, match="etcd") as info:
            await leases.join()
        assert info.value.code == "unavailable"
        assert granted and granted[0].lease_id, "the keeper did not grant a lease"
        assert leases.lease is None and leases.incarnation == 0
        # the granted lease was closed: its keeper ends
        wait_for(lambda: granted[0].status().exited, timeout_s=10.0,
                 what="the lease keeper to exit")
        assert closed == [granted[0].client]  # and so was the client it was made with
    finally:
        leases.stop_health()
        for lease in granted:
            await lease.close()
