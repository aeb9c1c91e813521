"""``POST /v1/processes/fork`` with ``"history": true``, through the SDK, over the
in-process router with its reasoning loops.

The child shares the parent's immutable event prefix (its acknowledged turns at
the forked version): the child's first turn continues the parent's turn
numbering and its model sees that history; afterwards parent and child are
isolated. A fork without ``history`` keeps today's fresh session. Reference
semantics: the reasoning-loop tests "durable fork shares an immutable event
prefix" and "subagent owns an isolated forked process" (everruns/svit).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from svit_cluster import reasoning
from svit_cluster.client import SvitClient
from svit_cluster.errors import SvitError
from svit_cluster.events import session_for
from svit_cluster.gateway import Principal, TokenStore, create_app
from svit_cluster.inprocess import InProcessRouter
from svit_cluster.reasoning import ReasonReply, SimulatedReasoner
from tests._support import wait_for
from tests.events._server import serve

ACME = "acme-token-0123456789"
PARENT, CHILD, PLAIN = "svit://acme/parent", "svit://acme/child", "svit://acme/plain"


class Recording(SimulatedReasoner):
    """The simulated (echo) model, keeping every request it was asked."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[reasoning.ReasonRequest] = []

    async def reason(self, request: reasoning.ReasonRequest) -> ReasonReply:
        self.requests.append(request)
        return await super().reason(request)


@pytest.fixture
def models() -> list[Recording]:
    return []


@pytest.fixture
def client(models: list[Recording]) -> Iterator[SvitClient]:
    def model() -> Recording:
        models.append(Recording())
        return models[-1]

    tokens = TokenStore()
    tokens.add(ACME, Principal(tenant="acme"))
    router = InProcessRouter(reasoner=model)
    with serve(create_app(router, tokens)) as base, SvitClient(base, ACME) as c:
        yield c


def turns(c: SvitClient, pid: str) -> int:
    value, _ = c.read_versioned(pid, "/thread")
    session = value.get("session") if isinstance(value, dict) else None
    return int(session["turns"]) if isinstance(session, dict) and \
        session.get("process") == pid else 0


def contents(request: reasoning.ReasonRequest) -> list[Any]:
    return [m["content"] for m in request.messages[1:]]  # after the system prompt


def test_fork_with_history_shares_the_acknowledged_prefix_then_isolates(
        client: SvitClient, models: list[Recording]) -> None:
    c = client
    c.create_process(PARENT, memory={"n": 1})
    c.inbox(PARENT, {"content": "before fork"})
    wait_for(lambda: turns(c, PARENT) == 1)

    info = c.fork(PARENT, CHILD, history=True)
    assert info["process_id"] == CHILD
    assert info["history"] == {"events": 2, "upto_seq": 2}
    plain = c.fork(PARENT, PLAIN)  # the default: a fresh session, as before
    assert "history" not in plain
    parent_model, child_model, plain_model = models

    # the child's session starts with the parent's events, same sequence numbers
    child_session = session_for(CHILD)
    shared = c.recent_events(CHILD, 64, session=child_session)
    assert [(e["seq"], e["event"]["turn"], e["event"]["kind"]) for e in shared] == [
        (1, 1, "user"), (2, 1, "reply")]
    assert [e["event"] for e in shared] == [
        e["event"] for e in c.recent_events(PARENT, 64, session=session_for(PARENT))]

    c.inbox(CHILD, {"content": "after fork"})
    wait_for(lambda: turns(c, CHILD) == 2)  # continues the parent's numbering
    assert contents(child_model.requests[-1]) == ["before fork", "echo: before fork",
                                                  "after fork"]
    c.inbox(PLAIN, {"content": "fresh"})
    wait_for(lambda: turns(c, PLAIN) == 1)
    assert contents(plain_model.requests[-1]) == ["fresh"]

    # isolated after the fork: the parent's next turn does not see the child's
    c.inbox(PARENT, {"content": "parent again"})
    wait_for(lambda: turns(c, PARENT) == 2)
    assert contents(parent_model.requests[-1]) == ["before fork", "echo: before fork",
                                                   "parent again"]
    parent_log = c.recent_events(PARENT, 64, session=session_for(PARENT))
    assert [e["seq"] for e in parent_log] == [1, 2, 3, 4]
    child_log = c.recent_events(CHILD, 64, session=child_session)
    assert [(e["seq"], e["event"]["turn"]) for e in child_log] == [
        (1, 1), (2, 1), (3, 2), (4, 2)]
    assert child_log[2]["event"]["session"] == child_session

    # a retried fork is refused (409) and leaves the child's history as it was
    with pytest.raises(SvitError) as conflict:
        c.fork(PARENT, CHILD, history=True)
    assert conflict.value.code == "conflict"
    assert c.recent_events(CHILD, 64, session=child_session) == child_log
    with pytest.raises(SvitError) as unknown:
        c.fork("svit://acme/nobody", "svit://acme/orphan", history=True)
    assert unknown.value.code == "not_found"


def test_fork_with_history_before_any_turn_shares_nothing(
        client: SvitClient, models: list[Recording]) -> None:
    # Only acknowledged turns are shared: a process that never finished one
    # gives its child an empty prefix, and the child starts at turn 1.
    c = client
    c.create_process(PARENT, memory={"n": 1})
    info = c.fork(PARENT, CHILD, history=True)
    assert info["history"] == {"events": 0, "upto_seq": 0}
    c.inbox(CHILD, {"content": "first"})
    wait_for(lambda: turns(c, CHILD) == 1)
    assert contents(models[1].requests[-1]) == ["first"]


def test_the_route_body_flag_is_honoured(client: SvitClient) -> None:
    # The plain HTTP body {"history": true} (no SDK): the child's log starts
    # with the parent's turn instead of the flag being silently ignored.
    c = client
    c.create_process(PARENT, memory={"n": 1})
    c.inbox(PARENT, {"content": "hello"})
    wait_for(lambda: turns(c, PARENT) == 1)
    resp = httpx.post(c.url + "/v1/processes/fork", headers={"Authorization": f"Bearer {ACME}"},
                      json={"process_id": PARENT, "new_process_id": CHILD, "history": True})
    assert resp.status_code == 201, resp.text
    events = c.recent_events(CHILD, 64, session=session_for(CHILD))
    assert [e["event"]["kind"] for e in events] == ["user", "reply"]
