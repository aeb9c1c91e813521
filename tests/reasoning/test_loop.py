"""The reasoning loop on the fenced Redis log: order, tools, failures, fencing, resume."""

from __future__ import annotations

import json

import pytest
import redis

import svit_cluster.reasoning as reasoning
from svit_cluster.events import SignalKind, fork_events, session_for
from svit_cluster.reasoning import LoopState, ReasonReply, SimulatedReasoner
from svit_cluster.store import RedisBackend, StoreConfig
from tests.reasoning._support import Owner, kinds, wait_for

pytestmark = pytest.mark.servers

ONE_TURN = ["committed", "canonical_event", "message", "canonical_event", "message",
            "committed", "completion"]


def completions(owner: Owner) -> list[dict]:
    return [s.data for s in owner.signals() if s.kind is SignalKind.COMPLETION]


def test_public_surface_is_pinned() -> None:
    assert sorted(reasoning.__all__) == sorted([
        "DEFAULT_SYSTEM_PROMPT", "SESSION_FORMAT", "TOOL_SPECS", "EventLog", "LoopState",
        "OpenAICompatReasoner", "ProcessTools", "ReasonReply", "ReasonRequest", "Reasoner",
        "ReasonerConfig", "ReasonerError", "SimulatedReasoner", "ToolCall", "TurnFailed",
        "TurnLoop", "build_reasoner", "validate_tool_calls",
        "DEFAULT_MAX_ITERATIONS", "THREAD_FORMAT", "TOOL_NAMES", "PortRunner",
        "ThreadRefused", "check_thread", "port_tool_specs", "system_prompt_for",
        "thread_metadata", "history_prefix_seq"])


async def test_one_turn_publishes_the_exact_signal_order(
    rclient: redis.Redis, pid: str, prefix: str
) -> None:
    owner = Owner(rclient, pid, prefix, 1, create=True)
    owner.loop.start()
    try:
        owner.send({"content": "hello", "id": "m-1"})
        await wait_for(lambda: len(completions(owner)) == 1)
    finally:
        await owner.loop.stop()
    sigs = owner.signals()
    assert kinds(sigs) == ONE_TURN
    # the first message also commits the /thread session metadata
    assert sigs[0].data["paths"] == [
        "/inbox", "/thread/format", "/thread/instructions", "/thread/process_id",
        "/thread/session_id", "/thread/system_prompt"] and sigs[0].data["version"] == 1
    assert sigs[5].data["paths"] == ["/inbox", "/thread/session"]
    done = sigs[6].data
    assert done["version"] == sigs[5].data["version"] == 2
    assert done["response"] == {"role": "assistant", "content": "echo: hello"}
    assert done["message_id"] == "m-1" and done["events"] == {"first": 1, "last": 2}
    session = owner.ctrl.read_versioned("/thread/session")[0]
    assert session == {"format": "svit-session@1", "id": session_for(pid), "process": pid,
                       "turns": 1, "last_seq": 2}
    assert owner.ctrl.read_versioned("/inbox") == ([], 2)


async def test_tool_calls_read_discover_and_exec_through_the_fenced_commit(
    rclient: redis.Redis, pid: str, prefix: str
) -> None:
    owner = Owner(rclient, pid, prefix, 1, create=True)
    owner.loop.start()
    try:
        owner.send('/exec counter {"by": 5}')
        await wait_for(lambda: len(completions(owner)) == 1)
        for text in ("/read /memory/count", "/discover /lib"):
            owner.send(text)
        await wait_for(lambda: len(completions(owner)) == 3)
    finally:
        await owner.loop.stop()
    replies = [c["response"]["content"] for c in completions(owner)]
    assert replies[0].startswith("exec counter: ") and '"status":"committed"' in replies[0]
    assert '"value":5' in replies[1] and '"entries":["counter"]' in replies[2]
    assert owner.ctrl.read_versioned("/memory/count")[0] == 5
    # the activation is a receipted svit-control@1 commit from the reasoner's client id
    entries = owner.backend.entries()
    sources = [json.loads(e.record)["source"] for e in entries]
    assert sources.count("activation") == 1
    assert rclient.hlen(owner.backend.keys.receipts) == 1
    (field,) = rclient.hkeys(owner.backend.keys.receipts)
    assert field.split(b"\x00")[:2] == [b"@reasoner", b"svit-reasoner"]
    # turn 1: user, reason, (committed by exec), act, reply
    turn1 = kinds(owner.signals())[:12]
    assert turn1 == ["committed", "canonical_event", "message", "canonical_event", "message",
                     "committed", "canonical_event", "message", "canonical_event", "message",
                     "committed", "completion"]


