"""The router's pure logic over fake actor handles and a fake agent (no Ray cluster).

``RayRouter`` reaches actors through handles whose methods have ``.remote(*args)``
returning an awaitable (Ray's ``ObjectRef``). Here each handle wraps a plain
Python object (:class:`FakeAgent`, :class:`FakeActor`) whose async methods answer
the same typed outcomes (``_results.Outcome``) the real agent and actor answer,
so the router's own code runs unchanged: the route cache, placement by load,
single-flight placement, reconcile after a dead actor, the call timeout.
"""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace
from typing import Any

import pytest

from svit_cluster.cluster import (
    Activated,
    ClusterConfig,
    Route,
    RouteCache,
    ServeStatus,
    agent_name,
)
from svit_cluster.cluster._results import Appended, CreateSpec, ForkHistory, Outcome
from svit_cluster.cluster._router import RayRouter, _fingerprint
from svit_cluster.errors import ConflictError, SvitError, UnavailableError, error_class
from svit_cluster.ownership import epoch_key, host_key, owner_key, record_token

CLUSTER = "unit"


def failed(code: str, message: str, **fields: Any) -> Outcome[Any]:
    """An answer carrying the error of ``code`` (as an actor or agent answers it)."""
    return Outcome.fail(error_class(code)(message, **fields))


class FakeHandle:
    """A Ray actor handle over ``target``: ``handle.m.remote(*a)`` awaits ``target.m(*a)``."""

    def __init__(self, target: Any) -> None:
        self._target = target

    def __getattr__(self, method: str) -> Any:
        fn = getattr(self._target, method)
        return SimpleNamespace(remote=lambda *args: fn(*args))


