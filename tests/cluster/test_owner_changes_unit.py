"""The route cache's log of ownership changes (pure logic: records applied as the
watch delivers them, no etcd).

A change pairs an owner record that went with the next one of the same
process: ``lease_ended`` when the record went in the same revision as its
host's registration (a failover), ``released`` when it went alone, ``replaced``
when a new token arrived with no deletion between; the gap is the time
without an owner. The log and the remembered owners are bounded.
"""

from __future__ import annotations

import json

from svit_cluster.cluster._moves import OwnerChanges
from svit_cluster.cluster._routes import RouteCache
from svit_cluster.ownership import host_key, owner_key

C = "c1"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _owner(cache: RouteCache, pid: str, host: str, revision: int) -> None:
    cache._apply(owner_key(C, pid), json.dumps({"host": host, "address": f"a{revision}"})
                 .encode(), revision)


def _host(cache: RouteCache, host: str) -> None:
    cache._apply(host_key(C, host), json.dumps({"host": host}).encode(), 1)


def test_changes_pair_each_end_with_the_next_owner_and_say_why() -> None:
    cache = RouteCache(None, C)
    clock = Clock()
    cache.changes = OwnerChanges(clock=clock)
    _host(cache, "h1")
    _host(cache, "h2")
    _owner(cache, "svit://t/a", "h1", 10)
    _owner(cache, "svit://t/b", "h1", 11)
    _owner(cache, "svit://t/c", "h2", 12)
    assert cache.changes.recent(10) == []  # first owners are no change

    # a passivation: the record goes alone; the next activation is on h2
    cache._apply(owner_key(C, "svit://t/a"), None, 10, deleted_at=20)
    clock.now += 4.0
    _owner(cache, "svit://t/a", "h2", 21)

    # h1's lease ends: its registration and b's record go in one revision
    cache._apply(owner_key(C, "svit://t/b"), None, 11, deleted_at=30)
    cache._apply(host_key(C, "h1"), None, 1, deleted_at=30)
    clock.now += 1.5
    _owner(cache, "svit://t/b", "h2", 31)

    # a record replaced in place (no deletion seen)
    _owner(cache, "svit://t/c", "h2", 40)

    c, b, a = cache.changes.recent(10)
    assert a.to_json() == {"process_id": "svit://t/a", "old_host": "h1", "old_token": 10,
                           "new_host": "h2", "new_token": 21, "cause": "released",
                           "ended_at": 1000.0, "acquired_at": 1004.0, "gap_s": 4.0}
    assert (b.old_host, b.old_token, b.new_host, b.new_token, b.cause, b.gap_s) == (
        "h1", 11, "h2", 31, "lease_ended", 1.5)
    assert (c.old_token, c.new_token, c.cause, c.ended_at, c.gap_s) == (
        12, 40, "replaced", None, None)
    assert [x.process_id for x in cache.changes.recent(2)] == ["svit://t/c", "svit://t/b"]


def test_a_record_that_comes_back_under_the_same_token_is_no_change() -> None:
    changes = OwnerChanges()
    changes.ended("svit://t/a", "h1", 7)
    changes.acquired("svit://t/a", "h1", 7)  # a reload re-reads the same record
    changes.acquired("svit://t/a", "h1", 7, previous=("h1", 7))
    assert changes.recent(10) == []


def test_the_log_and_the_remembered_owners_are_bounded() -> None:
    changes = OwnerChanges(keep=2, remember=2)
    for i in range(3):
        changes.ended(f"svit://t/{i}", "h1", i + 1)
    # the oldest remembered owner was forgotten: its next owner is no change
    for i in range(3):
        changes.acquired(f"svit://t/{i}", "h2", 100 + i)
    assert [c.process_id for c in changes.recent(10)] == ["svit://t/2", "svit://t/1"]
    for i in range(3, 6):
        changes.acquired(f"svit://t/{i}", "h2", 1, previous=("h1", 0))
    assert [c.process_id for c in changes.recent(10)] == ["svit://t/5", "svit://t/4"]
