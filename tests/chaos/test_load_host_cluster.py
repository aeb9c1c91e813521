"""The lease check on a real local cluster: Ray nodes, host agents holding etcd leases.

The negative control of the ``leases`` invariant end to end: during a
``load-host`` window on h1, h2 is cut off from etcd through its own proxy and
no fault is recorded for it. h2's agent loses its lease; the observer must see
the registration go, the checker must fail the run with a ``leases`` anomaly
naming h2, and the report must show the loss inside the load window. The
store's own invariants must still hold (the cut is an ownership fault, and
fencing covers it).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from svit_chaos.cluster import ChaosCluster, LaunchSpec, local_launcher
from svit_chaos.load import HostLoad
from svit_chaos.proxy import LinkMode
from svit_chaos.run import RunConfig, run
from svit_chaos.spec import NemesisSpec, Schedule, Window

pytestmark = [pytest.mark.cluster, pytest.mark.servers]


class HiddenCut:
    """The cluster's own target, except that starting a load also cuts ``host`` off
    from etcd (its proxy drops everything) until the load is stopped: a lease loss
    that no recorded fault explains."""

    def __init__(self, target: Any, hub: Any, host: str) -> None:
        self._target, self._hub, self._host = target, hub, host

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target, name)

    def start_load(self, host: str, *, cpu: int, memory_mib: int) -> HostLoad:
        load: HostLoad = self._target.start_load(host, cpu=cpu, memory_mib=memory_mib)
        link = self._hub.link(self._host, "etcd")
        link.set_mode(LinkMode.DROP)
        stop = load.stop

        def stop_and_reconnect(*, timeout_s: float = 10.0) -> dict[str, Any]:
            link.set_mode(LinkMode.PASS)
            return stop(timeout_s=timeout_s)

        load.stop = stop_and_reconnect  # type: ignore[method-assign]
        return load


def hidden_cut_launcher(spec: LaunchSpec) -> ChaosCluster:
    cluster = local_launcher(spec)
    cluster.target = HiddenCut(cluster.target, spec.hub, "h2")  # type: ignore[assignment]
    return cluster


@pytest.mark.timeout(900)
async def test_a_host_that_loses_its_lease_in_a_load_window_fails_a_real_run(
        tmp_path: Path) -> None:
    schedule = Schedule("hidden-cut", 0, (
        Window(3.0, 10.0, NemesisSpec("load-host", host="h1", cpu=1, memory_mib=32)),
    ), 22.0)
    config = RunConfig(scenario="none", seed=1, hosts=3, clients=2, processes=2,
                       out_dir=tmp_path, lease_ttl_s=2, negative_control=False,
                       loss_control=False, request_timeout_s=2.0, op_deadline_s=15.0,
                       drain_s=5.0, final_timeout_s=60.0, heal_timeout_s=60.0,
                       schedule=schedule)
    outcome = await run(config, launcher=hidden_cut_launcher)
    main = outcome.legs["main"]
    report = outcome.report
    assert outcome.verdict == "fail", json.dumps(report.get("harness_errors"))
    # only the lease check fails: the store's guarantees held through the cut
    assert {a.invariant for a in main.result.anomalies} == {"leases"}, \
        [a.message for a in main.result.anomalies]
    assert any(a.message.startswith("host h2 lost its etcd lease")
               and "in load window load-host h1 (window 0)" in a.message
               for a in main.result.anomalies)
    leases = report["host_leases"]
    assert leases["recorded"] and leases["hosts"]["h2"]["unexplained_in_load_windows"] >= 1
    assert len(leases["hosts"]["h2"]["leases"]) >= 2  # it joined again after the cut
    h2 = [x for x in leases["losses"] if x["host"] == "h2"]
    inject = next(e["t"] for e in main.history if e["kind"] == "nemesis"
                  and e["phase"] == "inject")
    assert h2 and inject < h2[0]["t"] < inject + 10.0 + 2 + 2
    text = (outcome.directory / "report.md").read_text()
    assert "## Host leases" in text and "| h2 |" in text
    # the load was stopped by PID at heal
    heal = next(e["detail"] for e in main.history if e["kind"] == "nemesis"
                and e["phase"] == "heal")
    assert heal["stopped"] and sorted(heal["stopped"]) == heal["pids"]