class FakeActor:
    """A process actor: ``inbox`` answers, or fails as a dead actor would."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.dead = False
        self.delay_s = 0.0
        self.calls: list[tuple[str, Any]] = []
        self.traces: list[str | None] = []  # the traceparent the router passed
        self.tokens: list[int] = []  # the owner token each call was routed for

    async def inbox(self, token: int, message: Any, dedup_key: str | None,
                    trace: str | None = None) -> Outcome[Appended]:
        self.calls.append(("inbox", message))
        self.tokens.append(token)
        self.traces.append(trace)
        await asyncio.sleep(self.delay_s)
        if self.dead:
            raise UnavailableError(f"actor {self.name} died")
        return Outcome.ok(Appended(True, 1))


class FakeAgent:
    """A host agent: ``activate`` places on this host (optionally gated), ``reconcile``."""

    def __init__(self, host: str, router: RayRouter) -> None:
        self.host = host
        self.router = router
        self.activations: list[str] = []
        self.reconciled: list[str] = []
        self.gate: asyncio.Event | None = None
        self.answer: Outcome[Activated] | None = None
        self.actors: dict[str, FakeActor] = {}

    async def activate(self, process_id: str, create: CreateSpec | None
                       ) -> Outcome[Activated]:
        self.activations.append(process_id)
        if self.gate is not None:
            await self.gate.wait()
        if self.answer is not None:
            return self.answer
        name = f"svit:{self.host}:{process_id}"
        actor = self.actors[process_id] = FakeActor(name)
        self.router._handles[name] = FakeHandle(actor)
        return Outcome.ok(Activated(ServeStatus.SERVING, self.host, 7, name))

    async def reconcile(self, process_id: str) -> bool:
        self.reconciled.append(process_id)
        return True


def routes_cache(hosts: list[str]) -> RouteCache:
    cache = RouteCache(None, CLUSTER)  # never started: filled through _apply, as a watch does
    for h in hosts:
        cache._apply(host_key(CLUSTER, h), json.dumps({"host": h}).encode(), 1)
    cache.ready.set()
    return cache


def fake_cluster(hosts: list[str], *, call_timeout_s: float = 5.0
                 ) -> tuple[RayRouter, dict[str, FakeAgent]]:
    router = RayRouter(ClusterConfig(cluster=CLUSTER, call_timeout_s=call_timeout_s),
                       routes_cache(hosts))
    agents = {h: FakeAgent(h, router) for h in hosts}
    for h, agent in agents.items():
        router._handles[agent_name(h)] = FakeHandle(agent)
    return router, agents


# -- the route cache ---------------------------------------------------------------------


async def test_a_new_registration_of_a_host_forgets_its_old_agent_and_prewarms_the_new(
) -> None:
    """A restarted host's agent is a new actor under the old name: the handle of
    the old one is dropped (a call through it would fail and make the host
    suspect for a TTL), the host is no longer suspect, and the new agent is
    resolved and called at once, in the background."""
    router, agents = fake_cluster(["a", "b"])

    class Pinged(FakeAgent):
        pings = 0

        async def ping(self) -> bool:
            Pinged.pings += 1
            return True

    new = Pinged("b", router)
    resolved: list[str] = []

    async def handle(name: str) -> Any:
        resolved.append(name)
        router._handles[name] = FakeHandle(new)
        return router._handles[name]

    router._handle = handle  # type: ignore[method-assign]
    router.host_watch.mark_unanswering("b")
    router.cache._apply(host_key(CLUSTER, "b"), json.dumps({"host": "b"}).encode(), 2)
    assert agent_name("b") not in router._handles
    assert "b" not in router.host_watch.excluded()
    await asyncio.gather(*router._prewarming)
    assert resolved == [agent_name("b")] and Pinged.pings == 1
    # the same registration seen again (a reload): nothing to do
    router.cache._apply(host_key(CLUSTER, "b"), json.dumps({"host": "b"}).encode(), 2)
    assert not router._prewarming and router._handles[agent_name("b")]._target is new
    assert agents["a"] is not None


def test_route_cache_applies_owner_and_host_records_and_deletes() -> None:
    cache = routes_cache(["a", "b"])
    value = json.dumps({"host": "a", "address": "svit:a:1"}).encode()
    cache._apply(owner_key(CLUSTER, "svit://t/p"), value, 42)
    assert cache.routes["svit://t/p"] == Route("svit://t/p", "a", record_token(value, 42),
                                               "svit:a:1")
    assert cache.load() == {"a": 1, "b": 0}
    cache._apply(owner_key(CLUSTER, "svit://t/p"), None, 0)  # the record went
    assert cache.routes == {} and cache.load() == {"a": 0, "b": 0}
    cache._apply(host_key(CLUSTER, "b"), None, 0)  # host b's lease ran out
    assert sorted(cache.hosts) == ["a"]


def test_route_cache_ignores_malformed_and_foreign_keys() -> None:
    cache = routes_cache(["a"])
    cache._apply(owner_key(CLUSTER, "svit://t/bad"), b"not json", 5)
    cache._apply(owner_key(CLUSTER, "svit://t/nohost"), b'{"address": "x"}', 5)
    cache._apply(epoch_key(CLUSTER), b"3", 5)
    cache._apply(owner_key("other", "svit://t/p"), b'{"host": "a", "address": "x"}', 5)
    assert cache.routes == {}
    cache._apply(host_key(CLUSTER, "c"), b"garbage", 5)  # a host is live even unreadable
    assert cache.hosts["c"] == {"host": "c"}


def test_load_counts_only_routes_on_live_hosts() -> None:
    cache = routes_cache(["a"])
    for pid, host in (("svit://t/1", "a"), ("svit://t/2", "gone")):
        cache._apply(owner_key(CLUSTER, pid),
                     json.dumps({"host": host, "address": f"svit:{host}:1"}).encode(), 3)
    assert cache.load() == {"a": 1}


# -- placement and single flight ---------------------------------------------------------


async def test_placement_goes_to_the_least_loaded_host() -> None:
    router, agents = fake_cluster(["a", "b"])
    router.cache._apply(owner_key(CLUSTER, "svit://t/x"),
                        json.dumps({"host": "a", "address": "svit:a:x"}).encode(), 3)
    route = await router._route("svit://t/new")
    assert route.host == "b" and agents["b"].activations == ["svit://t/new"]
    assert agents["a"].activations == []
    assert router.cache.routes["svit://t/new"] == route  # cached until etcd says more


async def test_concurrent_requests_for_an_unplaced_process_activate_it_once() -> None:
    router, agents = fake_cluster(["a"])
    gate = agents["a"].gate = asyncio.Event()
    first = asyncio.create_task(router._route("svit://t/p"))
    second = asyncio.create_task(router._route("svit://t/p"))
    await asyncio.sleep(0.05)
    assert agents["a"].activations == ["svit://t/p"]  # the second waits on the first
    gate.set()
    r1, r2 = await asyncio.gather(first, second)
    assert r1 == r2 and agents["a"].activations == ["svit://t/p"]
    assert router._placing == {}


async def test_a_failed_placement_is_not_remembered() -> None:
    router, agents = fake_cluster(["a"])
    agents["a"].answer = failed("unavailable", "lease suspended")
    with pytest.raises(UnavailableError):
        await router._route("svit://t/p")
    assert router._placing == {}
    agents["a"].answer = None  # the agent can serve again
    route = await router._route("svit://t/p")
    assert route.host == "a" and agents["a"].activations == ["svit://t/p"] * 2


async def test_a_process_owned_elsewhere_routes_to_its_owner_and_is_not_created() -> None:
    router, agents = fake_cluster(["a", "b"])
    for agent in agents.values():  # placement may ask either (ties go round)
        agent.answer = Outcome.ok(Activated(ServeStatus.OWNED, "b", 9, "svit:b:1"))
    route = await router._place("svit://t/p", None)
    assert route == Route("svit://t/p", "b", 9, "svit:b:1")
    with pytest.raises(ConflictError):
        await router._place("svit://t/q", CreateSpec())


@pytest.mark.parametrize("first", ["call failed", "answered unavailable"])
@pytest.mark.parametrize("second_answer", [
    Outcome.ok(Activated(ServeStatus.OWNED, "a", 7, "svit:a:p")),
    failed("conflict", "process svit://t/p already exists in the store"),
])
async def test_a_create_whose_first_attempt_is_unknown_is_not_answered_conflict(
    second_answer: Outcome[Activated], first: str,
) -> None:
    """Host a creates the process, but its answer is lost (the call fails as
    ``unavailable``) or is ``unavailable`` (its actor's start timed out after
    the store create); placement moves on to b, which finds the process owned
    or in the store. That may be this create's own doing, so the answer is
    ``unavailable`` (retry; the SDK compares the content), not ``conflict``."""
    router, agents = fake_cluster(["a", "b"])
    created: list[str] = []

    async def created_then_lost(process_id: str, create: CreateSpec | None
                                ) -> Outcome[Activated]:
        created.append(process_id)
        if first == "call failed":
            raise UnavailableError("agent call timed out")
        return failed("unavailable", "actor start failed: TimeoutError")

    agents["a"].activate = created_then_lost  # type: ignore[method-assign]
    agents["b"].answer = second_answer
    agents["b"].activations.clear()
    with pytest.raises(UnavailableError, match="may be this create's own doing"):
        await router._place("svit://t/p", CreateSpec())
    assert created == ["svit://t/p"] and agents["b"].activations == ["svit://t/p"]
    # the same answer without an unknown attempt before it is a real conflict
    router2, agents2 = fake_cluster(["b"])
    agents2["b"].answer = second_answer
    with pytest.raises(ConflictError):
        await router2._place("svit://t/p", CreateSpec())


async def test_create_of_a_known_process_conflicts_without_asking_an_agent() -> None:
    router, agents = fake_cluster(["a"])
    await router._route("svit://t/p")
    with pytest.raises(ConflictError):
        await router.create("svit://t/p", {}, {})
    assert agents["a"].activations == ["svit://t/p"]


# -- reconcile and the call timeout ------------------------------------------------------


async def test_a_dead_actor_makes_the_router_ask_its_agent_to_reconcile() -> None:
    router, agents = fake_cluster(["a"])
    await router._route("svit://t/p")
    agents["a"].actors["svit://t/p"].dead = True
    with pytest.raises(UnavailableError):
        await router.inbox("svit://t/p", {"m": 1}, None)
    assert agents["a"].reconciled == ["svit://t/p"]


async def test_the_callers_trace_reaches_the_actor() -> None:
    """The router passes the current W3C ``traceparent`` to the actor's call."""
    from svit_cluster import tracing

    router, agents = fake_cluster(["a"])
    await router._route("svit://t/p")
    parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    with tracing.use_traceparent(parent):
        await router.inbox("svit://t/p", {"m": 1}, None)
    await router.inbox("svit://t/p", {"m": 2}, None)
    sent = agents["a"].actors["svit://t/p"].traces
    assert sent[0] is not None and sent[0].split("-")[1] == parent.split("-")[1]
    assert sent[1] is None


