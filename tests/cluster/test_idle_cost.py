"""An idle active process costs (almost) nothing of ours.

Pure logic, no Ray cluster: a real :class:`HostAgent` and :class:`ProcessActor`
object with stand-in actor handles. Ray's own per-worker work (its core worker
checks signals every 10 ms) is out of our hands; what is ours must not wake an
idle actor: the agent does not poll its actors (a dead one is noticed through
an outstanding ``watch`` call), and the passivation watchdog sleeps until its
deadline instead of polling every second.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import ray.exceptions

from svit_cluster.cluster._actor import ProcessActor
from svit_cluster.cluster._agent import HostAgent
from svit_cluster.cluster._config import ClusterConfig
from svit_cluster.cluster._results import Unbound
from svit_cluster.cluster._types import ServedActor


class _Method:
    def __init__(self, name: str, handle: FakeActorHandle) -> None:
        self.name = name
        self.handle = handle

    def remote(self, *args: Any) -> asyncio.Future[Any]:
        self.handle.calls.append(self.name)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if self.handle.dead:
            fut.set_exception(ray.exceptions.ActorDiedError())
        elif self.name == "watch":
            self.handle.watches.append(fut)  # answered only when the actor dies
        elif self.name == "unbind":
            fut.set_result(Unbound(unbound=True))
        else:
            fut.set_result(None)
        return fut


class FakeActorHandle:
    """Records every call; ``die()`` fails the outstanding ``watch`` calls like Ray does."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.watches: list[asyncio.Future[Any]] = []
        self.dead = False

    def __getattr__(self, name: str) -> _Method:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Method(name, self)

    def die(self) -> None:
        self.dead = True
        for fut in self.watches:
            if not fut.done():
                fut.set_exception(ray.exceptions.ActorDiedError())


class FakeOwners:
    def __init__(self) -> None:
        self.released: list[Any] = []

    async def release(self, ownership: Any) -> bool:
        self.released.append(ownership)
        return True


class _Ownership(str):
    """A stand-in ownership record: compares as its label, names its actor."""

    address = "svit:h1:actor"


def _agent_serving(pid: str) -> tuple[HostAgent, FakeActorHandle, FakeOwners]:
    agent = HostAgent(ClusterConfig(), "h1")
    agent.pool.kill = lambda handle: None  # type: ignore[method-assign]
    handle, owners = FakeActorHandle(), FakeOwners()
    agent.actors[pid] = ServedActor(7, handle, owners, _Ownership("ownership"))  # type: ignore[arg-type]
    return agent, handle, owners


async def test_the_agent_does_not_call_an_idle_actor() -> None:
    """The agent's background loops leave a served, idle actor alone (before: an
    ``info`` call every 2 s to each actor, which woke every idle worker)."""
    agent, handle, _ = _agent_serving("svit://t/idle")
    sweep = asyncio.get_running_loop().create_task(agent.supervisor.reconcile_loop())
    try:
        await asyncio.sleep(3.0)
    finally:
        sweep.cancel()
    assert "info" not in handle.calls, handle.calls


async def test_a_dead_actor_is_released_at_once_through_its_watch() -> None:
    """When a served actor's worker dies, its outstanding ``watch`` call fails and
    the agent releases the process within a fraction of a second (no poll)."""
    pid = "svit://t/dies"
    agent, handle, owners = _agent_serving(pid)
    agent.supervisor.start_watch(pid, 7, handle)
    await asyncio.sleep(0.05)
    assert handle.calls == ["watch"] and pid in agent.actors  # alive: nothing else asked
    handle.die()
    for _ in range(50):
        await asyncio.sleep(0.01)
        if pid not in agent.actors:
            break
    assert pid not in agent.actors
    assert owners.released == ["ownership"]
    assert agent.supervisor.watches == {}


async def test_a_released_actor_is_not_released_twice_by_its_watch() -> None:
    """The agent's own release kills the actor; the failing watch then finds the
    process gone (or served under another token) and does nothing more."""
    pid = "svit://t/released"
    agent, handle, owners = _agent_serving(pid)
    agent.supervisor.start_watch(pid, 7, handle)
    await asyncio.sleep(0.01)
    assert await agent.release(pid, 7, "passivated")
    newer, newer_owners = FakeActorHandle(), FakeOwners()
    agent.actors[pid] = ServedActor(8, newer, newer_owners, _Ownership("newer"))  # type: ignore[arg-type]
    handle.die()
    await asyncio.sleep(0.1)
    assert owners.released == ["ownership"]
    assert newer_owners.released == [] and agent.actors[pid].token == 8
    assert "info" not in newer.calls


