"""Reference ``crates/svit/tests/agent_loop.rs``, ported where the feature exists.

The reference's older agent loop maps onto our reasoning loop (:class:`TurnLoop`,
``tests/conformance/reference/_agent.py``). Ported for real: the write tool
with a closable inbox, the exec allowlist and the bounded model output; the native
http, llm and spawn executables as the model's ``port`` tool; the live loop taking
messages in commit order; and the thread that follows a restore or is shared by a fork
(the host's event log, forked with ``fork_events``; difference A12). The ``/agent``
and ``/bin`` projections still fail with "feature absent: ..." (marker
``reference_absent``): the reference's later reasoning loop dropped them. See
docs/conformance.md, "Reference test port".
"""

from __future__ import annotations

import json

import pytest

from svit_cluster.errors import ConflictError, ErrorCode
from svit_cluster.inprocess import MemorySignals
from svit_cluster.ports import (
    LlmPortConfig,
    LocalSpawner,
    PortsConfig,
    SpawnPortConfig,
    build_registry,
)
from svit_cluster.process import Process, to_plain_json
from tests.conformance.reference._agent import (
    OVERSIZED_ANSWER,
    Agent,
    call,
    http_turn,
    oversized_turn,
    text,
    tool_results,
    two_live_turns,
)
from tests.conformance.reference.test_reasoning_loop import CLAIM


async def test_svit_builder_combines_process_definition_and_blocking_inbox_loop() -> None:
    # A simulated model calls the write tool, then answers; after the inbox is closed
    # and drained, sending is refused and commits nothing.
    agent = Agent("svit://local/runnable",
                  [call("write", path="/memory/status", value="complete"),
                   text("work complete")],
                  memory={"status": "idle"},
                  instructions="Handle inbox messages inside your Svit process.")
    agent.start()
    try:
        assert agent.read("/memory/status") == "idle"
        agent.send({"content": "Do the configured work.", "id": "m-1"})
        await agent.block()
    finally:
        await agent.stop()
    (done,) = agent.completions()
    assert done["response"] == {"role": "assistant", "content": "work complete"}
    assert agent.read("/memory/status") == "complete"
    assert agent.read("/inbox") == []
    assert agent.messages()[0] == {"turn": 1, "role": "user",
                                   "content": "Do the configured work."}
    before = agent.process.version
    with pytest.raises(ConflictError) as refused:
        agent.send("too late")
    assert refused.value.code == ErrorCode.INBOX_CLOSED
    assert agent.process.version == before


async def test_started_svit_processes_inbox_messages_in_commit_order() -> None:
    # After a completed turn the loop waits, still running; the next committed
    # message becomes the next turn without a restart.
    agent = await two_live_turns("svit://local/ordered-inbox")
    assert len(agent.messages()) == 4
    assert [m["turn"] for m in agent.messages()] == [1, 1, 2, 2]
    assert agent.read("/inbox") == []


@pytest.mark.reference_absent
def test_agent_runtime_projects_prompt_messages_and_events() -> None:
    pytest.fail(
        'feature absent: /agent/system_prompt, /agent/messages, /agent/events and the '
        '/bin catalog (jq, search) are projected (the older agent API; the later '
        'reasoning_loop.rs keeps no history in the process, see A12)'
    )


def test_resumed_agent_refreshes_tool_discovery_to_current_host_grants() -> None:
    # Where llm is granted the model is offered the port tool naming llm; restored on
    # a host that grants nothing, /ports is replaced by an empty catalog and the model
    # is offered no port tool (difference A10: /ports and the port tool, not /bin).
    source = Agent("svit://local/tool-projection-source",
                   ports=build_registry(PortsConfig(llm=LlmPortConfig(enabled=True))))
    offered = {spec["function"]["name"]: spec for spec in source.loop.tools.specs()}
    assert "llm" in offered["port"]["function"]["parameters"]["properties"]["name"]["enum"]
    restored = Process.restore(source.process.snapshot())
    resumed = Agent(restored)
    assert resumed.read("/ports") == {}
    assert "port" not in {spec["function"]["name"] for spec in resumed.loop.tools.specs()}