async def test_no_reconcile_when_the_owner_host_is_gone() -> None:
    router, agents = fake_cluster(["a"])
    await router._route("svit://t/p")
    agents["a"].actors["svit://t/p"].dead = True
    router.cache._apply(host_key(CLUSTER, "a"), None, 0)  # its lease expires on its own
    with pytest.raises(UnavailableError):
        await router.inbox("svit://t/p", {"m": 1}, None)
    assert agents["a"].reconciled == []


async def test_a_call_past_its_timeout_is_unavailable_and_drops_the_handle() -> None:
    router, agents = fake_cluster(["a"], call_timeout_s=0.05)
    route = await router._route("svit://t/p")
    agents["a"].actors["svit://t/p"].delay_s = 1.0
    with pytest.raises(UnavailableError) as info:
        await router.inbox("svit://t/p", {"m": 1}, None)
    assert "did not answer" in info.value.message
    assert route.actor not in router._handles  # looked up again on the next call


async def test_an_answered_error_is_raised_with_its_code() -> None:
    router, agents = fake_cluster(["a"])
    await router._route("svit://t/p")
    actor = agents["a"].actors["svit://t/p"]

    async def refused(token: int, message: Any, dedup_key: str | None,
                      trace: str | None = None) -> Outcome[Appended]:
        return failed("inbox_closed", "closed")

    actor.inbox = refused  # type: ignore[method-assign]
    with pytest.raises(SvitError) as info:
        await router.inbox("svit://t/p", {"m": 1}, None)
    assert info.value.code == "inbox_closed"


