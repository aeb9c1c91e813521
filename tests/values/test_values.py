"""Values: the kinds, the tagged wire codec, plain JSON, integer vs number."""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from svit_cluster.errors import ErrorCode, InvalidInput, LimitExceeded, SvitError
from svit_cluster.process import Process, Script
from svit_cluster.process._tree import MapNode, _Branch, _Leaf, node_from_value
from svit_cluster.values import (
    I64_MAX,
    I64_MIN,
    canonical_json,
    decode_value,
    encode_value,
    from_plain_json,
    strict_json_loads,
    to_plain_json,
    values_equal,
)
from tests.process.strategies import PROPS, big_maps, scalars, segments, shuffled, values

# -- the exact tagged wire shapes ---------------------------------------------------

WIRE = [
    (None, b'{"type":"null"}'),
    (True, b'{"type":"bool","value":true}'),
    (False, b'{"type":"bool","value":false}'),
    (4, b'{"type":"integer","value":4}'),
    (1.5, b'{"type":"number","value":1.5}'),
    ("x", b'{"type":"string","value":"x"}'),
    ([1, None], b'{"type":"array","value":[{"type":"integer","value":1},{"type":"null"}]}'),
    ({"b": 1, "a": "z"}, b'{"type":"map","value":{"a":{"type":"string","value":"z"},'
                         b'"b":{"type":"integer","value":1}}}'),
    (Script("(defn main (input) 1)", "doc"),
     b'{"type":"script","value":{"documentation":"doc","source":"(defn main (input) 1)"}}'),
]


@pytest.mark.parametrize(("value", "wire"), WIRE)
def test_each_kind_has_its_exact_tagged_wire_form(value: object, wire: bytes) -> None:
    assert canonical_json(encode_value(value)) == wire  # type: ignore[arg-type]
    back = decode_value(json.loads(wire))
    assert values_equal(back, value)  # type: ignore[arg-type]


def test_null_has_no_value_key_and_map_keys_come_out_sorted() -> None:
    assert encode_value(None) == {"type": "null"}
    assert list(encode_value({"b": 1, "a": 2, "c": 3})["value"]) == ["a", "b", "c"]
    assert list(decode_value(json.loads('{"type":"map","value":{"b":{"type":"null"},'
                                        '"a":{"type":"null"}}}'))) == ["a", "b"]  # type: ignore[arg-type]


NEAREST_INVALID_WIRE = [
    {"type": "null", "value": None},  # null takes no value key
    {"type": "bool", "value": 1},
    {"type": "bool"},
    {"type": "integer", "value": True},
    {"type": "integer", "value": 1.0},
    {"type": "integer", "value": "1"},
    {"type": "integer", "value": 2**63},
    {"type": "integer", "value": -(2**63) - 1},
    {"type": "number", "value": "1.5"},
    {"type": "number", "value": 2**53 + 1},
    {"type": "string", "value": 1},
    {"type": "array", "value": {}},
    {"type": "array", "value": [1]},  # children must be tagged
    {"type": "map", "value": []},
    {"type": "map", "value": {"a": 1}},
    {"type": "script", "value": {"source": 1}},
    {"type": "script", "value": {"source": "x", "documentation": 2}},
    {"type": "script", "value": {"source": "x", "extra": "y"}},
    {"type": "string", "value": "x", "extra": 1},
    {"type": "decimal", "value": "1"},
    {"value": 1},
    {},
    [],
    "x",
    None,
    4,
]


@pytest.mark.parametrize("wire", NEAREST_INVALID_WIRE, ids=repr)
def test_malformed_wire_values_are_invalid_value(wire: object) -> None:
    with pytest.raises(InvalidInput) as info:
        decode_value(wire)
    assert info.value.code == ErrorCode.INVALID_VALUE


def test_number_given_as_json_integer_decodes_to_a_float() -> None:
    v = decode_value({"type": "number", "value": 4})
    assert type(v) is float and v == 4.0


# -- integers are signed 64-bit -----------------------------------------------------


@pytest.mark.parametrize("n", [I64_MIN, -1, 0, 1, I64_MAX])
def test_integers_in_i64_range_are_valid(n: int) -> None:
    p = Process.create("svit://v")
    p.write("/memory/n", n)
    assert p.read("/memory/n") == n and type(p.read("/memory/n")) is int
    assert decode_value(encode_value(n)) == n


@pytest.mark.parametrize("n", [I64_MIN - 1, I64_MAX + 1, 10**30])
def test_integers_outside_i64_are_invalid(n: int) -> None:
    p = Process.create("svit://v")
    for call in (lambda: p.write("/memory/n", n), lambda: encode_value(n),
                 lambda: node_from_value(n), lambda: p.inbox_append([n])):
        with pytest.raises(InvalidInput) as info:
            call()
        assert info.value.code == ErrorCode.INVALID_VALUE
    assert p.version == 0


