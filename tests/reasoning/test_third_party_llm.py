"""The OpenAI-compatible reasoner and its loop against servers we did not write.

LLMock (``benchmarks._llm``: PyPI ``llmock``, run as a separate process on a
free loopback port) answers the chat completions: plain replies, tool calls
(one, several in one reply, and its automatic "call, then answer" mode), HTTP
error statuses, delays and broken tool calls. LLMock cannot send a
non-streamed body that is not JSON, or JSON of another shape, so those bytes
come from pytest-httpserver (PyPI ``pytest-httpserver``), which serves a
response configured byte for byte.

Every test runs the real path: our ``OpenAICompatReasoner`` over HTTP, the
``TurnLoop`` and the fenced Redis store. What each asserts is the loop's rule
(``reasoning._loop``): a completion exists if and only if its inbox item was
acknowledged, one per item; a failed turn publishes one typed ``failed``
signal and leaves its item at the head of ``/inbox``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from pytest_httpserver import HTTPServer

from benchmarks._llm import LLMOCK_VERSION, LLMServer, start_llm_server, stop_llm_server
from svit_cluster.events import SignalKind, session_for
from svit_cluster.reasoning import OpenAICompatReasoner, ReasonerConfig, build_reasoner
from tests.reasoning._support import Owner, wait_for

pytestmark = pytest.mark.servers

KEY = "sk-third-party-KEY-0123456789"
MODEL = "gpt-4o-mini"
#: LLMock's text answer with ``--response-style static``.
ANSWER = f"Mock response from {MODEL}."
CHAT = "/v1/chat/completions"


@pytest.fixture(scope="module")
def llm() -> Iterator[LLMServer]:
    server = start_llm_server()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def mock(llm: LLMServer) -> LLMServer:
    llm.reset()
    return llm


def reasoner(base_url: str, step_timeout_s: float) -> OpenAICompatReasoner:
    built = build_reasoner(ReasonerConfig(kind="openai", base_url=base_url, model=MODEL,
                                          api_key=KEY, step_timeout_s=step_timeout_s))
    assert isinstance(built, OpenAICompatReasoner)
    return built


def owner_for(base_url: str, rclient: redis.Redis, pid: str, prefix: str, *,
              step_timeout_s: float = 5.0, **config: Any) -> Owner:
    """One owner whose loop asks ``base_url``; a failed turn is retried only when
    woken (``retry_after_s`` 60), so each test decides when a retry happens."""
    config.setdefault("retry_after_s", 60)
    return Owner(rclient, pid, prefix, 1, create=True,
                 reasoner=reasoner(base_url, step_timeout_s),
                 step_timeout_s=step_timeout_s, **config)


def completions(owner: Owner) -> list[dict[str, Any]]:
    return [s.data for s in owner.signals() if s.kind is SignalKind.COMPLETION]


def failures(owner: Owner) -> list[dict[str, Any]]:
    return [s.data for s in owner.signals() if s.kind is SignalKind.FAILED]


def events(owner: Owner, pid: str) -> list[dict[str, Any]]:
    return [r.event for r in owner.log.recent(session_for(pid), 200)]


def chats(server: LLMServer) -> list[dict[str, Any]]:
    return [r for r in server.requests() if r["path"] == CHAT]


def inbox(owner: Owner) -> Any:
    return owner.ctrl.read_versioned("/inbox")[0]


def no_key_anywhere(owner: Owner) -> None:
    assert KEY not in json.dumps([s.to_json() for s in owner.signals()])


async def fail_then_recover(owner: Owner, code: str) -> dict[str, Any]:
    """Send m-1, wait for its failed turn, check nothing was lost, then send m-2:
    the wake retries m-1 at once and both complete exactly once, in order.

    Returns:
        The ``failed`` signal of m-1.
    """
    owner.send({"content": "first", "id": "m-1"})
    await wait_for(lambda: bool(failures(owner)))
    (failed,) = failures(owner)
    assert failed["code"] == code
    assert not completions(owner)
    assert inbox(owner) == [{"content": "first", "id": "m-1"}]
    owner.send({"content": "second", "id": "m-2"})
    await wait_for(lambda: len(completions(owner)) == 2)
    assert [c["message_id"] for c in completions(owner)] == ["m-1", "m-2"]
    assert inbox(owner) == []
    no_key_anywhere(owner)
    return failed


def findings(server: LLMServer) -> list[str]:
    """The codes of LLMock's verdict on how our client handled its faults."""
    return [f["code"] for f in server.verdict()["findings"]]