async def test_health_reports_the_cache() -> None:
    router, _ = fake_cluster(["a", "b"])
    await router._route("svit://t/p")
    assert await router.health() == {"ok": True, "hosts_live": 2, "hosts": ["a", "b"],
                                      "routes": 1, "revision": 0}


# -- a call in flight when its owner's record goes (e.g. a paused host) -----------------


def _owner_record(host: str, actor: str) -> bytes:
    return json.dumps({"host": host, "address": actor}).encode()


async def test_a_call_in_flight_is_abandoned_the_moment_its_owner_record_goes() -> None:
    """A paused owner never answers: the call must end when its lease's records go
    (revoked or expired), not at the call deadline, and the paused host's agent
    is not asked to reconcile (it would hang too)."""
    router, agents = fake_cluster(["a", "b"], call_timeout_s=5.0)
    route = await router._route("svit://t/p")
    # the watch delivers the record the placement wrote
    router.cache._apply(owner_key(CLUSTER, "svit://t/p"),
                        _owner_record(route.host, route.actor), 9)
    actor = agents[route.host].actors["svit://t/p"]
    actor.delay_s = 5.0  # paused: answers only at the deadline
    loop = asyncio.get_running_loop()
    started = loop.time()
    call = asyncio.ensure_future(router.inbox("svit://t/p", {"m": 1}, None))
    await asyncio.sleep(0.1)
    assert not call.done()
    router.cache._apply(owner_key(CLUSTER, "svit://t/p"), None, 0)  # its lease is gone
    with pytest.raises(UnavailableError) as info:
        await asyncio.wait_for(call, 1.0)
    assert loop.time() - started < 1.0
    assert info.value.fields.get("route_moved") is True
    assert agents[route.host].reconciled == []
    assert router.cache._movers == {}  # nothing left behind


