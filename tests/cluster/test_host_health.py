"""A host's lease means the host can serve, on a real etcd.

The raylet check is exercised on a real stopped process (``sleep``, standing in
for a raylet under SIGSTOP); the lease's health gate on a real etcd lease, with
a healthy lease next to it as the control.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from typing import Any

import pytest

from svit_cluster.cluster._health import HostHealth, raylet_problem
from svit_cluster.ownership import HostLease, LeaseState, open_client

pytestmark = pytest.mark.servers


def test_raylet_problem_sees_a_stopped_and_a_gone_process() -> None:
    proc = subprocess.Popen(["sleep", "60"])
    try:
        assert raylet_problem(proc.pid) is None
        os.kill(proc.pid, signal.SIGSTOP)
        for _ in range(50):
            reason = raylet_problem(proc.pid)
            if reason is not None:
                break
            asyncio.run(asyncio.sleep(0.02))
        assert reason is not None and "stopped" in reason
        os.kill(proc.pid, signal.SIGCONT)
        assert raylet_problem(proc.pid) is None
        health = HostHealth(proc.pid, None)
        assert health.problem() is None
    finally:
        proc.kill()
        proc.wait()
    assert raylet_problem(proc.pid) is not None  # reaped: gone


async def test_keepalives_stop_while_the_host_is_unhealthy(etcd_server: Any) -> None:
    client = open_client(etcd_server.endpoint, request_timeout_s=1.0)
    sick: list[str | None] = [None]
    leases = []
    try:
        for check in (lambda: sick[0], lambda: None):
            lease = HostLease(client, ttl_s=3, safety_margin_s=0.5,
                              keepalive_client=lambda: open_client(etcd_server.endpoint),
                              health_check=check)
            leases.append(await lease.grant())
        gated, control = leases
        await asyncio.sleep(1.5)
        assert gated.state is LeaseState.HELD  # healthy: kept alive past half the TTL
        sick[0] = "raylet 1 is stopped"
        assert await gated.wait_for(LeaseState.LOST, timeout_s=4.0)
        assert gated.unhealthy == "raylet 1 is stopped"
        await asyncio.sleep(1.0)  # past etcd's own expiry (3 s TTL from the last renewal)
        assert (await client.get_lease_info(gated.lease_id)).TTL == -1
        assert control.state is LeaseState.HELD  # the control kept its lease
        assert (await client.get_lease_info(control.lease_id)).TTL > 0
    finally:
        for lease in leases:
            await lease.close()
        await client.close()


async def test_an_unhealthy_host_revokes_its_lease_at_once(etcd_server: Any) -> None:
    """With ``revoke_when_unhealthy`` the lease is gone from etcd within a health
    poll of the check failing, not a TTL (30 s here) later;
    a healthy lease next to it is the control."""
    client = open_client(etcd_server.endpoint, request_timeout_s=1.0)
    sick: list[str | None] = [None]
    leases = []
    try:
        for check in (lambda: sick[0], lambda: None):
            lease = HostLease(client, ttl_s=30, safety_margin_s=1.0,
                              keepalive_client=lambda: open_client(etcd_server.endpoint),
                              health_check=check, revoke_when_unhealthy=True,
                              health_poll_s=0.1)
            leases.append(await lease.grant())
        gated, control = leases
        await asyncio.sleep(0.5)
        assert gated.state is LeaseState.HELD
        started = asyncio.get_running_loop().time()
        sick[0] = "raylet 1 is stopped"
        assert await gated.wait_for(LeaseState.LOST, timeout_s=2.0)
        while (await client.get_lease_info(gated.lease_id)).TTL != -1:
            assert asyncio.get_running_loop().time() - started < 2.0, "not revoked"
            await asyncio.sleep(0.05)
        assert control.state is LeaseState.HELD
        assert (await client.get_lease_info(control.lease_id)).TTL > 0
    finally:
        for lease in leases:
            await lease.close()
        await client.close()