# -- floats are finite --------------------------------------------------------------


@pytest.mark.parametrize("x", [0.0, -0.0, 1.5, -2.5e300, 5e-324])
def test_finite_floats_are_valid(x: float) -> None:
    p = Process.create("svit://v")
    p.write("/memory/x", x)
    got = p.read("/memory/x")
    assert type(got) is float and values_equal(got, x)


@pytest.mark.parametrize("x", [math.nan, math.inf, -math.inf])
def test_non_finite_floats_are_invalid(x: float) -> None:
    p = Process.create("svit://v")
    for call in (lambda: p.write("/memory/x", x), lambda: p.write("/memory/x", {"a": [x]}),
                 lambda: encode_value(x), lambda: from_plain_json(x),
                 lambda: canonical_json(x)):
        with pytest.raises(InvalidInput):
            call()
    assert p.version == 0


def test_nan_and_infinity_are_rejected_in_json_text() -> None:
    for text in ("NaN", "Infinity", "-Infinity", '{"type":"number","value":NaN}'):
        with pytest.raises(InvalidInput) as info:
            strict_json_loads(text)
        assert info.value.code == ErrorCode.DECODE_ERROR
    with pytest.raises(InvalidInput):
        from_plain_json(json.loads("1e400"))  # parses to inf


# -- strings, arrays, maps ----------------------------------------------------------


def test_strings_must_be_valid_unicode() -> None:
    p = Process.create("svit://v")
    p.write("/memory/s", "héllo ✓ 😀")
    not_unicode: list[Any] = ["\ud800", {"\udfff": 1}, ["ok", "\ud83d"]]
    for bad in not_unicode:
        with pytest.raises(InvalidInput) as info:
            p.write("/memory/s", bad)
        assert info.value.code == ErrorCode.INVALID_VALUE
    with pytest.raises(InvalidInput):
        decode_value(json.loads('{"type":"string","value":"\\ud800"}'))
    assert p.version == 1


def test_map_keys_must_be_strings() -> None:
    p = Process.create("svit://v")
    p.write("/memory/m", {"1": 1})
    for bad in ({1: 1}, {"a": 1, 2: 2}, {None: 1}, {("t",): 1}):
        for call in (lambda b=bad: p.write("/memory/m", b), lambda b=bad: encode_value(b),
                     lambda b=bad: from_plain_json(b), lambda b=bad: to_plain_json(b)):
            with pytest.raises(InvalidInput) as info:
                call()
            assert info.value.code == ErrorCode.INVALID_VALUE
    assert p.version == 1


@pytest.mark.parametrize("bad", [(1, 2), {1, 2}, b"x", object(), 1j, bytearray(b"x")], ids=repr)
def test_non_values_are_invalid(bad: object) -> None:
    p = Process.create("svit://v")
    for call in (lambda: p.write("/memory/x", bad), lambda: encode_value(bad),  # type: ignore[arg-type]
                 lambda: from_plain_json(bad), lambda: node_from_value(bad)):  # type: ignore[arg-type]
        with pytest.raises(InvalidInput):
            call()
    assert p.version == 0


def test_maps_keep_keys_sorted() -> None:
    p = Process.create("svit://v")
    p.write("/memory/m", {"b": 1, "a": 2, "ä": 3, "B": 4})
    assert list(p.read("/memory/m")) == ["B", "a", "b", "ä"]  # type: ignore[arg-type]
    assert p.discover("/memory/m") == ["B", "a", "b", "ä"]


# -- scripts only under /lib ---------------------------------------------------------


def test_script_record_is_allowed_at_lib_name() -> None:
    p = Process.create("svit://v")
    p.write("/lib/count", Script("(defn main (input) 1)", "counts"))
    p.write("/lib/plain", {"source": "(defn main (input) 2)"})
    assert p.read("/lib/count") == Script("(defn main (input) 1)", "counts")
    assert p.scripts()["plain"] == Script("(defn main (input) 2)", None)


@pytest.mark.parametrize(
    "path_value",
    [
        ("/memory/s", Script("x")),
        ("/memory/s", {"nested": Script("x")}),
        ("/memory/s", [Script("x")]),
        ("/lib/s", 5),
        ("/lib/s", {"source": 5}),
        ("/lib/s", {"source": "x", "other": "y"}),
        ("/lib/s", {"source": "x", "documentation": 3}),
    ],
    ids=repr,
)
def test_script_record_anywhere_else_or_malformed_is_invalid(
    path_value: tuple[str, object],
) -> None:
    p = Process.create("svit://v")
    path, value = path_value
    with pytest.raises(InvalidInput) as info:
        p.write(path, value)  # type: ignore[arg-type]
    assert info.value.code == ErrorCode.INVALID_VALUE
    with pytest.raises(InvalidInput):
        p.inbox_append(Script("x"))
    assert p.version == 0