async def test_a_record_rewritten_for_the_same_actor_does_not_abandon_its_call() -> None:
    router, agents = fake_cluster(["a"], call_timeout_s=5.0)
    route = await router._route("svit://t/p")
    router.cache._apply(owner_key(CLUSTER, "svit://t/p"),
                        _owner_record(route.host, route.actor), 9)
    agents["a"].actors["svit://t/p"].delay_s = 0.3
    call = asyncio.ensure_future(router.inbox("svit://t/p", {"m": 1}, None))
    await asyncio.sleep(0.05)
    # re-bound under a new lease: same actor, new token -- the call stays
    router.cache._apply(owner_key(CLUSTER, "svit://t/p"),
                        _owner_record(route.host, route.actor), 12)
    assert (await asyncio.wait_for(call, 2.0))["appended"] is True


async def test_a_record_naming_another_actor_abandons_the_call() -> None:
    router, agents = fake_cluster(["a", "b"], call_timeout_s=5.0)
    route = await router._route("svit://t/p")
    router.cache._apply(owner_key(CLUSTER, "svit://t/p"),
                        _owner_record(route.host, route.actor), 9)
    agents[route.host].actors["svit://t/p"].delay_s = 5.0
    call = asyncio.ensure_future(router.inbox("svit://t/p", {"m": 1}, None))
    await asyncio.sleep(0.05)
    other = "b" if route.host == "a" else "a"
    router.cache._apply(owner_key(CLUSTER, "svit://t/p"),
                        _owner_record(other, f"svit:{other}:new"), 20)
    with pytest.raises(UnavailableError):
        await asyncio.wait_for(call, 1.0)


async def test_processes_placed_at_once_spread_over_the_hosts() -> None:
    """A failed host's processes are placed all at once: activations under way count
    as load, so they do not all land on one host past its warm spares."""
    router, agents = fake_cluster(["a", "b", "c"])
    gate = asyncio.Event()
    for agent in agents.values():
        agent.gate = gate
    calls = [asyncio.ensure_future(router._route(f"svit://t/{n}")) for n in range(3)]
    await asyncio.sleep(0.05)
    gate.set()
    routes = await asyncio.gather(*calls)
    assert sorted(r.host for r in routes) == ["a", "b", "c"]
    assert router._activating == {}


async def _three_placed_at_once(router: Any, agents: dict[str, Any]
                                ) -> tuple[dict[str, int], list[str]]:
    """Survivors b and c holding 5 and 2 processes; three processes placed at
    once, held at a gate until all three are under way. Returns the
    activations under way per host then, and the hosts placed on (sorted)."""
    for n, host in enumerate(["b"] * 5 + ["c"] * 2):
        router.cache._apply(owner_key(CLUSTER, f"svit://t/old-{n}"),
                            json.dumps({"host": host, "address": f"svit:{host}:{n}"}).encode(), 3)
    gate = asyncio.Event()
    for agent in agents.values():
        agent.gate = gate
    calls = [asyncio.ensure_future(router._route(f"svit://t/{n}")) for n in range(3)]
    for _ in range(200):  # each first asks Redis (in a thread) whether the process exists
        if sum(router._activating.values()) == 3:
            break
        await asyncio.sleep(0.01)
    activating = dict(router._activating)
    gate.set()
    return activating, sorted(r.host for r in await asyncio.gather(*calls))


