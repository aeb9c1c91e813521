"""The model's tools and the closable inbox."""

from __future__ import annotations

import pytest
import redis

from svit_cluster.control import ProcessController
from svit_cluster.errors import ConflictError, ErrorCode, FencedError
from svit_cluster.process import Limits, Process
from svit_cluster.reasoning import (
    TOOL_NAMES,
    ProcessTools,
    ToolCall,
    TurnFailed,
    port_tool_specs,
    validate_tool_calls,
)
from svit_cluster.store import RedisBackend, StoreConfig
from tests.reasoning._support import Owner


def _tools(**kw: object) -> ProcessTools:
    proc = Process.create("svit://t/tools", memory={"a": 1}, scripts={
        "flag": '(define (main input) (do (write "/memory/flag" true) input))'},
        limits=Limits(max_text_bytes=64))
    return ProcessTools(ProcessController(proc), **kw)  # type: ignore[arg-type]


def test_the_six_tools_are_offered() -> None:
    assert TOOL_NAMES == ("discover", "read", "stat", "write", "remove", "exec")


def test_stat_write_remove_commit_one_version_each() -> None:
    tools = _tools()
    proc = tools.ctrl.process
    facts = tools.run(ToolCall("c", "stat", {"path": "/memory/a"}), "r")
    assert facts["stat"]["kind"] == "leaf" and facts["version"] == 0
    assert tools.run(ToolCall("c", "stat", {"path": "/memory/zz"}), "r")["stat"] is None
    done = tools.run(ToolCall("c", "write", {"path": "/memory/b", "value": {"x": [1]}}), "r")
    assert done == {"status": "committed", "path": "/memory/b", "version": 1}
    assert proc.read("/memory/b") == {"x": [1]}
    gone = tools.run(ToolCall("c", "remove", {"path": "/memory/a"}), "r")
    assert gone["version"] == 2 and proc.node("/memory/a") is None


@pytest.mark.parametrize(("call", "code"), [
    (ToolCall("c", "write", {"path": "/thread/x", "value": 1}), "invalid_path"),
    (ToolCall("c", "write", {"path": "/system/identity/address", "value": "x"}),
     "invalid_path"),
    (ToolCall("c", "write", {"path": "/memory/big", "value": "x" * 100}),
     "invalid_value"),
    (ToolCall("c", "remove", {"path": "/memory/missing"}), "invalid_path"),
])
def test_a_refused_change_is_a_tool_error_and_commits_nothing(call: ToolCall,
                                                              code: str) -> None:
    tools = _tools()
    result = tools.run(call, "r")
    assert result["error"]["code"] == code, result
    assert tools.ctrl.process.version == 0


def test_exec_takes_a_path_and_honours_the_allowlist() -> None:
    tools = _tools(allow_scripts=("other",))
    refused = tools.run(ToolCall("c", "exec", {"path": "/lib/flag"}), "r")
    assert refused["error"]["code"] == "forbidden"
    assert tools.ctrl.process.version == 0
    tools.allow_scripts = None
    ran = tools.run(ToolCall("c", "exec", {"path": "/lib/flag", "input": None}), "r")
    assert ran["status"] == "committed" and tools.ctrl.process.read("/memory/flag") is True


def test_malformed_calls_of_the_new_tools_fail_the_turn() -> None:
    with pytest.raises(TurnFailed, match="needs a 'value'"):
        validate_tool_calls([{"id": "1", "name": "write", "arguments": {"path": "/memory/a"}}])
    with pytest.raises(TurnFailed, match="'path' or 'script'"):
        validate_tool_calls([{"id": "1", "name": "exec", "arguments": {}}])
    ok = validate_tool_calls([{"id": "1", "name": "stat", "arguments": '{"path": "/"}'}])
    assert ok == [ToolCall("1", "stat", {"path": "/"})]


def test_the_port_tool_is_built_from_the_ports_catalog_only() -> None:
    assert port_tool_specs({}) == [] and port_tool_specs(None) == []
    (spec,) = port_tool_specs({"http": {"description": "GET allowed URLs."}, "llm": {}})
    fn = spec["function"]
    assert fn["name"] == "port"
    assert fn["parameters"]["properties"]["name"]["enum"] == ["http", "llm"]
    assert "http: GET allowed URLs." in fn["description"]
    tools = _tools(port_runner=lambda name, value: pytest.fail("must not run"))
    assert [s["function"]["name"] for s in tools.specs()] == list(TOOL_NAMES)
    result = tools.run(ToolCall("c", "port", {"name": "http", "input": {}}), "r")
    assert result["error"]["code"] == "port_unavailable"


def test_a_fenced_owners_write_tool_commits_nothing(
    rclient: redis.Redis, pid: str, prefix: str
) -> None:
    owner = Owner(rclient, pid, prefix, 1, create=True)
    RedisBackend(rclient, pid, 2, StoreConfig(prefix=prefix)).claim()
    with pytest.raises(FencedError):
        owner.loop.tools.run(ToolCall("c", "write", {"path": "/memory/count", "value": 9}),
                             "r")
    newer = RedisBackend(rclient, pid, 3, StoreConfig(prefix=prefix))
    newer.claim()
    restored = newer.restore()
    assert restored is not None and restored.read("/memory/count") == 0


def test_a_closed_inbox_refuses_messages_durably_and_a_fork_reopens() -> None:
    ctrl = ProcessController(Process.create("svit://t/closing"))
    ctrl.append_inbox("queued")
    assert ctrl.close_inbox() == (True, 2)
    assert ctrl.close_inbox() == (False, 2)
    with pytest.raises(ConflictError) as refused:
        ctrl.append_inbox("late")
    assert refused.value.code == ErrorCode.INBOX_CLOSED
    assert ctrl.process.version == 2 and ctrl.process.read("/inbox") == ["queued"]
    restored = Process.restore(ctrl.process.snapshot())
    with pytest.raises(ConflictError):
        ProcessController(restored).append_inbox("late")
    child = ProcessController(ctrl.process.fork("svit://t/child"))
    assert child.append_inbox("hi")[0] is True
