"""The lease keeper process (``KeptLease``), on a real etcd.

The keeper holds the host lease in a process of its own, so nothing the agent's
process does can starve the keepalives, and it revokes the lease the moment the
host can no longer serve (a watched process gone or stopped, the agent's pipe
closed, the agent's report). Every test reads the lease from etcd itself.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import threading
import time
from collections.abc import AsyncIterator

import pytest

from svit_cluster.errors import UnavailableError
from svit_cluster.local import EtcdServer
from svit_cluster.ownership import KeptLease, LeaseState, open_client

pytestmark = pytest.mark.servers

TTL_S = 3


@pytest.fixture
async def client(etcd_server: EtcdServer) -> AsyncIterator[object]:
    c = open_client(etcd_server.endpoint)
    try:
        yield c
    finally:
        await c.close()


async def _ttl(client: object, lease_id: int | None) -> int:
    assert lease_id is not None
    return int((await client.get_lease_info(lease_id)).TTL)  # type: ignore[attr-defined]


async def _gone_within(client: object, lease_id: int | None, timeout_s: float) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        if await _ttl(client, lease_id) == -1:
            return time.monotonic() - started
        await asyncio.sleep(0.05)
    raise AssertionError(f"lease {lease_id} still alive after {timeout_s} s")


def _hog_gil(seconds: float) -> None:
    """Hold this interpreter's lock for about ``seconds``: one C call (``sum``
    over a range) that no other thread of this process can interrupt."""
    n = 10_000_000
    started = time.monotonic()
    sum(range(n))
    per = time.monotonic() - started
    sum(range(int(n * seconds / max(per, 1e-3))))


async def test_the_lease_outlives_a_process_whose_interpreter_is_held(
        etcd_server: EtcdServer, client: object) -> None:
    """The agent's process holds its interpreter lock in one C call for twice the
    TTL: no thread of it runs. The keeper, a process of its own, keeps the lease
    (a keepalive thread inside the agent, as before, stopped for that long and
    lost it)."""
    lease = await KeptLease(client, etcd_server.endpoint, ttl_s=TTL_S,
                            safety_margin_s=0.75).grant()
    try:
        hog = threading.Thread(target=_hog_gil, args=(2 * TTL_S,))
        hog.start()
        hog.join()
        assert lease.state is LeaseState.HELD, lease.lost_reason
        assert await _ttl(client, lease.lease_id) > 0
        assert lease.max_keepalive_lag_s < TTL_S / 4
    finally:
        await lease.revoke()
    assert lease.revoked and await _ttl(client, lease.lease_id) == -1


@pytest.mark.parametrize("fault", ["stopped", "gone"])
async def test_a_watched_process_that_stops_or_dies_costs_the_lease_at_once(
        etcd_server: EtcdServer, client: object, fault: str) -> None:
    """A host whose agent (or raylet) is frozen or dead cannot serve: its lease
    is revoked within a fraction of a second, not after the TTL."""
    proc = subprocess.Popen(["sleep", "60"])
    try:
        lease = await KeptLease(client, etcd_server.endpoint, ttl_s=TTL_S,
                                safety_margin_s=0.75, watch={"raylet": proc.pid}).grant()
        await asyncio.sleep(0.5)
        assert lease.state is LeaseState.HELD  # negative control: a running process
        if fault == "stopped":
            os.kill(proc.pid, signal.SIGSTOP)
        else:
            proc.kill()
            proc.wait()
        took = await _gone_within(client, lease.lease_id, 2.0)
        assert took < 1.0, took
        assert await lease.wait_for(LeaseState.LOST, timeout_s=1.0)
        assert "raylet" in (lease.lost_reason or "") or lease.revoked
        await lease.close()
    finally:
        os.kill(proc.pid, signal.SIGCONT) if proc.poll() is None else None
        proc.kill()
        proc.wait()


async def test_the_agents_end_closing_or_its_report_revokes_the_lease(
        etcd_server: EtcdServer, client: object) -> None:
    """The agent died (its end of the keeper's pipe closes) or reports the host
    unhealthy (Ray declared its node dead): the keeper revokes at once."""
    lease = await KeptLease(client, etcd_server.endpoint, ttl_s=TTL_S,
                            safety_margin_s=0.75).grant()
    assert lease._proc is not None and lease._proc.stdin is not None
    lease._proc.stdin.close()
    assert await _gone_within(client, lease.lease_id, 2.0) < 1.0
    await lease.close()

    lease = await KeptLease(client, etcd_server.endpoint, ttl_s=TTL_S,
                            safety_margin_s=0.75).grant()
    lease.report_unhealthy("Ray reports node n1 dead")
    assert await _gone_within(client, lease.lease_id, 2.0) < 1.0
    assert await lease.wait_for(LeaseState.LOST, timeout_s=1.0)
    assert "node n1 dead" in (lease.lost_reason or "") + (lease.unhealthy or "")
    await lease.close()


async def test_a_lease_nobody_renews_is_suspended_then_lost_at_its_deadline(
        etcd_server: EtcdServer, client: object) -> None:
    """Negative control of the shared state: when keepalives stop, the agent's
    view goes SUSPENDED, then LOST at the local deadline (TTL - margin after
    the last keepalive sent), judged with its own clock."""
    lease = await KeptLease(client, etcd_server.endpoint, ttl_s=TTL_S,
                            safety_margin_s=0.75).grant()
    seen: list[LeaseState] = []
    lease.add_listener(seen.append)
    lease.stop_keepalive()
    assert await lease.wait_for(LeaseState.SUSPENDED, timeout_s=2.0)
    assert await lease.wait_for(LeaseState.LOST, timeout_s=TTL_S + 1.0)
    assert "local deadline passed" in (lease.lost_reason or "")
    await asyncio.sleep(0.3)
    assert seen == [LeaseState.SUSPENDED, LeaseState.LOST]
    with pytest.raises(UnavailableError) as info:
        lease.ensure_held()
    assert info.value.fields["lease_state"] == "lost"
    await lease.close()


async def test_a_lost_verdict_of_the_holder_ends_the_lease_the_keeper_still_holds(
        etcd_server: EtcdServer, client: object) -> None:
    """The agent judges its lease LOST from a record it read late, while the
    keeper still refreshes it (here the agent's clock runs ahead by the TTL).
    The agent has fenced out its actors by then; a lease the keeper went on
    refreshing would keep their ownership records alive in etcd for as long as
    the keeper runs. The verdict revokes it at once."""
    ahead = [0.0]
    lease = await KeptLease(client, etcd_server.endpoint, ttl_s=TTL_S, safety_margin_s=0.75,
                            clock=lambda: time.monotonic() + ahead[0]).grant()
    try:
        await asyncio.sleep(0.5)
        assert lease.state is LeaseState.HELD  # negative control: the clocks agree
        assert await _ttl(client, lease.lease_id) > 0
        ahead[0] = float(TTL_S)
        assert lease.state is LeaseState.LOST
        took = await _gone_within(client, lease.lease_id, TTL_S - 1.0)
        assert took < 1.0, took
        assert lease._proc is not None and await lease._await_exit(2.0)
    finally:
        await lease.close()


async def test_a_grant_etcd_refuses_is_unavailable_and_says_why(client: object) -> None:
    lease = KeptLease(client, "127.0.0.1:1", ttl_s=TTL_S, safety_margin_s=0.75,
                      request_timeout_s=0.5, grant_timeout_s=20.0)
    started = time.monotonic()
    with pytest.raises(UnavailableError) as info:
        await lease.grant()
    assert "could not grant" in info.value.message
    assert time.monotonic() - started < 20.0


async def test_the_keeper_asks_for_a_higher_priority_than_its_parent(
        etcd_server: EtcdServer, client: object) -> None:
    lease = await KeptLease(client, etcd_server.endpoint, ttl_s=TTL_S, safety_margin_s=0.75,
                            niceness=-5).grant()
    try:
        assert lease.keeper_pid is not None
        keeper = os.getpriority(os.PRIO_PROCESS, lease.keeper_pid)
        mine = os.getpriority(os.PRIO_PROCESS, 0)
        # below the inherited niceness needs CAP_SYS_NICE (root here); else it stays
        assert keeper == (-5 if os.geteuid() == 0 else mine), (keeper, mine)
    finally:
        await lease.revoke()
