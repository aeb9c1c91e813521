"""The commit-backend factory a process actor uses (``ClusterConfig.backend_factory``).

The default builds the fenced ``RedisBackend``; the chaos negative control names the
unfenced test factory by import path, so production code never imports
``svit_cluster.store.testing``. Real Redis: a stale owner's commit is refused by the
default backend and accepted by the unfenced one.
"""

from __future__ import annotations

import pytest

from svit_cluster.errors import ConfigurationError, FencedError
from svit_cluster.process import Process
from svit_cluster.store import RedisBackend, RedisClient, StoreConfig, load_backend_factory
from svit_cluster.store.testing import UNFENCED_BACKEND_FACTORY, unfenced_backend
from tests._commit_log import commit_write
from tests._support import unique

pytestmark = pytest.mark.servers


def test_factory_paths_resolve() -> None:
    assert load_backend_factory("") is RedisBackend
    assert load_backend_factory(UNFENCED_BACKEND_FACTORY) is unfenced_backend
    for bad in ("no-colon", "svit_cluster.store:nope", "no_such_module_xyz:f",
                "svit_cluster.store:DEFAULT_PREFIX"):
        with pytest.raises(ConfigurationError):
            load_backend_factory(bad)


@pytest.mark.parametrize(("path", "stale_commits"), [("", False),
                                                     (UNFENCED_BACKEND_FACTORY, True)])
def test_only_the_unfenced_factory_lets_a_stale_owner_commit(
        rclient: RedisClient, path: str, stale_commits: bool) -> None:
    pid = f"svit://acme/{unique('factory')}"
    config = StoreConfig(prefix=unique("bf"))
    stale = load_backend_factory(path)(rclient, pid, 1, config)
    stale.claim()
    proc = Process.create(pid, memory={"count": 0})
    stale.create(proc)
    newer = RedisBackend(rclient, pid, 2, config)
    newer.claim()  # the fence moves to 2
    if stale_commits:
        commit_write(stale, proc, 1)
        assert stale.head().version == 1
    else:
        with pytest.raises(FencedError):
            commit_write(stale, proc, 1)
