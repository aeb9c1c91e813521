"""The jq subset's data functions and the bounds of ``jq`` and ``search``.

The reference's bounds: a jq filter refuses recursive/looping constructs before it
runs and every evaluation step costs fuel; ``search`` refuses a pattern over 4 KiB
and stops at 100 matches. ``sort_by`` charges n*log2(n) steps, so sorting a large
array stops at the fuel limit instead of running unmetered.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from svit_cluster.errors import ErrorCode, InvalidInput, LimitExceeded, ScriptFailed
from svit_cluster.lisp._builtins_catalog import MAX_SEARCH_PATTERN_BYTES, MAX_SEARCH_RESULTS
from svit_cluster.values import Limits
from tests.lisp._support import run, value

SLOW_CLOCK = dataclasses.replace(Limits(), max_execution_millis=60_000)


def jq(flt: str, data: Any) -> Any:
    return value("(jq (value-get input \"/f\") (value-get input \"/d\"))",
                 {"f": flt, "d": data}, limits=SLOW_CLOCK)


def test_to_entries_sort_by_reverse_startswith() -> None:
    data = {"b": {"id": "x/2", "d": 2}, "a": {"id": "y/1", "d": 1}, "c": {"id": "x/3", "d": 1}}
    assert jq("to_entries | map(.key)", data) == [["a", "b", "c"]]
    assert jq("to_entries | .[0]", data) == [{"key": "a", "value": data["a"]}]
    # sort_by is stable on equal keys (a before c, both d=1); reverse flips it
    assert jq("[.[]] | sort_by(.d) | map(.id)", data) == [["y/1", "x/3", "x/2"]]
    assert jq("[.[]] | sort_by(.d) | reverse | map(.id)", data) == [["x/2", "x/3", "y/1"]]
    assert jq("reverse", "abc") == ["cba"]
    assert jq("reverse", None) == [[]]
    assert jq('[.[] | select(.id | startswith("x/"))] | length', data) == [2]


def test_object_construction_and_slices() -> None:
    row = {"id": 7, "name": "n", "extra": True}
    assert jq("{id, name}", row) == [{"id": 7, "name": "n"}]
    assert jq('{"k": .id, (.name): 1, total: .id | . }', row) == [{"k": 7, "n": 1, "total": 7}]
    # one object per combination of value outputs, as in jq
    assert jq("{a: (1, 2), b: (3, 4)}", None) == [
        {"a": 1, "b": 3}, {"a": 1, "b": 4}, {"a": 2, "b": 3}, {"a": 2, "b": 4}]
    assert jq("{}", 1) == [{}]
    assert jq(".[:2], .[1:], .[-2:], .[1:-1], .[5:], .[2:1]", [1, 2, 3, 4]) == [
        [1, 2], [2, 3, 4], [3, 4], [2, 3], [], []]
    assert jq(".[1:3]", "hello") == ["el"]
    assert jq(".[1:]", None) == [None]


@pytest.mark.parametrize(("flt", "word"), [
    ("to_entries", "has no keys"),
    ("sort_by(.a)", "cannot sort"),
    ("startswith(1)", "startswith() requires string"),
    (".[1:2]", "cannot slice"),
    ('"ab" | .[1:"x"]', "slice bounds must be numbers"),
    ("{(1): 2}", "object keys must be strings"),
])
def test_data_functions_fail_on_wrong_types(flt: str, word: str) -> None:
    with pytest.raises(ScriptFailed) as failed:
        jq(flt, 5)
    assert word in failed.value.message, failed.value.message


@pytest.mark.parametrize("flt", ["def f: f; f", "recurse", "[limit(3; .)]",
                                 "reduce .[] as $x (0; .)"])
def test_jq_refuses_unbounded_constructs_before_running(flt: str) -> None:
    with pytest.raises(ScriptFailed) as failed:
        jq(flt, [1])
    assert "unbounded construct" in failed.value.message


def test_sort_by_and_object_products_are_metered() -> None:
    tight = dataclasses.replace(SLOW_CLOCK, max_fuel=5_000)
    data = list(range(5000))
    with pytest.raises(LimitExceeded) as stopped:
        value('(jq "sort_by(.)" input)', data, limits=tight)
    assert stopped.value.code == ErrorCode.EXECUTION_LIMIT_EXCEEDED
    # the same sort under the default fuel completes
    assert value('(jq "sort_by(-1 < .) | length" input)', data, limits=SLOW_CLOCK) == [5000]
    # a cartesian object product stops at the result-count bound
    with pytest.raises(ScriptFailed) as many:
        jq("{a: .[], b: .[]}", list(range(11)))
    assert "result count" in many.value.message


def test_search_pattern_and_result_bounds() -> None:
    memory = {"doc": "\n".join(["hit"] * (MAX_SEARCH_RESULTS + 5))}
    ok = value('(search "/memory/doc" input)', "h" * 1, memory={"doc": "h"})
    assert ok == {"matches": [{"line": 1, "path": "/memory/doc", "text": "h"}],
                  "truncated": False}
    assert value('(search "/memory/doc" input)', "x" * MAX_SEARCH_PATTERN_BYTES,
                 memory=memory) == {"matches": [], "truncated": False}
    with pytest.raises(ScriptFailed) as refused:
        value('(search "/memory/doc" input)', "x" * (MAX_SEARCH_PATTERN_BYTES + 1),
              memory=memory)
    assert "pattern limit exceeded" in refused.value.message
    capped = value('(search "/memory/doc" "hit")', memory=memory)
    assert len(capped["matches"]) == MAX_SEARCH_RESULTS and capped["truncated"] is True
    with pytest.raises(InvalidInput):
        value('(search "/memory/missing" "x")', memory=memory)


def test_jq_charges_fuel_per_evaluation_step() -> None:
    # one fuel unit per 8 steps: iterating 3000 elements costs at least 3000 / 8 more
    _, _, small = run('(define (main input) (jq ".[]" input))', [1], limits=SLOW_CLOCK)
    _, _, large = run('(define (main input) (jq "[.a[]] | length" input))',
                      {"a": list(range(3000))}, limits=SLOW_CLOCK)
    assert large.fuel_used >= small.fuel_used + 3000 // 8