def test_script_record_fields_are_typed() -> None:
    with pytest.raises(InvalidInput):
        Script(5)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        Script("x", 5)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        Process.create("svit://v", scripts={"x": 5})  # type: ignore[dict-item]


# -- plain JSON ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "kind", "expected"),
    [
        ("4", int, 4),
        ("-9223372036854775808", int, I64_MIN),
        ("9223372036854775807", int, I64_MAX),
        ("9223372036854775808", float, 9.223372036854775808e18),
        ("-9223372036854775809", float, -9.223372036854775809e18),
        ("4.0", float, 4.0),
        ("1e2", float, 100.0),
        ("1.5", float, 1.5),
    ],
)
def test_plain_json_number_is_integer_iff_it_fits_i64(
    text: str, kind: type, expected: object
) -> None:
    v = from_plain_json(strict_json_loads(text))
    assert type(v) is kind and v == expected


def test_plain_json_containers_and_scalars() -> None:
    v = from_plain_json(json.loads('{"b":[1,2.0,"x",null,true],"a":{}}'))
    assert values_equal(v, {"a": {}, "b": [1, 2.0, "x", None, True]})
    assert list(v) == ["a", "b"]  # type: ignore[arg-type]
    assert to_plain_json(v) == {"a": {}, "b": [1, 2.0, "x", None, True]}
    assert to_plain_json(Script("s", "d")) == {"source": "s", "documentation": "d"}


def test_plain_json_huge_integers_are_invalid_not_overflow() -> None:
    with pytest.raises(InvalidInput):
        from_plain_json(10**400)
    with pytest.raises(InvalidInput):
        strict_json_loads("1" * 5000)  # over Python's int-digit limit: a decode error


# -- integer 1 and number 1.0 are different values ---------------------------------------


def test_integer_one_and_number_one_are_different_values() -> None:
    assert not values_equal(1, 1.0)
    assert not values_equal(1, True)
    assert not values_equal([1], [1.0])
    assert not values_equal({"a": 1}, {"a": 1.0})
    assert values_equal({"a": [1, 1.0]}, {"a": [1, 1.0]})
    assert encode_value(1) != encode_value(1.0)
    assert node_from_value(1).digest != node_from_value(1.0).digest
    assert node_from_value(1).digest != node_from_value(True).digest
    assert node_from_value(0).digest != node_from_value(False).digest
    assert node_from_value("1").digest != node_from_value(1).digest
    a, b = Process.create("svit://v"), Process.create("svit://v")
    a.write("/memory/x", 1)
    b.write("/memory/x", 1.0)
    assert a.root_hash != b.root_hash
    assert type(a.read("/memory/x")) is int and type(b.read("/memory/x")) is float
    assert type(decode_value(json.loads(canonical_json(encode_value(1.0))))) is float


# -- properties ---------------------------------------------------------------------------


@PROPS
@given(values)
def test_wire_round_trip_is_byte_identical(value: object) -> None:
    wire = canonical_json(encode_value(value))  # type: ignore[arg-type]
    back = decode_value(json.loads(wire))
    assert canonical_json(encode_value(back)) == wire
    assert values_equal(back, value)  # type: ignore[arg-type]
    # plain Python json text (not canonical) decodes to the same value too
    assert values_equal(decode_value(json.loads(json.dumps(encode_value(value)))), back)  # type: ignore[arg-type]


@PROPS
@given(values, st.randoms(use_true_random=False))
def test_equal_values_hash_equally_whatever_the_insertion_order(
    value: object, rnd: random.Random
) -> None:
    a = node_from_value(value)  # type: ignore[arg-type]
    b = node_from_value(shuffled(value, rnd))  # type: ignore[arg-type]
    assert a.digest == b.digest
    c = node_from_value(decode_value(json.loads(canonical_json(encode_value(value)))))  # type: ignore[arg-type]
    assert c.digest == a.digest


@PROPS
@given(values, values)
def test_different_values_hash_differently(a: object, b: object) -> None:
    same = values_equal(a, b)  # type: ignore[arg-type]
    assert (node_from_value(a).digest == node_from_value(b).digest) == same  # type: ignore[arg-type]


@PROPS
@given(big_maps, st.lists(segments, max_size=60),
       st.randoms(use_true_random=False))
