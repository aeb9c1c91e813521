"""The ``load-host`` nemesis: schedules, and the real load processes it starts and stops.

Every load here is a real process (busy loop or memory holder) started beside a
"host" whose node is a real process too; the tests check where the loads run,
at which niceness, that they burn CPU and hold memory, and that heal stops each
of them by PID -- also when the host went down, or is being restarted, by then.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest
from svit_chaos import load as load_module
from svit_chaos.clock import ManualClock
from svit_chaos.cluster import LocalClusterTarget
from svit_chaos.faults import LoadHost, NemesisContext
from svit_chaos.history import HistoryWriter
from svit_chaos.kinds import HOST_KINDS, KINDS
from svit_chaos.load import LOAD_MARKER, start_load, stop_all_loads
from svit_chaos.proxy import ProxyHub
from svit_chaos.runner import NemesisRunner
from svit_chaos.schedule import (
    LOAD_CPU,
    LOAD_MEMORY_MIB,
    SCENARIOS,
    SMOKE_KINDS,
    build_schedule,
    random_schedule,
    smoke_duration_s,
)
from svit_chaos.spec import NemesisSpec, Schedule, Window

from svit_cluster.errors import ConfigurationError

HOSTS = ["h1", "h2", "h3"]


# -- schedules ----------------------------------------------------------------------------


def test_load_host_is_a_host_kind_a_scenario_and_the_smokes_last_window() -> None:
    assert "load-host" in KINDS and "load-host" in SCENARIOS and "load-host" in HOST_KINDS
    assert SMOKE_KINDS[-1] == "load-host"
    s = build_schedule("smoke", hosts=HOSTS, duration_s=smoke_duration_s(3.0),
                       lease_ttl_s=3.0, seed=0, host_restart=True)
    [load] = [w for w in s.windows if w.spec.kind == "load-host"]
    assert load.spec.cpu == LOAD_CPU == 2 and load.spec.memory_mib == LOAD_MEMORY_MIB
    assert load.duration_s == 20.0 and load.start_s == max(w.start_s for w in s.windows)
    # the smoke's workload stays under two minutes at the default TTL (+25 s for the load)
    assert smoke_duration_s(3.0) == 119.0


def test_the_load_host_scenario_repeats_it_and_random_schedules_draw_it() -> None:
    s = build_schedule("load-host", hosts=HOSTS, duration_s=120.0, lease_ttl_s=3.0, seed=1,
                       host_restart=True)
    assert set(s.kinds()) == {"load-host"} and len(s.windows) >= 3  # no stale-owner windows
    assert all(w.duration_s == 20.0 and w.spec.host in HOSTS for w in s.windows)
    r = random_schedule(3, hosts=HOSTS, duration_s=600.0, lease_ttl_s=3.0, host_restart=True)
    assert r.kinds()["load-host"] >= 1
    # a longer TTL gets a longer window: at least 5 TTLs of saturated CPU
    long = build_schedule("load-host", hosts=HOSTS, duration_s=120.0, lease_ttl_s=6.0, seed=1)
    assert long.windows[0].duration_s == 35.0


def test_the_spec_needs_something_to_load_and_round_trips() -> None:
    with pytest.raises(ConfigurationError, match="needs a host"):
        NemesisSpec("load-host", cpu=1)
    with pytest.raises(ConfigurationError, match="cpu >= 1 or memory_mib >= 1"):
        NemesisSpec("load-host", host="h1")
    spec = NemesisSpec("load-host", host="h2", cpu=2, memory_mib=256)
    assert spec.label == "load-host h2 2cpu+256MiB"
    schedule = Schedule("t", 0, (Window(1.0, 20.0, spec),), 30.0)
    assert Schedule.from_json(schedule.to_json()) == schedule


# -- real loads beside a host whose node is a real process --------------------------------


@dataclass
class Node:
    procs: list[subprocess.Popen[bytes]]

    @property
    def pid(self) -> int:
        return self.procs[0].pid

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs if p.poll() is None]


@dataclass
class Cluster:
    nodes: dict[str, Node]
    doc: dict[str, Any] = field(default_factory=dict)

    def node(self, name: str) -> Node:
        if name not in self.nodes:
            raise ConfigurationError(f"no host {name!r}; hosts: {', '.join(sorted(self.nodes))}")
        return self.nodes[name]


@pytest.fixture
def two_hosts(tmp_path: Path) -> Iterator[tuple[LocalClusterTarget, Cluster]]:
    """Hosts h1 and h2, each a real ``raylet`` process in a session of its own (as
    ``ray start`` runs), adapted by the harness's real :class:`LocalClusterTarget`."""
    sleep = shutil.which("sleep")
    assert sleep
    raylet = tmp_path / "raylet"
    shutil.copy(sleep, raylet)
    nodes = {h: Node([subprocess.Popen([str(raylet), "120"], start_new_session=True)])
             for h in ("h1", "h2")}
    try:
        yield LocalClusterTarget(Cluster(nodes), ProxyHub(), 2.0), Cluster(nodes)
    finally:
        for node in nodes.values():
            for p in node.procs:
                with contextlib.suppress(ProcessLookupError):
                    p.kill()
                p.wait(5)
        stop_all_loads()