def test_the_helper_runs_the_pinned_llmock_in_its_own_process(llm: LLMServer) -> None:
    import os

    assert llm.version == LLMOCK_VERSION
    assert llm.pid != os.getpid() and os.path.exists(f"/proc/{llm.pid}")
    assert llm.base_url == f"http://127.0.0.1:{llm.port}/v1"


def test_the_helper_stops_its_server_by_pid_and_leaves_other_pids_alone() -> None:
    import os

    import httpx

    server = start_llm_server(tool_mode="off")
    answer = httpx.post(server.base_url + "/chat/completions", trust_env=False, json={
        "model": MODEL, "messages": [{"role": "user", "content": "read it"}],
        "tools": [{"type": "function", "function": {"name": "read", "parameters": {}}}]})
    assert answer.json()["choices"][0]["message"]["content"] == ANSWER  # no tool call
    server.stop()
    assert not os.path.exists(f"/proc/{server.pid}")
    with pytest.raises(httpx.ConnectError):
        httpx.get(server.url + "/health", trust_env=False)
    stop_llm_server(server.pid)  # gone: nothing to do
    stop_llm_server(os.getpid())  # not an LLMock server: never signalled
    with pytest.raises(ValueError, match="tool_mode"):
        start_llm_server(tool_mode="sometimes")


async def test_a_plain_reply_is_the_turns_answer(
    mock: LLMServer, rclient: redis.Redis, pid: str, prefix: str
) -> None:
    mock.script({"type": "reply", "text": "plain answer"})
    owner = owner_for(mock.base_url, rclient, pid, prefix)
    owner.loop.start()
    try:
        owner.send({"content": "hello", "id": "m-1"})
        await wait_for(lambda: len(completions(owner)) == 1)
    finally:
        await owner.loop.stop()
    (done,) = completions(owner)
    assert done["response"] == {"role": "assistant", "content": "plain answer"}
    assert done["message_id"] == "m-1" and inbox(owner) == []
    assert [e["kind"] for e in events(owner, pid)] == ["user", "reply"]
    (request,) = chats(mock)
    body = request["body"]
    assert request["status"] == 200 and body["model"] == MODEL
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    assert body["messages"][1]["content"] == "hello"
    assert {t["function"]["name"] for t in body["tools"]} == {
        "discover", "read", "stat", "write", "remove", "exec"}
    assert "stream" not in body
    no_key_anywhere(owner)


async def test_a_scripted_tool_call_runs_and_its_result_goes_back(
    mock: LLMServer, rclient: redis.Redis, pid: str, prefix: str
) -> None:
    mock.script({"type": "reply", "tool_calls": [
        {"name": "read", "arguments": {"path": "/memory/count"}}]})
    owner = owner_for(mock.base_url, rclient, pid, prefix)
    owner.loop.start()
    try:
        owner.send("what is the count?")
        await wait_for(lambda: len(completions(owner)) == 1)
    finally:
        await owner.loop.stop()
    assert completions(owner)[0]["response"]["content"] == ANSWER
    user, reason, act, reply = events(owner, pid)
    assert [user["kind"], reason["kind"], act["kind"], reply["kind"]] == \
        ["user", "reason", "act", "reply"]
    (call,) = reason["data"]["tool_calls"]
    assert call["name"] == "read" and call["arguments"] == {"path": "/memory/count"}
    assert call["id"].startswith("call_")  # LLMock's id, kept as sent
    assert act["data"]["call_id"] == call["id"]
    assert act["data"]["result"]["value"] == 0
    first, second = chats(mock)
    assert [m["role"] for m in first["body"]["messages"]] == ["system", "user"]
    assistant, tool = second["body"]["messages"][2:]
    assert assistant["role"] == "assistant" and assistant["content"] is None
    assert assistant["tool_calls"] == [{"id": call["id"], "type": "function", "function": {
        "name": "read", "arguments": json.dumps({"path": "/memory/count"})}}]
    assert tool["role"] == "tool" and tool["tool_call_id"] == call["id"]
    assert json.loads(tool["content"])["value"] == 0
    assert inbox(owner) == []


