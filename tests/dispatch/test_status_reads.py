"""Status reads racing the dispatcher's writes, at every read boundary.

``delivery_status`` and ``outbox_summary`` read several Redis keys one after
another (no snapshot spans them), while workers settle dead letters, re-drives
move letters and senders commit. Each scenario below runs the read once per
boundary between two of its Redis reads, with one concurrent write (a real
script, on a second client) injected at that boundary, and checks that the
answer is a state the intent really held during the call.

Regression: a full CI run (stop 24) read a dead-lettered intent as
``delivered``: the dead letters were read before the outbox group, and the
worker's settle (XACK + dead-settled, one script) landed in between.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

import pytest
import redis

from svit_cluster.dispatch import DeliveryState, DispatchKeys, delivery_status, outbox_summary
from svit_cluster.dispatch._claim import StreamClaims
from svit_cluster.dispatch._deadletter import DeadLetters, write_dead_letter
from svit_cluster.dispatch._intent import parse_entry
from svit_cluster.dispatch._keys import DEFAULT_GROUP
from svit_cluster.dispatch._redisutil import async_client
from tests.conftest import RedisTarget
from tests.dispatch._support import Sender

pytestmark = pytest.mark.servers

#: Client methods that read; each call is one boundary where a write can land.
_READS = frozenset({"xrange", "xrevrange", "xinfo_groups", "xinfo_stream", "xpending_range",
                    "hget", "hgetall", "xlen"})


class _Interleaver:
    """A redis-py client that runs ``action`` once, right after its ``at``-th read
    (``at == 0``: before the first). Pipelines count one read per ``execute``."""

    def __init__(self, client: Any, at: int, action: Callable[[], None]) -> None:
        self._client, self._at, self._action = client, at, action
        self.reads = 0
        if at == 0:
            action()

    def _count(self) -> None:
        self.reads += 1
        if self.reads == self._at:
            self._action()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if name == "pipeline":
            return lambda *a, **kw: _Pipeline(attr(*a, **kw), self)
        if name not in _READS:
            return attr

        def read(*args: Any, **kwargs: Any) -> Any:
            result = attr(*args, **kwargs)
            self._count()
            return result
        return read


class _Pipeline:
    def __init__(self, pipe: Any, owner: _Interleaver) -> None:
        self._pipe, self._owner = pipe, owner

    def execute(self, *args: Any, **kwargs: Any) -> Any:
        result = self._pipe.execute(*args, **kwargs)
        self._owner._count()
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pipe, name)


def _every_boundary(setup: Callable[[str], tuple[Callable[[], None], Callable[[Any], Any]]],
                    rclient: redis.Redis, prefix: str) -> list[tuple[int, Any]]:
    """Run ``read(client)`` with ``write`` injected after read 0, 1, ..., n (n:
    the number of reads of an undisturbed call; the last run has the write land
    after the answer). Each run gets fresh keys from ``setup(prefix)``."""
    _, read = setup(f"{prefix}-dry")
    dry = _Interleaver(rclient, -1, lambda: None)
    read(dry)
    assert dry.reads >= 3, dry.reads  # several reads, or there is no race to test
    answers = []
    for at in range(dry.reads + 1):
        write, read = setup(f"{prefix}-{at}")
        fired: list[bool] = []

        def fire(write: Callable[[], None] = write, fired: list[bool] = fired) -> None:
            fired.append(True)
            write()
        client = _Interleaver(rclient, at, fire)
        answers.append((at, read(client)))
        assert fired or at == dry.reads, f"the write never ran (at {at} of {client.reads})"
    return answers


def _pending_intent(rclient: redis.Redis, prefix: str
                    ) -> tuple[Sender, str, str, dict[bytes, bytes]]:
    """One committed intent, read by the dispatcher group (pending).
    Returns (its sender, the outbox stream, the entry id, the entry's fields)."""
    sender = Sender(rclient, f"svit://t/st-{uuid.uuid4().hex[:8]}", prefix)
    sender.send(to="http://127.0.0.1:9/reject", body=1)
    stream = DispatchKeys(prefix).outbox(sender.pid)
    rclient.xgroup_create(stream, DEFAULT_GROUP, id="0")
    reply: Any = rclient.xreadgroup(DEFAULT_GROUP, "c", {stream: ">"})
    eid, fields = reply[0][1][0]
    return sender, stream, eid.decode(), fields


def _dead_letter(url: str, prefix: str, pid: str, stream: str, eid: str,
                 fields: dict[bytes, bytes]) -> Callable[[], None]:
    """Write a worker's provisional dead letter for pending ``eid`` of ``stream``
    now; returns the settle (fenced XACK + dead-settled, one script) to run later."""
    keys = DispatchKeys(prefix)

    async def claim_and_write() -> tuple[int, str]:
        client = async_client(url)
        try:
            (token,) = (await StreamClaims(client, keys, "w", claim_ttl_s=60,
                                           worker_ttl_s=60).claim([stream])).values()
            assert token >= 1
            dead_id, _ = await write_dead_letter(
                client, keys, intent=parse_entry(stream, eid, fields, pid), fields=fields,
                stream=stream, entry_id=eid, source=pid, sink="webhook", reason="rejected",
                error="HTTP 400", attempts=1, worker="w", claim_token=token)
            return token, dead_id
        finally:
            await client.aclose()

    token, dead_id = asyncio.run(claim_and_write())

    async def settle() -> None:
        client = async_client(url)
        try:
            claims = StreamClaims(client, keys, "w", claim_ttl_s=60, worker_ttl_s=60)
            assert await claims.settle_dead(stream, DEFAULT_GROUP, eid, token, dead_id) == "ok"
        finally:
            await client.aclose()

    return lambda: asyncio.run(settle())


def _state(pid: str, prefix: str) -> Callable[[Any], DeliveryState]:
    def read(client: Any) -> DeliveryState:
        (status,) = delivery_status(client, [pid], prefix=prefix).values()
        return status.state
    return read


def _moves(answers: list[tuple[int, Any]], before: DeliveryState,
           after: DeliveryState) -> None:
    """Every answer is the state before or after the write (never ``delivered``),
    and the first run (write before the call) and the last (write after) show each."""
    assert all(s in (before, after) for _, s in answers), answers
    assert answers[0][1] == after and answers[-1][1] == before, answers


def test_a_dead_letter_settled_mid_read_is_never_reported_delivered(
        redis_target: RedisTarget, rclient: redis.Redis, prefix: str) -> None:
    def setup(p: str) -> tuple[Callable[[], None], Callable[[Any], Any]]:
        sender, stream, eid, fields = _pending_intent(rclient, p)
        pid = sender.pid
        return _dead_letter(redis_target.url, p, pid, stream, eid, fields), _state(pid, p)

    _moves(_every_boundary(setup, rclient, prefix),
           DeliveryState.PENDING, DeliveryState.DEAD_LETTERED)


def test_a_redrive_moving_the_letter_mid_read_is_never_reported_delivered(
        redis_target: RedisTarget, rclient: redis.Redis, prefix: str) -> None:
    """The re-drive moves the letter (XADD re-drive, XDEL dead) in one script:
    before it the intent is dead-lettered, after it pending again."""
    def setup(p: str) -> tuple[Callable[[], None], Callable[[Any], Any]]:
        sender, stream, eid, fields = _pending_intent(rclient, p)
        pid = sender.pid
        _dead_letter(redis_target.url, p, pid, stream, eid, fields)()
        letters = DeadLetters(rclient, p)

        def redrive() -> None:
            assert len(letters.redrive().redriven) == 1
        return redrive, _state(pid, p)

    _moves(_every_boundary(setup, rclient, prefix),
           DeliveryState.DEAD_LETTERED, DeliveryState.PENDING)


def test_a_redriven_intent_dead_lettered_again_mid_read_is_never_reported_delivered(
        redis_target: RedisTarget, rclient: redis.Redis, prefix: str) -> None:
    """The re-drive entry's own settle (on the re-drive stream) races the read."""
    def setup(p: str) -> tuple[Callable[[], None], Callable[[Any], Any]]:
        sender, stream, eid, fields = _pending_intent(rclient, p)
        pid = sender.pid
        _dead_letter(redis_target.url, p, pid, stream, eid, fields)()
        assert len(DeadLetters(rclient, p).redrive().redriven) == 1
        redrive = DispatchKeys(p).redrive
        rclient.xgroup_create(redrive, DEFAULT_GROUP, id="0")
        reply: Any = rclient.xreadgroup(DEFAULT_GROUP, "c", {redrive: ">"})
        rid, rfields = reply[0][1][0]
        return _dead_letter(redis_target.url, p, pid, redrive, rid.decode(), rfields), \
            _state(pid, p)

    _moves(_every_boundary(setup, rclient, prefix),
           DeliveryState.PENDING, DeliveryState.DEAD_LETTERED)


def test_a_commit_mid_summary_is_never_counted_delivered(
        redis_target: RedisTarget, rclient: redis.Redis, prefix: str) -> None:
    """One pending intent; a second is committed at each read boundary. Nothing
    was ever delivered, so ``delivered`` stays 0 whatever the summary counts."""
    def setup(p: str) -> tuple[Callable[[], None], Callable[[Any], Any]]:
        sender, _, _, _ = _pending_intent(rclient, p)
        pid = sender.pid

        def commit() -> None:  # the same sender commits a second intent
            sender.send(to="http://127.0.0.1:9/reject", body=2)

        def read(client: Any) -> tuple[int, int, int, int]:
            s = outbox_summary(client, [pid], prefix=p)[pid]
            return s.committed, s.pending, s.dead_lettered, s.delivered
        return commit, read

    answers = _every_boundary(setup, rclient, prefix)
    assert all(delivered == 0 and committed == pending + dead
               for _, (committed, pending, dead, delivered) in answers), answers