async def test_agent_resume_rejects_a_divergent_message_projection() -> None:
    # The events are canonical. A fork that shares the recorded turn (a store-level
    # fork of the history) but whose /thread carries a forged message list (empty,
    # unlike the event projection) is refused as a loop start; the model is never
    # asked. We keep no message list at all (difference A12): any list in /thread is
    # refused, a divergent one included.
    signals = MemorySignals()
    source = Agent("svit://local/projection-source", [text("recorded answer")],
                   signals=signals)
    await source.one_turn("record this")
    with source.ctrl.locked():
        child = source.process.fork("svit://local/projection-tampered")
        upto = to_plain_json(source.process.read("/thread/session/last_seq"))
    signals.fork_events(source.process.id, child.id, upto_seq=upto)
    wc = child.working_copy()
    wc.host_set("/thread/messages", [])
    child.commit(child.seal(wc, "test.tamper"))
    tampered = Agent(child, [text("must not run")], signals=signals)
    assert [m["content"] for m in tampered.recent_messages()] == ["record this",
                                                                  "recorded answer"]
    tampered.ctrl.append_inbox("resume")
    tampered.start()
    try:
        failed = await tampered.until_failed()
    finally:
        await tampered.stop()
    assert failed.data["code"] == "thread_refused"
    assert "materialised history" in failed.data["message"]
    assert tampered.reasoner.steps == 0 and tampered.completions() == []


async def test_svit_agent_resumes_its_thread_from_the_process_snapshot() -> None:
    # The conversation lives in the host's event log under the process id, which
    # follows the process (difference A3): restored from its snapshot on a host that
    # shares the log, the agent has its two messages and instructions, and its next
    # turn continues the thread (the model sees the first exchange).
    signals = MemorySignals()
    prompt = "Keep support answers concise."
    first = Agent("svit://local/durable-agent", [text("first answer")], instructions=prompt,
                  signals=signals)
    first.start()
    try:
        first.send("first question")
        await first.wait(lambda: len(first.completions()) == 1)
    finally:
        await first.stop()
    restored = Process.restore(first.process.snapshot())
    resumed = Agent(restored, [text("second answer")], signals=signals)
    assert len(resumed.recent_messages()) == 2
    assert resumed.read("/thread/instructions") == prompt
    await resumed.one_turn("second question")
    history = resumed.recent_messages()
    assert [m["content"] for m in history] == ["first question", "first answer",
                                               "second question", "second answer"]
    (request,) = resumed.reasoner.requests
    assert [m["content"] for m in request.messages[1:]] == [
        "first question", "first answer", "second question"]


async def test_subagent_owns_an_isolated_forked_process() -> None:
    # A subagent runs on a fork that inherits the parent's committed thread (a
    # store-level fork of the event history): its turn sees the parent's exchange
    # and appends only to the child. The parent's root hash and history are unchanged.
    signals = MemorySignals()
    parent = Agent("svit://local/parent-agent", [text("parent answer")], signals=signals)
    await parent.one_turn("parent question")
    parent_hash = parent.process.root_hash
    with parent.ctrl.locked():
        forked = parent.process.fork("svit://local/child-agent")
        upto = to_plain_json(parent.process.read("/thread/session/last_seq"))
    assert signals.fork_events(parent.process.id, forked.id, upto_seq=upto) == 2
    child = Agent(forked, [text("child answer")], signals=signals)
    await child.one_turn("child question")
    assert parent.process.root_hash == parent_hash
    assert len(parent.recent_messages()) == 2
    history = child.recent_messages()
    assert [m["content"] for m in history] == ["parent question", "parent answer",
                                               "child question", "child answer"]
    assert [m["turn"] for m in history] == [1, 1, 2, 2]
    (request,) = child.reasoner.requests
    assert [m["content"] for m in request.messages[1:]] == [
        "parent question", "parent answer", "child question"]


async def test_process_owned_agent_enforces_its_script_allowlist() -> None:
    # exec of a script outside the reasoner's allowlist is refused before it runs.
    agent = Agent("svit://local/restricted-agent",
                  [call("exec", path="/lib/denied", input=None), text("denied as expected")],
                  memory={"changed": False},
                  scripts={"denied":
                           '(define (main input) (do (write "/memory/changed" true) input))'},
                  allow_scripts=["allowed"])
    await agent.one_turn("try the denied script")
    assert agent.read("/memory/changed") is False
    (result,) = tool_results(agent)
    assert '"code":"forbidden"' in result
    assert agent.completions()[0]["response"]["content"] == "denied as expected"


async def test_agent_event_growth_fails_closed_at_the_process_limit() -> None:
    # Model output over max_text_bytes fails the turn; nothing of it is committed
    # and the message stays in the inbox.
    agent, failed = await oversized_turn()
    assert "maximum text bytes exceeded" in failed.data["message"]
    assert OVERSIZED_ANSWER not in repr(agent.read("/"))
    assert agent.process.discover("/inbox") == ["0"]


#: /lib stand-ins for the reference's /bin/search and /bin/jq executables (A10):
#: same inputs ({path, pattern}; {filter, input}), calling the runtime functions.
BIN_SCRIPTS = {
    "search": '(define (main input) (search (value-get input "/path") '
              '(value-get input "/pattern")))',
    "jq": '(define (main input) (jq (value-get input "/filter") (value-get input "/input")))',
}