async def test_several_tool_calls_in_one_reply_run_in_order(
    mock: LLMServer, rclient: redis.Redis, pid: str, prefix: str
) -> None:
    mock.script({"type": "reply", "tool_calls": [
        {"name": "read", "arguments": {"path": "/memory/count"}},
        {"name": "exec", "arguments": {"script": "counter", "input": {"by": 2}}},
        {"name": "read", "arguments": {"path": "/memory/count"}}]})
    owner = owner_for(mock.base_url, rclient, pid, prefix)
    owner.loop.start()
    try:
        owner.send("count up by two")
        await wait_for(lambda: len(completions(owner)) == 1)
    finally:
        await owner.loop.stop()
    kinds = [e["kind"] for e in events(owner, pid)]
    assert kinds == ["user", "reason", "act", "act", "act", "reply"]
    reason, *acts = events(owner, pid)[1:5]
    calls = reason["data"]["tool_calls"]
    assert [c["name"] for c in calls] == ["read", "exec", "read"]
    assert len({c["id"] for c in calls}) == 3
    assert [a["data"]["call_id"] for a in acts] == [c["id"] for c in calls]
    assert acts[0]["data"]["result"]["value"] == 0
    assert acts[1]["data"]["result"]["status"] == "committed"
    assert acts[2]["data"]["result"]["value"] == 2
    assert owner.ctrl.read_versioned("/memory/count")[0] == 2
    _, second = chats(mock)
    messages = second["body"]["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "tool",
                                             "tool"]
    assert [c["id"] for c in messages[2]["tool_calls"]] == [c["id"] for c in calls]
    assert [m["tool_call_id"] for m in messages[3:]] == [c["id"] for c in calls]
    assert inbox(owner) == []


async def test_automatic_tool_turns_go_on_for_every_message(
    mock: LLMServer, rclient: redis.Redis, pid: str, prefix: str
) -> None:
    """The soak benchmark's mode: nothing scripted, each turn is a tool call then
    an answer (LLMock answers in text once the last message is a tool result)."""
    owner = owner_for(mock.base_url, rclient, pid, prefix)
    owner.loop.start()
    try:
        for i in range(3):
            owner.send({"content": f"please read the memory ({i})", "id": f"m-{i}"})
        await wait_for(lambda: len(completions(owner)) == 3)
    finally:
        await owner.loop.stop()
    assert [c["message_id"] for c in completions(owner)] == ["m-0", "m-1", "m-2"]
    assert [c["turn"] for c in completions(owner)] == [1, 2, 3]
    assert [e["kind"] for e in events(owner, pid)] == ["user", "reason", "act", "reply"] * 3
    requests = chats(mock)
    assert len(requests) == 6
    # the answer step of each turn follows a tool result; later turns carry the history
    assert [r["body"]["messages"][-1]["role"] for r in requests] == ["user", "tool"] * 3
    assert len(requests[4]["body"]["messages"]) > len(requests[0]["body"]["messages"])
    # LLMock's pick: the tool sharing most words with the conversation (our system
    # prompt makes it `write`), arguments from its schema; refused, nothing committed
    acts = [e["data"] for e in events(owner, pid) if e["kind"] == "act"]
    assert [(a["name"], a["result"]["error"]["code"]) for a in acts] == \
        [("write", "invalid_path")] * 3
    assert owner.ctrl.read_versioned("/memory/count")[0] == 0
    assert inbox(owner) == []


