"""A SUSPENDED host lease holds the host's actors (they serve but do not
passivate) while the lease is still certain, and pauses them past that time;
HELD resumes them; LOST ends them (no Ray cluster: a recording actor handle, a
real ProcessActor object with a stand-in controller, and a real etcd behind a
link that holds requests, with the lease the agent runs).

SUSPENDED is temporary: no keepalive was answered lately (an etcd leader
election, a member cut off), but the lease cannot have expired before its last
answered keepalive + TTL - margin. Closing every actor at that point would make
the loss of one etcd member an outage of every process on the host; pausing
them at once made every leader election a stall of every process.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from svit_chaos.proxy import LinkMode, ProxyHub

from svit_cluster.cluster._actor import ProcessActor
from svit_cluster.cluster._agent import HostAgent
from svit_cluster.cluster._config import ClusterConfig
from svit_cluster.cluster._results import Unbound
from svit_cluster.cluster._types import ServedActor
from svit_cluster.errors import UnavailableError
from svit_cluster.local import EtcdServer
from svit_cluster.ownership import KeptLease, LeaseState, open_client


class _Recorder:
    def __init__(self, name: str, log: list[tuple[Any, ...]]) -> None:
        self.name = name
        self.log = log

    def remote(self, *args: Any) -> None:
        self.log.append((self.name, *args))


class RecordingHandle:
    def __init__(self) -> None:
        self.log: list[tuple[Any, ...]] = []

    def __getattr__(self, name: str) -> _Recorder:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Recorder(name, self.log)


def test_the_agent_suspends_resumes_and_fences_out_on_lease_states() -> None:
    agent = HostAgent(ClusterConfig(), "h1")
    handle = RecordingHandle()
    agent.actors["svit://t/p"] = ServedActor(1, handle, None, None)  # type: ignore[arg-type]
    agent.supervisor.on_lease(LeaseState.SUSPENDED)
    agent.supervisor.on_lease(LeaseState.HELD)
    agent.supervisor.on_lease(LeaseState.SUSPENDED)
    agent.supervisor.on_lease(LeaseState.LOST)
    assert [entry[0] for entry in handle.log] == ["suspend", "resume", "suspend", "fence_out"]
    seqs = [entry[-2] for entry in handle.log[:3]]
    assert seqs == sorted(seqs) and len(set(seqs)) == 3  # notices carry increasing numbers
    assert {entry[-1] for entry in handle.log} == {1}  # each names the binding it is for


class _CertainLease:
    """Stands in for the agent's lease: only ``certain_until`` is read here."""

    def __init__(self, certain_for_s: float) -> None:
        self.certain_until = time.monotonic() + certain_for_s


def _served_agent(lease: Any) -> tuple[HostAgent, RecordingHandle]:
    agent = HostAgent(ClusterConfig(), "h1")
    agent.leases.lease = lease
    handle = RecordingHandle()
    agent.actors["svit://t/p"] = ServedActor(1, handle, None, None)  # type: ignore[arg-type]
    return agent, handle


async def test_a_suspended_lease_holds_the_actors_until_its_certain_time_then_pauses_them(
) -> None:
    agent, handle = _served_agent(_CertainLease(0.3))
    agent.supervisor.on_lease(LeaseState.SUSPENDED)
    assert [e[0] for e in handle.log] == ["hold"]  # still serving
    await asyncio.sleep(0.5)
    assert [e[0] for e in handle.log] == ["hold", "suspend"]  # past it: paused
    assert handle.log[1][-2] > handle.log[0][-2]  # a newer notice than the hold


async def test_a_lease_held_again_in_time_cancels_the_pause() -> None:
    agent, handle = _served_agent(_CertainLease(0.3))
    agent.supervisor.on_lease(LeaseState.SUSPENDED)
    agent.supervisor.on_lease(LeaseState.HELD)
    await asyncio.sleep(0.5)
    assert [e[0] for e in handle.log] == ["hold", "resume"]


async def test_a_suspended_lease_past_its_certain_time_pauses_at_once() -> None:
    agent, handle = _served_agent(_CertainLease(-0.1))  # e.g. in the election grace
    agent.supervisor.on_lease(LeaseState.SUSPENDED)
    assert [e[0] for e in handle.log] == ["suspend"]


