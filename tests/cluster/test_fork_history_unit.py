"""The cluster path of a fork with history, on the real Redis, without Ray.

``RayRouter.fork(..., history=True)`` runs unchanged over fake agents whose
``activate`` starts a real :class:`ProcessActor` (plain objects reached through
handles with ``.remote``, as in ``test_router_unit``): the parent's actor forks
its state and names the acknowledged event prefix of that same state; the
child's actor copies the prefix (``events.fork_events``) after claiming the
child and before creating it, then serves. Reference semantics: a durable fork
shares an immutable event prefix, then parent and child are isolated (the
reasoning-loop tests of everruns/svit).
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

from svit_cluster.cluster import ClusterConfig, RouteCache, agent_name
from svit_cluster.cluster._actor import ProcessActor
from svit_cluster.cluster._results import CreateSpec, Outcome
from svit_cluster.cluster._router import RayRouter
from svit_cluster.cluster._types import Activated, ServeStatus
from svit_cluster.errors import ConflictError, NotFound
from svit_cluster.events import fork_events, session_for
from svit_cluster.local import RedisServer
from svit_cluster.ownership import host_key
from svit_cluster.store import connect

pytestmark = pytest.mark.servers
_n = itertools.count(1)


class Handle:
    """A Ray actor handle over ``target``: ``handle.m.remote(*a)`` awaits ``target.m(*a)``."""

    def __init__(self, target: Any) -> None:
        self._target = target

    def __getattr__(self, method: str) -> Any:
        fn = getattr(self._target, method)
        return SimpleNamespace(remote=lambda *args: fn(*args))


class Agent:
    """A host agent whose ``activate`` starts and serves a real process actor."""

    def __init__(self, host: str, router: RayRouter, cfg: ClusterConfig,
                 tokens: itertools.count[int]) -> None:
        self.host, self.router, self.cfg, self.tokens = host, router, cfg, tokens
        self.actors: list[ProcessActor] = []

    async def activate(self, process_id: str, create: CreateSpec | None
                       ) -> Outcome[Activated]:
        token = next(self.tokens)
        actor = ProcessActor(self.cfg, self.host, process_id, token, agent_name(self.host))
        answer = await actor.start(create)
        if answer.failed:
            return answer.failure()
        await actor.serve()
        self.actors.append(actor)
        name = f"svit:{self.host}:{process_id}:{token}"
        self.router._handles[name] = Handle(actor)
        return Outcome.ok(Activated(ServeStatus.SERVING, self.host, token, name))

    async def close(self) -> None:
        for actor in self.actors:
            await actor._stop_loop()
            if actor._watchdog is not None:
                actor._watchdog.cancel()


async def wait_for(check: Callable[[], Any], timeout_s: float = 15.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not await check():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def test_ray_router_fork_with_history_copies_the_prefix_once(
        redis_server: RedisServer) -> None:
    n = next(_n)
    cluster = f"forkh{n}"
    cfg = ClusterConfig(cluster=cluster, redis_url=redis_server.url)
    cache = RouteCache(None, cluster)  # never started: filled as a watch would
    cache._apply(host_key(cluster, "h1"), json.dumps({"host": "h1"}).encode(), 1)
    cache.ready.set()
    router = RayRouter(cfg, cache)
    agent = Agent("h1", router, cfg, itertools.count(5))
    router._handles[agent_name("h1")] = Handle(agent)
    client = connect(redis_server.url)
    parent, child, retried = (f"svit://t/forkh-{n}-{x}" for x in ("p", "c", "r"))

    async def turns(pid: str) -> int:
        value, _ = await router.state(pid, "/thread")
        session = value.get("session") if isinstance(value, dict) else None
        return int(session["turns"]) if isinstance(session, dict) and \
            session.get("process") == pid else 0

    def log(pid: str) -> list[tuple[int, int, str]]:
        key = f"svit:{{{pid}}}:events:{session_for(pid)}"
        return [(int(eid.decode().split("-")[0]), json.loads(f[b"event"])["turn"],
                 json.loads(f[b"event"])["session"])
                for eid, f in client.xrange(key)]

    try:
        await router.create(parent, {"n": 1}, {})
        await router.inbox(parent, {"content": "before fork"}, None)
        await wait_for(lambda: _eq(turns(parent), 1))

        info = await router.fork(parent, child, history=True)
        assert info["history"] == {"upto_seq": 2}
        parent_session = session_for(parent)
        assert log(child) == [(1, 1, parent_session), (2, 1, parent_session)]
        await router.inbox(child, {"content": "after fork"}, None)
        await wait_for(lambda: _eq(turns(child), 2))  # continues after the prefix
        await router.inbox(parent, {"content": "parent again"}, None)
        await wait_for(lambda: _eq(turns(parent), 2))
        child_log = log(child)
        assert [(s, t) for s, t, _ in child_log] == [(1, 1), (2, 1), (3, 2), (4, 2)]
        assert child_log[2][2] == session_for(child)
        assert [s for s, _, _ in log(parent)] == [1, 2, 3, 4]
        assert {sess for _, _, sess in log(parent)} == {parent_session}  # isolated

        # a fork that copied (at the older version) and then crashed before the
        # create is retried: the retry's snapshot is newer, so its prefix is
        # longer; the copied events are kept, only the missing ones are added
        assert fork_events(client, parent, retried, upto_seq=2) == 2
        again = await router.fork(parent, retried, history=True)
        assert again["history"] == {"upto_seq": 4}
        assert log(retried) == log(parent)  # 1..4 once each, the parent's events

        # the child exists: refused by the router (409), and by the child's
        # actor when the router does not know it, leaving its log untouched
        with pytest.raises(ConflictError):
            await router.fork(parent, child, history=True)
        del router.cache.routes[child]
        with pytest.raises(ConflictError):
            await router.fork(parent, child, history=True)
        assert log(child) == child_log
        with pytest.raises(NotFound):
            await router.fork(f"svit://t/forkh-{n}-nobody", f"svit://t/forkh-{n}-x",
                              history=True)
    finally:
        await agent.close()
        client.close()


async def _eq(value: Any, expected: Any) -> bool:
    return bool(await value == expected)