async def test_processes_placed_at_once_go_to_a_host_with_a_warm_spare_left() -> None:
    """Three processes of a failed host placed at once, on survivors holding 5 and 2
    processes, 2 warm spares each: by load alone all three would go to the
    lighter host, the third past its spares (a cold Ray worker start); the third
    goes to the other host, whose spares are idle."""
    router, agents = fake_cluster(["b", "c"])
    activating, hosts = await _three_placed_at_once(router, agents)
    assert activating == {"c": 2, "b": 1}
    assert hosts == ["b", "c", "c"]
    assert router._activating == {}


async def test_a_host_whose_spares_are_still_starting_is_placed_on_last() -> None:
    """Survivors holding 5 and 2 processes, the lighter one just restarted: its
    record says it is not warm yet (no spare up), so two processes placed at
    once both go to the warm host's spares, not to cold starts on the lighter."""
    router, _ = fake_cluster(["b", "c"])
    # An update of c's record keeps its create revision (1: etcd's, for a key
    # rewritten under the same lease); a new revision would be a new registration.
    router.cache._apply(host_key(CLUSTER, "c"),
                        json.dumps({"host": "c", "warm": False}).encode(), 1)
    for n, host in enumerate(["b"] * 5 + ["c"] * 2):
        router.cache._apply(owner_key(CLUSTER, f"svit://t/old-{n}"),
                            json.dumps({"host": host, "address": f"svit:{host}:{n}"}).encode(), 3)
    routes = await asyncio.gather(*(router._route(f"svit://t/{n}") for n in range(2)))
    assert sorted(r.host for r in routes) == ["b", "b"]
    # once warm, it is the lighter host again
    router.cache._apply(host_key(CLUSTER, "c"),
                        json.dumps({"host": "c", "warm": True}).encode(), 1)
    assert (await router._route("svit://t/2")).host == "c"


# -- residency: full hosts, moved bindings ------------------------------------------------


FULL: Outcome[Activated] = failed("unavailable", "host is full", host_full=True, active=8,
                                  max_active=8)


async def test_placement_tries_every_host_then_answers_cluster_full_with_retry_after() -> None:
    """Each host at its budget with every actor busy answers ``host_full``; the
    router tries them all, then answers ``cluster_full`` (a 503 whose
    Retry-After comes from the error) -- and tries a host that was just full
    only after the others."""
    from svit_cluster.gateway._errors import from_exception

    router, agents = fake_cluster(["a", "b", "c"])
    for agent in agents.values():
        agent.answer = FULL
    with pytest.raises(UnavailableError) as info:
        await router._place("svit://t/p", None)
    assert info.value.fields["cluster_full"] is True
    assert info.value.fields["hosts"] == ["a", "b", "c"]
    assert sorted(a for agent in agents.values() for a in agent.activations) == ["svit://t/p"] * 3
    response = from_exception(info.value)
    assert response.status_code == 503 and response.headers["Retry-After"] == "1"
    body = json.loads(bytes(response.body))
    assert body["error"]["fields"]["cluster_full"] is True

    agents["a"].answer = agents["b"].answer = None  # room again on a and b
    agents["c"].answer = None
    for agent in agents.values():
        agent.activations.clear()
    router._full_until = {"a": 1e18, "b": 1e18}  # a and b were full just now, c not
    route = await router._place("svit://t/q", None)
    assert route.host == "c" and agents["c"].activations == ["svit://t/q"]


