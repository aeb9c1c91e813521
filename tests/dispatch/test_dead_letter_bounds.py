"""The dead-letter stream's bounds (count, age) and the ``:dead-settled`` fields
that go with its letters.

Real redis-server and real Redis Cluster (``redis_target``/``rclient``), real
workers (``make_worker``) and real commits through the fenced commit script.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest
import redis

from svit_cluster.dispatch import DeadLetters, DeliveryState, DispatchKeys, delivery_status
from svit_cluster.dispatch._claim import StreamClaims
from svit_cluster.dispatch._deadbound import (
    BOUND_SCRIPT,
    PRUNE_SETTLED_SCRIPT,
    DeadLetterBound,
    Trimmed,
)
from svit_cluster.dispatch._deadletter import write_dead_letter
from svit_cluster.dispatch._redisutil import async_client
from tests._support import wait_for
from tests.conftest import RedisTarget
from tests.dispatch._support import Sender, WebhookStub

pytestmark = pytest.mark.servers

STREAM_OF = "svit://t/a"


def _ids(client: Any, key: str) -> list[str]:
    return [e.decode() if isinstance(e, bytes) else e for e, _ in client.xrange(key)]


async def _write(url: str, keys: DispatchKeys, n: int, bound: DeadLetterBound, *,
                 token: int = 0, stream: str = "", entry: str = "1-0"
                 ) -> list[tuple[str, Trimmed]]:
    """``n`` letters (undecodable intents) through the workers' write script."""
    client = async_client(url)
    try:
        out = []
        for i in range(n):
            out.append(await write_dead_letter(
                client, keys, intent=None, fields={b"intent": b"?", b"version": b"%d" % i},
                stream=stream or keys.outbox(STREAM_OF), entry_id=entry, source=STREAM_OF,
                sink="none", reason="malformed_intent", error="undecodable", attempts=0,
                worker="w", claim_token=token, bound=bound))
        return out
    finally:
        await client.aclose()


def test_the_dead_letter_stream_keeps_at_most_max_count_letters(
        redis_target: RedisTarget, rclient: redis.Redis, prefix: str) -> None:
    keys = DispatchKeys(prefix)
    written = asyncio.run(_write(redis_target.url, keys, 12,
                                 DeadLetterBound(max_count=5, max_age_s=3600)))
    ids = [i for i, _ in written]
    assert _ids(rclient, keys.dead) == ids[-5:]  # the newest five, never the one just written
    assert [t.by_count for _, t in written] == [0] * 5 + [1] * 7
    assert written[-1][1] == Trimmed(0, 1, ids[7])
    meta = {k.decode(): v.decode() for k, v in rclient.hgetall(keys.dead_trim).items()}
    assert meta == {"total": "7", "below": ids[7], "max_count": "5", "max_age_ms": "3600000"}


def test_letters_older_than_max_age_go_while_no_letter_arrives(
        redis_target: RedisTarget, rclient: redis.Redis, prefix: str, make_worker: Any) -> None:
    keys = DispatchKeys(prefix)
    lasting = DeadLetterBound(max_count=100, max_age_s=3600)
    old = [i for i, _ in asyncio.run(_write(redis_target.url, keys, 3, lasting))]
    time.sleep(2.2)
    (young, _), = asyncio.run(_write(redis_target.url, keys, 1, lasting))
    worker = make_worker(dead_letter_max_age_s=2.0)  # its scans, every 0.2 s, write nothing
    wait_for(lambda: _ids(rclient, keys.dead) == [young], 10, "the three old letters gone")
    wait_for(lambda: _ids(rclient, keys.dead) == [], 10, "the young letter gone in turn")

    def trimmed_by_age() -> float | None:
        return worker.worker.metrics.registry.get_sample_value(
            "svit_dispatch_dead_trimmed_total", {"bound": "age"})
    # the worker counts a removal after the script's reply, so the metric may lag the
    # stream by one scan: wait for it, then check it never over-counts
    wait_for(lambda: trimmed_by_age() == 4, 5, "four letters counted as trimmed by age")
    time.sleep(0.5)
    assert trimmed_by_age() == 4 and len(old) == 3