@pytest.mark.servers
async def test_etcd_out_of_reach_for_less_than_the_certain_time_holds_the_actors(
        etcd_server: EtcdServer) -> None:
    """The agent's own lease (a keeper process; TTL 6 s, margin 1 s: a
    keepalive every 1.25 s, certain for 5 s after the last one answered)
    reaches etcd through a link that holds every request for 3 s, as a member
    without a leader does during an election: no keepalive is answered, the
    lease goes SUSPENDED after two intervals (2.5 s), and it is answered again
    well before the 5 s are up. The actors are held (serving), never paused,
    and resumed; the lease is never LOST. Pausing them at SUSPENDED stalled
    every process of every host through each etcd leader election (1.4-2.4 s
    in ten-minute chaos runs at TTL 3 s)."""
    hub = ProxyHub().start()
    address, _, port = etcd_server.endpoint.rpartition(":")
    link = hub.proxy("hold/etcd", address, int(port))
    client: Any = open_client(link.address, request_timeout_s=1.0)
    lease = await KeptLease(client, link.address, ttl_s=6, safety_margin_s=1.0).grant()
    agent, handle = _served_agent(lease)
    states: list[LeaseState] = []
    lease.add_listener(states.append)
    lease.add_listener(agent.supervisor.on_lease)
    try:
        last = lease.status().last_ok
        while lease.status().last_ok == last:  # the outage starts right after one
            await asyncio.sleep(0.01)
        link.set_mode(LinkMode.STALL)
        await asyncio.sleep(3.0)
        link.set_mode(LinkMode.PASS)
        await asyncio.sleep(2.5)  # keepalives answered again
    finally:
        await lease.close()
        await client.close()
        hub.close()
    notices = [e[0] for e in handle.log]
    assert LeaseState.SUSPENDED in states and LeaseState.LOST not in states, states
    assert states[-1] is LeaseState.HELD, states
    assert "suspend" not in notices, (notices, states)
    assert notices[0] == "hold" and notices[-1] == "resume", (notices, states)


async def test_a_suspended_actor_refuses_work_and_serves_again_when_resumed() -> None:
    config = ClusterConfig(reasoner={"enabled": False})
    actor = ProcessActor(config, "h1", "svit://t/p", 1, "svit:h1:agent")
    actor._ctrl = object()  # type: ignore[assignment]  # a stand-in: never called here
    work = lambda: {"ok": True}  # noqa: E731

    assert (await actor._run(1, work)).unwrap() == {"ok": True}
    await actor.suspend("host lease suspended", 5, 1)
    refused = await actor._run(1, work)
    assert refused.code == "unavailable", refused
    try:
        actor._guard()
    except UnavailableError as exc:
        assert exc.fields.get("lease_state") == "suspended"
    else:
        raise AssertionError("the guard let a commit through while suspended")
    await actor.resume(4, 1)  # an older notice than the suspension: ignored
    assert (await actor._run(1, work)).failed
    await actor.resume(6, 1)
    assert (await actor._run(1, work)).unwrap() == {"ok": True}
    actor._guard()  # no error: committing is allowed again
    await actor.fence_out("host lease lost", 1)
    await actor.resume(7, 1)  # LOST is for good
    assert (await actor._run(1, work)).failed
    if actor._watchdog is not None:
        actor._watchdog.cancel()


async def test_a_reused_worker_starts_its_next_binding_unsuspended() -> None:
    """A worker parked at a lost lease was suspended under it; bound again under
    the new (HELD) lease it must serve, and a late notice for its old binding
    must not suspend the new one (every request of the rebound process was
    refused as suspended, and its start failed the fence guard)."""
    config = ClusterConfig(reasoner={"enabled": False})
    actor = ProcessActor(config, "h1", "svit://t/p", 1, "svit:h1:agent")
    actor._ctrl = object()  # type: ignore[assignment]  # a stand-in: never called here
    await actor.suspend("host lease suspended", 5, 1)
    await actor.fence_out("host lease lost", 1)
    assert (await actor.unbind(1)) == Unbound(True)
    assert await actor.bind("svit://t/q", 2)
    actor._guard()  # no error: the new binding is not suspended
    await actor.suspend("host lease suspended", 9, 1)  # late, for the old binding
    await actor.fence_out("host lease lost", 1)
    actor._guard()
    assert actor._closed is None