async def test_a_call_refused_as_route_moved_is_sent_once_to_the_current_owner() -> None:
    """A worker that passivated the process (and may serve another one now)
    refuses a request routed to the old binding before running it; the router
    places the process again and sends the request once more."""
    router, agents = fake_cluster(["a"])
    route = await router._route("svit://t/p")
    moved = failed("unavailable", "not served here", route_moved=True)
    old = agents["a"].actors["svit://t/p"]
    calls: list[int] = []

    async def refused(token: int, message: Any, dedup_key: str | None,
                      trace: str | None = None) -> Outcome[Appended]:
        calls.append(token)
        return moved

    old.inbox = refused  # type: ignore[method-assign]
    router.cache.routes.pop("svit://t/p")  # its ownership record went (watch)
    router.cache.routes["svit://t/p"] = route  # ... but this gateway has not seen it yet
    agents["a"].actors.clear()
    result = await router.inbox("svit://t/p", {"hi": 1}, None)
    assert result == {"appended": True, "version": 1}
    assert calls == [route.token] and agents["a"].activations == ["svit://t/p", "svit://t/p"]


async def test_a_slow_activation_is_answered_503_in_time_and_a_retry_joins_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """An activation slower than PLACEMENT_WAIT_S (a full host waiting for a free
    process actor) answers ``unavailable`` (``activating``) before a client's
    timeout; it goes on, and the retry gets its route without a second
    activation."""
    from svit_cluster.cluster import _router as router_module

    monkeypatch.setattr(router_module, "PLACEMENT_WAIT_S", 0.2)
    router, agents = fake_cluster(["a"])
    agents["a"].gate = asyncio.Event()
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(UnavailableError) as info:
        await router._route("svit://t/p")
    assert loop.time() - started < 1.0
    assert info.value.fields["activating"] is True and info.value.fields["retry_after_s"] == 1
    retry = asyncio.ensure_future(router._route("svit://t/p"))
    await asyncio.sleep(0.05)
    agents["a"].gate.set()
    route = await retry
    assert route.host == "a" and agents["a"].activations == ["svit://t/p"]


