"""The process actor's delete: fenced, final, and released (no Ray needed).

Two :class:`ProcessActor` objects for one process, as after a failover: A (the
old owner, token 5) and B (the new one, token 9), on the real Redis. A's delete
is refused (fenced) and removes nothing; B's delete removes the process, after
which B answers ``not_found``, A's writes stay refused, a newer activation
finds nothing, and the actor asks its agent to release the ownership record.
The actors are plain objects here (the agent wraps them with ``ray.remote``);
``_leave`` (a Ray call to the agent) is recorded instead.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest

from svit_cluster.cluster._actor import ProcessActor
from svit_cluster.cluster._config import ClusterConfig
from svit_cluster.cluster._results import CreateSpec
from svit_cluster.local import RedisServer

pytestmark = pytest.mark.servers
_n = itertools.count(1)


def _actor(cfg: ClusterConfig, host: str, pid: str, token: int,
           left: list[tuple[str, str]], monkeypatch: pytest.MonkeyPatch) -> ProcessActor:
    actor = ProcessActor(cfg, host, pid, token, f"agent-{host}")

    async def leave(reason: str, *_: Any) -> None:
        left.append((host, reason))

    monkeypatch.setattr(actor, "_leave", leave)
    return actor


async def test_only_the_current_owner_deletes_and_the_delete_is_final(
        redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = ClusterConfig(cluster=f"del{next(_n)}", redis_url=redis_server.url)
    pid = f"svit://t/actor-del-{next(_n)}"
    left: list[tuple[str, str]] = []
    a = _actor(cfg, "h1", pid, 5, left, monkeypatch)
    assert not (await a.start(CreateSpec(memory={"n": 0}))).failed
    assert (await a.inbox(5, "one", None)).unwrap().appended is True
    b = _actor(cfg, "h2", pid, 9, left, monkeypatch)
    assert not (await b.start(None)).failed  # B claimed the fence

    refused = await a.delete(5)
    assert refused.code == "fenced", refused
    assert (await b.state(9, "/memory/n")).unwrap().version == 1  # nothing was removed

    done = (await b.delete(9)).unwrap()
    assert (done.version, done.token) == (1, 9), done
    assert (await b.state(9, "/")).code == "not_found"
    assert (await b.delete(9)).code == "not_found"
    assert (await a.inbox(5, "zombie", None)).failed  # the stale owner stays refused
    c = _actor(cfg, "h3", pid, 12, left, monkeypatch)
    assert (await c.start(None)).code == "not_found"

    await asyncio.sleep(2.3)  # the deleting actor's fallback release
    assert ("h2", "deleted") in left and ("h1", "fenced") in left