def _recording_actor(passivate_after_s: float,
                     monkeypatch: Any) -> tuple[ProcessActor, list[str]]:
    """An unbound ProcessActor whose ``_leave`` only records the reason."""
    config = ClusterConfig(passivate_after_s=passivate_after_s,
                           reasoner={"enabled": False})
    actor = ProcessActor(config, "h1", "svit://t/p", 1, "agent:h1")
    left: list[str] = []

    async def leave(reason: str, *_: Any) -> None:
        left.append(reason)

    monkeypatch.setattr(actor, "_leave", leave)
    return actor, left


async def _watch_idle(passivate_after_s: float, monkeypatch: Any,
                      actor_ready: Any = None) -> tuple[ProcessActor, list[float], list[str]]:
    """Run the idle loop of a recording actor to its end, counting its sleeps."""
    actor, left = _recording_actor(passivate_after_s, monkeypatch)
    if actor_ready is not None:
        actor_ready(actor)
    sleeps: list[float] = []
    real_sleep = asyncio.sleep

    async def counting_sleep(delay: float, *args: Any) -> Any:
        sleeps.append(delay)
        return await real_sleep(delay, *args)

    monkeypatch.setattr(asyncio, "sleep", counting_sleep)
    await actor._idle_loop()
    return actor, sleeps, left


async def test_the_passivation_watchdog_sleeps_until_its_deadline(monkeypatch: Any) -> None:
    """An idle actor passivates after ``passivate_after_s`` with one or two wakeups
    (before: one every ``min(1 s, passivate_after_s / 4)``)."""
    t0 = time.monotonic()
    actor, sleeps, left = await asyncio.wait_for(_watch_idle(1.2, monkeypatch), 5)
    assert left == ["passivated"] and actor._closed == "passivated"
    assert time.monotonic() - t0 >= 1.1
    assert len(sleeps) <= 2, sleeps


async def test_a_request_moves_the_passivation_deadline(monkeypatch: Any) -> None:
    """A request during the idle time restarts it; the actor never passivates early."""
    async def use_at(actor: ProcessActor, delay: float) -> float:
        await asyncio.sleep(delay)
        assert (await actor._run(1, lambda: {"ok": True})).unwrap() == {"ok": True}
        return time.monotonic()

    users: list[asyncio.Task[float]] = []

    def start_user(actor: ProcessActor) -> None:
        actor._ctrl = object()  # type: ignore[assignment]  # a stand-in: never called here
        users.append(asyncio.get_running_loop().create_task(use_at(actor, 0.5)))

    _actor, _sleeps, left = await asyncio.wait_for(
        _watch_idle(0.8, monkeypatch, start_user), 5)
    (user,) = users
    used = await user
    assert left == ["passivated"]
    assert time.monotonic() - used >= 0.75  # a full idle period after the request


async def test_a_warm_spare_bound_late_does_not_passivate_before_its_first_request(
    monkeypatch: Any,
) -> None:
    """A warm spare waits unbound for minutes, then is bound when a host dies: its
    idle clock starts at ``serve``, not at construction (a cluster run answered the
    moved process's retried requests with "passivated" for 40 s)."""
    actor, left = _recording_actor(0.6, monkeypatch)
    actor._last_used -= 3600  # created (warm) an hour before it was bound
    await actor.serve()
    await asyncio.sleep(0.3)
    assert left == [] and actor._closed is None  # still serving, half an idle period in
    await asyncio.sleep(0.6)
    assert left == ["passivated"]  # and it does passivate once really idle


async def test_an_actor_does_not_passivate_while_its_hosts_lease_is_suspended(
    monkeypatch: Any,
) -> None:
    """A SUSPENDED lease means etcd is out of reach: a passivation could not
    release the ownership record, and its worker would be stopped for nothing
    (a process idle through an etcd outage was lost to the host's rejoin). It
    passivates once the lease is HELD again."""
    actor, left = _recording_actor(0.3, monkeypatch)
    await actor.serve()
    await actor.suspend("host lease suspended", 1, 1)
    await asyncio.sleep(0.8)
    assert left == [] and actor._closed is None
    await actor.resume(2, 1)
    await asyncio.sleep(0.6)
    assert left == ["passivated"]
