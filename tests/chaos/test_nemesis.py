"""Schedules from seeds, and the runner's inject/heal discipline on a fake and a real target."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from svit_chaos.clock import ManualClock, MonotonicClock
from svit_chaos.cluster import etcd_ready, redis_ready
from svit_chaos.faults import NemesisContext
from svit_chaos.history import HistoryWriter
from svit_chaos.proxy import LinkMode
from svit_chaos.runner import NemesisRunner
from svit_chaos.schedule import SMOKE_KINDS, build_schedule, random_schedule, smoke_duration_s
from svit_chaos.spec import NemesisSpec, Schedule, Window

from svit_cluster.errors import ConfigurationError
from svit_cluster.local import EtcdServer, RedisServer

HOSTS = ["h1", "h2", "h3"]


@dataclass
class FakeLink:
    modes: list[tuple[str, int]] = field(default_factory=list)

    def set_mode(self, mode: LinkMode | str, *, delay_ms: int = 0) -> None:
        self.modes.append((str(LinkMode(mode)), delay_ms))


@dataclass
class FakeTarget:
    """Records calls; 'redis'/'etcd' readiness follows kill/start."""

    calls: list[str] = field(default_factory=list)
    up: dict[str, bool] = field(default_factory=lambda: {"redis": True, "etcd": True})
    links: dict[tuple[str, str], FakeLink] = field(default_factory=dict)
    fail_start: bool = False

    @property
    def lease_ttl_s(self) -> float:
        return 2.0

    def hosts(self) -> list[str]:
        return list(HOSTS)

    def kill_host(self, host: str) -> Any:
        self.calls.append(f"kill {host}")
        return [1, 2]

    def restart_host(self, host: str) -> bool:
        self.calls.append(f"restart {host}")
        return False

    def pause_host(self, host: str) -> Any:
        self.calls.append(f"pause {host}")

    def resume_host(self, host: str) -> Any:
        self.calls.append(f"resume {host}")

    def kill_redis(self) -> None:
        self.calls.append("kill redis")
        self.up["redis"] = False

    def start_redis(self) -> None:
        self.calls.append("start redis")
        self.up["redis"] = not self.fail_start

    def kill_etcd(self) -> None:
        self.calls.append("kill etcd")
        self.up["etcd"] = False

    def start_etcd(self) -> None:
        self.calls.append("start etcd")
        self.up["etcd"] = True

    def service_ready(self, service: str) -> bool:
        return self.up[service]

    def link(self, host: str, service: str) -> FakeLink:
        return self.links.setdefault((host, service), FakeLink())

    def owner(self, process: str) -> str | None:
        return "h2"


# -- schedules ---------------------------------------------------------------------------


def healthy_at_all_times(schedule: Schedule, hosts: list[str], ttl: float) -> bool:
    dead: set[str] = set()
    for w in schedule.windows:
        if w.spec.kind == "kill-host" and w.spec.host:
            dead.add(w.spec.host)
    for t in [w.start_s + 0.01 for w in schedule.windows]:
        faulted = {w.spec.host for w in schedule.windows
                   if w.spec.host and w.start_s <= t < w.end_s + ttl}
        killed = {w.spec.host for w in schedule.windows
                  if w.spec.kind == "kill-host" and w.start_s <= t}
        if not set(hosts) - faulted - killed:
            return False
    return True


def test_smoke_exercises_every_nemesis_in_time_order() -> None:
    ttl = 3.0
    duration = smoke_duration_s(ttl)
    schedule = build_schedule("smoke", hosts=HOSTS, duration_s=duration, lease_ttl_s=ttl,
                              seed=1)
    assert set(schedule.kinds()) == {*SMOKE_KINDS, "stale-owner"}
    assert schedule.kinds()["stale-owner"] == 4
    assert all(w.end_s <= duration for w in schedule.windows)
    faults = [w for w in schedule.windows if w.spec.kind != "stale-owner"]
    assert all(a.end_s < b.start_s for a, b in itertools.pairwise(faults))
    pause = next(w for w in schedule.windows if w.spec.kind == "pause-host")
    assert pause.duration_s > ttl  # a pause outlasts the lease
    assert healthy_at_all_times(schedule, HOSTS, ttl)
    assert duration < 120  # CI budget: both legs and the controls in about 5 minutes


def test_schedules_are_deterministic_per_seed_and_round_trip() -> None:
    args: dict[str, Any] = {"hosts": HOSTS, "duration_s": 120.0, "lease_ttl_s": 2.0}
    a = build_schedule("random", seed=7, **args)
    assert a == build_schedule("random", seed=7, **args)
    assert a != build_schedule("random", seed=8, **args)
    assert Schedule.from_json(a.to_json()) == a


@pytest.mark.parametrize("seed", range(12))
def test_random_schedules_keep_a_healthy_host(seed: int) -> None:
    s = random_schedule(seed, hosts=HOSTS, duration_s=200.0, lease_ttl_s=2.0)
    assert s.windows and all(w.end_s <= 200.0 for w in s.windows)
    assert healthy_at_all_times(s, HOSTS, 2.0)
    assert sum(w.spec.kind == "kill-host" for w in s.windows) <= len(HOSTS) - 1


def test_single_kind_scenarios_and_bad_input() -> None:
    s = build_schedule("cut-redis", hosts=HOSTS, duration_s=60, lease_ttl_s=2, seed=3)
    assert {w.spec.kind for w in s.windows} == {"cut-redis"}
    assert all(w.spec.mode in ("drop", "stall") for w in s.windows)
    assert build_schedule("none", hosts=HOSTS, duration_s=5, lease_ttl_s=2, seed=0).windows == ()
    with pytest.raises(ConfigurationError, match="unknown scenario"):
        build_schedule("nope", hosts=HOSTS, duration_s=60, lease_ttl_s=2, seed=0)
    with pytest.raises(ConfigurationError, match="at least"):
        build_schedule("smoke", hosts=HOSTS, duration_s=20, lease_ttl_s=2, seed=0)
    with pytest.raises(ConfigurationError, match="3 hosts"):
        build_schedule("smoke", hosts=["h1", "h2"], duration_s=200, lease_ttl_s=2, seed=0)
    with pytest.raises(ConfigurationError, match="needs a host"):
        NemesisSpec("pause-host")


# -- runner ------------------------------------------------------------------------------


async def inline(fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    return fn()


def ctx(target: FakeTarget, clock: ManualClock | MonotonicClock) -> NemesisContext:
    return NemesisContext(target, HistoryWriter(clock=clock), ["svit://chaos/p0"])


async def test_runner_injects_and_heals_on_schedule() -> None:
    clock = ManualClock()
    target = FakeTarget()
    schedule = Schedule("t", 0, (
        Window(1.0, 5.0, NemesisSpec("pause-host", host="h2")),
        Window(2.0, 1.0, NemesisSpec("cut-redis", host="h1", mode="stall")),
        Window(7.0, 1.0, NemesisSpec("kill-redis")),
    ), 10.0)
    c = ctx(target, clock)
    runner = NemesisRunner(schedule, c, clock=clock, blocking=inline)
    stop = asyncio.Event()
    task = asyncio.ensure_future(runner.run(stop))
    await clock.advance(1.5, step=0.1)
    assert target.calls == ["pause h2"] and runner.active_labels == ["pause-host h2"]
    await clock.advance(2.0, step=0.1)
    assert target.link("h1", "redis").modes == [("stall", 0), ("pass", 0)]
    await clock.advance(8.0, step=0.1)
    await asyncio.wait_for(task, 5)
    assert target.calls == ["pause h2", "resume h2", "kill redis", "start redis"]
    events = [(e["phase"], e["nemesis"], e["t"]) for e in c.history.events]
    assert events[0] == ("inject", "pause-host", 1.0)
    assert ("heal", "pause-host", 6.0) in events
    assert [p for p, _, _ in events].count("inject") == 3
    assert [p for p, _, _ in events].count("heal") == 3
    assert runner.injected == {"pause-host": 1, "cut-redis": 1, "kill-redis": 1}
    assert not runner.errors and not runner.active


def slow_kill_host_heals(clock: ManualClock, heal_s: float) -> Callable[..., Any]:
    """A ``blocking`` that runs calls inline, but a kill-host's heal (a host
    restart) takes ``heal_s`` seconds of ``clock``."""
    async def blocking(fn: Any) -> Any:
        func = getattr(fn, "func", None)
        if getattr(func, "__name__", "") == "heal" and \
                type(getattr(func, "__self__", None)).__name__ == "KillHost":
            await clock.sleep(heal_s)
        return fn()
    return blocking


@pytest.mark.parametrize("rule", [True, False])
async def test_a_window_waits_while_the_host_rule_does_not_hold(rule: bool) -> None:
    # h1 is killed at 1.0 and its restart (the heal) runs from 3.0 to 9.0: past
    # the planner's gap. pause-host h1 (4.0-5.0) would hit a host still
    # restarting: skipped. cut-redis h3 at 4.5 would leave no host free (h1
    # restarting, h2 paused): it waits until h2's pause is healed at 7.0.
    # pause-host h2 fits at once. Negative control: without hosts every window starts at its offset.
    clock = ManualClock()
    target = FakeTarget()
    schedule = Schedule("t", 0, (
        Window(1.0, 2.0, NemesisSpec("kill-host", host="h1")),
        Window(4.0, 1.0, NemesisSpec("pause-host", host="h1")),
        Window(4.0, 3.0, NemesisSpec("pause-host", host="h2")),
        Window(4.5, 6.0, NemesisSpec("cut-redis", host="h3", mode="stall")),
    ), 20.0)
    c = ctx(target, clock)
    runner = NemesisRunner(schedule, c, clock=clock, blocking=slow_kill_host_heals(clock, 6.0),
                           hosts=HOSTS if rule else ())
    task = asyncio.ensure_future(runner.run(asyncio.Event()))
    await clock.advance(20.0, step=0.1)
    await asyncio.wait_for(task, 5)
    events = {(e["phase"], e["spec"].get("host"), e["nemesis"]): e for e in c.history.events}
    injected_at = {(h, k): round(e["t"], 1) for (p, h, k), e in events.items() if p == "inject"}
    assert injected_at[("h2", "pause-host")] == 4.0
    if not rule:
        assert injected_at[("h1", "pause-host")] == 4.0
        assert injected_at[("h3", "cut-redis")] == 4.5
        assert not runner.skipped
        return
    assert ("h1", "pause-host") not in injected_at
    skip = events[("skip", "h1", "pause-host")]["detail"]
    assert skip["faulted_hosts"] == ["h1", "h2"] and 1.0 <= skip["waited_s"] <= 1.3
    assert runner.skipped == ["pause-host h1"]
    assert 7.0 <= injected_at[("h3", "cut-redis")] <= 7.2
    assert events[("inject", "h3", "cut-redis")]["detail"]["delayed_s"] >= 2.5
    assert not runner.errors and not runner.active


def test_an_owner_fault_needs_every_host_free() -> None:
    runner = NemesisRunner(Schedule("t", 0, (), 1.0), ctx(FakeTarget(), ManualClock()),
                           hosts=HOSTS)
    owner = NemesisSpec("pause-owner")
    assert runner.room_for(owner)
    runner._hold(0, "h3")
    assert not runner.room_for(owner)
    assert runner.room_for(NemesisSpec("pause-host", host="h1"))
    assert not runner.room_for(NemesisSpec("pause-host", host="h3"))
    runner._release(0)
    assert runner.room_for(owner)


def test_a_host_fault_needs_its_free_survivors_warm() -> None:
    """With the warm hosts known, a host fault also needs every free host that
    takes over to have its spares up; an owner fault needs every host warm."""
    runner = NemesisRunner(Schedule("t", 0, (), 1.0), ctx(FakeTarget(), ManualClock()),
                           hosts=HOSTS)
    kill_h1 = NemesisSpec("kill-host", host="h1")
    owner = NemesisSpec("pause-owner")
    assert runner.room_for(kill_h1, {"h2", "h3"}) and runner.room_for(owner, set(HOSTS))
    assert not runner.room_for(kill_h1, {"h2"})  # h3 restored a moment ago: cold
    assert runner.room_for(kill_h1, {"h1", "h2", "h3"})
    assert not runner.room_for(owner, {"h1", "h2"})
    # the victim's own warmth does not matter, nor a faulted host's
    runner._hold(0, "h3")
    assert runner.room_for(kill_h1, {"h2"})
    # without the warm hosts (None) only the host rule counts
    assert runner.room_for(kill_h1)
    # a fault of no host needs nothing
    assert runner.room_for(NemesisSpec("kill-etcd"), set())


@pytest.mark.parametrize("with_warm", [True, False])
async def test_a_window_waits_for_warm_survivors_then_starts(with_warm: bool) -> None:
    # kill-host h1 planned at 1.0-6.0; h3 turns warm only at 3.0: the window
    # starts then. Negative control: the same run without ``warm`` starts it at 1.0.
    clock = ManualClock()
    target = FakeTarget()
    schedule = Schedule("t", 0, (Window(1.0, 5.0, NemesisSpec("kill-host", host="h1")),),
                        10.0)
    c = ctx(target, clock)
    reads: list[float] = []

    def warm() -> set[str]:
        reads.append(clock.now())
        time.sleep(0.002)  # a real etcd read takes time: the clock must not outrun it
        return {"h2", "h3"} if clock.now() >= 3.0 else {"h2"}

    runner = NemesisRunner(schedule, c, clock=clock, blocking=inline, hosts=HOSTS,
                           warm=warm if with_warm else None)
    task = asyncio.ensure_future(runner.run(asyncio.Event()))
    await clock.advance(10.0, step=0.1)
    await asyncio.wait_for(task, 5)
    inject = next(e for e in c.history.events if e["phase"] == "inject")
    if with_warm:
        assert 3.0 <= inject["t"] <= 3.5 and inject["detail"]["delayed_s"] >= 1.9
        assert reads and min(reads) >= 1.0
    else:
        assert inject["t"] == 1.0 and not reads


async def test_stop_heals_everything_still_broken() -> None:
    clock = ManualClock()
    target = FakeTarget()
    schedule = Schedule("t", 0, (
        Window(0.5, 100.0, NemesisSpec("kill-etcd")),
        Window(0.5, 100.0, NemesisSpec("cut-etcd", host="h3", mode="drop")),
        Window(50.0, 1.0, NemesisSpec("kill-host", host="h1")),
    ), 200.0)
    runner = NemesisRunner(schedule, ctx(target, clock), clock=clock, blocking=inline)
    stop = asyncio.Event()
    task = asyncio.ensure_future(runner.run(stop))
    await clock.advance(1.0, step=0.1)
    assert not target.up["etcd"]
    stop.set()
    await asyncio.wait_for(task, 5)
    assert target.up["etcd"] and target.link("h3", "etcd").modes[-1] == ("pass", 0)
    assert "kill h1" not in target.calls  # windows not yet started never start


async def test_cancellation_still_heals() -> None:
    clock = ManualClock()
    target = FakeTarget()
    schedule = Schedule("t", 0, (Window(0.0, 100.0, NemesisSpec("pause-host", host="h1")),),
                        100.0)
    runner = NemesisRunner(schedule, ctx(target, clock), clock=clock, blocking=inline)
    task = asyncio.ensure_future(runner.run(asyncio.Event()))
    await clock.advance(1.0, step=0.1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert target.calls == ["pause h1", "resume h1"]


async def test_a_server_that_does_not_come_back_is_a_harness_error() -> None:
    clock = MonotonicClock()
    target = FakeTarget(fail_start=True)
    schedule = Schedule("t", 0, (Window(0.0, 0.05, NemesisSpec("kill-redis")),), 1.0)
    c = ctx(target, clock)
    runner = NemesisRunner(schedule, c, clock=clock, heal_timeout_s=0.3)
    await runner.run(asyncio.Event())
    assert runner.errors and "heal kill-redis failed" in runner.errors[0]
    assert c.history.events[-1]["phase"] == "error"


@dataclass
class ServersTarget(FakeTarget):
    """Real redis-server and etcd behind the FaultTarget server methods."""

    redis: RedisServer | None = None
    etcd: EtcdServer | None = None

    def kill_redis(self) -> None:
        assert self.redis is not None
        self.redis.kill9()

    def start_redis(self) -> None:
        assert self.redis is not None
        self.redis.start()

    def kill_etcd(self) -> None:
        assert self.etcd is not None
        self.etcd.kill9()

    def start_etcd(self) -> None:
        assert self.etcd is not None
        self.etcd.start()

    def service_ready(self, service: str) -> bool:
        assert self.redis is not None and self.etcd is not None
        if service == "redis":
            return redis_ready(self.redis.url)
        return etcd_ready(self.etcd.endpoint)


@pytest.mark.servers
async def test_kill9_and_restart_of_real_servers(fresh_redis: RedisServer,
                                                 fresh_etcd: EtcdServer) -> None:
    import redis as redis_py

    r = redis_py.Redis.from_url(fresh_redis.url)
    r.set("chaos:durable", "yes")
    target = ServersTarget(redis=fresh_redis, etcd=fresh_etcd)
    schedule = Schedule("t", 0, (Window(0.0, 0.2, NemesisSpec("kill-redis")),
                                 Window(0.0, 0.2, NemesisSpec("kill-etcd"))), 1.0)
    c = ctx(target, MonotonicClock())
    runner = NemesisRunner(schedule, c, heal_timeout_s=20)
    await runner.run(asyncio.Event())
    assert not runner.errors, runner.errors
    assert r.get("chaos:durable") == b"yes"  # restarted from its AOF
    assert etcd_ready(fresh_etcd.endpoint)
    r.close()
