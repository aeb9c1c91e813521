"""Errors across the Ray boundary, without a Ray cluster (fake handles, pure logic).

* the router answers ``unavailable`` only for a timeout, a dead actor or a dead
  node; a ``RayTaskError`` wrapping our typed error is that error; one wrapping
  anything else is a bug: logged with its traceback, answered as ``internal``;
* the host agent never uses a lease it read before an await without checking
  it again (it may be gone: ``'NoneType' object has no attribute 'ensure_held'``).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, ClassVar

import pytest
import ray.exceptions as rex

from svit_cluster.cluster._agent import HostAgent
from svit_cluster.cluster._config import ClusterConfig
from svit_cluster.cluster._results import Outcome, Started
from svit_cluster.cluster._router import RayRouter
from svit_cluster.cluster._routes import Route, RouteCache
from svit_cluster.control import ControlRequest
from svit_cluster.errors import ConflictError, ErrorCode, SvitError, UnavailableError
from svit_cluster.examples import REFERENCE_REQUEST

ACTOR = "svit:h1:test"


class _Method:
    def __init__(self, outcome: Any) -> None:
        self.outcome = outcome
        self.calls = 0

    def remote(self, *args: Any) -> Any:
        self.calls += 1

        async def answer() -> Any:
            if self.outcome == "hang":
                await asyncio.sleep(30)
            if isinstance(self.outcome, BaseException):
                raise self.outcome
            return self.outcome

        return answer()


class FakeHandle:
    """An actor handle whose every method answers ``outcome`` (a value, an exception, "hang")."""

    def __init__(self, outcome: Any) -> None:
        self.outcome = outcome
        self.methods: dict[str, _Method] = {}

    def __getattr__(self, name: str) -> _Method:
        if name.startswith("__"):
            raise AttributeError(name)
        return self.methods.setdefault(name, _Method(self.outcome))


def task_error(cause: BaseException, *, as_cause: bool) -> BaseException:
    """A RayTaskError as Ray raises it (``as_instanceof_cause``: also a subclass of the cause)."""
    err = rex.RayTaskError("control", "Traceback (most recent call last):\n  remote frame\n",
                           cause)
    return err.as_instanceof_cause() if as_cause else err


def router(outcome: Any) -> RayRouter:
    r = RayRouter(ClusterConfig(call_timeout_s=0.2), RouteCache(None, "test"))
    r._handles[ACTOR] = FakeHandle(outcome)
    return r


async def call(r: RayRouter) -> Any:
    return await r._call(ACTOR, "control", b"{}", "t")


@pytest.mark.parametrize("exc", [rex.ActorDiedError(), rex.ActorUnavailableError("gone", None),
                                 rex.NodeDiedError("node died"), rex.WorkerCrashedError(),
                                 rex.GetTimeoutError("slow")],
                         ids=lambda e: type(e).__name__)
async def test_dead_actor_dead_node_or_timeout_is_unavailable(exc: BaseException) -> None:
    r = router(exc)
    with pytest.raises(UnavailableError, match="outcome unknown"):
        await call(r)
    assert ACTOR not in r._handles  # the handle is looked up afresh next time


async def test_no_answer_within_the_deadline_is_unavailable() -> None:
    with pytest.raises(UnavailableError, match="TimeoutError"):
        await call(router("hang"))


@pytest.mark.parametrize("as_cause", [True, False])
async def test_a_bug_in_the_actor_is_internal_and_logged_with_its_traceback(
        as_cause: bool, caplog: pytest.LogCaptureFixture) -> None:
    bug = AttributeError("'NoneType' object has no attribute 'ensure_held'")
    r = router(task_error(bug, as_cause=as_cause))
    with caplog.at_level(logging.ERROR, logger="svit_cluster.cluster._router"):
        with pytest.raises(SvitError) as info:
            await call(r)
    assert info.value.code is ErrorCode.INTERNAL
    assert not isinstance(info.value, UnavailableError)
    assert "AttributeError" in info.value.message
    records = [rec for rec in caplog.records if rec.levelno >= logging.ERROR]
    assert records and records[0].exc_info is not None
    assert "remote frame" in records[0].getMessage()  # the remote traceback is in the log
    assert ACTOR in r._handles  # a bug says nothing about the actor being gone


@pytest.mark.parametrize("as_cause", [True, False])
async def test_our_typed_error_inside_a_task_error_keeps_its_code(as_cause: bool) -> None:
    conflict = ConflictError("process p already exists", token=7)
    with pytest.raises(ConflictError) as info:
        await call(router(task_error(conflict, as_cause=as_cause)))
    assert info.value.code is ErrorCode.CONFLICT and info.value.fields["token"] == 7


async def test_a_bad_call_on_our_side_is_internal_not_unavailable() -> None:
    class NoMethod:
        def __getattr__(self, name: str) -> Any:
            raise AttributeError(name)

    r = router(None)
    r._handles[ACTOR] = NoMethod()
    with pytest.raises(SvitError) as info:
        await call(r)
    assert info.value.code is ErrorCode.INTERNAL


async def test_control_answers_internal_for_a_bug_and_does_not_retry_it() -> None:
    bug = task_error(KeyError("version"), as_cause=True)
    r = router(bug)
    r.cache.ready.set()
    request = ControlRequest.model_validate_json(REFERENCE_REQUEST)
    pid = request.process_id
    r.cache.routes[pid] = Route(pid, "h1", 5, ACTOR)
    with pytest.raises(SvitError) as info:
        await r.control(request, "t")
    assert info.value.code is ErrorCode.INTERNAL
    handle = r._handles[ACTOR]
    assert isinstance(handle, FakeHandle) and handle.methods["control"].calls == 1
    assert r.cache.routes[pid].actor == ACTOR  # the route is kept


# -- the agent: no lease read across an await without checking it again -------------------


class FakeLease:
    def __init__(self) -> None:
        self.held = True
        self.lease_id = 1

    def ensure_held(self) -> None:
        if not self.held:
            raise UnavailableError("lease lost", lease_state="lost")


#: What a spare's ``bind_start_serve`` answers when it starts the process.
STARTED: Outcome[Started] = Outcome.ok(Started(0, "0" * 64))


def agent() -> HostAgent:
    a = HostAgent(ClusterConfig(), "h1")
    a.lease = FakeLease()
    killed: list[Any] = []
    a.pool.kill = killed.append  # type: ignore[method-assign]
    a.killed = killed  # type: ignore[attr-defined]
    return a


async def test_activate_after_the_lease_was_reset_during_an_await_is_unavailable() -> None:
    a = agent()
    spare = ("svit:h1:spare", FakeHandle(STARTED))

    async def take(*_: Any) -> tuple[str, Any]:
        await asyncio.sleep(0)
        a.lease = None  # the rejoin loop dropped the lost lease meanwhile
        return spare

    a._take_actor = take  # type: ignore[method-assign]
    result = await a.activate("p1")
    assert result.code == "unavailable", result
    assert a.pool.spares == [spare]  # the unused actor is kept warm
    assert a.actors == {}


class FakeOwners:
    """Owners whose acquire outlives the lease: the rejoin loop replaces it meanwhile."""

    released: ClassVar[list[Any]] = []

    def __init__(self, lease: Any, **_: Any) -> None:
        self.lease = lease

    async def claim(self, process_id: str, fences: Any) -> Any:
        """Acquire + fence claim in one call (the agent's path since the fence epoch)."""
        self.lease.ensure_held()
        await asyncio.sleep(0)
        AGENT[0].lease = FakeLease()  # rejoined with a new lease

        class Own:
            token = 42

        return Own()

    async def release(self, ownership: Any) -> bool:
        self.released.append(ownership)
        return True


AGENT: list[HostAgent] = []


async def test_an_actor_is_not_registered_under_a_lease_replaced_during_activation(
        monkeypatch: pytest.MonkeyPatch) -> None:
    a = agent()
    AGENT[:] = [a]
    handle = FakeHandle(STARTED)

    async def take(*_: Any) -> tuple[str, Any]:
        return ("svit:h1:x", handle)

    a._take_actor = take  # type: ignore[method-assign]
    a._fences = lambda: None  # type: ignore[method-assign]  # FakeOwners.claim needs no store
    monkeypatch.setattr("svit_cluster.cluster._agent.Owners", FakeOwners)
    FakeOwners.released = []
    result = await a.activate("p1")
    assert result.code == "unavailable", result
    assert a.actors == {}  # never registered: the rejoin loop would not have killed it
    assert a.killed == [handle]  # type: ignore[attr-defined]
    assert len(FakeOwners.released) == 1
    assert not {"bind_start_serve", "serve"} & set(handle.methods)  # never started


class RecordingOwners:
    """Owners whose claim succeeds at once (token 7) and notes what ran before it."""

    def __init__(self, lease: Any, **_: Any) -> None:
        self.lease = lease

    async def claim(self, process_id: str, fences: Any) -> Any:
        class Own:
            token = 7
            address = "svit:h1:spare"

        return Own()

    async def release(self, ownership: Any) -> bool:
        return True


async def test_a_taken_spare_is_replaced_only_after_the_activation_ends(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A Ray worker started beside an activation takes a core from it (cold
    activation), so the agent starts the replacement spare SPARE_REFILL_DELAY_S
    after the activation that took a spare has ended, not when it took it."""
    from svit_cluster.cluster import _agent

    a = agent()
    a.pool.spares = [("svit:h1:spare", FakeHandle(STARTED)),
                 ("svit:h1:other", FakeHandle(STARTED))]
    a._fences = lambda: None  # type: ignore[method-assign]
    a.supervisor.start_watch = lambda *_: None  # type: ignore[method-assign,assignment]
    monkeypatch.setattr("svit_cluster.cluster._agent.Owners", RecordingOwners)
    monkeypatch.setattr(_agent, "SPARE_REFILL_DELAY_S", 0.2, raising=False)
    refills: list[float] = []
    loop = asyncio.get_running_loop()
    a.pool.refill_loop = lambda: _record(refills, loop.time())  # type: ignore[method-assign]

    started = loop.time()
    result = await a.activate("p1")
    ended = loop.time()
    assert result.unwrap().status == "serving", result
    assert len(a.pool.spares) == 1 and "p1" in a.actors
    assert refills == [], "the replacement spare started during the activation"
    await asyncio.sleep(0.35)
    assert len(refills) == 1 and refills[0] - ended >= 0.19, (started, ended, refills)

    # A refill still pending when the host shuts down never runs.
    assert (await a.activate("p2")).unwrap().status == "serving"
    assert a.pool.refill_timer is not None
    a.actors, a.pool.spares, a.lease = {}, [], None  # nothing for shutdown to release or revoke
    await a.shutdown("test")
    await asyncio.sleep(0.35)
    assert len(refills) == 1


async def _record(refills: list[float], now: float) -> None:
    refills.append(now)
