"""The Svit surface: process primitives, typed values, maps, JSON, results, safe-call."""

from __future__ import annotations

from typing import Any

import pytest

from svit_cluster.errors import ErrorCode, InvalidInput, LimitExceeded, NotFound, ScriptFailed
from svit_cluster.lisp import Meter, compile_script
from svit_cluster.values import Limits
from tests.lisp._support import COUNTER, FakeHost, run, value


def test_reference_counter_runs_unchanged() -> None:
    out, host, meter = run(COUNTER, {"by": 2}, memory={"count": 0}, name="counter")
    assert out == {"count": 2}
    assert host.root["memory"]["count"] == 2
    assert meter.fuel_used > 0


def test_reference_counter_with_log_and_null_check() -> None:
    src = """
    (define (main input)
      (let ((count (+ (read "/memory/count") (value-get input "/by"))))
        (do
          (write "/memory/count" count)
          (log-info! "counted" (value-map "count" count))
          (value-map "count" count
                     "missing-is-null" (value-null? (read "/memory/missing"))))))
    """
    out, host, _ = run(src, {"by": 2}, memory={"count": 0})
    assert out == {"count": 2, "missing-is-null": True}
    assert host.logs == [{"message": "counted", "fields": {"count": 2}}]


def test_reference_generic_operations_and_nested_exec() -> None:
    src = r"""
    (define (main input)
      (do
        (write "/memory/draft" true)
        (write
          "/lib/increment"
          (value-map
            "source"
            "(define (main input) (let ((next (+ (read \"/memory/count\") \
(value-get input \"/by\")))) (do (write \"/memory/count\" next) next)))"
            "documentation"
            "Increment the durable count"))
        (let ((before (discover "/memory"))
              (nested (exec "/lib/increment" input)))
          (do
            (remove "/memory/draft")
            (remove "/lib/increment")
            (value-map
              "before" before
              "nested" nested
              "identity" (read "/system/identity/address"))))))
    """
    out, host, _ = run(src, {"by": 2}, memory={"count": 0})
    assert out == {"before": ["count", "draft"], "nested": 2, "identity": "svit://local/test"}
    assert host.root["memory"] == {"count": 2}


def test_value_get_paths_and_plain_keys() -> None:
    doc = {"a": {"b": [10, {"c": "deep"}]}, "x/y": 1}
    assert value('(value-get input "/a/b/1/c")', doc) == "deep"
    assert value('(value-get input "/a/b/0")', doc) == 10
    assert value('(value-get input "/a/missing")', doc) is None
    assert value('(value-get input "/a/b/9")', doc) is None
    assert value('(value-get input "")', doc) == doc
    assert value('(value-get input "/")', doc) == doc
    assert value('(value-get input "x/y")', doc) == 1
    assert value('(value-get input "a")', doc) == doc["a"]
    assert value("(value-get '(1 2) \"/1\")") == 2
    for bad in ('"/a//b"', '"/a/../b"', '"/a/b/x"', '"/a/b/0/z"'):
        with pytest.raises(InvalidInput) as info:
            value(f"(value-get input {bad})", doc)
        assert info.value.code == ErrorCode.INVALID_PATH
    with pytest.raises(ScriptFailed):
        value("(value-get input 1)", doc)


def test_value_map_and_array() -> None:
    assert value('(value-map "b" 1 "a" (list 1 2) "c" ())') == {"a": [1, 2], "b": 1, "c": None}
    assert value("(value-array)") == []
    assert value("(value-array 1 (value-array) ())") == [1, [], None]
    with pytest.raises(InvalidInput) as info:
        value('(value-map "a" 1 "a" 2)')
    assert info.value.code == ErrorCode.INVALID_VALUE and "duplicate map key" in info.value.message
    with pytest.raises(ScriptFailed):
        value('(value-map "a")')
    with pytest.raises(ScriptFailed):
        value("(value-map 1 2)")
    with pytest.raises(InvalidInput):
        value("(value-array (lambda (x) x))")


def test_empty_array_differs_from_unit() -> None:
    assert value("(null input)", []) is False
    assert value("(list? input)", []) is True
    assert value("(null? input)", None) is True
    assert value("(value-null? ())") is False
    assert value("(value-null? input)", None) is True


def test_host_errors_propagate_unchanged() -> None:
    program = compile_script('(define (main input) (remove "/memory/nope"))', name="s",
                             limits=Limits())
    host = FakeHost()
    with pytest.raises(NotFound) as info:
        program.run_main(None, host, Meter(Limits()))
    assert info.value.message == "nothing to remove at /memory/nope"


def test_storing_a_lambda_fails() -> None:
    with pytest.raises(InvalidInput) as info:
        run('(define (main input) (write "/memory/f" (lambda (x) x)))')
    assert info.value.code == ErrorCode.INVALID_VALUE
    with pytest.raises(InvalidInput):
        run("(define (main input) main)")
    with pytest.raises(InvalidInput):
        run("(define (main input) 'sym)")


def test_stat_discover_send_log() -> None:
    src = """
    (define (main input)
      (value-array
        (stat "/memory")
        (stat "/memory/none")
        (discover "/memory")
        (send! "svit://local/other" (value-map "hi" 1))
        (log-info! "plain")))
    """
    out, host, _ = run(src, memory={"k": 1})
    assert out == [{"kind": "map", "path": "/memory"}, None, ["k"], "svit://local/test:1:0", None]
    assert host.messages == [("svit://local/other", {"hi": 1})]
    assert host.logs == [{"message": "plain", "fields": {}}]
    with pytest.raises(ScriptFailed):
        run("(define (main input) (send! 1 2))")
    with pytest.raises(ScriptFailed):
        run("(define (main input) (read 1))")


