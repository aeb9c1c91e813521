"""The host-level nemeses: raylet-only stop, agent-only kill, SIGTERM of a host, GCS pause,
etcd restart while a host is dead -- schedules, inject/heal order, and which real
processes the local target signals."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest
from svit_chaos.availability import fault_windows
from svit_chaos.clock import ManualClock
from svit_chaos.cluster import LocalClusterTarget
from svit_chaos.errors import HarnessError
from svit_chaos.faults import EtcdRestartDeadHost, NemesisContext, restart_if_died
from svit_chaos.history import HistoryWriter
from svit_chaos.kinds import FAILOVER_KINDS, KINDS
from svit_chaos.proxy import ProxyHub
from svit_chaos.runner import NemesisRunner
from svit_chaos.schedule import build_schedule, random_schedule
from svit_chaos.spec import NemesisSpec, Schedule, Window

NEW = ("stop-raylet", "kill-agent", "term-host", "pause-gcs", "etcd-restart-dead-host")
HOSTS = ["h1", "h2", "h3"]


# -- schedules --------------------------------------------------------------------------


@pytest.mark.parametrize("kind", NEW)
def test_each_new_kind_is_a_scenario(kind: str) -> None:
    assert kind in KINDS
    s = build_schedule(kind, hosts=HOSTS, duration_s=120.0, lease_ttl_s=2.0, seed=1,
                       host_restart=True)
    mine = [w for w in s.windows if w.spec.kind == kind]
    assert len(mine) >= 3
    assert all((w.spec.host is None) == (kind == "pause-gcs") for w in mine)
    stale = [w for w in s.windows if w.spec.kind == "stale-owner"]
    assert bool(stale) == (kind in FAILOVER_KINDS) == (kind != "pause-gcs")


def test_a_random_ten_minute_schedule_draws_every_new_kind() -> None:
    s = random_schedule(3, hosts=HOSTS, duration_s=600.0, lease_ttl_s=3.0, host_restart=True)
    assert set(NEW) <= set(s.kinds())


@pytest.mark.parametrize("kind", ["kill-agent", "term-host", "etcd-restart-dead-host"])
def test_without_host_restart_a_downed_host_stays_dead(kind: str) -> None:
    # 3 hosts, none restarted: the planner downs two different hosts, then stops
    # (the third must stay healthy)
    s = build_schedule(kind, hosts=HOSTS, duration_s=300.0, lease_ttl_s=2.0, seed=2)
    hosts = [w.spec.host for w in s.windows if w.spec.kind == kind]
    assert len(hosts) == 2 and len(set(hosts)) == 2


# -- inject and heal on a fake target ---------------------------------------------------


@dataclass
class FakeTarget:
    calls: list[str] = field(default_factory=list)
    etcd_up: bool = True

    @property
    def lease_ttl_s(self) -> float:
        return 2.0

    def hosts(self) -> list[str]:
        return list(HOSTS)

    def kill_host(self, host: str) -> Any:
        self.calls.append(f"kill {host}")
        return [11]

    def restart_host(self, host: str) -> bool:
        self.calls.append(f"restart {host}")
        return True

    def kill_etcd(self) -> None:
        self.calls.append("kill etcd")
        self.etcd_up = False

    def start_etcd(self) -> None:
        self.calls.append("start etcd")
        self.etcd_up = True

    def service_ready(self, service: str) -> bool:
        return self.etcd_up if service == "etcd" else True

    def signal_raylet(self, host: str, sig: int) -> list[int]:
        self.calls.append(f"raylet {host} {signal.Signals(sig).name}")
        return [21]

    def kill_agent(self, host: str) -> list[int]:
        self.calls.append(f"kill-agent {host}")
        return [22]

    def term_host(self, host: str) -> list[int]:
        self.calls.append(f"term {host}")
        return [23, 24]

    def signal_gcs(self, sig: int) -> list[int]:
        self.calls.append(f"gcs {signal.Signals(sig).name}")
        return [25]


async def inline(fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    return fn()


async def run_windows(target: FakeTarget, *windows: Window) -> list[dict[str, Any]]:
    clock = ManualClock()
    history = HistoryWriter(clock=clock)
    ctx = NemesisContext(target, history, ["svit://chaos/p0"])  # type: ignore[arg-type]
    runner = NemesisRunner(Schedule("t", 0, tuple(windows), 20.0), ctx, clock=clock,
                           blocking=inline)
    task = asyncio.ensure_future(runner.run(asyncio.Event()))
    await clock.advance(20.0, step=0.1)
    await asyncio.wait_for(task, 5)
    assert not runner.errors and not runner.active
    return history.events


@pytest.mark.parametrize(("spec", "calls"), [
    (NemesisSpec("stop-raylet", host="h1"), ["raylet h1 SIGSTOP", "raylet h1 SIGCONT"]),
    (NemesisSpec("kill-agent", host="h2"), ["kill-agent h2", "restart h2"]),
    (NemesisSpec("term-host", host="h3"), ["term h3", "restart h3"]),
    (NemesisSpec("pause-gcs"), ["gcs SIGSTOP", "gcs SIGCONT"]),
])
async def test_inject_then_heal(spec: NemesisSpec, calls: list[str]) -> None:
    target = FakeTarget()
    events = await run_windows(target, Window(1.0, 3.0, spec))
    assert target.calls == calls
    assert [(e["phase"], e["t"]) for e in events] == [("inject", 1.0), ("heal", 4.0)]


async def test_etcd_restarts_while_the_host_is_dead_and_the_fault_starts_at_the_kill(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(EtcdRestartDeadHost, "restart_after", 0.1)  # 0.1 x TTL 2 s
    target = FakeTarget()
    events = await run_windows(target, Window(1.0, 3.0, NemesisSpec("etcd-restart-dead-host",
                                                                    host="h2")))
    # the host is still dead when etcd restarts; it comes back only at heal
    assert target.calls == ["kill h2", "kill etcd", "start etcd", "restart h2"]
    inject = events[0]
    assert inject["phase"] == "inject" and inject["detail"]["etcd_restarted_at_s"] >= 0.2
    lead = inject["detail"]["lead_s"]
    assert lead >= 0.2
    [fault] = fault_windows(events)
    assert fault.start == pytest.approx(inject["t"] - lead) and fault.host == "h2"


def test_an_etcd_that_does_not_come_back_fails_the_inject_and_heal_starts_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(EtcdRestartDeadHost, "restart_after", 0.0)
    monkeypatch.setattr(EtcdRestartDeadHost, "etcd_timeout_s", 0.2)

    class NoEtcd(FakeTarget):
        def start_etcd(self) -> None:
            self.calls.append("start etcd")

    target = NoEtcd()
    ctx = NemesisContext(target, HistoryWriter(), [])  # type: ignore[arg-type]
    nemesis = EtcdRestartDeadHost(NemesisSpec("etcd-restart-dead-host", host="h1"))
    with pytest.raises(HarnessError, match="etcd did not answer"):
        nemesis.inject(ctx)
    nemesis.heal(ctx)
    assert target.calls == ["kill h1", "kill etcd", "start etcd", "start etcd", "restart h1"]
    assert not nemesis.healed(ctx)


# -- the local target signals the right real processes ----------------------------------


@dataclass
class Node:
    procs: list[subprocess.Popen[bytes]]

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]


@dataclass
class Cluster:
    nodes: dict[str, Node]
    doc: dict[str, Any] = field(default_factory=dict)

    def node(self, name: str) -> Node:
        return self.nodes[name]


@pytest.fixture
def fake_host(tmp_path: Path) -> Iterator[tuple[LocalClusterTarget, dict[str, int]]]:
    """Three real processes of one "host": a ``raylet`` binary, a worker titled
    ``ray::HostAgent`` and one titled ``ray::ProcessActor`` (titles as Ray sets them)."""
    sleep = shutil.which("sleep")
    assert sleep
    raylet = tmp_path / "raylet"
    shutil.copy(sleep, raylet)
    procs = {
        "raylet": subprocess.Popen([str(raylet), "60"]),
        "agent": subprocess.Popen(["bash", "-c", 'exec -a "ray::HostAgent" sleep 60']),
        "actor": subprocess.Popen(["bash", "-c", 'exec -a "ray::ProcessActor" sleep 60']),
    }
    try:
        deadline = time.monotonic() + 5
        while not all(" ".join(psutil.Process(p.pid).cmdline()).startswith(("ray::", str(raylet)))
                      for p in procs.values()):  # bash has exec'd
            assert time.monotonic() < deadline
            time.sleep(0.02)
        target = LocalClusterTarget(Cluster({"h1": Node(list(procs.values()))}),
                                    ProxyHub(), 2.0)
        yield target, {k: p.pid for k, p in procs.items()}
    finally:
        for p in procs.values():
            with contextlib.suppress(ProcessLookupError):
                p.send_signal(signal.SIGCONT)
                p.kill()
            p.wait(5)


def status(pid: int) -> str:
    try:
        return str(psutil.Process(pid).status())
    except psutil.NoSuchProcess:
        return "gone"


def gone(pid: int, procs_timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + procs_timeout_s
    while status(pid) not in ("gone", psutil.STATUS_ZOMBIE):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_stop_raylet_stops_only_the_raylet(fake_host: tuple[LocalClusterTarget, dict[str, int]]
                                           ) -> None:
    target, pids = fake_host
    assert target.signal_raylet("h1", signal.SIGSTOP) == [pids["raylet"]]
    time.sleep(0.1)
    assert status(pids["raylet"]) == psutil.STATUS_STOPPED
    assert status(pids["agent"]) != psutil.STATUS_STOPPED
    assert target.signal_raylet("h1", signal.SIGCONT) == [pids["raylet"]]
    time.sleep(0.1)
    assert status(pids["raylet"]) != psutil.STATUS_STOPPED


def test_kill_agent_kills_only_the_agent(fake_host: tuple[LocalClusterTarget, dict[str, int]]
                                         ) -> None:
    target, pids = fake_host
    assert target.kill_agent("h1") == [pids["agent"]]
    assert gone(pids["agent"])
    assert status(pids["raylet"]) not in ("gone", psutil.STATUS_ZOMBIE)
    assert status(pids["actor"]) not in ("gone", psutil.STATUS_ZOMBIE)
    started = time.monotonic()
    assert target.kill_agent("h1", wait_s=0.5) == []  # none left: looked for, then none
    assert time.monotonic() - started >= 0.5
    assert any(str(pids["raylet"]) in line for line in target.host_processes("h1"))


def test_term_host_terminates_every_process(fake_host: tuple[LocalClusterTarget, dict[str, int]]
                                            ) -> None:
    target, pids = fake_host
    assert sorted(target.term_host("h1")) == sorted(pids.values())
    assert all(gone(pid) for pid in pids.values())


def test_host_alive_follows_the_raylet(fake_host: tuple[LocalClusterTarget, dict[str, int]]
                                       ) -> None:
    target, pids = fake_host
    assert target.host_alive("h1")
    target.signal_raylet("h1", signal.SIGSTOP)
    assert target.host_alive("h1")  # stopped is not dead
    target.signal_raylet("h1", signal.SIGKILL)
    assert gone(pids["raylet"]) and not target.host_alive("h1")


# -- a node Ray declared dead exits when resumed: heal restarts it ------------------------


@dataclass
class DyingNodeTarget(FakeTarget):
    """The raylet exits once resumed (as Ray's does after its node was declared dead)."""

    dies: bool = True
    alive: bool = True

    def signal_raylet(self, host: str, sig: int) -> list[int]:
        if sig == signal.SIGCONT and self.dies:
            self.alive = False
        return super().signal_raylet(host, sig)

    def pause_host(self, host: str) -> Any:
        self.calls.append(f"pause {host}")

    def resume_host(self, host: str) -> Any:
        self.calls.append(f"resume {host}")
        self.alive = not self.dies

    def host_alive(self, host: str) -> bool:
        self.calls.append(f"alive? {host}")
        return self.alive

    def restart_host(self, host: str) -> bool:
        self.alive = True
        return super().restart_host(host)


@pytest.mark.parametrize(("spec", "first"), [
    # stop-raylet first checks that its host is up (host_already_down)
    (NemesisSpec("stop-raylet", host="h1"),
     ["alive? h1", "raylet h1 SIGSTOP", "raylet h1 SIGCONT"]),
    (NemesisSpec("pause-host", host="h1"), ["pause h1", "resume h1"]),
])
async def test_a_node_that_died_while_stopped_is_restarted_at_heal(
        spec: NemesisSpec, first: list[str]) -> None:
    target = DyingNodeTarget()
    events = await run_windows(target, Window(1.0, 3.0, spec))
    assert target.calls == [*first, "alive? h1", "restart h1"]
    assert events[-1]["detail"]["node_died"] is True and events[-1]["detail"]["restarted"]


async def test_a_node_that_survived_is_left_alone() -> None:
    target = DyingNodeTarget(dies=False)
    nemesis_ctx = NemesisContext(target, HistoryWriter(), [])  # type: ignore[arg-type]
    assert restart_if_died(nemesis_ctx, "h1", settle_s=0.3, poll_s=0.05) == {"node_died": False}
    assert "restart h1" not in target.calls and target.calls.count("alive? h1") >= 2


@dataclass
class DownTarget(FakeTarget):
    """A target whose hosts another fault has taken down (no raylet)."""

    def host_alive(self, host: str) -> bool:
        return False

    def kill_agent(self, host: str) -> list[int]:
        raise HarnessError(f"no HostAgent worker of {host} process found", stage="inject")

    def signal_raylet(self, host: str, sig: int) -> list[int]:
        raise HarnessError(f"no raylet of {host} process found", stage="inject")


@dataclass
class RestartingTarget(DownTarget):
    """A host that another fault's heal is restarting: a raylet, no agent yet."""

    def host_alive(self, host: str) -> bool:
        return True

    def host_restarting(self, host: str) -> bool:
        return True


@pytest.mark.parametrize("kind", ["kill-agent", "stop-raylet"])
@pytest.mark.parametrize(("target_class", "why"), [
    (DownTarget, "already down"), (RestartingTarget, "being restarted")])
async def test_a_host_fault_on_a_host_already_down_is_skipped_not_an_error(
        kind: str, target_class: type[DownTarget], why: str) -> None:
    """Seen in random runs (seed 12): kill-agent h1 came when another fault had
    killed h1 (ten minutes), or while pause-host's heal was restarting it (five
    minutes: a raylet, no agent yet); the inject raised and the run was
    inconclusive. Now the window is recorded as skipped and its heal neither
    signals nor restarts anything."""
    target = target_class()
    events = await run_windows(target, Window(1.0, 3.0, NemesisSpec(kind, host="h1")))
    assert target.calls == []  # no signal, no restart: the other fault's heal restarts h1
    assert [e["phase"] for e in events] == ["inject", "heal"]
    assert why in events[0]["detail"]["skipped"]
    assert events[1]["detail"] == {"skipped": True}


@dataclass
class AgentlessTarget(FakeTarget):
    """A live host (a raylet, not restarting) whose agent worker is not there."""

    def host_alive(self, host: str) -> bool:
        return True

    def kill_agent(self, host: str) -> list[int]:
        self.calls.append(f"kill-agent {host}")
        return []

    def host_processes(self, host: str) -> list[str]:
        return ["21 raylet", "30 ray::IDLE"]


async def test_kill_agent_on_a_live_host_without_an_agent_says_what_it_found_and_heals() -> None:
    """A live host that no heal is restarting may still run no agent worker when
    kill-agent comes. That is no harness error: the inject records what the host
    ran, and the heal restarts the host as after any kill-agent, so the agent
    comes back."""
    target = AgentlessTarget()
    events = await run_windows(target, Window(1.0, 3.0, NemesisSpec("kill-agent", host="h1")))
    assert [e["phase"] for e in events] == ["inject", "heal"]
    assert events[0]["detail"] == {"killed": [], "no_agent_worker": True,
                                   "found": ["21 raylet", "30 ray::IDLE"]}
    assert target.calls == ["kill-agent h1", "restart h1"]


def test_the_target_reports_a_host_restart_while_it_is_under_way() -> None:
    seen: list[bool] = []

    class Cluster:
        def __init__(self) -> None:
            self.doc: dict[str, Any] = {"hosts": {"h1": {}, "h2": {}}}

        def restart_host(self, host: str) -> None:
            seen.extend([target.host_restarting(host), target.host_restarting("h2")])
            if host == "h2":
                raise RuntimeError("node did not start")

    target = LocalClusterTarget(Cluster(), ProxyHub(), 2.0)  # type: ignore[arg-type]
    assert target.restart_host("h1") is True
    with pytest.raises(RuntimeError):
        target.restart_host("h2")
    assert seen == [True, False, True, True]
    assert not target.host_restarting("h1") and not target.host_restarting("h2")
