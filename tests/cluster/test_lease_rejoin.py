"""A host that loses its lease keeps its workers and serves its processes again,
on the session's real cluster (3 hosts, lease TTL 3 s, per-host etcd proxies).

The host is cut off from etcd until its lease is LOST (revoked by a peer in its
name, so its ownership records go), then the cut heals. Nobody asks for its
processes meanwhile, so nobody else claims them. The agent ends every binding
but keeps the Ray workers as spares, joins with a new lease and activates its
processes again: each is owned by the same host under a higher fencing token
(restored from its log under a token that claims the Redis fence above the
old one), no worker was dropped, and its state is intact. Before, the agent
killed every actor at a lost lease and the next requests cold-started new
workers.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from svit_chaos.proxy import LinkMode

from svit_cluster.client import SvitClient
from svit_cluster.cluster._supervisor import UNPARK_RETRY_S
from svit_cluster.local import LocalCluster
from tests.cluster.test_failover_faults import etcd_view, processes_on_one_host, restore
from tests.cluster.test_overload import agent_statuses

pytestmark = pytest.mark.cluster


def _wait(what: str, check: Any, timeout_s: float) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            got = check()
        except Exception:  # etcd or Ray busy: look again
            got = None
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not within {timeout_s} s")
        time.sleep(0.2)


def _agent_log(cluster: LocalCluster, needles: list[str], keep: int = 30) -> list[str]:
    """The last ``keep`` lines of the Ray worker logs under the cluster's state
    directory (where host agents log) that name any of ``needles``."""
    lines: list[str] = []
    logs = Path(cluster.spec.state_dir).glob("ray/session_*/logs/worker-*")
    for path in sorted({p.resolve() for p in logs}):  # session_latest links to one of them
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        lines += [ln for ln in text.splitlines() if any(n in ln for n in needles)]
    return lines[-keep:]


@pytest.mark.timeout(300)
def test_a_host_that_lost_its_lease_keeps_its_workers_and_serves_its_processes_again(
        cluster: LocalCluster, gateway: tuple[str, str], etcd_links: dict[str, Any]) -> None:
    url, token = gateway
    victim, pids = processes_on_one_host(cluster, url, token, count=3)
    with SvitClient(url, token, attempts=20, max_wait_s=1.0) as c:
        for pid in pids:  # the session cluster passivates after 4 s idle: not these
            c.set_passivation(pid, 600)
    owners = etcd_view(cluster)["owners"]
    old = {p: owners[p] for p in pids}
    before = agent_statuses(cluster)[victim]
    etcd_links[victim].set_mode(LinkMode.DROP)
    try:
        _wait("the lost lease", lambda: len(agent_statuses(cluster)[victim]["lost_leases"])
              > len(before["lost_leases"]), 30.0)
    finally:
        etcd_links[victim].set_mode(LinkMode.PASS)
    try:
        def back() -> bool:
            now = etcd_view(cluster)["owners"]
            return all(p in now and now[p]["token"] > old[p]["token"] for p in pids)

        try:  # the agent retries a parked process for UNPARK_RETRY_S after the rejoin
            _wait("every process owned again", back, UNPARK_RETRY_S + 10.0)
        except AssertionError as exc:  # say where the rejoin stopped
            status = {k: v for k, v in agent_statuses(cluster)[victim].items()
                      if k in ("lease_state", "incarnation", "actors", "spares",
                               "lost_leases", "activations", "shed_activations")}
            owners = {p: etcd_view(cluster)["owners"].get(p) for p in pids}
            log = "\n".join(_agent_log(cluster, [*pids, f"host {victim} "]))
            raise AssertionError(f"{exc}: {victim} {status}; owners {owners}; "
                                 f"agent log:\n{log}") from None
        now = etcd_view(cluster)["owners"]
        after = agent_statuses(cluster)[victim]
        print(f"REJOIN {victim}: tokens {[old[p]['token'] for p in pids]} -> "
              f"{[now[p]['token'] for p in pids]}; workers dropped "
              f"{after['dropped_at_lease_loss'] - before['dropped_at_lease_loss']}, started "
              f"{before['worker_starts']} -> {after['worker_starts']}; lost "
              f"{after['lost_leases'][-1:]}")
        assert all(now[p]["host"] == victim for p in pids), (victim, now)
        # every worker was kept (as a spare) and bound again: none dropped
        assert after["dropped_at_lease_loss"] == before["dropped_at_lease_loss"], after
        assert after["incarnation"] == before["incarnation"] + 1
        with SvitClient(url, token, attempts=20, max_wait_s=1.0) as c:
            for pid, version in pids.items():
                value, seen = c.state(pid, "/memory/count")
                # nothing lost, nothing new: every commit of the counter adds 1
                assert (seen, value) == (version, version), (pid, seen, value, version)
                out = c.activate(pid, "counter", {"by": 1}, expected_version=version)
                assert out.outcome.status == "committed", out
    finally:
        restore(cluster, victim)