def gone(pid: int, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while psutil.pid_exists(pid):
        with contextlib.suppress(psutil.NoSuchProcess):
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return False  # a load must be reaped, not left a zombie
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def wait_for(condition: Callable[[], bool], timeout_s: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def cpu_s(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


def test_inject_starts_busy_loops_and_memory_beside_the_named_host_and_heal_stops_them(
        two_hosts: tuple[LocalClusterTarget, Cluster]) -> None:
    target, cluster = two_hosts
    ctx = NemesisContext(target, HistoryWriter(), [])
    nemesis = LoadHost(NemesisSpec("load-host", host="h2", cpu=2, memory_mib=64))
    detail = nemesis.inject(ctx)
    pids = detail["pids"]
    assert detail["host"] == "h2" and detail["host_state"] == "up"
    assert len(detail["cpu_pids"]) == 2 and len(detail["memory_pids"]) == 1
    assert sorted(detail["cpu_pids"] + detail["memory_pids"]) == pids
    assert detail["memory_mib"] == detail["requested_memory_mib"] == 64
    for pid in pids:
        proc = psutil.Process(pid)
        role = "cpu" if pid in detail["cpu_pids"] else "memory"
        assert proc.cmdline()[3] == f"{LOAD_MARKER}:h2:{role}"
        # the host agent's niceness: a neighbour at normal priority
        assert proc.nice() == 0 and detail["niceness"][str(pid)] == 0
        # beside the node, not in its session: a kill or pause of the host misses it
        assert pid not in cluster.node("h2").pids()
        assert proc.status() != psutil.STATUS_STOPPED
    assert all(wait_for(lambda p=pid: cpu_s(p) > 0.3) for pid in detail["cpu_pids"])
    [holder] = detail["memory_pids"]
    assert psutil.Process(holder).memory_info().rss >= 64 * 1024 * 1024
    assert not nemesis.healed(ctx)
    healed = nemesis.heal(ctx)
    assert sorted(healed["stopped"]) == pids and healed["exited_before"] == {}
    assert healed["host_state"] == "up" and healed["pids"] == pids
    assert all(gone(pid) for pid in pids)
    assert nemesis.healed(ctx)
    assert nemesis.heal(ctx) == {"stopped": []}  # safe to call twice


@pytest.mark.parametrize("what", ["killed", "restarting"])
def test_heal_stops_the_loads_by_pid_when_the_host_went_down_or_is_restarting(
        two_hosts: tuple[LocalClusterTarget, Cluster], what: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    target, cluster = two_hosts
    ctx = NemesisContext(target, HistoryWriter(), [])
    nemesis = LoadHost(NemesisSpec("load-host", host="h1", cpu=1, memory_mib=16))
    pids = nemesis.inject(ctx)["pids"]
    if what == "killed":  # another fault killed the host meanwhile (SIGKILL of its node)
        raylet = cluster.node("h1").procs[0]
        raylet.kill()
        raylet.wait(5)
        assert not target.host_alive("h1")
    else:  # another fault's heal is restarting it right now
        monkeypatch.setattr(target, "host_restarting", lambda host: host == "h1")
    assert all(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE for pid in pids)
    healed = nemesis.heal(ctx)
    assert healed["host_state"] == ("down" if what == "killed" else "restarting")
    assert sorted(healed["stopped"]) == pids
    assert all(gone(pid) for pid in pids) and nemesis.healed(ctx)


def test_a_load_on_a_host_that_is_down_still_runs_and_is_stopped(
        two_hosts: tuple[LocalClusterTarget, Cluster]) -> None:
    target, cluster = two_hosts
    raylet = cluster.node("h2").procs[0]
    raylet.kill()
    raylet.wait(5)
    ctx = NemesisContext(target, HistoryWriter(), [])
    nemesis = LoadHost(NemesisSpec("load-host", host="h2", cpu=1))
    detail = nemesis.inject(ctx)
    assert detail["host_state"] == "down" and len(detail["pids"]) == 1
    assert detail["memory_pids"] == [] and detail["memory_mib"] == 0
    assert nemesis.heal(ctx)["stopped"] == detail["pids"] and gone(detail["pids"][0])


def loads_running() -> list[int]:
    me = psutil.Process()
    out = []
    for child in me.children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if any(a.startswith(LOAD_MARKER) for a in child.cmdline()):
                out.append(child.pid)
    return out


def test_an_unknown_host_starts_nothing(two_hosts: tuple[LocalClusterTarget, Cluster]) -> None:
    target, _ = two_hosts
    with pytest.raises(ConfigurationError, match="no host 'h9'"):
        target.start_load("h9", cpu=2, memory_mib=16)
    assert loads_running() == []


def test_the_memory_load_is_cut_to_a_quarter_of_the_available_memory(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(load_module, "available_memory_mib", lambda: 100)
    load = start_load("h1", cpu=0, memory_mib=256)
    try:
        assert load.memory_mib == 25 and load.describe()["requested_memory_mib"] == 256
        assert psutil.Process(load.pids[0]).memory_info().rss >= 25 * 1024 * 1024
    finally:
        load.stop()
    assert gone(load.pids[0])


def test_loads_die_with_the_thread_that_started_them_and_teardown_stops_the_rest() -> None:
    started: list[int] = []

    def start() -> None:
        started.extend(start_load("h1", cpu=1).pids)

    thread = threading.Thread(target=start)
    thread.start()
    thread.join()
    # PR_SET_PDEATHSIG: the starting thread has exited, so the kernel killed the load
    assert started and wait_for(lambda: not psutil.pid_exists(started[0])
                                or psutil.Process(started[0]).status() == psutil.STATUS_ZOMBIE)
    stop_all_loads()  # reaps it
    assert gone(started[0])
    # a load whose heal never ran: teardown's stop_all_loads stops it by PID
    orphan = start_load("h2", cpu=1)
    assert stop_all_loads() == orphan.pids and gone(orphan.pids[0])
    assert loads_running() == []


async def test_the_runner_records_the_loads_pids_at_inject_and_heal(
        two_hosts: tuple[LocalClusterTarget, Cluster]) -> None:
    target, _ = two_hosts
    clock = ManualClock()
    history = HistoryWriter(clock=clock)

    async def inline(fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        return fn()

    spec = NemesisSpec("load-host", host="h1", cpu=2, memory_mib=16)
    runner = NemesisRunner(Schedule("t", 0, (Window(1.0, 3.0, spec),), 10.0),
                           NemesisContext(target, history, []), clock=clock, blocking=inline)
    task = asyncio.ensure_future(runner.run(asyncio.Event()))
    await clock.advance(10.0, step=0.1)
    await asyncio.wait_for(task, 10)
    assert not runner.errors and not runner.active
    events = [(e["phase"], e["t"], e["detail"]) for e in history.events]
    assert [(phase, t) for phase, t, _ in events] == [("inject", 1.0), ("heal", 4.0)]
    inject, heal = events[0][2], events[1][2]
    assert len(inject["pids"]) == 3 and sorted(heal["stopped"]) == inject["pids"]
    assert all(gone(pid) for pid in inject["pids"])


def test_a_target_without_host_hooks_reports_the_host_state_unknown() -> None:
    class Bare:
        lease_ttl_s = 2.0

        def start_load(self, host: str, *, cpu: int, memory_mib: int) -> Any:
            return start_load(host, cpu=cpu, memory_mib=memory_mib)

    ctx = NemesisContext(Bare(), HistoryWriter(), [])  # type: ignore[arg-type]
    nemesis = LoadHost(NemesisSpec("load-host", host="h1", cpu=1))
    assert nemesis.inject(ctx)["host_state"] == "unknown"
    healed = nemesis.heal(ctx)
    assert healed["host_state"] == "unknown" and all(gone(p) for p in healed["stopped"])


def test_a_sigstopped_load_is_still_stopped_by_heal(
        two_hosts: tuple[LocalClusterTarget, Cluster]) -> None:
    """SIGKILL ends a stopped process too (a pause of the whole machine's processes)."""
    target, _ = two_hosts
    ctx = NemesisContext(target, HistoryWriter(), [])
    nemesis = LoadHost(NemesisSpec("load-host", host="h1", cpu=1))
    [pid] = nemesis.inject(ctx)["pids"]
    psutil.Process(pid).send_signal(signal.SIGSTOP)
    assert nemesis.heal(ctx)["stopped"] == [pid] and gone(pid)
