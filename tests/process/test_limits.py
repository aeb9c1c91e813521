"""Limits: a frozen object with reference defaults and hard maxima; typed violations."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from svit_cluster.errors import MAX_MESSAGE_BYTES, ErrorCode, InvalidInput, LimitExceeded, SvitError
from svit_cluster.process import HARD_MAXIMA, Limits, Process, Script

KIB, MIB = 1024, 1024 * 1024

# (field, reference default, hard maximum) -- from the upstream reference
TABLE = [
    ("max_value_depth", 32, 128),
    ("max_value_entries", 10_000, 1_000_000),
    ("max_text_bytes", 1 * MIB, 64 * MIB),
    ("max_script_bytes", 64 * KIB, 1 * MIB),
    ("max_tree_nodes", 100_000, 10_000_000),
    ("max_tree_text_bytes", 16 * MIB, 512 * MIB),
    ("max_execution_millis", 100, 60_000),
    ("max_call_stack", 64, 4096),
    ("max_exec_depth", 16, 64),
    ("max_guest_memory", 8 * MIB, 64 * MIB),
]


@pytest.mark.parametrize(("name", "default", "hard"), TABLE)
def test_defaults_and_hard_maxima(name: str, default: int, hard: int) -> None:
    assert getattr(Limits(), name) == default
    assert HARD_MAXIMA[name] == hard


def test_every_field_has_a_hard_maximum_and_the_defaults_are_valid() -> None:
    names = [f.name for f in dataclasses.fields(Limits)]
    assert set(HARD_MAXIMA) == set(names)
    assert Limits().validate() == Limits()
    assert Limits(**HARD_MAXIMA).validate() == Limits(**HARD_MAXIMA)
    assert Limits.from_dict(Limits().to_dict()) == Limits()


def test_limits_are_frozen() -> None:
    lim = Limits()
    with pytest.raises(dataclasses.FrozenInstanceError):
        lim.max_value_depth = 1000  # type: ignore[misc]
    with pytest.raises((AttributeError, TypeError)):
        lim.new_field = 1  # type: ignore[attr-defined]
    assert hash(lim) == hash(Limits())


@pytest.mark.parametrize("name", sorted(HARD_MAXIMA))
def test_each_limit_above_its_hard_maximum_is_rejected(name: str) -> None:
    assert Limits(**{name: HARD_MAXIMA[name]}).validate()
    wrong: list[Any] = [HARD_MAXIMA[name] + 1, -1, True, 1.0, "1", None]
    for bad in wrong:
        with pytest.raises(InvalidInput) as info:
            dataclasses.replace(Limits(), **{name: bad}).validate()
        assert info.value.code == ErrorCode.RESOURCE_LIMIT_EXCEEDED
        assert name in info.value.message
        with pytest.raises(InvalidInput):
            Process.create("svit://l", limits=dataclasses.replace(Limits(), **{name: bad}))
        with pytest.raises(InvalidInput):
            Limits.from_dict({**Limits().to_dict(), name: bad})


@pytest.mark.parametrize("data", [None, [], "x", {"max_fuel": 1}, {**Limits().to_dict(), "x": 1}])
def test_limits_from_untrusted_data(data: Any) -> None:
    with pytest.raises(InvalidInput):
        Limits.from_dict(data)


def _nested(levels: int) -> Any:
    v: Any = 0
    for _ in range(levels):
        v = [v]
    return v


def _check(exc: SvitError) -> None:
    assert exc.code == ErrorCode.RESOURCE_LIMIT_EXCEEDED
    assert 0 < len(exc.message.encode()) <= 200 < MAX_MESSAGE_BYTES
    assert "\n" not in exc.message


def _check_value(exc: SvitError) -> None:
    """Value depth/entry/text bounds are invalid_value (reference: value validation)."""
    assert exc.code == ErrorCode.INVALID_VALUE
    assert 0 < len(exc.message.encode()) <= 200 < MAX_MESSAGE_BYTES
    assert "\n" not in exc.message


def test_max_value_depth_counts_from_memory() -> None:
    p = Process.create("svit://l", limits=Limits(max_value_depth=8))
    p.write("/memory/x", _nested(7))  # leaf at depth 1 + 7 = 8 below /memory
    with pytest.raises(InvalidInput) as info:
        p.write("/memory/y", _nested(8))
    _check_value(info.value)
    p.write("/memory/m", {"a": {}})
    p.write("/memory/m/a/b", _nested(5))  # 3 + 5 = 8
    with pytest.raises(InvalidInput):
        p.write("/memory/m/a/c", _nested(6))
    assert p.version == 3
    p.inbox_append(_nested(8))  # a message is one value of its own
    with pytest.raises(InvalidInput):
        p.inbox_append(_nested(9))
    with pytest.raises(InvalidInput):
        Process.create("svit://l", memory={"x": _nested(8)}, limits=Limits(max_value_depth=8))


def test_max_value_entries() -> None:
    p = Process.create("svit://l", limits=Limits(max_value_entries=10))
    p.write("/memory/x", list(range(9)))  # 1 array + 9 items
    with pytest.raises(InvalidInput) as info:
        p.write("/memory/x", list(range(10)))
    _check_value(info.value)
    p.write("/memory/m", {str(i): i for i in range(9)})
    with pytest.raises(InvalidInput):
        p.write("/memory/m", {str(i): i for i in range(10)})


def test_max_text_bytes_counts_strings_and_keys_in_utf8() -> None:
    p = Process.create("svit://l", limits=Limits(max_text_bytes=100))
    p.write("/memory/s", "a" * 100)
    p.write("/memory/s", "é" * 50)
    p.write("/memory/m", {"k" * 50: "v" * 50})
    too_much: list[Any] = ["a" * 101, "é" * 51, {"k" * 51: "v" * 50}, ["a" * 60, "b" * 41]]
    for bad in too_much:
        with pytest.raises(InvalidInput) as info:
            p.write("/memory/s", bad)
        _check_value(info.value)
    assert p.version == 3


def test_max_script_bytes() -> None:
    p = Process.create("svit://l", limits=Limits(max_script_bytes=64))
    p.write("/lib/s", Script("a" * 64))
    too_big: list[Any] = [Script("a" * 65), Script("é" * 33), {"source": "a" * 65}]
    for bad in too_big:
        with pytest.raises(LimitExceeded) as info:
            p.write("/lib/s", bad)
        _check(info.value)
    with pytest.raises(LimitExceeded):
        Process.create("svit://l", scripts={"s": "a" * 65}, limits=Limits(max_script_bytes=64))


def test_max_tree_nodes_and_text_bound_the_whole_tree() -> None:
    base = Process.create("svit://l")
    nodes = base.root.size
    text = base.root.text
    p = Process.create("svit://l", limits=Limits(max_tree_nodes=nodes + 3))
    p.write("/memory/a", [1, 2])  # +3 nodes: exactly at the bound
    with pytest.raises(LimitExceeded) as info:
        p.write("/memory/b", 1)
    _check(info.value)
    with pytest.raises(LimitExceeded):
        p.inbox_append(1)
    q = Process.create("svit://l", limits=Limits(max_tree_text_bytes=text + 10))
    q.write("/memory/abc", "x" * 7)  # key 3 + value 7 bytes
    with pytest.raises(LimitExceeded):
        q.write("/memory/d", "")
    with pytest.raises(LimitExceeded):
        Process.create("svit://l", limits=Limits(max_tree_nodes=nodes - 1))
    assert Process.restore(p.snapshot()).root_hash == p.root_hash


def test_violation_messages_stay_bounded_with_huge_input() -> None:
    p = Process.create("svit://l")
    huge = "x" * 5_000_000
    for call in (lambda: p.write(huge, 1), lambda: p.write("/memory/" + huge[:4000] + "/y", 1),
                 lambda: p.write("/lib/" + huge[:3000], Script("x")),
                 lambda: Process.create("svit://" + huge),
                 lambda: Limits.from_dict({**Limits().to_dict(), huge: 1})):
        with pytest.raises(SvitError) as info:
            call()
        assert len(str(info.value).encode()) <= MAX_MESSAGE_BYTES + 64
