"""Wire types: decoding rules, round trips, schema freshness, fuzzing."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from svit_cluster.control import (
    ProcessController,
    decode_request,
    decode_response,
)
from svit_cluster.control.schema import render_schemas
from svit_cluster.errors import ErrorCode, SvitError
from svit_cluster.examples import REFERENCE_REQUEST
from svit_cluster.process import Process
from tests.control._support import COUNTER, PID, request

# Taken verbatim from reference/control-protocol.md (indentation included).
REFERENCE_EXAMPLE = REFERENCE_REQUEST


def test_reference_example_decodes() -> None:
    req = decode_request(REFERENCE_EXAMPLE)
    assert req.client_id == "agent-a"
    assert req.request_id == "turn-42"
    assert req.process_id == "svit://local/example/planner"
    assert req.expected_version == 7
    assert req.command.operation == "activate"
    assert req.command.script == "plan"
    assert req.command.input == {"goal": "prepare release"}


def test_request_round_trips_through_json() -> None:
    req = decode_request(REFERENCE_EXAMPLE)
    text = req.model_dump_json()
    assert decode_request(text) == req
    assert json.loads(text) == json.loads(REFERENCE_EXAMPLE)


def test_response_round_trips_through_json() -> None:
    proc = Process.create(PID, memory={"count": 0}, scripts={"counter": COUNTER})
    ctrl = ProcessController(proc)
    for doc in (request(rid="a", version=0), request(rid="b", version=0),
                request(rid="c", version=1, script="nope")):
        resp = ctrl.execute(decode_request(doc))
        text = resp.model_dump_json()
        back = decode_response(text)
        assert back == resp
        assert back.model_dump_json() == text


def _with_extra(doc: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    node = out
    for key in path:
        node = node[key]
    node["future_field"] = {"nested": [1, 2, 3]}
    return out


@pytest.mark.parametrize("path", [(), ("command",)])
def test_unknown_fields_are_ignored_on_requests(path: tuple[str, ...]) -> None:
    base = json.loads(REFERENCE_EXAMPLE)
    assert decode_request(_with_extra(base, path)) == decode_request(base)


@pytest.mark.parametrize(
    "path", [(), ("outcome",), ("outcome", "activation"), ("outcome", "activation", "messages", 0)]
)
def test_unknown_fields_are_ignored_on_responses(path: tuple[Any, ...]) -> None:
    proc = Process.create(
        PID,
        memory={"count": 0},
        scripts={"counter": '(define (main input) (do (send! "svit://local/x" 1) 1))'},
    )
    resp = ProcessController(proc).execute(decode_request(request(version=0)))
    base = resp.model_dump(mode="json")
    assert base["outcome"]["status"] == "committed", base
    assert decode_response(_with_extra(base, path)) == resp


def test_unknown_operation_fails_closed() -> None:
    doc = json.loads(REFERENCE_EXAMPLE)
    doc["command"]["operation"] = "delete_everything"
    with pytest.raises(SvitError) as info:
        decode_request(doc)
    assert info.value.code == ErrorCode.DECODE_ERROR


@pytest.mark.parametrize("field", ["client_id", "request_id"])
@pytest.mark.parametrize("bad", ["", "x" * 129, "has space", "slash/no", "ünï", 7])
def test_bad_identifiers_fail_at_decode(field: str, bad: object) -> None:
    doc = json.loads(REFERENCE_EXAMPLE)
    doc[field] = bad
    with pytest.raises(SvitError) as info:
        decode_request(doc)
    assert info.value.code in (ErrorCode.INVALID_CONTROL_ID, ErrorCode.DECODE_ERROR)


@pytest.mark.parametrize("ok", ["a", "x" * 128, "A.b_c-9"])
def test_good_identifiers_decode(ok: str) -> None:
    doc = json.loads(REFERENCE_EXAMPLE)
    doc["client_id"] = ok
    assert decode_request(doc).client_id == ok


@pytest.mark.parametrize(
    "bad_pid", ["local/x", "svit://", "svit://a b", "svit://" + "x" * 250, 5]
)
def test_bad_process_id_fails_at_decode(bad_pid: object) -> None:
    doc = json.loads(REFERENCE_EXAMPLE)
    doc["process_id"] = bad_pid
    with pytest.raises(SvitError) as info:
        decode_request(doc)
    assert info.value.code in (ErrorCode.INVALID_PROCESS_ID, ErrorCode.DECODE_ERROR)


@pytest.mark.parametrize(
    "mutate",
    [
        lambda d: d.update(protocol="svit-control@2"),
        lambda d: d.pop("protocol"),
        lambda d: d.pop("command"),
        lambda d: d.update(expected_version="7"),
        lambda d: d.update(expected_version=-1),
        lambda d: d.update(expected_version=2**64),
        lambda d: d.update(expected_version=7.0),
        lambda d: d["command"].update(input={"type": "integer", "value": 2**63}),
        lambda d: d["command"].update(input={"type": "number", "value": 2**60 + 1}),
        lambda d: d["command"].update(input={"type": "bogus"}),
        lambda d: d["command"].update(input={"type": "null", "value": 1}),
        lambda d: d["command"].pop("script"),
    ],
)
def test_malformed_envelopes_are_decode_errors(mutate: Any) -> None:
    doc = json.loads(REFERENCE_EXAMPLE)
    mutate(doc)
    with pytest.raises(SvitError):
        decode_request(doc)


@pytest.mark.parametrize(
    "text",
    [b"", b"{", b"[]", b"null", b"{\"protocol\": NaN}", REFERENCE_EXAMPLE.encode() + b"x",
     b"\xff\xfe", b"[" * 100_000],
)
def test_malformed_json_is_a_decode_error(text: bytes) -> None:
    with pytest.raises(SvitError) as info:
        decode_request(text)
    assert info.value.code == ErrorCode.DECODE_ERROR


def test_committed_schema_is_current() -> None:
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "schemas"
    for name, text in render_schemas().items():
        assert (root / name).read_text() == text, (
            f"schemas/{name} is stale: run python -m svit_cluster.control.schema"
        )


# -- fuzzing ---------------------------------------------------------------------

json_leaf = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=8)
)
json_doc = st.recursive(
    json_leaf,
    lambda kids: st.one_of(
        st.lists(kids, max_size=4), st.dictionaries(st.text(max_size=8), kids, max_size=4)
    ),
    max_leaves=20,
)


def _mutations(doc: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    paths = [
        (), ("command",), ("command", "input"), ("command", "input", "value"),
    ]

    @st.composite
    def mutate(draw: st.DrawFn) -> dict[str, Any]:
        out = copy.deepcopy(doc)
        path = draw(st.sampled_from(paths))
        node: Any = out
        for key in path:
            node = node[key]
        key = draw(st.sampled_from([*sorted(node), "zz"]))
        if draw(st.booleans()):
            node[key] = draw(json_doc)
        else:
            node.pop(key, None)
        return out

    return mutate()


def _check_outcome(raw: Any) -> None:
    proc = Process.create(PID, memory={"count": 0}, scripts={"counter": COUNTER})
    ctrl = ProcessController(proc)
    before = (proc.version, proc.root_hash)
    try:
        req = decode_request(raw)
    except SvitError:
        assert (proc.version, proc.root_hash) == before
        return
    resp = ctrl.execute(req)
    if resp.outcome.status != "committed":
        assert (proc.version, proc.root_hash) == before
    else:
        assert proc.version == before[0] + 1


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(json_doc)
def test_random_json_documents_only_decode_errors_or_outcomes(raw: Any) -> None:
    _check_outcome(raw)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(_mutations(request(pid=PID, version=0)))
def test_mutated_envelopes_only_decode_errors_or_outcomes(raw: dict[str, Any]) -> None:
    _check_outcome(raw)
