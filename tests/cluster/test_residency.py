"""Bounded residency: the budget, least-recently-used passivation, worker reuse,
paced starts, spares and the memory guard (pure logic: a real ``HostAgent`` over
fake workers and a fake ownership store; the real-cluster burst is
test_overload.py)."""

from __future__ import annotations

import asyncio
import itertools
from types import SimpleNamespace
from typing import Any

import pytest

from svit_cluster.cluster import Budget, derive_budget
from svit_cluster.cluster._agent import HostAgent
from svit_cluster.cluster._config import ClusterConfig
from svit_cluster.cluster._residency import MIN_ACTIVE, Usage, lru_order
from svit_cluster.cluster._results import ActorUsage, CreateSpec, Outcome, Started, Unbound
from svit_cluster.cluster._types import ServeStatus

GiB = 1 << 30


def test_the_derived_budget_follows_cpus_and_memory() -> None:
    b = derive_budget(2, 24 * GiB)
    assert (b.max_active, b.max_actors_pss_mib, b.max_starting) == (32, 12288.0, 1)
    assert "derived from 2 CPUs" in b.basis
    assert derive_budget(8, 8 * GiB).max_active == 42  # memory bound: 4 GiB / 96 MiB
    assert derive_budget(0.5, GiB // 4).max_active == MIN_ACTIVE  # a tiny node
    configured = derive_budget(2, 24 * GiB, max_active=8, max_actors_pss_mib=500.0,
                               max_starting=3)
    assert (configured.max_active, configured.max_actors_pss_mib, configured.max_starting,
            configured.basis) == (8, 500.0, 3, "configured")


def test_lru_order_skips_busy_and_excluded_processes() -> None:
    usage = {
        "a": Usage("a", 5.0, 100.0, False),
        "b": Usage("b", 50.0, 100.0, True),  # busy: never a candidate
        "c": Usage("c", 20.0, 100.0, False),
        "d": Usage("d", 0.0, 110.0, False),  # used at 110: idle 0 then
        "e": Usage("e", 20.0, 100.0, False),
    }
    assert lru_order(usage, 110.0) == ["c", "e", "a", "d"]
    assert lru_order(usage, 110.0, exclude={"c"}) == ["e", "a", "d"]
    assert usage["d"].idle_at(115.0) == 5.0 and usage["b"].idle_at(115.0) == 0.0


# -- a fake world: workers, ownership records -------------------------------------------

_pids = itertools.count(1000)


class FakeWorker:
    """A process actor: warms up, binds, reports its use, unbinds when idle."""

    def __init__(self, world: World, name: str) -> None:
        self.world, self.name, self.pid = world, name, next(_pids)
        self.token = 0
        self.process_id = ""
        self.busy = False
        self.idle_s = 0.0
        self.ended = asyncio.Event()

    async def warm(self) -> int:
        self.world.warming += 1
        self.world.most_warming = max(self.world.most_warming, self.world.warming)
        await asyncio.sleep(self.world.warm_s)
        self.world.warming -= 1
        return self.pid

    async def bind_start_serve(self, process_id: str, token: int, create: CreateSpec | None
                               ) -> Outcome[Started]:
        assert not self.token, f"{self.name} bound twice"
        self.token, self.process_id, self.ended = token, process_id, asyncio.Event()
        self.world.bound.append((self.name, process_id))
        return Outcome.ok(Started(0, "0" * 64, pid=self.pid))

    async def unbind(self, token: int, only_if_idle: bool = True) -> Unbound:
        await asyncio.sleep(self.world.unbind_s)
        if token != self.token:
            return Unbound(False, token=self.token)
        if only_if_idle and self.busy:
            return Unbound(False, busy=True)
        self.token, self.process_id = 0, ""
        self.ended.set()
        return Unbound(True)

    async def residency(self) -> ActorUsage:
        return ActorUsage(self.token, self.process_id, self.idle_s, 1 if self.busy else 0,
                          False, self.pid, 1)

    async def watch(self, token: int) -> bool:
        if token == self.token:
            await self.ended.wait()
        return False


class FakeHandle:
    def __init__(self, target: Any) -> None:
        self.target = target

    def __getattr__(self, method: str) -> Any:
        fn = getattr(self.target, method)
        return SimpleNamespace(remote=lambda *a: asyncio.ensure_future(fn(*a)))


class World:
    def __init__(self, *, warm_s: float = 0.0) -> None:
        self.warm_s = warm_s
        self.unbind_s = 0.0
        self.warming = 0
        self.most_warming = 0
        self.workers: dict[str, FakeWorker] = {}
        self.killed: list[str] = []
        self.bound: list[tuple[str, str]] = []
        self.released: list[str] = []
        self.records: set[str] = set()  # ownership records that exist now
        self.most_records = 0
        self.release_gate = asyncio.Event()
        self.release_gate.set()
        self.tokens = itertools.count(1)
        self._names = itertools.count(1)

    def new_actor(self) -> tuple[str, Any]:
        name = f"svit:h1:w{next(self._names)}"
        worker = self.workers[name] = FakeWorker(self, name)
        return name, FakeHandle(worker)

    def owners(self, world: World) -> Any:
        class Owners:
            def __init__(self, lease: Any, *, cluster: str, host: str, address: str) -> None:
                self.address = address

            async def claim(self, process_id: str, fences: Any) -> Any:
                world.records.add(process_id)
                world.most_records = max(world.most_records, len(world.records))
                return SimpleNamespace(process_id=process_id, token=next(world.tokens),
                                       address=self.address)

            async def release(self, ownership: Any) -> bool:
                await world.release_gate.wait()
                world.records.discard(ownership.process_id)
                world.released.append(ownership.process_id)
                return True

        return Owners


class FakeLease:
    lease_id = 1
    request_timeout_s = 2.0

    def ensure_held(self) -> None:
        return None


def _agent(world: World, monkeypatch: pytest.MonkeyPatch, *, max_active: int,
           max_starting: int = 1, spares: int = 0, pss_mib: float = 1e9) -> HostAgent:
    agent = HostAgent(ClusterConfig(), "h1")
    agent.lease = FakeLease()
    agent.budget = Budget(max_active, pss_mib, max_starting, "test")
    agent.spare_target = spares
    agent.pool.new_actor = world.new_actor  # type: ignore[method-assign]
    agent.pool.kill = lambda handle: world.killed.append(handle.target.name)  # type: ignore[method-assign]
    agent._fences = lambda: None  # type: ignore[method-assign]
    monkeypatch.setattr("svit_cluster.cluster._agent.Owners", world.owners(world))
    return agent


async def _shutdown(agent: HostAgent) -> None:
    for task in agent.supervisor.watches.values():
        task.cancel()
    if agent.pool.refill_timer is not None:
        agent.pool.refill_timer.cancel()


async def test_at_the_budget_the_least_recently_used_idle_process_gives_its_worker(
        monkeypatch: pytest.MonkeyPatch) -> None:
    world = World()
    agent = _agent(world, monkeypatch, max_active=3)
    for pid in ("p1", "p2", "p3"):
        assert (await agent.activate(pid)).unwrap().status == "serving"
    assert agent.worker_starts == 3
    # p2 has been idle longest, p1 is busy (a request in flight)
    idle = {"p1": 500.0, "p2": 90.0, "p3": 10.0}
    for w in world.workers.values():
        w.idle_s = idle[w.process_id]
    world.workers[agent.actors["p1"].ownership.address].busy = True
    agent.supervisor.usage_at = 0.0  # the view is stale: asked again
    answer = await agent.activate("p4")
    assert answer.unwrap().status == "serving", answer
    assert sorted(agent.actors) == ["p1", "p3", "p4"]
    assert world.released == ["p2"]  # its ownership record went first
    assert agent.worker_starts == 3 and agent.worker_reuses == 1 and agent.evictions == 1
    assert world.killed == []  # the worker was reused, not stopped
    assert len(agent.actors) + len(agent.pool.spares) <= 3
    await _shutdown(agent)


async def test_a_host_whose_actors_are_all_busy_answers_host_full(
        monkeypatch: pytest.MonkeyPatch) -> None:
    world = World()
    agent = _agent(world, monkeypatch, max_active=2)
    for pid in ("p1", "p2"):
        await agent.activate(pid)
    for w in world.workers.values():
        w.busy = True
    agent.supervisor.usage_at = 0.0
    answer = await agent.activate("p3")
    err = answer.error
    assert err is not None and err.code == "unavailable", answer
    assert err.fields["host_full"] is True
    assert (err.fields["active"], err.fields["max_active"]) == (2, 2)
    assert agent.worker_starts == 2 and agent.host_full == 1 and world.released == []
    await _shutdown(agent)


async def test_workers_are_started_at_most_max_starting_at_a_time(
        monkeypatch: pytest.MonkeyPatch) -> None:
    world = World(warm_s=0.1)
    agent = _agent(world, monkeypatch, max_active=10, max_starting=2)
    answers = await asyncio.gather(*(agent.activate(f"p{i}") for i in range(6)))
    assert all(a.unwrap().status == "serving" for a in answers), answers
    assert world.most_warming == 2, world.most_warming
    assert agent.worker_starts == 6
    await _shutdown(agent)


async def test_concurrent_activations_never_overshoot_the_budget(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers being started, taken for a binding or refilled as spares all count,
    in the same step as the room is checked."""
    world = World(warm_s=0.05)
    agent = _agent(world, monkeypatch, max_active=4, max_starting=2, spares=2)
    agent.pool.refill()
    answers = await asyncio.gather(*(agent.activate(f"p{i}") for i in range(8)))
    assert sum(1 for a in answers
               if a.value is not None and a.value.status is ServeStatus.SERVING) >= 4
    assert len(world.workers) <= 4, len(world.workers)
    assert len(agent.actors) + len(agent.pool.spares) <= 4
    await _shutdown(agent)


async def test_a_passivated_process_leaves_its_worker_warm_for_a_while(
        monkeypatch: pytest.MonkeyPatch) -> None:
    world = World()
    agent = _agent(world, monkeypatch, max_active=4)
    await agent.activate("p1")
    served = agent.actors["p1"]
    assert await agent.release("p1", served.token, "passivated")
    assert [n for n, _h in agent.pool.spares] == [served.ownership.address]
    assert agent.pool.trim(linger_s=60.0) == 0  # still lingering
    assert agent.pool.trim(linger_s=0.0) == 1  # a surplus spare (target 0) goes
    assert world.killed == [served.ownership.address] and agent.pool.spares == []
    await _shutdown(agent)


async def test_the_memory_guard_stops_spares_then_passivates_the_least_recently_used(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from svit_cluster.cluster import _memory_guard

    world = World()
    agent = _agent(world, monkeypatch, max_active=10, pss_mib=250.0)
    for pid in ("p1", "p2", "p3"):
        await agent.activate(pid)
    agent.pool.add_spare(*world.new_actor())
    agent.pool.pids[agent.pool.spares[0][0]] = world.workers[agent.pool.spares[0][0]].pid
    for w in world.workers.values():
        w.idle_s = {"p1": 30.0, "p2": 300.0, "p3": 3.0}.get(w.process_id, 0.0)
    agent.supervisor.usage_at = 0.0
    monkeypatch.setattr(_memory_guard, "read_pss_kib", lambda pid: 100 * 1024)  # 100 MiB each
    pss = await agent.check_memory()
    assert pss < 250.0, pss
    assert agent.pool.spares == []  # the spare went first
    assert sorted(agent.actors) == ["p1", "p3"] and world.released == ["p2"]
    assert len(world.killed) == 2  # the spare's and p2's workers: stopped, not reused
    await _shutdown(agent)


async def test_an_activation_that_gets_no_worker_in_time_is_unavailable(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """No worker within the wait (starts queued behind a slow one): a typed,
    retryable ``unavailable`` (``overloaded``), not an internal error."""
    from svit_cluster.cluster import _agent as agent_module

    world = World(warm_s=5.0)
    agent = _agent(world, monkeypatch, max_active=4)
    monkeypatch.setattr(agent_module, "TAKE_TIMEOUT_S", 0.3)
    answer = await agent.activate("p1")
    assert answer.code == "unavailable", answer
    assert answer.route_moved is False and answer.error is not None
    assert answer.error.fields["overloaded"] is True
    await _shutdown(agent)


async def test_a_release_racing_a_passivation_never_stops_the_reused_worker(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """p1 passivates by itself (its actor asks for a release) while an activation
    at the budget passivates it too and takes its worker for p3. Exactly one of
    them owns the worker: p3 is never bound to a worker the release stopped
    (before, the release stopped it and p3's ownership record named a dead
    actor: "actor ... is not registered" on every request)."""
    world = World()
    agent = _agent(world, monkeypatch, max_active=2)
    for pid in ("p1", "p2"):
        await agent.activate(pid)
    for w in world.workers.values():
        w.idle_s = {"p1": 100.0, "p2": 1.0}[w.process_id]
    agent.supervisor.usage_at = 0.0
    served = agent.actors["p1"]
    world.unbind_s = 0.05  # both reach the worker while the other waits on it
    activation = asyncio.ensure_future(agent.activate("p3"))
    await asyncio.sleep(0.02)  # the passivation of p1 is waiting on its unbind
    released = asyncio.ensure_future(agent.release("p1", served.token, "passivated"))
    answer = await activation
    await released
    assert answer.unwrap().status == "serving", answer
    for pid, s in agent.actors.items():
        assert s.ownership.address not in world.killed, (pid, world.killed)
    assert sorted(agent.actors) == ["p2", "p3"]
    await _shutdown(agent)


async def test_a_process_being_released_still_counts_until_its_record_is_gone(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """While a passivated process's ownership record is being deleted, its worker
    still counts: a new activation waits, so a host never holds more records
    than its budget (a real cluster showed 9 owners on a host of 8)."""
    world = World()
    agent = _agent(world, monkeypatch, max_active=2)
    for pid in ("p1", "p2"):
        await agent.activate(pid)
    world.workers[agent.actors["p2"].ownership.address].busy = True
    world.release_gate.clear()  # etcd slow: the release of p1 waits
    releasing = asyncio.ensure_future(agent.release("p1", agent.actors["p1"].token,
                                                    "passivated"))
    await asyncio.sleep(0.02)
    activation = asyncio.ensure_future(agent.activate("p3"))
    await asyncio.sleep(0.3)
    assert not activation.done() and len(world.workers) == 2 and world.most_records == 2
    world.release_gate.set()
    assert await releasing is True
    assert (await activation).unwrap().status == "serving"
    assert world.most_records == 2 and len(world.workers) == 2 and agent.worker_reuses == 1
    await _shutdown(agent)


async def test_the_agent_forgets_the_locks_of_processes_it_no_longer_serves(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """One lock per process ever activated would grow with every process the host
    has seen; locks of processes not served (and free) are dropped."""
    world = World()
    agent = _agent(world, monkeypatch, max_active=2)
    for pid in ("p1", "p2", "p3", "p4"):
        await agent.activate(pid)
    assert len(agent.supervisor.locks) == 4 and len(agent.actors) == 2
    held = agent.supervisor.locks.setdefault("p9", asyncio.Lock())
    await held.acquire()  # an activation of p9 under way
    assert agent.supervisor.prune_locks() == 2
    assert sorted(agent.supervisor.locks) == sorted([*agent.actors, "p9"])
    held.release()
    await _shutdown(agent)
