"""The chaos harness on the scaled topology, Ray-free.

A real Redis Cluster (3 masters x 1 replica, ``cluster-node-timeout`` 1 s) and a
real 3-member etcd under the mini cluster's emulated hosts and real gateway.
The harness kills the Redis master of a workload process's slot (its replica is
promoted), kills the etcd leader, isolates an etcd member and pauses an owner,
then reads the logs back from the Redis Cluster and checks them; the deletion
of an acknowledged entry (on the cluster) must be caught.

The mini cluster keeps ownership out of etcd, so the etcd nemeses here test the
harness (leader found, killed, restarted, isolated, healed); what a 3-member
etcd's loss of its leader does to host leases is tests/ownership/test_etcd_cluster_leader.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from svit_chaos.run import RunConfig, run, validate
from svit_chaos.schedule import build_schedule, check_topology
from svit_chaos.spec import NemesisSpec, Schedule, Window

from svit_cluster.errors import ConfigurationError
from tests.chaos._mini import mini_launcher

SCHEDULE = Schedule("scaled-mini", 0, (
    Window(1.0, 3.0, NemesisSpec("kill-redis-master", target="0")),
    Window(6.0, 2.5, NemesisSpec("kill-etcd-leader")),
    Window(10.0, 2.5, NemesisSpec("partition-etcd-member", target="leader")),
    Window(13.5, 2.5, NemesisSpec("pause-owner")),
), 20.0)


@pytest.mark.servers
async def test_scaled_run_kills_a_redis_master_and_the_etcd_leader_and_checks_the_cluster(
        tmp_path: Path) -> None:
    config = RunConfig(scenario="none", seed=5, hosts=3, clients=3, processes=3,
                       out_dir=tmp_path, lease_ttl_s=1, snapshot_every=8,
                       negative_control=False, loss_control=True, request_timeout_s=2.0,
                       op_deadline_s=10.0, drain_s=3.0, final_timeout_s=20.0,
                       heal_timeout_s=30.0, schedule=SCHEDULE, topology="scaled")
    outcome = await run(config, launcher=mini_launcher)
    report = outcome.report
    main_leg = outcome.legs["main"]
    assert main_leg.result.verdict == "pass", json.dumps(main_leg.result.to_json())[:3000]
    assert outcome.verdict == "pass", json.dumps(report["controls"])
    assert set(report["faults_injected"]) == {w.spec.kind for w in SCHEDULE.windows}
    assert report["acked_commits"] > 20 and report["anomaly_count"] == 0
    # the checker still catches a lost acknowledged entry when it reads a Redis Cluster
    assert report["controls"]["lost_commit"]["verdict"] == "pass"
    events = {(e["nemesis"], e["phase"]): e.get("detail", {}) for e in main_leg.history
              if e["kind"] == "nemesis"}
    killed = events[("kill-redis-master", "inject")]
    assert killed["process"] in outcome.legs["main"].logs.processes and killed["port"] > 0
    assert events[("kill-etcd-leader", "inject")]["member"].startswith("m")
    assert events[("partition-etcd-member", "inject")]["role"] == "leader"
    meta = next(e for e in main_leg.history if e["kind"] == "meta")
    assert meta["topology"] == "scaled"


def test_the_scaled_kinds_need_the_scaled_topology_and_proxy_kinds_the_single_one() -> None:
    hosts = ["h1", "h2", "h3"]
    with pytest.raises(ConfigurationError, match="need --topology scaled"):
        build_schedule("kill-etcd-leader", hosts=hosts, duration_s=60, lease_ttl_s=3, seed=0)
    with pytest.raises(ConfigurationError, match="need the single topology"):
        build_schedule("cut-etcd", hosts=hosts, duration_s=60, lease_ttl_s=3, seed=0,
                       topology="scaled")
    with pytest.raises(ConfigurationError, match="need --topology scaled"):
        check_topology(SCHEDULE, "single")
    with pytest.raises(ConfigurationError, match="scenario scaled needs --topology scaled"):
        validate(RunConfig(scenario="scaled"))
    scaled = build_schedule("scaled", hosts=hosts, duration_s=180, lease_ttl_s=3, seed=1,
                            topology="scaled", host_restart=True)
    kinds = scaled.kinds()
    assert all(kinds[k] >= 2 for k in ("kill-redis-master", "kill-etcd-leader",
                                        "partition-etcd-member")), kinds
    # random on the scaled topology draws only kinds it can carry out
    rnd = build_schedule("random", hosts=hosts, duration_s=600, lease_ttl_s=3, seed=2,
                         topology="scaled", host_restart=True)
    assert set(rnd.kinds()) & {"kill-redis-master", "kill-etcd-leader"}
    assert not set(rnd.kinds()) & {"cut-etcd", "cut-redis", "slow-link", "kill-redis"}
