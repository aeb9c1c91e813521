"""A SUSPENDED host lease pauses the host's actors; HELD resumes them; LOST ends them
(pure logic, no Ray cluster: a fake actor handle and a real ProcessActor
object with a stand-in controller).

SUSPENDED is temporary: a keepalive failed (say on an etcd member that just
died) but the lease cannot have expired yet. Closing every actor at that point
would make the loss of one etcd member an outage of every process on the host.
"""

from __future__ import annotations

from typing import Any

from svit_cluster.cluster._actor import ProcessActor
from svit_cluster.cluster._agent import HostAgent
from svit_cluster.cluster._config import ClusterConfig
from svit_cluster.cluster._results import Unbound
from svit_cluster.cluster._types import ServedActor
from svit_cluster.errors import UnavailableError
from svit_cluster.ownership import LeaseState


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
    agent = HostAgent(ClusterConfig().to_dict(), "h1")
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


async def test_a_suspended_actor_refuses_work_and_serves_again_when_resumed() -> None:
    config = ClusterConfig(reasoner={"enabled": False}).to_dict()
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
    config = ClusterConfig(reasoner={"enabled": False}).to_dict()
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