@pytest.mark.parametrize(("text", "code", "options"), [
    ("/sleep 5 slow", "reasoner_timeout", {"step_timeout_s": 0.3}),
    ("/malformed", "reasoner_malformed", {}),
    ("/fail", "reasoner_failed", {}),
    ({"not": "text"}, "invalid_inbox", {}),
])
async def test_a_failed_turn_keeps_the_item_and_publishes_a_sanitized_failure(
    rclient: redis.Redis, pid: str, prefix: str, text: object, code: str, options: dict
) -> None:
    owner = Owner(rclient, pid, prefix, 1, create=True, retry_after_s=60, **options)
    owner.loop.start()
    try:
        owner.send(text)
        await wait_for(lambda: any(s.kind is SignalKind.FAILED for s in owner.signals()))
        assert owner.loop.state == LoopState.BACKOFF
        assert owner.loop.pending and not owner.loop.busy  # its head still waits for it
    finally:
        await owner.loop.stop()
    sigs = owner.signals()
    (failed,) = [s.data for s in sigs if s.kind is SignalKind.FAILED]
    assert failed["code"] == code and len(failed["message"].encode()) <= 1024
    assert set(failed) == {"code", "message", "session", "turn", "inbox_hash"}
    raw = json.dumps([s.to_json() for s in sigs])
    assert "SECRET" not in raw and "Traceback" not in raw and "RuntimeError" not in raw
    assert not completions(owner)
    assert owner.ctrl.read_versioned("/inbox")[0] == [text]


async def test_a_new_message_retries_the_failed_head_at_once(
    rclient: redis.Redis, pid: str, prefix: str
) -> None:
    flaky = SimulatedReasoner([ReasonReply(None, [{"id": "x", "name": "nope"}])])
    owner = Owner(rclient, pid, prefix, 1, create=True, reasoner=flaky, retry_after_s=60)
    owner.loop.start()
    try:
        owner.send("first")
        await wait_for(lambda: any(s.kind is SignalKind.FAILED for s in owner.signals()))
        owner.send("second")
        await wait_for(lambda: len(completions(owner)) == 2)
    finally:
        await owner.loop.stop()
    assert [c["response"]["content"] for c in completions(owner)] == \
        ["echo: first", "echo: second"]


async def test_stale_owner_is_fenced_and_the_new_owner_completes_once(
    rclient: redis.Redis, pid: str, prefix: str
) -> None:
    old = Owner(rclient, pid, prefix, 1, create=True)
    old.loop.start()
    old.send("/sleep 1.0 hello")
    await wait_for(lambda: any(s.kind is SignalKind.CANONICAL_EVENT for s in old.signals()))
    new = Owner(rclient, pid, prefix, 2)  # claims: raises the fence
    new.loop.start()
    try:
        await wait_for(lambda: len(completions(new)) == 1)
        await wait_for(lambda: old.fenced, 5.0)
    finally:
        await new.loop.stop()
        await old.loop.stop()
    assert old.loop.state == LoopState.STOPPED
    sigs = new.signals()
    assert len([s for s in sigs if s.kind is SignalKind.COMPLETION]) == 1
    tokens = [s.token for s in sigs]
    assert tokens == sorted(tokens)  # nothing from the stale owner after the claim
    events = new.log.recent(session_for(pid), 100)
    assert [r.token for r in events] == sorted(r.token for r in events)
    assert events[-1].token == 2 and events[-1].event["kind"] == "reply"
    assert new.ctrl.read_versioned("/inbox")[0] == []


