"""Every entry point answers malformed input with a typed SvitError and changes nothing."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from svit_cluster.errors import SvitError
from svit_cluster.process import (
    Process,
    Transaction,
    decode_value,
    from_plain_json,
    parse_path,
    strict_json_loads,
    validate_process_id,
    validate_script_name,
)

from .strategies import PROPS, nested_json, state

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner,
                                                                max_size=4),
    max_leaves=15,
)
junk = st.one_of(
    json_values,
    st.binary(max_size=20),
    st.tuples(st.integers()),
    st.sets(st.integers(), max_size=3),
    st.builds(object),
    st.dictionaries(st.integers(), st.integers(), max_size=2),
)
tagged_keys = st.sampled_from(["type", "value", "source", "documentation", "x"])
tag_names = st.sampled_from(["null", "bool", "integer", "number", "string", "array", "map",
                             "script", "other"])
tagged_junk = st.recursive(
    json_values | tag_names,
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(tagged_keys, inner | tag_names, max_size=3)
    | st.fixed_dictionaries({"type": tag_names, "value": inner}),
    max_leaves=15,
)


def _typed(call: Any, *args: Any) -> None:
    try:
        call(*args)
    except SvitError:
        pass


@PROPS
@given(st.one_of(junk, tagged_junk))
def test_codec_and_validators_answer_with_values_or_typed_errors(data: Any) -> None:
    for call in (decode_value, from_plain_json, parse_path, validate_process_id,
                 validate_script_name, Transaction.from_json):
        _typed(call, data)


@PROPS
@given(st.binary(max_size=200) | st.text(max_size=200).map(str.encode)
       | json_values.map(lambda v: json.dumps(v).encode()))
def test_byte_entry_points_answer_with_typed_errors(raw: bytes) -> None:
    for call in (strict_json_loads, Transaction.decode, Process.restore):
        _typed(call, raw)


@PROPS
@given(junk | st.text(max_size=30), junk | tagged_junk)
def test_host_operations_on_junk_raise_typed_errors_and_change_nothing(
    path: Any, value: Any
) -> None:
    p = Process.create("svit://bad", memory={"a": {"b": [1]}})
    p.inbox_append("m")
    before = state(p)
    for call, args in ((p.write, (path, value)), (p.remove, (path,)), (p.inbox_ack, (value,)),
                       (p.read, (path,)), (p.stat, (path,)), (p.discover, (path,)),
                       (p.fork, (path,))):
        try:
            call(*args)
        except SvitError:
            assert state(p) == before
        else:
            if call in (p.write, p.remove, p.inbox_ack):
                assert p.version == before[1] + 1
                p = Process.restore(before[-1])  # back to the state under test
    try:
        p.inbox_append(value)
    except SvitError:
        assert p.version == before[1]


@pytest.mark.parametrize("levels", [129, 1_000, 100_000])
def test_deep_nesting_in_every_decoder_is_a_typed_error(levels: int) -> None:
    for inner in ("[]", "{}", '{"type":"null"}'):
        text = nested_json(levels, inner)
        for call in (Transaction.decode, Process.restore):
            with pytest.raises(SvitError):
                call(text.encode())
        if levels >= 100_000:  # valid JSON below that; too deep for the parser here
            with pytest.raises(SvitError):
                strict_json_loads(text)
    tagged = '{"type":"array","value":[' * levels + '{"type":"null"}' + "]}" * levels
    try:
        parsed = strict_json_loads(tagged)
    except SvitError:
        return  # too deep even for the parser: already typed
    with pytest.raises(SvitError):
        decode_value(parsed)
    with pytest.raises(SvitError):
        from_plain_json(parsed)


def test_deep_values_through_host_operations_are_typed_and_change_nothing() -> None:
    p = Process.create("svit://bad")
    before = state(p)
    deep: Any = None
    for _ in range(100_000):
        deep = {"k": deep}
    calls: list[Callable[[], object]] = [
        lambda: p.write("/memory/x", deep), lambda: p.inbox_append(deep),
        lambda: p.write("/lib/x", deep), lambda: p.inbox_ack(deep)]
    for call in calls:
        with pytest.raises(SvitError):
            call()
        assert state(p) == before
    with pytest.raises(SvitError):
        Process.create("svit://bad", memory={"x": deep})