def test_dead_settled_keeps_fields_only_for_letters_still_kept(
        rclient: redis.Redis, prefix: str, make_worker: Any, stub: WebhookStub) -> None:
    keys = DispatchKeys(prefix)
    sender = Sender(rclient, f"svit://t/{uuid.uuid4().hex[:10]}", prefix)
    intents = [sender.send(to=f"{stub.base}/reject", body={"i": i})[0] for i in range(6)]
    stream = keys.outbox(sender.pid)
    settled = DispatchKeys.dead_settled(stream)
    worker = make_worker(dead_letter_max_count=2)

    def settled_letters() -> set[str]:
        return {v.decode() for v in rclient.hvals(settled)}

    def all_settled() -> bool:
        groups = rclient.xinfo_groups(stream)
        return bool(groups) and groups[0]["pending"] == 0 and groups[0]["entries-read"] == 6

    wait_for(all_settled, 20, "all six settled")
    kept = _ids(rclient, keys.dead)
    assert len(kept) == 2
    wait_for(lambda: settled_letters() == set(kept), 10, "fields of trimmed letters pruned")
    worker.stop()
    status = delivery_status(rclient, [sender.pid], prefix=prefix)
    assert status[intents[-1]].state is DeliveryState.DEAD_LETTERED  # counted through its field
    assert worker.worker.metrics.registry.get_sample_value(
        "svit_dispatch_dead_trimmed_total", {"bound": "count"}) == 4

    letters = DeadLetters(rclient, prefix)
    assert letters.redrive([kept[0]]).redriven == (kept[0],)
    assert settled_letters() == {kept[1]}  # a moved letter's field goes with it
    first_trimmed = rclient.hget(keys.dead_trim, "below").decode()
    gone = "1-0"  # any id below the bound's floor
    again = letters.redrive([kept[0], gone, "99999999999999-0"])
    assert (again.redriven, again.missing, again.trimmed) == (
        (), (kept[0], "99999999999999-0"), (gone,))  # a retry is "missing", not an error
    assert f"every letter below {first_trimmed} is gone" in again.trimmed_reason
    assert "at most 2 letters" in again.trimmed_reason


def test_a_provisional_letter_removed_before_its_settle_keeps_the_fence_rules(
        redis_target: RedisTarget, rclient: redis.Redis, prefix: str) -> None:
    """The bounds may remove a letter between its write and its settle; the
    settle still acknowledges the entry only under the current claim token and
    only while it is pending, and its field is pruned once the letter is gone."""
    keys = DispatchKeys(prefix)
    stream = keys.outbox(f"svit://t/{uuid.uuid4().hex[:10]}")
    entry = rclient.xadd(stream, {"intent": "{}"}).decode()
    rclient.xgroup_create(stream, "g", id="0")
    rclient.xreadgroup("g", "w", {stream: ">"})

    async def run() -> tuple[str, str, str]:
        client = async_client(redis_target.url)
        try:
            claims = StreamClaims(client, keys, "w", claim_ttl_s=60, worker_ttl_s=60)
            (token,) = (await claims.claim([stream])).values()
            one = DeadLetterBound(max_count=1, max_age_s=3600)
            (letter, _), = await _write(redis_target.url, keys, 1, one, token=token,
                                        stream=stream, entry=entry)
            await _write(redis_target.url, keys, 1, one)  # removes the provisional letter
            assert _ids(rclient, keys.dead) != [letter]
            stale = await claims.settle_dead(stream, "g", entry, token - 1, letter)
            ok = await claims.settle_dead(stream, "g", entry, token, letter)
            twice = await claims.settle_dead(stream, "g", entry, token, letter)
            return stale, ok, twice
        finally:
            await client.aclose()

    assert asyncio.run(run()) == ("fenced", "ok", "settled")
    assert rclient.xpending(stream, "g")["pending"] == 0
    below = Trimmed.from_reply(rclient.register_script(BOUND_SCRIPT)(
        keys=[keys.dead, keys.dead_trim], args=DeadLetterBound().args)).below
    assert rclient.register_script(PRUNE_SETTLED_SCRIPT)(
        keys=[DispatchKeys.dead_settled(stream)], args=[below]) == 1
    assert rclient.exists(DispatchKeys.dead_settled(stream)) == 0