async def test_a_new_owner_resumes_pending_items_in_order(
    rclient: redis.Redis, pid: str, prefix: str
) -> None:
    first = Owner(rclient, pid, prefix, 1, create=True)
    for text in ("a", "b", "c"):
        first.ctrl.append_inbox(text)  # committed; this owner never runs its loop
    second = Owner(rclient, pid, prefix, 2)
    second.loop.start()
    try:
        await wait_for(lambda: len(completions(second)) == 3)
    finally:
        await second.loop.stop()
    assert [c["response"]["content"] for c in completions(second)] == \
        ["echo: a", "echo: b", "echo: c"]
    assert [c["turn"] for c in completions(second)] == [1, 2, 3]


async def _fork_after_one_turn(rclient: redis.Redis, pid: str, prefix: str,
                               child_id: str) -> Owner:
    """Create ``pid`` (owner token 1), answer "before fork" on its loop, then fork it
    to ``child_id`` and claim and create the child in the store at ``prefix`` (token 1).

    Returns the parent owner, its loop stopped; the child is for the caller to own.
    """
    parent = Owner(rclient, pid, prefix, 1, create=True)
    parent.loop.start()
    try:
        parent.send("before fork")
        await wait_for(lambda: len(completions(parent)) == 1)
    finally:
        await parent.loop.stop()
    with parent.ctrl.locked():
        child_proc = parent.ctrl.process.fork(child_id)
    b = RedisBackend(rclient, child_id, 1, StoreConfig(prefix=prefix))
    b.claim()
    b.create(child_proc)
    return parent


async def test_process_only_fork_begins_a_fresh_session(
    rclient: redis.Redis, pid: str, prefix: str
) -> None:
    child_id = pid + "-fork"
    await _fork_after_one_turn(rclient, pid, prefix, child_id)
    child = Owner(rclient, child_id, prefix, 1)
    child.loop.start()
    try:
        child.send("after fork")
        await wait_for(lambda: len(completions(child)) == 1)
    finally:
        await child.loop.stop()
    (done,) = completions(child)
    assert done["session"] == session_for(child_id) != session_for(pid)
    assert done["turn"] == 1 and done["events"] == {"first": 1, "last": 2}


class _Recording(SimulatedReasoner):
    """The simulated model, failing its first step with an unknown tool (once
    ``fail_first``) and keeping every request it was asked."""

    def __init__(self, fail_first: bool = False) -> None:
        super().__init__([ReasonReply(None, [{"id": "x", "name": "nope"}])] if fail_first
                         else [])
        self.requests: list[reasoning.ReasonRequest] = []

    async def reason(self, request: reasoning.ReasonRequest) -> ReasonReply:
        self.requests.append(request)
        return await super().reason(request)


async def test_store_level_fork_continues_after_the_shared_prefix(
    rclient: redis.Redis, pid: str, prefix: str
) -> None:
    # A child whose first session starts with the parent's acknowledged events
    # (fork_events) numbers its first turn after them and gives them to its model
    # as history; a retry of that first turn (it failed after appending its user
    # event, so no acknowledge moved /thread/session yet) keeps its turn number.
    child_id = pid + "-durable-fork"
    parent = await _fork_after_one_turn(rclient, pid, prefix, child_id)
    last_seq = parent.ctrl.read_versioned("/thread/session/last_seq")[0]
    assert fork_events(rclient, pid, child_id, prefix=prefix, upto_seq=last_seq) == 2
    model = _Recording(fail_first=True)
    child = Owner(rclient, child_id, prefix, 1, reasoner=model, retry_after_s=60)
    child.loop.start()
    try:
        child.send("after fork")
        await wait_for(lambda: any(s.kind is SignalKind.FAILED for s in child.signals()))
        child.send("second")
        await wait_for(lambda: len(completions(child)) == 2)
    finally:
        await child.loop.stop()
    first, second = completions(child)
    assert (first["turn"], second["turn"]) == (2, 3)
    assert first["response"]["content"] == "echo: after fork"
    assert first["session"] == session_for(child_id)
    assert [m["content"] for m in model.requests[1].messages[1:]] == [
        "before fork", "echo: before fork", "after fork"]
    assert [s.data["turn"] for s in child.signals() if s.kind is SignalKind.FAILED] == [2]
    # the parent's history is unchanged
    assert [r.event["turn"] for r in parent.log.recent(session_for(pid), 10)] == [1, 1]