async def test_native_search_and_jq_process_structured_data() -> None:
    # search finds the active record's name in memory and jq selects it. We have no
    # /bin executables: the model execs /lib scripts with the same inputs that call
    # the search and jq runtime functions (difference A10); our search pattern is a
    # literal substring (difference B3), so "beta" stands for the reference's "^beta$".
    records = {"items": [{"name": "alpha", "active": False},
                         {"name": "beta", "active": True}]}
    agent = Agent("svit://local/native-data-tools",
                  [call("exec", path="/lib/search",
                        input={"path": "/memory/records", "pattern": "beta"}),
                   call("exec", path="/lib/jq",
                        input={"filter": ".items[] | select(.active) | .name",
                               "input": records}),
                   text("found active record")],
                  memory={"records": records}, scripts=BIN_SCRIPTS)
    await agent.one_turn("find the active record")
    found, selected = tool_results(agent)
    assert "/memory/records/items/1/name" in found, found
    assert [m["path"] for m in json.loads(found)["output"]["matches"]] == [
        "/memory/records/items/1/name"]
    assert json.loads(selected)["output"] == ["beta"], selected


async def test_native_http_is_denied_without_an_explicit_url_grant() -> None:
    # The model's port tool calls http (granted, empty allowlist) at a live loopback
    # server: refused, and no request reaches the server. Our model reaches ports
    # through its port tool, not an exec of /bin/http (difference A10).
    _, result, paths = await http_turn(
        lambda request: call("port", name="http", input=request), allowed=False)
    assert "HTTP URL is not allowed" in result
    assert paths == []


async def test_native_http_uses_the_host_allowlist_and_transport() -> None:
    # An allowlisted URL goes through the host's http transport and the response
    # reaches the model (difference A10: the port tool).
    _, result, paths = await http_turn(
        lambda request: call("port", name="http", input=request), allowed=True)
    answer = json.loads(result)["result"]
    assert answer["status"] == 200 and json.loads(answer["body"]) == {"source": "fixture"}
    assert paths == ["/data"]


async def test_native_llm_uses_only_the_host_selected_nested_model() -> None:
    # The port tool's llm call runs the host's configured reasoner (simulated, echoes),
    # not the process's scripted one (difference A10: the port tool).
    agent = Agent("svit://local/native-llm",
                  [call("port", name="llm", input={"prompt": "nested question"}),
                   text("outer answer")],
                  ports=build_registry(PortsConfig(llm=LlmPortConfig(enabled=True))))
    await agent.one_turn("delegate once")
    (result,) = tool_results(agent)
    assert json.loads(result)["result"]["content"] == "echo: nested question", result
    assert agent.reasoner.steps == 2
    assert agent.completions()[0]["response"]["content"] == "outer answer"


async def test_native_spawn_runs_and_retains_an_isolated_child_svit() -> None:
    # The port tool's spawn forks the committed state into a child the host keeps and
    # runs one child activation; the parent is untouched (differences A9, A10).
    spawner = LocalSpawner()
    agent = Agent("svit://local/native-parent",
                  [call("port", name="spawn", input={"script": "claim",
                                                     "input": "analyze this"}),
                   text("parent answer")],
                  memory={"owner": "parent"}, scripts={"claim": CLAIM},
                  ports=build_registry(PortsConfig(spawn=SpawnPortConfig(enabled=True)),
                                       spawner=spawner))
    await agent.one_turn("create a child")
    (result,) = tool_results(agent)
    spawned = json.loads(result)["result"]
    (child_id,) = spawner.children
    assert spawned["child"] == child_id and spawned["output"] == "analyze this"
    child = Process.restore(spawner.children[child_id].snapshot())
    assert child.read("/system/lineage/parent") == "svit://local/native-parent"
    assert child.read("/memory/owner") == "child"
    assert child.read("/memory/task") == "analyze this"
    assert agent.read("/memory/owner") == "parent"


async def test_native_data_tools_reject_unbounded_or_oversized_work() -> None:
    # jq refuses a recursive definition and search a 5 KiB pattern; the model sees
    # both limit failures and memory is unchanged (/lib stand-ins, difference A10).
    agent = Agent("svit://local/native-limits",
                  [call("exec", path="/lib/jq", input={"filter": "def f: f; f", "input": None}),
                   call("exec", path="/lib/search",
                        input={"path": "/memory/text", "pattern": "x" * (5 * 1024)}),
                   text("limit observed")],
                  memory={"text": "bounded"}, scripts=BIN_SCRIPTS)
    before = agent.read("/memory")
    await agent.one_turn("loop forever")
    jq_result, search_result = tool_results(agent)
    assert "unbounded construct" in jq_result, jq_result
    assert "pattern limit exceeded" in search_result, search_result
    assert agent.read("/memory") == before