def test_exec_only_under_lib() -> None:
    for path in ('"/memory/x"', '"counter"', '"/lib/"'):
        with pytest.raises(InvalidInput) as info:
            run(f"(define (main input) (exec {path} 1))")
        assert info.value.code == ErrorCode.INVALID_PATH
    out, _, _ = run('(define (main input) (exec "/lib/double" 21))',
                    lib={"double": "(define (main input) (* input 2))"})
    assert out == 42


def test_exec_shares_the_meter() -> None:
    lib = {"spin": "(define (loop n) (if (= n 0) 0 (loop (- n 1)))) (define (main n) (loop n))"}
    _, _, alone = run('(define (main input) 0)', lib=lib)
    _, _, nested = run('(define (main input) (exec "/lib/spin" 100))', lib=lib)
    assert nested.fuel_used > alone.fuel_used + 500


def test_json() -> None:
    assert value('(json-parse "{\\"a\\": [1, 2.5, null, true]}")') == {"a": [1, 2.5, None, True]}
    assert value("(json-stringify (value-map \"b\" 1 \"a\" '(1 \"x\")))") == '{"a":[1,"x"],"b":1}'
    assert value("(json-stringify 1.0)") == "1.0"
    # a repeated key keeps its last value, as serde_json does
    assert value('(json-parse "{\\"a\\":1,\\"a\\":2}")') == {"a": 2}
    for bad in ('"{"', '"NaN"', '"[1] 2"'):
        with pytest.raises(InvalidInput):
            value(f"(json-parse {bad})")
    with pytest.raises(InvalidInput):
        value("(json-stringify (lambda () 1))")
    assert value('(json-parse-safe "{")')["ok"] is False
    assert value('(json-parse-safe "[1]")') == {"ok": True, "value": [1]}


def test_maps() -> None:
    m = {"a": 1}
    assert value('(map-get input "a")', m) == 1
    with pytest.raises(ScriptFailed, match="absent"):  # the reference's catalog: absent fails
        value('(map-get input "z")', m)
    assert value('(map-get input "z" 7)', m) == 7
    assert value('(map-has? input "a")', m) is True
    assert value('(map-set input "b" (list 2))', m) == {"a": 1, "b": [2]}
    assert value('(do (map-set input "b" 2) input)', m) == m
    with pytest.raises(ScriptFailed):
        value('(map-get (value-array) "a")')
    with pytest.raises(ScriptFailed):
        value("(map-has? input 1)", m)


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("(list? '(1))", True), ("(list? ())", True), ("(list? \"a\")", False),
        ("(string? \"a\")", True), ("(string? 'a)", False),
        ("(number? 1)", True), ("(number? 1.5)", True), ("(number? true)", False),
        ("(boolean? false)", True), ("(boolean? 0)", False),
        ("(null? ())", True), ("(null? 0)", False),
    ],
)
def test_predicates(expr: str, expected: bool) -> None:
    assert value(expr) is expected


def test_results() -> None:
    assert value("(result-ok 1)") == {"ok": True, "value": 1}
    assert value('(result-error "bad")') == {"ok": False, "error": "bad"}
    assert value("(result-ok? (result-ok 1))") is True
    assert value('(result-ok? (result-error "x"))') is False
    assert value("(result-value (result-ok '(1)))") == [1]
    with pytest.raises(ScriptFailed) as info:
        value('(result-value (result-error "bad"))')
    assert "bad" in info.value.message
    with pytest.raises(ScriptFailed):
        value("(result-ok? 1)")


def test_safe_call_catches_guest_failures_only() -> None:
    assert value("(safe-call + 1 2)") == {"ok": True, "value": 3}
    out = value('(safe-call (lambda () (panic "no")))')
    assert out["ok"] is False and out["code"] == "script_failed" and "panic: no" in out["error"]
    out = value('(safe-call value-map "a" 1 "a" 2)')
    assert out["code"] == "invalid_value"
    # nested frames are unwound and execution continues after the safe-call
    src = """
    (define (deep n) (if (= n 0) (panic "bottom") (+ 1 (deep (- n 1)))))
    (define (main input)
      (let ((r (safe-call deep 10)))
        (value-array (result-ok? r) (+ 1 (first '(1))))))
    """
    assert run(src)[0] == [False, 2]
    for limit_expr in ("(safe-call (lambda () (+ 9223372036854775807 1)))",
                       "(safe-call loop 0)"):
        with pytest.raises(LimitExceeded):
            run(f"(define (loop n) (loop (+ n 1))) (define (main input) {limit_expr})")


def test_exec_safe_and_limits() -> None:
    lib = {"bad": '(define (main input) (panic "inner"))',
           "spin": "(define (l n) (l n)) (define (main input) (l 0))"}
    out, _, _ = run('(define (main input) (exec-safe "/lib/bad" 1))', lib=lib)
    assert out["ok"] is False and "inner" in out["error"]
    with pytest.raises(LimitExceeded) as info:
        run('(define (main input) (exec-safe "/lib/spin" 1))', lib=lib)
    assert info.value.code == ErrorCode.EXECUTION_LIMIT_EXCEEDED


def test_nested_exec_depth_is_the_hosts_limit() -> None:
    lib = {"self": '(define (main n) (exec "/lib/self" (+ n 1)))'}
    with pytest.raises(LimitExceeded) as info:
        run('(define (main input) (exec "/lib/self" 0))', lib=lib)
    assert "exec depth" in info.value.message


def test_output_conversion() -> None:
    out: Any = value("(list 1 (list 2 ()) \"s\" 1.5 true)")
    assert out == [1, [2, None], "s", 1.5, True]
    assert value("()") is None