@pytest.mark.parametrize(("status", "hint"), [
    (500, ""),
    (502, ""),
    (503, " (retry after 1 s)"),  # LLMock's default Retry-After for a 503
    (400, ""),
    (401, ""),
])
async def test_an_error_status_fails_the_turn_and_keeps_the_item(
    mock: LLMServer, rclient: redis.Redis, pid: str, prefix: str, status: int, hint: str
) -> None:
    mock.script({"type": "fail", "status": status, "message": f"boom {KEY}"})
    owner = owner_for(mock.base_url, rclient, pid, prefix)
    owner.loop.start()
    try:
        failed = await fail_then_recover(owner, "reasoner_failed")
    finally:
        await owner.loop.stop()
    # the error body (here with the key in it) is never echoed
    assert failed["message"] == f"the reasoner answered HTTP {status}{hint}"
    # one refused request, then two turns of "tool call, then answer"
    assert [r["status"] for r in chats(mock)] == [status] + [200] * 4
    assert "retry_after_ignored" not in findings(mock)


@pytest.mark.parametrize(("status", "retry_after_s"), [(429, 1.5), (503, 1.0)])
async def test_a_retry_after_holds_the_retry_even_when_a_new_message_wakes_the_loop(
    mock: LLMServer, rclient: redis.Redis, pid: str, prefix: str, status: int,
    retry_after_s: float
) -> None:
    mock.script({"type": "fail", "status": status, "retry_after": retry_after_s})
    owner = owner_for(mock.base_url, rclient, pid, prefix)
    owner.loop.start()
    try:
        failed = await fail_then_recover(owner, "reasoner_failed")
    finally:
        await owner.loop.stop()
    assert failed["message"] == (f"the reasoner answered HTTP {status} "
                                 f"(retry after {retry_after_s:g} s)")
    refused, retried = chats(mock)[:2]
    assert refused["status"] == status and refused["retry_after"] == retry_after_s
    assert retried["started_at"] - refused["ended_at"] >= retry_after_s
    assert "retry_after_ignored" not in findings(mock)


async def test_a_retry_after_longer_than_the_backoff_cap_is_capped(
    mock: LLMServer, rclient: redis.Redis, pid: str, prefix: str
) -> None:
    mock.script({"type": "fail", "status": 429, "retry_after": 3600})
    owner = owner_for(mock.base_url, rclient, pid, prefix, retry_after_s=0.2,
                      max_retry_after_s=0.5)
    owner.loop.start()
    try:
        owner.send("first")
        await wait_for(lambda: len(completions(owner)) == 1, 10.0)
    finally:
        await owner.loop.stop()
    assert failures(owner)[0]["message"] == "the reasoner answered HTTP 429 (retry after 3600 s)"


async def test_a_slow_reply_past_the_step_timeout_fails_fast_and_keeps_the_item(
    mock: LLMServer, rclient: redis.Redis, pid: str, prefix: str
) -> None:
    mock.script({"type": "delay", "seconds": 4.0})
    owner = owner_for(mock.base_url, rclient, pid, prefix, step_timeout_s=1.0)
    owner.loop.start()
    try:
        started = time.monotonic()
        owner.send({"content": "first", "id": "m-1"})
        await wait_for(lambda: bool(failures(owner)))
        waited = time.monotonic() - started
        assert 1.0 <= waited < 3.0  # the step timeout, not the server's 4 s
        (failed,) = failures(owner)
        assert failed["code"] == "reasoner_timeout"
        assert inbox(owner) == [{"content": "first", "id": "m-1"}]
        assert not completions(owner)
        owner.send({"content": "second", "id": "m-2"})
        await wait_for(lambda: len(completions(owner)) == 2)
    finally:
        await owner.loop.stop()
    assert [c["message_id"] for c in completions(owner)] == ["m-1", "m-2"]
    assert inbox(owner) == []


