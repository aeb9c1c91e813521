"""Reference ``crates/svit/tests/reasoning_loop.rs``, ported where the feature exists.

The reasoning loop runs as :class:`TurnLoop` over a real controller and a signalling
backend (``tests/conformance/reference/_agent.py``). Ported for real: the
model's tools, ``/thread`` session metadata, the closable inbox, bounded answers, the
step limit; and, since ports exist, the port tests: the ``/ports`` catalog, ``port-call``
of ``http`` (against a loopback fixture server), ``llm`` and ``spawn``, ``jq`` over an
http response, host-registered ports and their refresh on restore; and the durable
cases on the fenced Redis log (``DurableHost``): resume without re-reasoning, a fork
sharing its parent's event prefix, a persisted model-authored script (difference A12).
All 35 pass. See docs/conformance.md, "Reference test port".
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from svit_cluster.control import ProcessController
from svit_cluster.errors import ConfigurationError, ConflictError, ErrorCode
from svit_cluster.events import Signal, SignalKind, observe
from svit_cluster.inprocess import MemoryEventLog, MemorySignals, SignalingMemoryBackend
from svit_cluster.ports import (
    HttpPortConfig,
    LlmPortConfig,
    LocalSpawner,
    PortContext,
    PortRegistry,
    PortsConfig,
    SpawnPortConfig,
    build_registry,
)
from svit_cluster.process import Process, to_plain_json
from svit_cluster.reasoning import DEFAULT_MAX_ITERATIONS, THREAD_FORMAT, LoopState, TurnLoop
from svit_cluster.reasoning._thread import HOST_KEYS, METADATA_KEYS
from tests.conformance.reference._agent import (
    OVERSIZED_ANSWER,
    Agent,
    DurableHost,
    call,
    http_registry,
    http_turn,
    oversized_turn,
    text,
    tool_results,
    two_live_turns,
)
from tests.conformance.reference._http import fixture_server
from tests.conformance.reference._support import activate_request


class ReadValue:
    """A host port reading one committed value (the reference's fixture port)."""

    name = "read-value"

    def descriptor(self) -> dict[str, Any]:
        return {"name": self.name, "version": "v1",
                "description": "Read one committed process value.",
                "input_schema": {"type": "object", "required": ["path"],
                                 "properties": {"path": {"type": "string"}}},
                "output": "The committed JSON value at path.", "effect": "read",
                "limits": {}}

    def call(self, input: Any, ctx: PortContext) -> Any:
        return ctx.committed.read(input["path"])


class Oversized:
    """A host port answering 2 MiB of text."""

    name = "oversized"

    def descriptor(self) -> dict[str, Any]:
        return {"name": self.name, "version": "v1", "description": "Return an oversized text.",
                "input_schema": {"type": "object"}, "output": {"type": "string"},
                "effect": "read", "limits": {}}

    def call(self, input: Any, ctx: PortContext) -> Any:
        return "x" * (2 * 1024 * 1024)


COUNT_BLOBS = """
(define (main url)
  (let ((response (port-call "http" (value-map "method" "GET" "url" url))))
    (jq "[.tree[] | select(.type == \\"blob\\")] | length" response)))
"""
CLAIM = """
(define (main input)
  (do (write "/memory/owner" "child") (write "/memory/task" input) input))
"""
FETCH_AND_KEEP = """
(define (main input)
  (let ((response (port-call "http" input)))
    (do (write "/memory/inline-http" response) response)))
"""
FETCH_THEN_FAIL = """
(define (main input)
  (do (write "/memory/uncommitted" true)
      (port-call "http" input)
      (panic "failed after HTTP")))
"""


def test_svit_builder_requires_a_reasoner() -> None:
    # A reasoning loop built without a reasoner is refused at construction (our
    # builder is the TurnLoop constructor), and the process is left unchanged.
    process = Process.create("svit://local/missing-provider")
    signals = MemorySignals()
    ctrl = ProcessController(process, SignalingMemoryBackend(signals, process.id))
    with pytest.raises(ConfigurationError, match="needs a reasoner"):
        TurnLoop(ctrl, MemoryEventLog(signals, process.id), None)
    assert ctrl.append_stage is None and process.version == 0


async def test_svit_owns_the_system_prompt_without_host_instructions() -> None:
    # Without operator instructions, /thread/instructions is null and the generated
    # system prompt names the process and teaches exec, value-map and port-call.
    agent = Agent("svit://local/base-prompt", [text("ok")])
    await agent.one_turn("hello")
    assert agent.read("/thread/instructions") is None
    prompt = agent.read("/thread/system_prompt")
    assert isinstance(prompt, str) and "svit://local/base-prompt" in prompt
    for taught in ('(port-call "name" input)', '(exec "/lib/name" input)',
                   '(value-map "key" value ...)', "immediate external effect", "/memory"):
        assert taught in prompt, taught
    assert "<instructions>" not in prompt


async def test_svit_builder_combines_process_definition_and_blocking_inbox_loop() -> None:
    # The model writes /memory/status with the write tool, then answers; once the
    # inbox is closed and drained, a later message is refused and not committed.
    agent = Agent("svit://local/runnable",
                  [call("write", path="/memory/status", value="complete"),
                   text("work complete")],
                  memory={"status": "idle"},
                  instructions="Handle inbox messages inside your Svit process.")
    agent.start()
    try:
        assert agent.read("/memory/status") == "idle"
        agent.send("Do the configured work.")
        await agent.block()
    finally:
        await agent.stop()
    (done,) = agent.completions()
    assert done["response"] == {"role": "assistant", "content": "work complete"}
    assert agent.read("/memory/status") == "complete"
    assert agent.read("/inbox") == []
    assert agent.messages()[0]["content"] == "Do the configured work."
    version = agent.process.version
    with pytest.raises(ConflictError) as refused:
        agent.send("too late")
    assert refused.value.code == ErrorCode.INBOX_CLOSED
    assert agent.process.version == version and agent.read("/inbox") == []


async def test_svit_uses_the_everruns_iteration_default() -> None:
    # Nine tool-calling steps and the answer fit the default step limit.
    steps = [call("discover", path="/memory") for _ in range(9)]
    agent = Agent("svit://local/default-turn-iterations",
                  [*steps, text("finished after discovery")])
    assert agent.loop.config.max_iterations == DEFAULT_MAX_ITERATIONS == 10
    await agent.one_turn("finish the task")
    (done,) = agent.completions()
    assert done["response"]["content"] == "finished after discovery"
    assert agent.read("/inbox") == []


async def test_iteration_limit_does_not_publish_a_tool_call_as_a_completed_turn() -> None:
    # With one step allowed, a tool call cannot complete the turn: it fails, nothing
    # is answered and the message stays queued.
    agent = Agent("svit://local/limited-turn",
                  [call("discover", path="/memory"), text("unreached answer")],
                  max_iterations=1)
    agent.start()
    try:
        agent.send("finish the task")
        failed = await agent.until_failed()
    finally:
        await agent.stop()
    assert failed.data["code"] == "turn_limit"
    assert "maximum reason/act iterations" in failed.data["message"]
    assert agent.completions() == []
    assert len(agent.read("/inbox")) == 1


@pytest.mark.servers
async def test_persisted_svit_resumes_memory_and_conversation_without_rerunning_reasoning(
        rclient: Any) -> None:
    # A durable process (the fenced Redis log) runs one turn whose write tool sets
    # /memory/status; a new owner resumes it: memory, version and the paged history
    # come back, and the resumed loop reasons about nothing. The log's sources name
    # the port refresh and the inbox operations, never reasoning itself. Our sources
    # are inbox.append / inbox.ack where the reference says inbox.enqueue /
    # inbox.acknowledge (difference A12); our event kinds are user / reply where it
    # says input.message / output.message.completed.
    store = DurableHost(rclient)
    pid = "svit://local/persisted-reasoning"
    ports = PortRegistry({"read-value": ReadValue()})
    first = store.create(Process.create(pid, memory={"status": "idle"}),
                         [call("write", path="/memory/status", value="complete"),
                          text("persisted answer")], ports=ports)
    await first.one_turn("persist this turn")
    expected_messages = first.recent_messages(128)
    expected_version = first.process.version
    sources = [t.source for t in store.transactions(first)]
    assert {"ports.refresh", "inbox.append", "inbox.ack"} <= set(sources), sources
    assert "reasoning" not in sources

    resumed = store.resume(pid, [], ports=ports)
    assert resumed.read("/memory/status") == "complete"
    assert resumed.recent_messages(128) == expected_messages
    assert expected_messages[0]["content"] == "persist this turn"
    assert expected_messages[-1]["content"] == "persisted answer"
    kinds = {r.event["kind"] for r in resumed.log.recent(
        resumed.read("/thread/session/id"), 128)}
    assert {"user", "reply"} <= kinds
    cursor = resumed.signals()[-1].id
    resumed.start()
    try:
        await resumed.wait(lambda: resumed.loop.state == LoopState.IDLE)
    finally:
        await resumed.stop()
    assert resumed.reasoner.steps == 0
    assert resumed.log.signals(after=cursor) == []
    assert resumed.read("/inbox") == []
    assert resumed.process.version == expected_version


@pytest.mark.servers
async def test_durable_fork_shares_an_immutable_event_prefix_and_diverges_afterward(
        rclient: Any) -> None:
    # A store-level fork of a durable parent starts the child's history with the
    # parent's acknowledged events; the child's turn continues after them (its model
    # sees the parent's turn) and appends only to the child; the parent's history is
    # unchanged.
    store = DurableHost(rclient)
    parent = store.create(Process.create("svit://local/persisted-thread-parent"),
                          [text("parent answer")])
    await parent.one_turn("parent question")
    parent_history = parent.recent_messages(32)
    assert [m["content"] for m in parent_history] == ["parent question", "parent answer"]

    resumed_parent = store.resume("svit://local/persisted-thread-parent")
    child = store.fork(resumed_parent, "svit://local/persisted-thread-child",
                       [text("child answer")])
    assert child.recent_messages(32) == parent_history
    await child.one_turn("child question")
    child_history = child.recent_messages(32)
    assert len(child_history) == 4
    assert child_history[:2] == parent_history
    assert child_history[2]["content"] == "child question"
    assert child_history[3]["content"] == "child answer"
    (request,) = child.reasoner.requests
    assert [m["content"] for m in request.messages[1:]] == [
        "parent question", "parent answer", "child question"]

    again = store.resume("svit://local/persisted-thread-parent")
    assert again.recent_messages(32) == parent_history


def test_svit_exposes_only_explicitly_registered_ports() -> None:
    # The operator enables http, llm and spawn: /ports lists exactly those three; a
    # host that enables nothing lists none.
    granted = Agent("svit://local/port-setup", ports=build_registry(PortsConfig(
        http=HttpPortConfig(enabled=True), llm=LlmPortConfig(enabled=True),
        spawn=SpawnPortConfig(enabled=True))))
    assert sorted(granted.read("/ports")) == ["http", "llm", "spawn"]
    bare = Agent("svit://local/port-setup-none", ports=build_registry(PortsConfig()))
    assert bare.read("/ports") == {}


def test_explicit_http_registration_exposes_only_http() -> None:
    # Enabling only http (with an empty allowlist) exposes only http.
    agent = Agent("svit://local/http-ports",
                  ports=build_registry(PortsConfig(http=HttpPortConfig(enabled=True))))
    assert sorted(agent.read("/ports")) == ["http"]


async def test_svit_commit_notifications_are_observed_through_the_contract() -> None:
    # Two observers of the process's signal stream each see the inbox commit and
    # then the acknowledge (which touches /inbox); nothing is published before the
    # loop starts; read_versioned of / agrees with the root and the version.
    agent = Agent("svit://local/state-events", [text("done")])
    pid = agent.process.id
    observers = [observe(agent.signals_store, pid, "$", block_s=0.05) for _ in range(2)]

    async def next_commit(observer: Any) -> Signal:
        while True:
            got = await anext(observer)
            if isinstance(got, Signal) and got.kind is SignalKind.COMMITTED:
                return got
            assert not (isinstance(got, Signal) and got.kind is SignalKind.FAILED), got

    for observer in observers:
        assert await anext(observer) is None  # empty: nothing published yet
    assert agent.completions() == []
    agent.start()
    try:
        agent.send("run")
        for observer in observers:
            await next_commit(observer)
        await agent.wait(lambda: len(agent.completions()) == 1)
        completed = [await next_commit(observer) for observer in observers]
        await agent.block()
    finally:
        await agent.stop()
    assert all("/inbox" in c.data["paths"] for c in completed)
    assert completed[0].id == completed[1].id
    root, version = agent.ctrl.read_versioned("/")
    assert root == to_plain_json(agent.process.read("/"))
    assert version == agent.ctrl.observe()[0] == agent.process.version


async def test_canonical_events_are_observed_without_materializing_thread_history() -> None:
    # Canonical events reach observers; /thread keeps only bounded metadata (the
    # reference's five keys plus this project's documented bookkeeping keys).
    agent = Agent("svit://local/canonical-event-observation", [text("done")])
    await agent.one_turn("run")
    kinds = [s.data["event"]["kind"] for s in agent.signals(SignalKind.CANONICAL_EVENT)]
    assert kinds[0] == "user"
    keys = set(agent.process.discover("/thread"))
    assert set(METADATA_KEYS) <= keys
    assert keys - set(METADATA_KEYS) <= set(HOST_KEYS)
    assert not keys & {"messages", "events"}


async def test_reasoning_tool_commits_are_observed_through_the_contract() -> None:
    # The write tool's commit is a committed signal touching exactly its path.
    agent = Agent("svit://local/reasoning-tool-events",
                  [call("write", path="/memory/research", value="complete"), text("done")])
    await agent.one_turn("remember this")
    paths = [s.data["paths"] for s in agent.signals(SignalKind.COMMITTED)]
    assert ["/memory/research"] in paths
    assert agent.read("/memory/research") == "complete"


async def test_started_svit_processes_inbox_messages_in_commit_order() -> None:
    # The loop stays live after a completed turn: a message committed while it
    # waits becomes the next turn, without restarting the loop.
    agent = await two_live_turns("svit://local/ordered-inbox")
    assert [m["content"] for m in agent.messages()] == [
        "first question", "first answer", "second question", "second answer"]
    assert agent.read("/inbox") == []


async def test_reasoning_loop_exposes_bounded_thread_metadata_and_host_history() -> None:
    # /thread carries the format, the instructions and a prompt that ends with them;
    # the model can read the prompt and sees an empty /ports catalog.
    instructions = "Inspect your projected runtime state."
    agent = Agent("svit://local/thread-projection",
                  [call("read", path="/thread/system_prompt"),
                   call("discover", path="/ports"), text("projection inspected")],
                  instructions=instructions)
    await agent.one_turn("inspect projection")
    thread = agent.read("/thread")
    assert thread["format"] == THREAD_FORMAT == "svit-thread@8"
    assert thread["instructions"] == instructions
    assert "svit://local/thread-projection" in thread["system_prompt"]
    assert thread["system_prompt"].endswith(f"<instructions>\n{instructions}\n</instructions>")
    assert "messages" not in thread and "events" not in thread
    assert agent.process.discover("/ports") == []
    results = tool_results(agent)
    assert len(results) == 2
    assert instructions in results[0]
    assert '"entries":[]' in results[1]


def test_resumed_svit_refreshes_builtin_discovery_to_current_host_grants() -> None:
    # A snapshot taken where llm was granted carries it under /ports; restored on a
    # host that grants nothing, the catalog is replaced and lists no port.
    source = Agent("svit://local/tool-projection-source",
                   ports=build_registry(PortsConfig(llm=LlmPortConfig(enabled=True))))
    assert "llm" in source.read("/ports")
    restored = Process.restore(source.process.snapshot())
    assert "llm" in restored.read("/ports")
    resumed = Agent(restored, ports=None)
    assert resumed.read("/ports") == {}


async def test_reasoning_resume_rejects_materialized_thread_history() -> None:
    # A fork whose /thread carries a message list cannot start a loop: it is refused
    # with a failed signal and its inbox item is left alone.
    source = Agent("svit://local/projection-source", [text("ok")])
    await source.one_turn("hello")
    child = source.process.fork("svit://local/projection-tampered")
    wc = child.working_copy()
    wc.host_set("/thread/messages", [])
    child.commit(child.seal(wc, "test.tamper"))
    tampered = Agent(child, [text("must not run")])
    tampered.ctrl.append_inbox("hi")
    tampered.start()
    try:
        failed = await tampered.until_failed()
        await tampered.wait(lambda: tampered.loop.state == LoopState.STOPPED)
    finally:
        await tampered.stop()
    assert failed.data["code"] == "thread_refused"
    assert "materialised history" in failed.data["message"]
    assert tampered.reasoner.steps == 0 and tampered.completions() == []
    assert tampered.read("/inbox") == ["hi"]


async def test_reasoning_resume_rejects_thread_metadata_without_its_owner() -> None:
    # /thread metadata without its process_id is refused as a loop start.
    source = Agent("svit://local/event-sequence-source", [text("ok")])
    await source.one_turn("hello")
    child = source.process.fork("svit://local/event-sequence-tampered")
    wc = child.working_copy()
    wc.host_remove("/thread/process_id")
    child.commit(child.seal(wc, "test.tamper"))
    tampered = Agent(child, [text("must not run")])
    tampered.start()
    try:
        failed = await tampered.until_failed()
    finally:
        await tampered.stop()
    assert failed.data["code"] == "thread_refused"
    assert "no process_id" in failed.data["message"]
    assert tampered.reasoner.steps == 0


async def test_process_snapshot_restores_thread_metadata_but_not_event_history() -> None:
    # The snapshot carries /thread metadata (instructions, prompt, session); the
    # conversation lives in the event log, which a snapshot does not carry.
    prompt = "Keep support answers concise."
    first = Agent("svit://local/durable-agent", [text("first answer")], instructions=prompt)
    first.start()
    try:
        first.send("first question")
        await first.wait(lambda: len(first.completions()) == 1)
    finally:
        await first.stop()
    restored = Process.restore(first.process.snapshot())
    resumed = Agent(restored, [text("second answer")])
    assert resumed.messages() == []
    assert resumed.read("/thread/instructions") == prompt
    assert "svit://local/durable-agent" in resumed.read("/thread/system_prompt")
    await resumed.one_turn("second question")
    assert [m["content"] for m in resumed.messages()] == ["second question", "second answer"]
    assert resumed.read("/thread/session_id") == first.read("/thread/session_id")


async def test_child_process_owns_an_isolated_forked_process() -> None:
    # A fork keeps the instructions but gets its own prompt and session; the parent
    # is unchanged.
    parent = Agent("svit://local/parent-agent", [text("parent answer")],
                   instructions="Keep inherited context.")
    parent.start()
    parent.send("parent question")
    await parent.wait(lambda: len(parent.completions()) == 1)
    parent_hash = parent.process.root_hash
    with parent.ctrl.locked():
        forked = parent.process.fork("svit://local/child-agent")
    child = Agent(forked, [text("child answer")])
    child.start()
    try:
        child.send("child question")
        await child.block()
    finally:
        await child.stop()
        await parent.stop()
    assert child.read("/thread/instructions") == "Keep inherited context."
    child_prompt = child.read("/thread/system_prompt")
    assert "svit://local/child-agent" in child_prompt
    assert "svit://local/parent-agent" not in child_prompt
    assert child.read("/thread/process_id") == "svit://local/child-agent"
    assert child.read("/thread/session_id") != parent.read("/thread/session_id")
    assert parent.process.root_hash == parent_hash
    assert len(parent.messages()) == 2 and len(child.messages()) == 2


async def test_process_reasoning_executes_any_process_script() -> None:
    # exec takes the script by /lib path and commits its writes.
    agent = Agent("svit://local/process-agent",
                  [call("exec", path="/lib/any_script", input=None), text("script completed")],
                  memory={"changed": False},
                  scripts={"any_script":
                           '(define (main input) (do (write "/memory/changed" true) input))'})
    assert agent.process.discover("/ports") == []
    await agent.one_turn("run the script")
    assert agent.read("/memory/changed") is True


async def test_system_prompt_teaches_the_script_library_lifecycle() -> None:
    # The generated prompt teaches that scripts are /lib process state, how to save
    # one ({source, documentation}) and exec it by path, that a script can call
    # ports and write durable state, that a port response lasts one activation,
    # and the jq and search forms. Our own text (A4); no inline one-off exec form
    # is taught because our exec tool runs /lib scripts only (A8).
    agent = Agent("svit://local/script-guidance", [text("ok")])
    await agent.one_turn("hello")
    prompt = agent.read("/thread/system_prompt")
    for taught in ("Scripts are process state under /lib",
                   '{"source": ', '"documentation": ', "exec tool with path /lib/<name>",
                   "call ports and write durable state",
                   "What a port returns exists only during that activation",
                   "(jq filter value)", "(search path pattern)"):
        assert taught in prompt, taught


async def test_reasoning_event_growth_fails_closed_at_the_process_limit() -> None:
    # An answer over max_text_bytes fails the turn with a limit error, reported as a
    # failed signal; nothing of it is committed or appended; the item stays queued.
    agent, failed = await oversized_turn()
    assert failed.data["code"] == "limit_exceeded"
    assert "maximum text bytes exceeded" in failed.data["message"]
    assert OVERSIZED_ANSWER not in repr(agent.read("/"))
    assert all(OVERSIZED_ANSWER not in repr(s.data) for s in agent.signals())
    assert agent.process.discover("/inbox") == ["0"]
    assert agent.completions() == []


async def test_host_extension_registers_discoverable_process_builtin() -> None:
    # A host-registered port is discoverable under /ports with its own descriptor and
    # a script reaches it with port-call; it reads the committed value it is asked for
    # (difference A8: the script is a /lib script).
    agent = Agent("svit://local/port-extension",
                  [call("exec", path="/lib/read-it", input={"path": "/memory/color"}),
                   text("read extension value")],
                  memory={"color": "blue"},
                  scripts={"read-it": '(define (main input) (port-call "read-value" input))'},
                  ports=PortRegistry({"read-value": ReadValue()}))
    assert "read-value" in agent.read("/ports")
    descriptor = agent.read("/ports/read-value")
    assert descriptor["version"] == "v1" and descriptor["effect"] == "read"
    assert descriptor["output"] == "The committed JSON value at path."
    await agent.one_turn("read the color")
    (result,) = tool_results(agent)
    assert json.loads(result)["output"] == "blue", result


def test_host_port_registration_exposes_its_own_descriptor() -> None:
    # A host-registered port's own description and effect appear under /ports/<name>.
    agent = Agent("svit://local/port-override",
                  ports=PortRegistry({"read-value": ReadValue()}))
    descriptor = agent.read("/ports/read-value")
    assert descriptor["description"] == "Read one committed process value."
    assert descriptor["effect"] == "read"
    assert descriptor["version"] == "v1"


async def test_port_output_cannot_cross_the_persistent_value_boundary() -> None:
    # A port answering 2 MiB of text fails the call at the port's output bound
    # (difference A7: we bound the port result itself); the model sees the limit
    # error, never the text, and nothing is committed.
    agent = Agent("svit://local/port-output-limit",
                  [call("exec", path="/lib/oversized", input={}), text("limit observed")],
                  scripts={"oversized": '(define (main input) (port-call "oversized" input))'},
                  ports=PortRegistry({"oversized": Oversized()}))
    before = agent.read("/memory")
    await agent.one_turn("run oversized")
    (result,) = tool_results(agent)
    assert "max_output_bytes" in result and "resource_limit_exceeded" in result
    assert "x" * 1024 not in result
    assert agent.read("/memory") == before


RECORDS = {"items": [{"name": "alpha", "active": False}, {"name": "beta", "active": True}]}
SEARCH_RECORDS = '(define (main input) (search "/memory/records" "beta"))'
SELECT_ACTIVE = '(define (main input) (jq ".items[] | select(.active) | .name" input))'


async def test_standard_library_processes_structured_data() -> None:
    # search finds the record's name below /memory/records; jq selects the active
    # record's name. Our search pattern is a literal substring, not a regular
    # expression (difference B3), so the script searches "beta" where the reference
    # searches "^beta$"; our exec tool runs /lib scripts (difference A8).
    agent = Agent("svit://local/native-data-tools",
                  [call("exec", path="/lib/search-records", input=None),
                   call("exec", path="/lib/select-active", input=RECORDS),
                   text("found active record")],
                  memory={"records": RECORDS},
                  scripts={"search-records": SEARCH_RECORDS, "select-active": SELECT_ACTIVE})
    await agent.one_turn("find the active record")
    found, selected = tool_results(agent)
    assert "/memory/records/items/1/name" in found, found
    assert json.loads(found)["output"] == {
        "matches": [{"line": 1, "path": "/memory/records/items/1/name", "text": "beta"}],
        "truncated": False}
    assert json.loads(selected)["output"] == ["beta"], selected


async def test_jq_standard_library_processes_json_returned_by_the_http_port() -> None:
    # A script fetches a JSON tree over the http port, parses the body and counts
    # its blobs with jq.
    with fixture_server() as server:
        agent = Agent("svit://local/http-jq-pipeline",
                      [call("exec", path="/lib/count-blobs", input=server.url("/tree")),
                       text("counted blobs")],
                      scripts={"count-blobs": COUNT_BLOBS},
                      ports=http_registry(server.host))
        await agent.one_turn("count blobs")
    (result,) = tool_results(agent)
    assert json.loads(result)["output"] == [2], result
    assert server.paths == ["/tree"]


CATALOG_FILTER = (
    'to_entries | map(.value) | {model_count: length, latest_gpt_models: '
    '([.[] | select(.id | startswith(\\"openai/gpt\\"))] | sort_by(.release_date) '
    '| reverse | .[:2] | map({id, name, release_date}))}'
)
SUMMARIZE_CATALOG = """
(define (main url)
  (let ((response (port-call "http" (value-map "method" "GET" "url" url))))
    (let ((summary (jq "FILTER" response)))
      (do (write "/memory/model_catalog" (value-get summary "/0"))
          (value-get summary "/0")))))
""".replace("FILTER", CATALOG_FILTER)


async def test_model_catalog_scenario_uses_a_saved_script_to_reduce_http_into_memory() -> None:
    # The model saves a script under /lib with the write tool, then execs it: the
    # script fetches a model catalog over http, reduces it with jq (to_entries,
    # object construction, startswith, sort_by, reverse, a slice) and commits the
    # summary to memory. The fixture's large entry is 2 KiB here, not 2 MiB: our
    # port results are bounded by max_output_bytes (difference A7).
    with fixture_server() as server:
        agent = Agent(
            "svit://local/model-catalog-scenario",
            [call("write", path="/lib/summarize-model-catalog",
                  value={"source": SUMMARIZE_CATALOG,
                         "documentation": "Fetch a model catalog, count its models, "
                                          "and save the newest GPT models."}),
             call("exec", path="/lib/summarize-model-catalog",
                  input=server.url("/models.json")),
             text("Saved the model count and latest GPT models to /memory/model_catalog.")],
            ports=http_registry(server.host))
        await agent.one_turn("Count models.dev models and save the latest GPT models to memory.")
    assert agent.read("/memory/model_catalog") == {
        "model_count": 4,
        "latest_gpt_models": [
            {"id": "openai/gpt-5.6", "name": "GPT-5.6", "release_date": "2026-08-01"},
            {"id": "openai/gpt-5.4", "name": "GPT-5.4", "release_date": "2026-06-01"},
        ],
    }, tool_results(agent)
    assert agent.read("/lib/summarize-model-catalog") is not None
    assert server.paths == ["/models.json"]


async def test_builtin_http_is_denied_without_an_explicit_url_grant() -> None:
    # With http granted but an empty allowlist, port-call http to a live loopback
    # server is refused and no request reaches it.
    _, result, paths = await http_turn(
        lambda request: call("exec", path="/lib/fetch", input=request), allowed=False,
        scripts={"fetch": '(define (main input) (port-call "http" input))'})
    assert "HTTP URL is not allowed" in result
    assert paths == []


async def test_inline_exec_can_call_http_and_commit_memory() -> None:
    # A script calls the allowlisted http port and commits the response to memory in
    # the same activation; the model sees the response. Our exec tool runs a /lib
    # script (difference A8), so the script is installed at creation.
    agent, result, paths = await http_turn(
        lambda request: call("exec", path="/lib/fetch-and-keep", input=request),
        allowed=True, scripts={"fetch-and-keep": FETCH_AND_KEEP})
    assert "fixture" in result, result
    assert json.loads(agent.read("/memory/inline-http")["body"]) == {"source": "fixture"}
    assert sorted(agent.read("/lib")) == ["fetch-and-keep"]
    assert paths == ["/data"]


FETCH_FIXTURE = """
(define (main input)
  (let ((response (port-call "http" (value-map "method" "GET" "url" "URL"))))
    (do (write "/memory/http-response" response) response)))
"""


@pytest.mark.servers
async def test_persisted_model_authored_script_invokes_host_http_builtin(
        rclient: Any) -> None:
    # On a durable process, the model saves a script under /lib with the write tool
    # and execs it: the script calls the allowlisted http port exactly once and
    # commits the response; the model sees status 200 and the body.
    with fixture_server() as server:
        store = DurableHost(rclient)
        agent = store.create(
            Process.create("svit://local/scripted-http"),
            [call("write", path="/lib/fetch-fixture",
                  value={"source": FETCH_FIXTURE.replace("URL", server.url("/data")),
                         "documentation": "Fetch the fixture document."}),
             call("exec", path="/lib/fetch-fixture", input=None),
             text("fetched through the saved script")],
            ports=http_registry(server.host))
        await agent.one_turn("create and invoke a reusable fetch script")
    results = tool_results(agent)
    assert len(results) == 2
    assert '"status":200' in results[1] and "fixture" in results[1], results[1]
    assert server.paths == ["/data"]
    assert "fixture" in agent.read("/memory/http-response")["body"]
    assert agent.read("/inbox") == []
    assert "activation" in [t.source for t in store.transactions(agent)]


def test_failed_script_does_not_repeat_builtin_or_commit_guest_state() -> None:
    # A script that writes memory, calls http once and then panics fails the
    # activation: one request was made, the version is unchanged, nothing committed.
    with fixture_server() as server:
        agent = Agent("svit://local/failed-scripted-http",
                      scripts={"fetch-then-fail": FETCH_THEN_FAIL},
                      ports=http_registry(server.host))
        version = agent.process.version
        response = agent.ctrl.execute(activate_request(
            "host", "req-1", agent.process.id, version, "fetch-then-fail",
            {"method": "GET", "url": server.url("/data")}))
    assert response.outcome.status == "rejected"
    assert "failed after HTTP" in response.outcome.failure.message
    assert server.paths == ["/data"]
    assert agent.process.version == version
    assert agent.process.node("/memory/uncommitted") is None


async def test_builtin_llm_uses_only_the_host_selected_nested_model() -> None:
    # port-call llm runs one step of the host's configured reasoner (here the
    # deterministic simulated one, which echoes), not the process's own scripted
    # reasoner, and outside the transaction (nothing is committed by the call).
    agent = Agent("svit://local/native-llm",
                  [call("exec", path="/lib/ask", input={"prompt": "nested question"}),
                   text("outer answer")],
                  scripts={"ask": '(define (main input) (port-call "llm" input))'},
                  ports=build_registry(PortsConfig(llm=LlmPortConfig(enabled=True))))
    assert agent.read("/ports/llm/limits/reasoner") == "simulated"
    await agent.one_turn("delegate once")
    (result,) = tool_results(agent)
    assert json.loads(result)["output"] == {"content": "echo: nested question",
                                            "tool_calls": []}, result
    assert agent.reasoner.steps == 2  # the outer script only: the nested step is not its
    assert agent.completions()[0]["response"]["content"] == "outer answer"


async def test_builtin_spawn_runs_and_retains_an_isolated_child_svit() -> None:
    # port-call spawn forks the committed state into a child, runs one child
    # activation there and the host keeps the child; the parent's memory is untouched.
    # Our child address derives from the call's idempotency key (difference A9).
    spawner = LocalSpawner()
    agent = Agent("svit://local/native-parent",
                  [call("exec", path="/lib/spawn-child", input={"script": "claim",
                                                                "input": "analyze this"}),
                   text("parent answer")],
                  memory={"owner": "parent"},
                  scripts={"spawn-child": '(define (main input) (port-call "spawn" input))',
                           "claim": CLAIM},
                  ports=build_registry(PortsConfig(spawn=SpawnPortConfig(enabled=True)),
                                       spawner=spawner))
    await agent.one_turn("create a child")
    (result,) = tool_results(agent)
    spawned = json.loads(result)["output"]
    assert spawned["output"] == "analyze this"
    (child_id,) = spawner.children
    assert spawned["child"] == child_id and child_id.startswith("svit://local/native-parent/")
    child = Process.restore(spawner.children[child_id].snapshot())
    assert child.read("/system/lineage/parent") == "svit://local/native-parent"
    assert child.read("/memory/owner") == "child"
    assert child.read("/memory/task") == "analyze this"
    assert agent.read("/memory/owner") == "parent"
    assert agent.process.node("/memory/task") is None


UNBOUNDED_JQ = '(define (main input) (jq "def f: f; f" input))'
SEARCH_INPUT = '(define (main input) (search "/memory/text" input))'


async def test_bounded_data_operations_reject_unbounded_or_oversized_work() -> None:
    # jq refuses a recursive definition before evaluating it; search refuses a 5 KiB
    # pattern (over its 4 KiB bound). Both are script failures the model sees.
    agent = Agent("svit://local/native-limits",
                  [call("exec", path="/lib/unbounded-jq", input=None),
                   call("exec", path="/lib/search-input", input="x" * (5 * 1024)),
                   text("limit observed")],
                  memory={"text": "bounded"},
                  scripts={"unbounded-jq": UNBOUNDED_JQ, "search-input": SEARCH_INPUT})
    before = agent.read("/memory")
    await agent.one_turn("loop forever")
    jq_result, search_result = tool_results(agent)
    assert "unbounded construct" in jq_result, jq_result
    assert "pattern limit exceeded" in search_result, search_result
    assert agent.read("/memory") == before
