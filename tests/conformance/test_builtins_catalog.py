"""The reference's runtime helper catalog, through real activations.

Every case runs a script in a real :class:`Process` (``activate``), so the
values, errors, logs and fuel are what a client sees. The reference keeps its
catalog next to the guest API of its process module (descriptor list, result
and path helpers, dispatch tables, ``jq`` in its stdlib module); the cases
below restate its behaviour in our words.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import pytest

from svit_cluster.activation import ActivationResult, activate
from svit_cluster.errors import ErrorCode, InvalidInput, LimitExceeded, ScriptFailed, SvitError
from svit_cluster.lisp._builtins import BUILTINS
from svit_cluster.process import Limits, Process

ADDED = (
    "runtime-builtins", "jq", "search", "port-call", "map?", "map-get-safe", "list-get",
    "result-error-message", "result-map", "result-and-then", "result-or-else", "value-at",
    "value-at-safe", "value-has-path?", "dispatch-table", "dispatch", "dispatch-safe",
)


def run(body: str, input: Any = None, *, memory: Any = None, limits: Limits | None = None,
        prelude: str = "") -> ActivationResult:
    """Activate ``(define (main input) BODY)`` on a fresh process."""
    source = f"{prelude}\n(define (main input) {body})"
    p = Process.create("svit://conformance/catalog", limits=limits, memory=memory or {},
                       scripts={"subject": source})
    return activate(p, "subject", input)


def out(body: str, input: Any = None, **kw: Any) -> Any:
    return run(body, input, **kw).output


def fails(body: str, input: Any = None, **kw: Any) -> SvitError:
    with pytest.raises(SvitError) as info:
        run(body, input, **kw)
    return info.value


def test_runtime_builtins_lists_the_catalog() -> None:
    catalog = out("(runtime-builtins)")
    assert isinstance(catalog, list) and len(catalog) == 46  # the reference's 45 + cancel!
    names = [e["name"] for e in catalog]
    assert len(set(names)) == len(names)
    assert set(ADDED) <= set(names)
    for entry in catalog:
        assert sorted(entry) == ["category", "description", "name", "signature"]
        assert all(isinstance(v, str) and v for v in entry.values())
        assert entry["signature"].startswith("(" + entry["name"])
        assert entry["name"] in BUILTINS  # every catalogued helper is callable
    assert {e["category"] for e in catalog} == {
        "discovery", "persistent-value", "predicate", "structured-data", "memory-tree",
        "scripts", "ports", "effects", "recoverable", "result", "dispatch",
    }
    assert isinstance(fails("(runtime-builtins 1)"), ScriptFailed)


def test_map_predicate_get_and_get_safe() -> None:
    m = {"a": 1, "n": None}
    assert out('(value-array (map? input) (map? (value-array)) (map? 1) (map? (list 1)))', m) == [
        True, False, False, False]
    assert out('(map-get input "a")', m) == 1
    assert out('(map-get input "n")', m) is None  # a present null is not absent
    error = fails('(map-get input "zz")', m)
    assert isinstance(error, ScriptFailed) and "absent" in error.message
    assert out('(map-get-safe input "a")', m) == {"ok": True, "value": 1}
    safe = out('(map-get-safe input "zz")', m)
    assert safe["ok"] is False and "absent" in safe["error"] and safe["code"] == "script_failed"
    assert out('(map-get-safe 5 "a")')["ok"] is False  # a type error is recoverable too
    assert isinstance(fails("(map? 1 2)"), ScriptFailed)


def test_list_get() -> None:
    arr = [10, 20, {"x": 1}]
    assert out("(list-get input 0)", arr) == 10
    assert out("(list-get input 2)", arr) == {"x": 1}
    for bad in ("(list-get input 3)", "(list-get input -1)", '(list-get input "0")',
                "(list-get (list 1 2) 0)", "(list-get input 1.0)"):
        assert isinstance(fails(bad, arr), ScriptFailed), bad


def test_result_error_message() -> None:
    assert out('(result-error-message (result-error "boom"))') == "boom"
    assert out('(result-error-message (json-parse-safe "{"))').startswith("json-parse")
    assert isinstance(fails("(result-error-message (result-ok 1))"), ScriptFailed)
    assert isinstance(fails('(result-error-message (value-map "x" 1))'), ScriptFailed)


def test_result_map_and_then_or_else() -> None:
    inc = "(lambda (x) (+ x 1))"
    assert out(f"(result-map {inc} (result-ok 1))") == {"ok": True, "value": 2}
    assert out(f'(result-map {inc} (result-error "e"))') == {"ok": False, "error": "e"}
    ok_half = '(lambda (x) (if (= 0 (rem x 2)) (result-ok (// x 2)) (result-error "odd")))'
    assert out(f"(result-and-then {ok_half} (result-ok 8))") == {"ok": True, "value": 4}
    assert out(f"(result-and-then {ok_half} (result-ok 3))") == {"ok": False, "error": "odd"}
    assert out(f'(result-and-then {ok_half} (result-error "x"))') == {"ok": False, "error": "x"}
    recover = '(lambda (e) (result-ok (concat "fixed " e)))'
    assert out(f'(result-or-else {recover} (result-error "x"))') == {
        "ok": True, "value": "fixed x"}
    assert out(f"(result-or-else {recover} (result-ok 1))") == {"ok": True, "value": 1}
    # chaining through a named function, the function argument comes first
    chained = out("(result-and-then half (result-and-then half (result-ok 8)))",
                  prelude=f"(define half {ok_half})")
    assert chained == {"ok": True, "value": 2}
    # errors: the function must return a result map; bad arguments fail; errors propagate
    assert isinstance(fails("(result-and-then (lambda (x) x) (result-ok 1))"), ScriptFailed)
    assert isinstance(fails('(result-or-else (lambda (e) 5) (result-error "e"))'), ScriptFailed)
    assert isinstance(fails("(result-map 1 (result-ok 1))"), ScriptFailed)
    assert isinstance(fails(f"(result-map {inc} 1)"), ScriptFailed)
    error = fails('(result-map (lambda (x) (panic "inner")) (result-ok 1))')
    assert isinstance(error, ScriptFailed) and "inner" in error.message
    assert out(f'(safe-call result-map {inc} (result-ok "s"))')["ok"] is False


def test_value_at_family() -> None:
    doc = {"a": [1, {"b": "deep"}], "m": {"k": None}}
    assert out('(value-at input (list "a" 1 "b"))', doc) == "deep"
    assert out("(value-at input (list))", doc) == doc
    assert out('(value-at input (list "m" "k"))', doc) is None
    for absent in ('(list "zz")', '(list "a" 5)', '(list "a" "x")', '(list 0)'):
        assert isinstance(fails(f"(value-at input {absent})", doc), ScriptFailed), absent
        assert out(f"(value-has-path? input {absent})", doc) is False
    for malformed in ('(list "a" -1)', '(list "a" 1.5)', '"a"', "(list true)"):
        assert isinstance(fails(f"(value-at input {malformed})", doc), ScriptFailed)
        assert isinstance(fails(f"(value-has-path? input {malformed})", doc), ScriptFailed)
    assert out('(value-has-path? input (list "a" 0))', doc) is True
    assert out('(value-at-safe input (list "a" 0))', doc) == {"ok": True, "value": 1}
    safe = out('(value-at-safe input (list "a" 9))', doc)
    assert safe["ok"] is False and "out of bounds" in safe["error"]


def test_dispatch_table_dispatch_and_dispatch_safe() -> None:
    prelude = """
    (define table (dispatch-table
      "double" (lambda (x) (* 2 x))
      "boom" (lambda (x) (panic "handler failed"))
      "list" (lambda (x) (list x x))))
    """
    assert out('(dispatch table "double" 21)', prelude=prelude) == 42
    assert out('(dispatch table "list" 1)', prelude=prelude) == [1, 1]  # a plain value
    assert out('(dispatch-safe table "double" 2)', prelude=prelude) == {"ok": True, "value": 4}
    unknown = fails('(dispatch table "eval" 1)', prelude=prelude)
    assert isinstance(unknown, ScriptFailed) and "no handler" in unknown.message
    safe_unknown = out('(dispatch-safe table "eval" 1)', prelude=prelude)
    assert safe_unknown["ok"] is False and "no handler" in safe_unknown["error"]
    safe_boom = out('(dispatch-safe table "boom" 1)', prelude=prelude)
    assert safe_boom["ok"] is False and "handler failed" in safe_boom["error"]
    assert out("(is 'dispatch-table (dispatch-table))") is True
    for bad in ('(dispatch-table "a")', '(dispatch-table 1 id)', '(dispatch-table "a" 1)',
                '(dispatch-table "a" id "a" id)', '(dispatch (value-map) "a" 1)',
                '(dispatch (dispatch-table "a" id) 1 1)', '(dispatch (dispatch-table) "a")'):
        assert isinstance(fails(bad), ScriptFailed), bad
    # a table is ephemeral: it cannot be returned, written or sent
    stored = fails('(dispatch-table "a" id)')
    assert isinstance(stored, InvalidInput) and stored.code == ErrorCode.INVALID_VALUE
    # a limit failure inside a handler is never turned into a result
    spin = "(define (spin n) (spin (+ n 1)))"
    limits = dataclasses.replace(Limits(), max_fuel=2_000)
    error = fails('(dispatch-safe (dispatch-table "s" spin) "s" 0)', prelude=spin, limits=limits)
    assert isinstance(error, LimitExceeded) and error.code == ErrorCode.EXECUTION_LIMIT_EXCEEDED


def test_jq_subset() -> None:
    tree = {"tree": [{"path": "README.md", "type": "blob"}, {"path": "src", "type": "tree"},
                     {"path": "src/lib.rs", "type": "blob"}]}
    # the reference's own example: select the blobs and count them
    assert out('(jq "[.tree[] | select(.type == \\"blob\\")] | length" input)', tree) == [2]
    assert out('(jq "." input)', tree) == [tree]
    assert out('(jq ".tree[].path" input)', tree) == ["README.md", "src", "src/lib.rs"]
    assert out('(jq ".tree[-1].type, .missing" input)', tree) == ["blob", None]
    assert out('(jq ".tree | map(.path) | .[0]" input)', tree) == ["README.md"]
    assert out('(jq "keys" (value-map "b" 1 "a" 2))') == [["a", "b"]]
    assert out('(jq ".[] | type" (json-parse "[null,true,1,\\"s\\",[],{}]"))') == [
        "null", "boolean", "number", "string", "array", "object"]
    assert out('(jq ".a and (.b or false), (.a | not), has(\\"a\\")" (value-map "a" true "b" 0))'
               ) == [True, False, True]
    assert out('(jq ".[] | select(. >= 2)" (value-array 1 2 3))') == [2, 3]
    assert out('(jq ".x?" (value-array 1))') == []
    assert out('(jq "empty" 1)') == []
    # JSON text and an HTTP response envelope are decoded before filtering
    assert out('(jq ".a" "{\\"a\\": [1]}")') == [[1]]
    envelope = {"status": 200, "headers": {}, "body": '{"tree":[1,2,3]}'}
    assert out('(jq ".tree | length" input)', envelope) == [3]
    assert out('(jq "length" "not json")') == [8]
    # errors: unsupported, unbounded, invalid, runtime type errors, bounds
    for flt, word in ((".a | from_entries", "unsupported function from_entries"),
                      ("recurse", "unbounded"), ("..", "unbounded"), ("[.", "expected"),
                      (".a + 1", "unsupported syntax"), ("", "empty"), (".[", "unexpected"),
                      ("{1: 2}", "unexpected 1 in an object"), (".a", "cannot index number")):
        error = fails(f'(jq "{flt}" 5)')
        assert isinstance(error, ScriptFailed) and word in error.message, (flt, error.message)
    assert "exceeds its limit" in fails(f'(jq "{". " * 2049}" 1)').message
    assert isinstance(fails(f'(jq "{"(" * 65 + "." + ")" * 65}" 1)'), ScriptFailed)
    many = fails('(jq ".[]" input)', list(range(101)))
    assert isinstance(many, ScriptFailed) and "result count" in many.message
    assert len(out('(jq ".[]" input)', list(range(100)))) == 100


def test_search_over_the_process_namespace() -> None:
    memory = {"notes": {"a": "alpha\nbeta gamma\n", "b": ["gamma ray", 7, None]}, "x": "none"}
    found = out('(search "/memory" "gamma")', memory=memory)
    assert found == {"truncated": False, "matches": [
        {"path": "/memory/notes/a", "line": 2, "text": "beta gamma"},
        {"path": "/memory/notes/b/0", "line": 1, "text": "gamma ray"},
    ]}
    # staged writes are visible, like read
    staged = out('(do (write "/memory/new" "gamma again") (search "/memory/new" "gamma"))',
                 memory=memory)
    assert staged["matches"] == [{"path": "/memory/new", "line": 1, "text": "gamma again"}]
    # the library is searchable (script source lines)
    lib = out('(search "/lib" "define")')
    assert lib["matches"][0]["path"] == "/lib/subject/source"
    big = {"lines": "\n".join(f"hit {i}" for i in range(150))}
    capped = out('(search "/memory" "hit")', memory=big)
    assert capped["truncated"] is True and len(capped["matches"]) == 100
    missing = fails('(search "/memory/none" "x")', memory=memory)
    assert isinstance(missing, InvalidInput) and missing.code == ErrorCode.INVALID_PATH
    assert isinstance(fails('(search "memory" "x")'), InvalidInput)
    assert isinstance(fails(f'(search "/memory" "{"x" * 4097}")'), ScriptFailed)
    assert isinstance(fails('(search "/memory" 1)'), ScriptFailed)


def test_port_call_fails_with_a_typed_error_until_ports_exist() -> None:
    error = fails('(port-call "http" (value-map "url" "https://example.invalid"))')
    assert isinstance(error, ScriptFailed) and error.code == ErrorCode.SCRIPT_FAILED
    assert "no port named http is granted" in error.message
    caught = out('(safe-call port-call "llm" 1)')
    assert caught["ok"] is False and caught["code"] == "script_failed"
    assert isinstance(fails('(port-call "a/b" 1)'), ScriptFailed)
    assert isinstance(fails("(port-call 1 1)"), ScriptFailed)


def test_stat_returns_the_reference_facts_record() -> None:
    memory = {"s": "héllo", "arr": [1, 2], "m": {"k": 1}, "n": 3}
    got = out('(value-map "s" (stat "/memory/s") "arr" (stat "/memory/arr") "m" (stat "/memory/m")'
              ' "n" (stat "/memory/n") "sys" (stat "/system") "lib" (stat "/lib/subject")'
              ' "none" (stat "/memory/none"))', memory=memory)
    common = {"attached": True, "locality": "cache", "mount": None, "source": "process"}
    s = got["s"]
    assert {k: s[k] for k in common} == common and len(s["hash"]) == 64
    assert (s["kind"], s["access"], s["path"], s["facts"]) == (
        "leaf", "read-write", "/memory/s", {"bytes": 6, "content": "text/plain"})
    assert (got["arr"]["kind"], got["arr"]["facts"]) == (
        "directory", {"content": "array", "entries": 2})
    assert got["m"]["facts"] == {"content": "object", "entries": 1}
    assert (got["n"]["kind"], got["n"]["facts"]) == ("leaf", {"content": "scalar"})
    assert (got["sys"]["kind"], got["sys"]["access"]) == ("directory", "read")
    assert got["lib"]["access"] == "read-write" and got["lib"]["facts"]["content"] == "svit-script"
    assert got["none"] is None
    assert got["s"]["hash"] != got["n"]["hash"]


def test_fuel_is_deterministic_and_charged_for_the_work_done() -> None:
    body = """(do
      (jq "[.[] | select(. > 1)] | length" input)
      (search "/memory" "x")
      (dispatch (dispatch-table "f" (lambda (v) (result-map id (result-ok v)))) "f" 1)
      (value-at-safe input (list 3))
      (runtime-builtins))"""
    memory = {"t": "x\n" * 50}
    fuel = {run(body, list(range(n)), memory=memory).fuel_used for _ in range(3) for n in (50,)}
    assert len(fuel) == 1  # the same activation spends the same fuel every time
    small = run(body, list(range(10)), memory=memory).fuel_used
    large = run(body, list(range(1000)), memory=memory).fuel_used
    assert large > small  # jq steps and touched elements are charged
    # the fuel limit stops an exploding jq filter at the same point, quickly
    limits = dataclasses.replace(Limits(), max_fuel=20_000, max_execution_millis=20_000)
    started = time.monotonic()
    errors = {fails('(jq "[.[][] == .[][]] | length" input)', [list(range(60))] * 60,
                    limits=limits).message for _ in range(2)}
    assert len(errors) == 1 and "fuel" in next(iter(errors))
    assert time.monotonic() - started < 10
