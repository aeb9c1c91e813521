"""``pause-owner`` on the REAL store: a stale writer on every run, never by luck of timing.

The target is a fake whose ``pause_host`` lets a newer owner (token 2) claim
and commit from another thread, exactly as a failover would; the store, the
fence and the checker are real.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis
from svit_chaos.checker import check
from svit_chaos.clock import ManualClock
from svit_chaos.errors import HarnessError
from svit_chaos.faults import NemesisContext, PauseOwner
from svit_chaos.history import HistoryWriter
from svit_chaos.logs import dump_processes
from svit_chaos.spec import NemesisSpec
from svit_chaos.stale import StaleWriter

from svit_cluster.store import RedisBackend, StoreConfig
from svit_cluster.store._records import parse_head
from tests._support import unique
from tests.chaos._support import Clients, redis_commit, redis_new_log

pytestmark = pytest.mark.servers


@dataclass
class OwnerTarget:
    """Owner ``h1`` (token 1); pausing it lets ``h2`` (token 2) claim and commit."""

    client: redis.Redis
    pid: str
    config: StoreConfig
    clients: Clients
    failover: bool = True
    died: bool = False  # Ray declared the paused node dead: its raylet exits on resume
    calls: list[str] = field(default_factory=list)
    threads: list[threading.Thread] = field(default_factory=list)
    lease_ttl_s: float = 1.0

    def owner(self, process: str) -> str | None:
        return "h1" if process == self.pid else None

    def pause_host(self, host: str) -> Any:
        self.calls.append(f"pause {host}")
        if self.failover:
            thread = threading.Thread(target=self._new_owner)
            thread.start()
            self.threads.append(thread)

    def _new_owner(self) -> None:
        b = RedisBackend(self.client, self.pid, 2, self.config)
        b.claim()
        proc = b.restore()
        assert proc is not None
        redis_commit(b, proc, self.clients, "c2")

    def resume_host(self, host: str) -> Any:
        # Judge the order by the durable head, not by the new owner's thread
        # bookkeeping (which may append after the nemesis already saw the commit).
        keys = RedisBackend(self.client, self.pid, 1, self.config).keys  # keys only
        head = parse_head(self.pid, self.client.hgetall(keys.head))
        if head is not None and head.token == 2 and "h2 committed" not in self.calls:
            self.calls.append("h2 committed")
        self.calls.append(f"resume {host}")

    def host_alive(self, host: str) -> bool:
        return not self.died or f"restart {host}" in self.calls

    def restart_host(self, host: str) -> bool:
        self.calls.append(f"restart {host}")
        return True

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"pause-owner must not call {name}")


def owned_process(rclient: redis.Redis, *, fenced: bool, failover: bool = True) -> tuple[
        OwnerTarget, NemesisContext, StaleWriter]:
    pid = f"svit://chaos/{unique('p')}"
    config = StoreConfig(prefix=unique("chaos"), snapshot_every=50)
    history = HistoryWriter(clock=ManualClock())
    clients = Clients(history)
    a, proc = redis_new_log(rclient, pid, 1, config)
    for _ in range(3):
        redis_commit(a, proc, clients, "c0")
    target = OwnerTarget(rclient, pid, config, clients, failover=failover)
    stale = StaleWriter(rclient, history, run_id="t", prefix=config.prefix, unfenced=not fenced)
    ctx = NemesisContext(target, history, ["svit://chaos/unowned", pid], stale)  # type: ignore[arg-type]
    return target, ctx, stale


@pytest.mark.parametrize("fenced", [True, False], ids=["fenced", "unfenced"])
def test_the_old_owner_commits_its_in_flight_change_after_a_newer_owner_committed(
        rclient: redis.Redis, fenced: bool) -> None:
    target, ctx, stale = owned_process(rclient, fenced=fenced)
    nemesis = PauseOwner(NemesisSpec("pause-owner"), claim_timeout_s=30)
    injected = nemesis.inject(ctx)
    assert injected == {"host": "h1", "process": target.pid, "token": 1, "expected": 3,
                        "rid": "t.stale.1"}
    healed = nemesis.heal(ctx)
    for thread in target.threads:
        thread.join(10)
    # order: pause, the newer owner committed, resume, and only then the stale commit
    assert target.calls == ["pause h1", "h2 committed", "resume h1"]
    assert healed["new_token"] == 2 and healed["resumed"] and healed["node_died"] is False
    write = healed["write"]
    assert stale.attempts >= 1 and write["token"] == 1
    logs = dump_processes(rclient, [target.pid], prefix=target.config.prefix)
    result = check(ctx.history.events, logs)
    if fenced:
        assert write["outcome"] == "fenced" and stale.committed == 0
        assert result.verdict == "pass", result.to_json()
    else:
        # the sealed change conflicts with the newer owner's commit; the zombie
        # re-reads and lands on top of it with token 1
        assert write["outcome"] == "committed" and write["version"] == 5
        assert stale.committed == 1
        assert any(a.invariant == "tokens" and 5 in a.versions for a in result.anomalies)
    assert nemesis.heal(ctx) == {}  # a second heal does nothing


def test_no_newer_owner_in_time_is_a_harness_error_and_the_host_is_resumed(
        rclient: redis.Redis) -> None:
    target, ctx, stale = owned_process(rclient, fenced=False, failover=False)
    nemesis = PauseOwner(NemesisSpec("pause-owner"), claim_timeout_s=0.3)
    nemesis.inject(ctx)
    with pytest.raises(HarnessError, match="no other host committed"):
        nemesis.heal(ctx)
    assert target.calls == ["pause h1", "resume h1"]
    assert stale.attempts == 0


def test_a_stopped_run_only_resumes(rclient: redis.Redis) -> None:
    target, ctx, stale = owned_process(rclient, fenced=False, failover=False)
    nemesis = PauseOwner(NemesisSpec("pause-owner"), claim_timeout_s=30)
    nemesis.inject(ctx)
    nemesis.interrupted = True
    assert nemesis.heal(ctx)["write"] == "skipped: run stopped"
    assert target.calls == ["pause h1", "resume h1"] and stale.attempts == 0


def test_no_owner_anywhere_is_a_harness_error(rclient: redis.Redis) -> None:
    target, ctx, _ = owned_process(rclient, fenced=True)
    ctx.processes = ["svit://chaos/unowned"]
    with pytest.raises(HarnessError, match=r"no process had an owner for 0\.5 s"):
        PauseOwner(NemesisSpec("pause-owner"), wait_s=0.5).inject(ctx)
    assert target.calls == []


def test_a_paused_owner_whose_node_died_is_restarted(rclient: redis.Redis) -> None:
    """The host was paused long enough for Ray to declare its node dead: heal
    restarts it, after the stale commit and also when no newer owner came."""
    target, ctx, _ = owned_process(rclient, fenced=True)
    target.died = True
    nemesis = PauseOwner(NemesisSpec("pause-owner"), claim_timeout_s=30)
    nemesis.inject(ctx)
    healed = nemesis.heal(ctx)
    for thread in target.threads:
        thread.join(10)
    assert healed["node_died"] is True and healed["restarted"] is True
    assert healed["write"]["outcome"] == "fenced"
    assert target.calls == ["pause h1", "h2 committed", "resume h1", "restart h1"]

    target, ctx, _ = owned_process(rclient, fenced=False, failover=False)
    target.died = True
    nemesis = PauseOwner(NemesisSpec("pause-owner"), claim_timeout_s=0.3)
    nemesis.inject(ctx)
    with pytest.raises(HarnessError, match="no other host committed"):
        nemesis.heal(ctx)
    assert target.calls == ["pause h1", "resume h1", "restart h1"]


def test_redis_down_at_inject_is_waited_for_then_the_owner_is_paused(
        fresh_redis: Any) -> None:
    """A ``kill-redis`` window overlapping the inject (seed 42 ended inconclusive
    on "redis fence failed ... Connection refused"): the Redis reads are retried
    until Redis is back, and only then is the owner paused."""
    client = redis.Redis.from_url(fresh_redis.url)
    target, ctx, _ = owned_process(client, fenced=True)
    fresh_redis.stop()
    nemesis = PauseOwner(NemesisSpec("pause-owner"), claim_timeout_s=30, wait_s=20)
    answer: dict[str, Any] = {}
    injecting = threading.Thread(target=lambda: answer.update(nemesis.inject(ctx)))
    injecting.start()
    time.sleep(1.0)
    assert target.calls == [] and not answer  # waiting for Redis, nothing paused
    # started from this thread: the server dies with the thread that started it
    fresh_redis.start()
    injecting.join(30)
    injected = answer
    assert injected["host"] == "h1" and injected["token"] == 1
    assert target.calls[0] == "pause h1"
    nemesis.heal(ctx)
    for thread in target.threads:
        thread.join(10)


def test_redis_down_past_the_wait_is_a_harness_error_before_any_pause(
        fresh_redis: Any) -> None:
    client = redis.Redis.from_url(fresh_redis.url)
    target, ctx, _ = owned_process(client, fenced=True)
    fresh_redis.stop()
    with pytest.raises(HarnessError, match="Redis unreachable for 1 s before the pause"):
        PauseOwner(NemesisSpec("pause-owner"), wait_s=1.0).inject(ctx)
    assert target.calls == []