async def test_a_slow_reply_just_under_the_step_timeout_completes(
    mock: LLMServer, rclient: redis.Redis, pid: str, prefix: str
) -> None:
    mock.script({"type": "delay", "seconds": 1.2}, {"type": "reply", "text": "worth the wait"})
    owner = owner_for(mock.base_url, rclient, pid, prefix, step_timeout_s=2.0)
    owner.loop.start()
    try:
        started = time.monotonic()
        owner.send("slow please")
        await wait_for(lambda: len(completions(owner)) == 1)
        assert time.monotonic() - started >= 1.2
    finally:
        await owner.loop.stop()
    assert completions(owner)[0]["response"]["content"] == "worth the wait"
    assert not failures(owner) and inbox(owner) == []
    (request,) = chats(mock)
    assert request["duration"] >= 1.2


@pytest.mark.parametrize(("kind", "why"), [
    ("malformed_arguments", "call 0 arguments are not JSON"),
    ("unknown_tool", "call 0 names an unknown tool"),
])
async def test_a_broken_tool_call_fails_the_turn_before_anything_runs(
    mock: LLMServer, rclient: redis.Redis, pid: str, prefix: str, kind: str, why: str
) -> None:
    mock.script({"type": "tool_fault", "kind": kind})
    owner = owner_for(mock.base_url, rclient, pid, prefix)
    owner.loop.start()
    try:
        failed = await fail_then_recover(owner, "reasoner_malformed")
    finally:
        await owner.loop.stop()
    assert failed["message"] == f"the reasoner returned a malformed tool call: {why}"
    assert chats(mock)[0]["fault"] is None  # LLMock journals tool faults as plain replies
    # the failed attempt appended only its user event: no reason, no act
    first_attempt = [e for e in events(owner, pid) if e["turn"] == 1]
    attempts = sorted({e["attempt"] for e in first_attempt})
    assert [e["kind"] for e in first_attempt if e["attempt"] == attempts[0]] == ["user"]


#: The failures a malformed body must end in: ``(code, message)``.
INVALID_JSON = ("reasoner_failed", "the reasoner answered with invalid JSON")
NO_MESSAGE = ("reasoner_malformed", "the reasoner's answer has no usable message")

#: Bodies LLMock cannot send to a non-streaming client, served byte for byte.
BYTES: list[tuple[str, bytes, str, str, str]] = [
    ("html", b"<html><body>502 Bad Gateway</body></html>", "text/html", *INVALID_JSON),
    ("truncated", b'{"choices": [{"message": {"content": "cut sho', "application/json",
     *INVALID_JSON),
    ("not-utf8", b"\xff\xfe\x00\x81", "application/json", *INVALID_JSON),
    ("sse", b'data: {"choices": [{"delta": {"content": "hi"}}]}\n\ndata: [DONE]\n\n',
     "text/event-stream", *INVALID_JSON),
    ("empty", b"", "application/json", *INVALID_JSON),
    ("no-choices", b'{"choices": []}', "application/json", *NO_MESSAGE),
    ("error-with-200", b'{"error": {"message": "overloaded"}}', "application/json",
     *NO_MESSAGE),
    ("a-list", b"[]", "application/json", *NO_MESSAGE),
    ("message-is-text", b'{"choices": [{"message": "hello"}]}', "application/json",
     *NO_MESSAGE),
    ("tool-calls-not-a-list", b'{"choices": [{"message": {"tool_calls": "read"}}]}',
     "application/json", *NO_MESSAGE),
    ("content-a-number", b'{"choices": [{"message": {"content": 42}}]}', "application/json",
     "reasoner_malformed", "the reasoner's content is not text"),
    ("nothing-said", b'{"choices": [{"message": {"role": "assistant", "content": null}}]}',
     "application/json", "reasoner_malformed",
     "the reasoner answered with neither text nor tool calls"),
    ("call-without-arguments", b'{"choices": [{"message": {"tool_calls": [{"id": "c1", '
     b'"type": "function", "function": {"name": "read"}}]}}]}', "application/json",
     "reasoner_malformed", "the reasoner returned a malformed tool call: "
     "call 0 (read) needs a string 'path'"),
]


