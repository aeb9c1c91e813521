"""The process actor builds its commit backend through ``ClusterConfig.backend_factory``.

No Ray: ``ProcessActor`` is a plain class (the agent wraps it with ``ray.remote``);
its start path runs against the real test Redis. With the default factory a stale
owner's commit is refused; with the unfenced test factory (what
``LocalCluster.up(unsafe_disable_fencing=True)`` passes) it lands.
"""

from __future__ import annotations

import pytest

from svit_cluster.cluster import ClusterConfig
from svit_cluster.cluster._actor import ProcessActor
from svit_cluster.cluster._results import CreateSpec
from svit_cluster.errors import FencedError
from svit_cluster.store import RedisBackend, RedisClient, StoreConfig
from svit_cluster.store.testing import UNFENCED_BACKEND_FACTORY
from tests._commit_log import commit_write
from tests._support import unique
from tests.conftest import RedisTarget

pytestmark = pytest.mark.servers


@pytest.mark.parametrize(("factory", "stale_commits"), [("", False),
                                                        (UNFENCED_BACKEND_FACTORY, True)])
def test_actor_uses_the_configured_backend_factory(
        redis_target: RedisTarget, rclient: RedisClient, factory: str,
        stale_commits: bool) -> None:
    config = ClusterConfig(redis_url=redis_target.url, redis_cluster=redis_target.cluster,
                           backend_factory=factory)
    pid = f"svit://acme/{unique('actor-factory')}"
    actor = ProcessActor(config, "h1", pid, 1, "agent-h1")
    answer = actor._start_sync(CreateSpec(memory={"count": 0}))
    assert answer.version == 0, answer
    newer = RedisBackend(rclient, pid, 2, StoreConfig())
    newer.claim()  # a newer owner: the fence moves to 2
    proc = newer.restore()
    assert proc is not None
    if stale_commits:
        commit_write(actor._backend, proc, 1)
    else:
        with pytest.raises(FencedError):
            commit_write(actor._backend, proc, 1)