async def test_a_create_retried_while_it_is_under_way_joins_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A client retries its create after the 503 of PLACEMENT_WAIT_S: the retry
    waits for the same placement instead of starting a second activation of the
    process on another host (under load every retry added one, and hosts shed
    hundreds of activations). A create of other content is not joined."""
    from svit_cluster.cluster import _router as router_module

    monkeypatch.setattr(router_module, "PLACEMENT_WAIT_S", 0.2)
    router, agents = fake_cluster(["a", "b"])
    for agent in agents.values():
        agent.gate = asyncio.Event()
    with pytest.raises(UnavailableError):
        await router.create("svit://t/p", {"n": 1}, {})
    with pytest.raises(UnavailableError) as other:
        await router.create("svit://t/p", {"n": 1.0}, {})  # a float, not the same content
    assert other.value.fields["activating"] is True
    retry = asyncio.ensure_future(router.create("svit://t/p", {"n": 1}, {}))
    await asyncio.sleep(0.05)
    for agent in agents.values():
        agent.gate.set()
    info = await retry
    assert info["process_id"] == "svit://t/p"
    assert sum(len(agent.activations) for agent in agents.values()) == 1


def test_a_create_fingerprint_follows_its_content_exactly() -> None:
    """Equal content gives one fingerprint (a retry joins the create under way);
    any difference in memory (an integer 1 is not a float 1.0), scripts,
    snapshot or fork history gives another."""
    from svit_cluster.process import Script

    new = CreateSpec(memory={"n": 1}, scripts={"s": Script("(define (main i) i)")})
    assert _fingerprint(new) == _fingerprint(
        CreateSpec(memory={"n": 1}, scripts={"s": Script("(define (main i) i)")}))
    others = [
        CreateSpec(memory={"n": 1.0}, scripts={"s": Script("(define (main i) i)")}),
        CreateSpec(memory={"n": 1}, scripts={"s": Script("(define (main i) 1)")}),
        CreateSpec(memory={"n": 1}),
        CreateSpec(snapshot=b"\x01"),
        CreateSpec(snapshot=b"\x01", history=ForkHistory("svit://t/parent", 2)),
        CreateSpec(snapshot=b"\x01", history=ForkHistory("svit://t/parent", 3)),
        CreateSpec(snapshot=b"\x02", history=ForkHistory("svit://t/parent", 3)),
    ]
    prints = {_fingerprint(spec) for spec in [new, *others]}
    assert len(prints) == 1 + len(others)
    assert _fingerprint(CreateSpec(snapshot=b"\x01", history=ForkHistory("svit://t/parent", 2))
                        ) == _fingerprint(others[4])


def test_a_create_is_either_new_content_or_a_fork() -> None:
    with pytest.raises(ValueError, match="history needs"):
        CreateSpec(history=ForkHistory("svit://t/parent", 2))
    with pytest.raises(ValueError, match="snapshot only"):
        CreateSpec(memory={"n": 1}, snapshot=b"\x01")


# -- unknown processes --------------------------------------------------------------------


async def test_an_unknown_or_deleted_process_is_not_found_without_asking_an_agent(
        redis_server: Any) -> None:
    """A process the commit log does not hold (no head key: never created, or
    deleted) is answered ``not_found`` by the router itself; only a stored one
    is placed. Real redis-server, fake agents."""
    from svit_cluster.errors import NotFound
    from svit_cluster.store import ProcessKeys, connect

    router = RayRouter(ClusterConfig(cluster=CLUSTER, redis_url=redis_server.url),
                       routes_cache(["a"]))
    agent = FakeAgent("a", router)
    router._handles[agent_name("a")] = FakeHandle(agent)
    pid = f"svit://t/unknown-{id(router)}"
    try:
        with pytest.raises(NotFound) as raised:
            await router._route(pid)
        assert raised.value.code == "not_found" and agent.activations == []
        rc = connect(redis_server.url)
        try:
            rc.hset(ProcessKeys(pid).head, mapping={"version": 0})  # as a create leaves it
            route = await router._route(pid)
            assert route.host == "a" and agent.activations == [pid]
            rc.delete(ProcessKeys(pid).head)  # as a delete leaves it
        finally:
            rc.close()
        router.cache.routes.pop(pid, None)
        with pytest.raises(NotFound):
            await router._route(pid)
        assert agent.activations == [pid]
    finally:
        await router.close()


async def test_a_host_whose_record_states_more_spares_takes_that_many_warm() -> None:
    """Survivors holding 5 and 2 processes; the lighter one's record states 3
    spares (its share of a failed peer's processes, cluster._headroom): three
    processes placed at once all go to its spares; with the default 2 the
    third would go to the other host."""
    router, agents = fake_cluster(["b", "c"])
    router.cache._apply(host_key(CLUSTER, "c"),
                        json.dumps({"host": "c", "warm": True, "spares": 3}).encode(), 1)
    activating, hosts = await _three_placed_at_once(router, agents)
    assert activating == {"c": 3}
    assert hosts == ["c", "c", "c"]


async def test_a_host_whose_spares_are_taken_is_cold_until_its_record_says_they_are_up() -> None:
    """The lighter survivor's record states a target of 3 spares but 0 ready (the
    last failover took them): two processes placed at once both go to the other
    host; once its record says 3 ready, it is the lighter host again."""
    router, _ = fake_cluster(["b", "c"])
    router.cache._apply(host_key(CLUSTER, "c"), json.dumps(
        {"host": "c", "warm": True, "spares": 3, "ready": 0}).encode(), 1)
    for n, host in enumerate(["b"] * 5 + ["c"] * 2):
        router.cache._apply(owner_key(CLUSTER, f"svit://t/old-{n}"),
                            json.dumps({"host": host, "address": f"svit:{host}:{n}"}).encode(), 3)
    routes = await asyncio.gather(*(router._route(f"svit://t/{n}") for n in range(2)))
    assert sorted(r.host for r in routes) == ["b", "b"]
    router.cache._apply(host_key(CLUSTER, "c"), json.dumps(
        {"host": "c", "warm": True, "spares": 3, "ready": 3}).encode(), 1)
    assert (await router._route("svit://t/2")).host == "c"
