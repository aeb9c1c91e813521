"""A whole ``run`` end to end on the Ray-free mini cluster: faults, heal, dump, check, report.

Every nemesis kind fires once (on real sockets, a real redis-server and a real
etcd); the negative control (fencing off) must be caught, and so must the
deletion of an acknowledged entry.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
import time
from pathlib import Path

import psutil
import pytest
from click.testing import CliRunner
from svit_chaos.cli import main
from svit_chaos.cluster import LaunchSpec
from svit_chaos.errors import HarnessError
from svit_chaos.run import RunConfig, run
from svit_chaos.spec import NemesisSpec, Schedule, Window

from tests.chaos._mini import MiniCluster, mini_launcher

pytestmark = pytest.mark.servers

SCHEDULE = Schedule("mini", 0, (
    Window(0.5, 4.0, NemesisSpec("stale-owner")),
    Window(1.0, 2.5, NemesisSpec("pause-host", host="h1")),  # longer than the 1 s TTL
    Window(4.5, 3.5, NemesisSpec("stale-owner")),
    Window(5.0, 2.0, NemesisSpec("kill-host", host="h2")),
    Window(8.0, 1.0, NemesisSpec("cut-redis", host="h3", mode="stall")),
    Window(9.5, 1.5, NemesisSpec("cut-etcd", host="h3", mode="drop")),
    Window(9.5, 1.0, NemesisSpec("slow-link", host="h1", service="redis", delay_ms=50)),
    Window(11.5, 1.0, NemesisSpec("kill-redis")),
    Window(13.0, 1.0, NemesisSpec("kill-etcd")),
    # a stale commit on every run: pause the owner until another host committed
    Window(14.5, 2.5, NemesisSpec("pause-owner")),
    # busy loops and held memory beside a host, stopped by PID at heal
    Window(17.0, 2.5, NemesisSpec("load-host", host="h3", cpu=1, memory_mib=32)),
), 20.0)


async def test_run_with_every_nemesis_and_both_controls(tmp_path: Path) -> None:
    config = RunConfig(scenario="none", seed=3, hosts=3, clients=3, processes=3,
                       out_dir=tmp_path, lease_ttl_s=1, snapshot_every=8,
                       negative_control=True, loss_control=True, request_timeout_s=1.0,
                       op_deadline_s=6.0, drain_s=3.0, final_timeout_s=15.0,
                       heal_timeout_s=20.0, schedule=SCHEDULE)
    outcome = await run(config, launcher=mini_launcher)
    report = outcome.report
    main_leg = outcome.legs["main"]
    assert main_leg.result.verdict == "pass", json.dumps(main_leg.result.to_json())[:3000]
    assert outcome.verdict == "pass", json.dumps(report["controls"])
    assert outcome.exit_code == 0
    assert set(report["faults_injected"]) == {k.spec.kind for k in SCHEDULE.windows}
    assert report["acked_commits"] > 20 and report["anomaly_count"] == 0
    assert report["controls"]["negative"]["verdict"] == "pass"
    assert report["controls"]["lost_commit"]["verdict"] == "pass"
    assert outcome.legs["negative"].stale_commits > 0
    assert {a.invariant for a in outcome.legs["negative"].result.anomalies} & {"tokens"}
    # the stale writer tried in the fenced leg too, and was refused
    stale = [e for e in main_leg.history if e.get("client") == "stale" and e["kind"] != "invoke"]
    assert stale and all(e["kind"] == "fail" and e["outcome"] == "fenced" for e in stale)
    # the forced stale owner wrote in both legs, after a newer owner had committed:
    # refused with fencing on, landed (and was reported) with fencing off
    def forced(leg: str) -> dict[str, object]:
        heals = [e["detail"] for e in outcome.legs[leg].history if e["kind"] == "nemesis"
                 and e["nemesis"] == "pause-owner" and e["phase"] == "heal"]
        assert len(heals) == 1, heals
        assert heals[0]["new_token"] > heals[0]["write"]["token"]
        return dict(heals[0]["write"])
    assert forced("main")["outcome"] == "fenced"
    landed = forced("negative")
    assert landed["outcome"] == "committed"
    assert any(a.process == landed["process"] and landed["version"] in a.versions
               for a in outcome.legs["negative"].result.anomalies if a.invariant == "tokens")
    # failovers were measured after the pause and the kill
    assert report["failover"]["count"] >= 1 and report["failover"]["max_s"] < 10
    # the load ran beside h3 and its heal stopped every load process by PID
    loads = {e["phase"]: e["detail"] for e in main_leg.history
             if e["kind"] == "nemesis" and e["nemesis"] == "load-host"}
    assert loads["inject"]["host"] == "h3" and len(loads["inject"]["pids"]) == 2
    assert sorted(loads["heal"]["stopped"]) == loads["inject"]["pids"]
    assert not any(psutil.pid_exists(pid) for pid in loads["inject"]["pids"])
    # the mini cluster registers no hosts in etcd: the report says leases were not recorded
    assert report["host_leases"]["recorded"] is False and report["host_leases"]["lost"] == 0
    # every nemesis healed, and the files a later `check` needs are there
    windows = report["nemesis_windows"]
    assert windows and all(w["healed"] for w in windows)
    d = outcome.directory
    for name in ("report.json", "report.html", "timeline.png", "main/history.jsonl",
                 "main/logs.jsonl", "negative/history.jsonl", "lost-commit-control/logs.jsonl"):
        assert (d / name).exists(), name
    assert (d / "timeline.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "data:image/png;base64," in (d / "report.html").read_text()
    # availability: per process, and recovery / failover per fault kind, in every report
    availability = report["availability"]
    meta = next(e for e in main_leg.history if e["kind"] == "meta")
    assert {p["process"] for p in availability["processes"]} == set(meta["processes"])
    assert all(0.0 <= p["availability"] <= 1.0 for p in availability["processes"])
    assert "kill-redis" in availability["recovery"]["by_kind"]
    assert availability["failover"]["events"]
    markdown = (d / "report.md").read_text()
    assert "Time to recovery per fault kind" in markdown and "| kill-redis |" in markdown
    # the failover breakdown: one row per failover, its total the failover figure; the
    # mini cluster keeps no ownership in etcd, so loss detection is null with the reason,
    # while the Redis fence shows the claim and the workload's send times the routing
    breakdown = report["failover_breakdown"]
    fos = availability["failover"]["events"]
    assert [r["total"] for r in breakdown["events"]] == [f["seconds"] for f in fos]
    for row in breakdown["events"]:
        p = row["points"]
        assert p["detected"] is None and "keeps none in etcd" in row["unobserved"]["detect"]
        assert p["claimed"] is not None and p["routed"] is not None, row
        assert p["fault"] <= p["claimed"] <= p["routed"] <= p["committed"], row
        assert round(p["claimed"] - p["fault"] + row["steps"]["route"]
                     + row["steps"]["commit"], 3) == pytest.approx(row["total"], abs=0.002)
    assert "### Failover breakdown per fault kind" in markdown
    # failed requests: every workload fail/info counted once, under one cause
    failed = [e for e in main_leg.history
              if e["kind"] in ("fail", "info") and e.get("client") != "stale"]
    causes = report["failed_requests"]
    assert causes["total"]["all"] == len(failed) > 0
    assert causes["total"]["conflict"] == sum(e.get("outcome") == "conflict" for e in failed)
    assert set(causes["by_kind"]) <= set(report["faults_injected"]) | {"none"}
    assert "Availability per process" in (d / "report.html").read_text()
    # re-check offline: the main leg passes, the controls fail, exit codes say so
    cli = CliRunner()
    assert cli.invoke(main, ["check", str(d / "main")]).exit_code == 0
    assert cli.invoke(main, ["check", str(d / "negative")]).exit_code == 1
    lost = cli.invoke(main, ["check", str(d / "lost-commit-control" / "history.jsonl")])
    assert lost.exit_code == 1


async def test_the_loss_control_commits_its_own_victim_when_the_run_acked_none(
        tmp_path: Path) -> None:
    # Redis is down for the whole run, so no workload operation is acknowledged:
    # the control must still find an acknowledged entry above a snapshot to
    # delete (a settle commit after healing) instead of ending inconclusive.
    schedule = Schedule("no-acks", 0, (Window(0.0, 3.0, NemesisSpec("kill-redis")),), 3.0)
    config = RunConfig(scenario="none", seed=5, hosts=2, clients=2, processes=2,
                       out_dir=tmp_path, lease_ttl_s=1, snapshot_every=8,
                       negative_control=False, loss_control=True, request_timeout_s=0.5,
                       op_deadline_s=2.0, drain_s=1.0, final_timeout_s=15.0,
                       heal_timeout_s=20.0, schedule=schedule)
    outcome = await run(config, launcher=mini_launcher)
    history = outcome.legs["main"].history
    acked = [e for e in history if e["kind"] == "ok"]
    assert acked and {e["client"] for e in acked} == {"settle"}, acked
    control = outcome.report["controls"]["lost_commit"]
    assert control["verdict"] == "pass", control
    assert f"version {acked[-1]['version']} " in control["detail"], control
    assert outcome.verdict == "pass"


async def test_ctrl_c_heals_everything_and_stops_every_process(tmp_path: Path) -> None:
    started: list[MiniCluster] = []

    def launcher(spec: LaunchSpec) -> MiniCluster:
        cluster = mini_launcher(spec)
        started.append(cluster)
        return cluster

    schedule = Schedule("interrupt", 0, (
        Window(0.3, 60.0, NemesisSpec("pause-host", host="h1")),
        Window(0.3, 60.0, NemesisSpec("kill-redis")),
        Window(0.3, 60.0, NemesisSpec("cut-etcd", host="h2", mode="stall")),
        Window(0.3, 60.0, NemesisSpec("load-host", host="h2", cpu=1, memory_mib=16)),
    ), 60.0)
    config = RunConfig(scenario="none", hosts=2, clients=2, processes=2, out_dir=tmp_path,
                       lease_ttl_s=1, negative_control=True, loss_control=True,
                       request_timeout_s=0.5, op_deadline_s=2.0, drain_s=1.0,
                       final_timeout_s=5.0, heal_timeout_s=20.0, schedule=schedule)
    task = asyncio.ensure_future(run(config, launcher=launcher, install_signal_handlers=True))
    deadline = time.monotonic() + 20
    while not (started and {"pause h1", "kill redis", "load h2"}
               <= set(started[0].target.calls)):
        assert time.monotonic() < deadline and not task.done()
        await asyncio.sleep(0.05)
    os.kill(os.getpid(), signal.SIGINT)
    outcome = await asyncio.wait_for(task, 60)
    assert outcome.verdict == "inconclusive" and outcome.exit_code == 3
    assert "interrupted by a signal" in outcome.report["harness_errors"]
    assert "negative" not in outcome.legs  # nothing new starts after Ctrl-C
    cluster = started[0]
    assert "resume h1" in cluster.target.calls
    assert cluster.redis_server.pid is None and cluster.etcd_server.pid is None
    heals = [e for e in outcome.legs["main"].history
             if e["kind"] == "nemesis" and e["phase"] == "heal"]
    assert {e["nemesis"] for e in heals} == {"pause-host", "kill-redis", "cut-etcd",
                                             "load-host"}
    [load] = [e["detail"] for e in heals if e["nemesis"] == "load-host"]
    assert len(load["pids"]) == 2 and sorted(load["stopped"]) == load["pids"]
    assert not any(psutil.pid_exists(pid) for pid in load["pids"])
    assert not [t for t in threading.enumerate()
                if t.name in ("svit-chaos-proxies", "svit-chaos-observer")]


async def test_a_cluster_that_does_not_start_is_inconclusive(tmp_path: Path) -> None:
    def broken(spec: LaunchSpec) -> MiniCluster:
        raise HarnessError("no cluster today", stage="start")

    outcome = await run(RunConfig(scenario="none", duration_s=1, out_dir=tmp_path),
                        launcher=broken)
    assert outcome.verdict == "inconclusive" and outcome.exit_code == 3
    doc = json.loads((outcome.directory / "report.json").read_text())
    assert doc["verdict"] == "inconclusive" and "no cluster today" in doc["harness_errors"][0]