@pytest.mark.parametrize(("body", "content_type", "code", "message"),
                         [b[1:] for b in BYTES], ids=[b[0] for b in BYTES])
async def test_a_malformed_body_fails_the_turn_with_a_typed_cause(
    httpserver: HTTPServer, rclient: redis.Redis, pid: str, prefix: str, body: bytes,
    content_type: str, code: str, message: str
) -> None:
    httpserver.expect_oneshot_request(CHAT, method="POST").respond_with_data(
        body, status=200, content_type=content_type)
    httpserver.expect_request(CHAT, method="POST").respond_with_json(
        {"choices": [{"message": {"role": "assistant", "content": "recovered"}}]})
    owner = owner_for(httpserver.url_for("/v1"), rclient, pid, prefix)
    owner.loop.start()
    try:
        failed = await fail_then_recover(owner, code)
    finally:
        await owner.loop.stop()
    assert failed["message"] == message
    assert [c["response"]["content"] for c in completions(owner)] == ["recovered"] * 2
    assert len(httpserver.log) == 3


async def test_a_redirect_is_a_failed_status_not_a_body_to_parse(
    httpserver: HTTPServer, rclient: redis.Redis, pid: str, prefix: str
) -> None:
    """Redirects are not followed (the bearer key must not travel to another
    address); the failure names the status rather than the body it came with."""
    httpserver.expect_oneshot_request(CHAT, method="POST").respond_with_data(
        b'{"choices": []}', status=307, content_type="application/json",
        headers={"Location": "http://127.0.0.1:9/v1/chat/completions"})
    httpserver.expect_request(CHAT, method="POST").respond_with_json(
        {"choices": [{"message": {"role": "assistant", "content": "recovered"}}]})
    owner = owner_for(httpserver.url_for("/v1"), rclient, pid, prefix)
    owner.loop.start()
    try:
        failed = await fail_then_recover(owner, "reasoner_failed")
    finally:
        await owner.loop.stop()
    assert failed["message"] == "the reasoner answered HTTP 307"
    assert len(httpserver.log) == 3


@pytest.mark.parametrize(("headers", "expected"), [
    ({}, None),
    ({"retry-after": "2"}, 2.0),
    ({"retry-after": "0.25"}, 0.25),
    ({"retry-after-ms": "1500", "retry-after": "9"}, 1.5),  # the OpenAI header wins
    ({"retry-after-ms": "soon", "retry-after": "3"}, 3.0),
    ({"retry-after": "-5"}, 0.0),
    ({"retry-after": "nan"}, None),
    ({"retry-after": "inf"}, None),
    ({"retry-after": "1e12"}, 86400.0),
    ({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, 0.0),  # a date in the past
    ({"retry-after": "tomorrow-ish"}, None),
])
def test_retry_after_reads_what_servers_send(headers: dict[str, str],
                                             expected: float | None) -> None:
    import httpx

    from svit_cluster.reasoning._openai import retry_after_s

    assert retry_after_s(httpx.Headers(headers)) == expected


def test_retry_after_reads_an_http_date() -> None:
    from email.utils import formatdate

    import httpx

    from svit_cluster.reasoning._openai import retry_after_s

    wait = retry_after_s(httpx.Headers({"retry-after": formatdate(time.time() + 30,
                                                                  usegmt=True)}))
    assert wait is not None and 28.0 <= wait <= 30.0
