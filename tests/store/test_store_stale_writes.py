"""Every write refused to a stale owner is recorded in ``<prefix>:stale_writes``.

Real redis-server. Token 1 creates the log, token 2 claims (a newer owner);
token 1's commit is refused by the Lua fence check and the refusal is appended
to the bounded stream with who refused it; a write stopped by the owner's own
guard (lease lost) is recorded as ``by: self``. Nothing is recorded for a write
that commits.
"""

from __future__ import annotations

import pytest
import redis

from svit_cluster.errors import FencedError, UnavailableError
from svit_cluster.store import RedisBackend, StoreConfig
from svit_cluster.store._stale_writes import stale_writes_key
from tests._commit_log import commit_write, new_log
from tests._support import unique

pytestmark = pytest.mark.servers


def _entries(rclient: redis.Redis, prefix: str) -> list[dict[str, str]]:
    return [{k.decode(): v.decode() for k, v in fields.items()}
            for _id, fields in rclient.xrange(stale_writes_key(prefix))]


def test_fence_refusal_is_recorded(rclient: redis.Redis) -> None:
    config = StoreConfig(prefix=unique("stalewrites"))
    pid = f"svit://test/{unique('stale')}"
    old, proc = new_log(rclient, pid, 1, config)
    commit_write(old, proc, 1)
    assert _entries(rclient, config.prefix) == []  # a committed write records nothing
    RedisBackend(rclient, pid, 2, config).claim()  # a newer owner
    with pytest.raises(FencedError):
        commit_write(old, proc, 2)
    [entry] = _entries(rclient, config.prefix)
    assert entry["process_id"] == pid and entry["op"] == "commit"
    assert entry["by"] == "fence" and entry["token"] == "1" and entry["fence"] == "2"
    assert float(entry["at"]) > 0


def test_guard_refusal_is_recorded(rclient: redis.Redis) -> None:
    config = StoreConfig(prefix=unique("stalewrites"))
    pid = f"svit://test/{unique('self')}"
    lost = False

    def guard() -> None:
        if lost:
            raise UnavailableError("host lease lost")

    _backend, proc = new_log(rclient, pid, 1, config)
    guarded = RedisBackend(rclient, pid, 1, config, guard=guard)
    assert guarded.restore() is not None
    lost = True
    with pytest.raises(UnavailableError):
        commit_write(guarded, proc, 5)
    [entry] = _entries(rclient, config.prefix)
    assert entry["by"] == "self" and entry["op"] == "guard"
    assert entry["reason"] == "host lease lost" and "fence" not in entry


def test_the_stale_writes_stream_keeps_about_the_newest_retained(
        rclient: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    """``MAXLEN ~ STALE_WRITES_RETAINED``: at most one stream node (100 entries)
    over the bound, the newest refusals kept."""
    from svit_cluster.store import _stale_writes

    monkeypatch.setattr(_stale_writes, "STALE_WRITES_RETAINED", 20)
    config = StoreConfig(prefix=unique("stalewrites"))
    pid = f"svit://test/{unique('many')}"
    old, proc = new_log(rclient, pid, 1, config)
    RedisBackend(rclient, pid, 2, config).claim()
    for i in range(300):
        with pytest.raises(FencedError):
            commit_write(old, proc, i)
    kept = rclient.xlen(stale_writes_key(config.prefix))
    assert 20 <= kept <= 20 + 100
    assert _entries(rclient, config.prefix)[-1]["process_id"] == pid
