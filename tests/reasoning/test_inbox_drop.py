"""Dead-lettering a failing inbox head: a fenced commit that unblocks the agent."""

from __future__ import annotations

import pytest
import redis

from svit_cluster.errors import ConflictError, ErrorCode, FencedError, InvalidInput
from svit_cluster.events import SignalKind
from svit_cluster.store import ProcessKeys, RedisBackend, StoreConfig
from tests.reasoning._support import Owner, wait_for

pytestmark = pytest.mark.servers


def completions(owner: Owner) -> list[dict]:
    return [s.data for s in owner.signals() if s.kind is SignalKind.COMPLETION]


async def test_a_failing_head_is_dead_lettered_and_the_next_message_is_answered(
    rclient: redis.Redis, pid: str, prefix: str
) -> None:
    owner = Owner(rclient, pid, prefix, 1, create=True, retry_after_s=60)
    owner.loop.start()
    try:
        owner.send({"content": "/fail", "id": "m-bad"})
        owner.send({"content": "after", "id": "m-next"})
        await wait_for(lambda: any(s.kind is SignalKind.FAILED for s in owner.signals()))
        assert not completions(owner)  # the failing head blocks the message behind it
        before, version = owner.ctrl.read_versioned("/inbox")
        head = owner.ctrl.process.inbox_head_hash()
        # the head must be the named message: nothing is committed otherwise
        with pytest.raises(ConflictError) as wrong:
            owner.ctrl.drop_inbox_head(reason="stuck", message_id="m-next")
        assert wrong.value.code == ErrorCode.INBOX_CONFLICT
        with pytest.raises(ConflictError):
            owner.ctrl.drop_inbox_head(reason="stuck", head_hash="0" * 64)
        with pytest.raises(InvalidInput):
            owner.ctrl.drop_inbox_head(reason="stuck")
        with pytest.raises(InvalidInput):
            owner.ctrl.drop_inbox_head(reason=" ", message_id="m-bad")
        assert owner.ctrl.read_versioned("/inbox")[1] == version
        dropped_at, letter = owner.ctrl.drop_inbox_head(
            reason="the model fails on it", message_id="m-bad", head_hash=head)
        owner.loop.wake()
        assert dropped_at == version + 1
        assert letter == {"inbox_hash": head, "message_id": "m-bad",
                          "message": {"content": "/fail", "id": "m-bad"},
                          "reason": "the model fails on it", "version": version + 1}
        await wait_for(lambda: len(completions(owner)) == 1)
    finally:
        await owner.loop.stop()
    (done,) = completions(owner)
    assert done["message_id"] == "m-next" and done["response"]["content"] == "echo: after"
    assert owner.ctrl.read_versioned("/inbox")[0] == []
    assert owner.ctrl.read_versioned("/thread/dead_letters")[0] == [letter]
    assert len(before) == 2
    # durable and fenced: a restore from Redis has the drop, committed with token 1
    backend = RedisBackend(rclient, pid, 2, StoreConfig(prefix=prefix))
    backend.claim()
    restored = backend.restore()
    assert restored is not None
    assert restored.read("/thread/dead_letters")[0]["message_id"] == "m-bad"
    ((_, fields),) = rclient.xrange(ProcessKeys(pid, prefix).stream, f"{dropped_at}-0",
                                    f"{dropped_at}-0")
    assert b"inbox.drop" in b"".join(fields.values())


async def test_a_fenced_owner_cannot_drop(rclient: redis.Redis, pid: str, prefix: str) -> None:
    old = Owner(rclient, pid, prefix, 1, create=True)
    old.ctrl.append_inbox({"content": "/fail", "id": "m1"})
    new = Owner(rclient, pid, prefix, 2)
    with pytest.raises(FencedError):
        old.ctrl.drop_inbox_head(reason="stale", message_id="m1")
    _, letter = new.ctrl.drop_inbox_head(reason="fresh", message_id="m1")
    assert letter["reason"] == "fresh" and new.ctrl.read_versioned("/inbox")[0] == []
    # keep at most 16 dead letters, newest last
    for i in range(20):
        new.ctrl.append_inbox({"content": "x", "id": f"k{i}"})
        new.ctrl.drop_inbox_head(reason=f"r{i}", message_id=f"k{i}")
    kept = new.ctrl.read_versioned("/thread/dead_letters")[0]
    assert len(kept) == 16 and kept[-1]["message_id"] == "k19"
