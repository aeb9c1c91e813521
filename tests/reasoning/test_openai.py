"""The OpenAI-compatible reasoner against a local stub server (never a real service)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from svit_cluster.events import SignalKind
from svit_cluster.reasoning import OpenAICompatReasoner, ReasonerConfig, build_reasoner
from tests.events._server import serve
from tests.reasoning._support import Owner, wait_for

pytestmark = pytest.mark.servers

KEY = "sk-test-KEY-0123456789"


class Stub:
    def __init__(self) -> None:
        self.mode = "ok"
        self.seen: list[tuple[dict[str, str], dict[str, Any]]] = []

    async def chat(self, request: Request) -> JSONResponse:
        body = await request.json()
        self.seen.append((dict(request.headers), body))
        if self.mode == "error":
            return JSONResponse({"error": {"message": f"bad key {KEY}"}}, status_code=500)
        if self.mode == "slow":
            await asyncio.sleep(3)
        if self.mode == "empty":
            return JSONResponse({"choices": []})
        if self.mode == "badargs":
            return JSONResponse({"choices": [{"message": {"content": None, "tool_calls": [
                {"id": "c1", "type": "function",
                 "function": {"name": "read", "arguments": "{not json"}}]}}]})
        tool_results = [m for m in body["messages"] if m["role"] == "tool"]
        if not tool_results:
            return JSONResponse({"choices": [{"message": {
                "role": "assistant", "content": None,
                "tool_calls": [{"id": "call_abc", "type": "function", "function": {
                    "name": "read", "arguments": json.dumps({"path": "/memory/count"})}}]}}]})
        value = json.loads(tool_results[-1]["content"])["value"]
        return JSONResponse({"choices": [{"message": {
            "role": "assistant", "content": f"the count is {value}"}}]})


@pytest.fixture(scope="module")
def stub() -> Iterator[tuple[Stub, str]]:
    s = Stub()
    app = Starlette(routes=[Route("/v1/chat/completions", s.chat, methods=["POST"])])
    with serve(app) as url:
        yield s, url + "/v1"


def make(url: str) -> OpenAICompatReasoner:
    reasoner = build_reasoner(ReasonerConfig(kind="openai", base_url=url, model="stub-model",
                                             api_key=KEY))
    assert isinstance(reasoner, OpenAICompatReasoner)
    return reasoner


async def test_tool_call_then_reply_through_the_stub(
    stub: tuple[Stub, str], rclient: redis.Redis, pid: str, prefix: str
) -> None:
    server, url = stub
    server.mode, server.seen = "ok", []
    reasoner = make(url)
    assert KEY not in repr(reasoner) and KEY not in repr(
        ReasonerConfig(kind="openai", base_url=url, model="m", api_key=KEY))
    owner = Owner(rclient, pid, prefix, 1, create=True, reasoner=reasoner)
    owner.loop.start()
    try:
        owner.send("what is the count?")
        await wait_for(lambda: any(s.kind is SignalKind.COMPLETION for s in owner.signals()))
    finally:
        await owner.loop.stop()
    (done,) = [s.data for s in owner.signals() if s.kind is SignalKind.COMPLETION]
    assert done["response"]["content"] == "the count is 0"
    (h1, first), (_h2, second) = server.seen
    assert h1["authorization"] == f"Bearer {KEY}"
    assert first["model"] == "stub-model"
    assert {t["function"]["name"] for t in first["tools"]} == {
        "discover", "read", "stat", "write", "remove", "exec"}
    assert [m["role"] for m in first["messages"]] == ["system", "user"]
    assistant = second["messages"][2]
    assert assistant["tool_calls"][0]["function"] == {
        "name": "read", "arguments": json.dumps({"path": "/memory/count"})}
    assert second["messages"][3]["tool_call_id"] == "call_abc"
    assert KEY not in json.dumps([s.to_json() for s in owner.signals()])


@pytest.mark.parametrize(("mode", "code"), [
    ("error", "reasoner_failed"),
    ("slow", "reasoner_timeout"),
    ("empty", "reasoner_malformed"),
    ("badargs", "reasoner_malformed"),
])
async def test_stub_faults_fail_the_turn_without_leaking(
    stub: tuple[Stub, str], rclient: redis.Redis, pid: str, prefix: str, mode: str, code: str
) -> None:
    server, url = stub
    server.mode = mode
    owner = Owner(rclient, pid, prefix, 1, create=True, reasoner=make(url),
                  step_timeout_s=0.5, retry_after_s=60)
    owner.loop.start()
    try:
        owner.send("hi")
        await wait_for(lambda: any(s.kind is SignalKind.FAILED for s in owner.signals()))
    finally:
        await owner.loop.stop()
    (failed,) = [s.data for s in owner.signals() if s.kind is SignalKind.FAILED]
    assert failed["code"] == code
    assert KEY not in json.dumps([s.to_json() for s in owner.signals()])
    assert owner.ctrl.read_versioned("/inbox")[0] == ["hi"]