def test_large_maps_hash_by_content_through_trie_splits_and_collapses(
    final: dict[str, object], extra: list[str], rnd: random.Random
) -> None:
    """Build the same big map by inserts in random order, detours and removes."""
    canonical = MapNode.from_items({k: node_from_value(v) for k, v in final.items()})  # type: ignore[arg-type]
    assert isinstance(canonical.trie, _Branch)
    order = list(final)
    rnd.shuffle(order)
    m = MapNode.from_items({})
    detour = [k for k in extra if k not in final]
    for k in detour:  # keys that will be removed again
        m = m.with_key(k, node_from_value("tmp"))
    for k in order:
        m = m.with_key(k, node_from_value(final[k]))  # type: ignore[arg-type]
    rnd.shuffle(detour)
    for k in detour:
        removed = m.without_key(k)
        if removed is not None:
            m = removed
    assert m.digest == canonical.digest and len(m) == len(final)
    assert m.keys() == sorted(final)
    # remove down to a small map: the trie must collapse to the canonical leaf
    keep = sorted(final)[:rnd.randint(0, 32)]
    for k in order:
        if k not in keep:
            removed = m.without_key(k)
            assert removed is not None
            m = removed
    small = MapNode.from_items({k: node_from_value(final[k]) for k in keep})  # type: ignore[arg-type]
    assert isinstance(m.trie, _Leaf)
    assert m.digest == small.digest


@PROPS
@given(big_maps, st.randoms(use_true_random=False))
def test_large_maps_written_into_a_process_in_any_order_hash_equally(
    final: dict[str, object], rnd: random.Random
) -> None:
    limits_kw = {"memory": {"m": final}}
    direct = Process.create("svit://v", **limits_kw)  # type: ignore[arg-type]
    p = Process.create("svit://v", memory={"m": {"zz-gone": 1, "zz-gone2": [1]}})
    order = list(final)
    rnd.shuffle(order)
    for k in order:
        p.write(f"/memory/m/{k}", final[k])  # type: ignore[arg-type]
    p.remove("/memory/m/zz-gone2")
    p.remove("/memory/m/zz-gone")
    assert p.node("/memory/m").digest == direct.node("/memory/m").digest  # type: ignore[union-attr]
    assert p.root_hash == direct.root_hash


@PROPS
@given(st.recursive(scalars | st.binary() | st.tuples(st.integers()) | st.sets(st.integers()),
                    lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.text(max_size=3) | st.integers(), inner, max_size=3),
                    max_leaves=10))
def test_codec_answers_arbitrary_python_input_with_values_or_typed_errors(data: object) -> None:
    calls: list[Callable[[Any], object]] = [
        encode_value, from_plain_json, decode_value, to_plain_json, node_from_value,
        canonical_json]
    for call in calls:
        try:
            call(data)
        except SvitError:
            pass


def test_cyclic_and_deep_python_values_are_typed_errors() -> None:
    cyc: list[object] = []
    cyc.append(cyc)
    deep: object = 1
    for _ in range(100_000):
        deep = [deep]
    deep_map: object = 1
    for _ in range(100_000):
        deep_map = {"a": deep_map}
    for bad in (cyc, deep, deep_map):
        walkers: list[Callable[[Any], object]] = [encode_value, to_plain_json]
        for call in walkers:
            with pytest.raises(LimitExceeded):
                call(bad)
        for call in (from_plain_json, node_from_value):  # value bounds: invalid_value
            with pytest.raises(InvalidInput) as info:
                call(bad)
            assert info.value.code == "invalid_value"
        with pytest.raises(SvitError):
            decode_value(bad)
        with pytest.raises(SvitError):
            values_equal(bad, bad)  # type: ignore[arg-type]
        with pytest.raises(InvalidInput):
            canonical_json(bad)


def test_process_id_character_rule_is_the_per_character_rule_for_every_code_point() -> None:
    """``validate_process_id`` refuses exactly the ids holding a character that is
    whitespace or not printable: checked for every Unicode code point (the
    validator scans with ``str.isprintable`` plus a space test)."""
    from svit_cluster.errors import InvalidInput
    from svit_cluster.values._paths import validate_process_id

    refused = []
    for code in range(0x110000):
        ch = chr(code)
        if 0xD800 <= code <= 0xDFFF:
            continue  # a lone surrogate is refused for its UTF-8 length already
        try:
            validate_process_id(f"svit://t/p{ch}q")
        except InvalidInput:
            refused.append(code)
    expected = [code for code in range(0x110000) if not 0xD800 <= code <= 0xDFFF
                and (chr(code).isspace() or not chr(code).isprintable())]
    assert refused == expected
    assert 0x20 in refused and 0xA0 in refused and 0x2028 in refused and 0x41 not in refused
