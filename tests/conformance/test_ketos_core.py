"""The Ketos core functions scripts use, through real activations.

The reference interprets Svit Lisp with Ketos, whose system functions define
these names; each case states the Ketos behaviour in our words and the
documented adaptation to Svit values (bounded integers, finite floats, no
ratio, byte-string or struct types; see ``docs/conformance.md``).
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any

import pytest

from svit_cluster.activation import ActivationResult, activate
from svit_cluster.errors import ErrorCode, InvalidInput, LimitExceeded, ScriptFailed, SvitError
from svit_cluster.process import Limits, Process


def run(body: str, input: Any = None, *, limits: Limits | None = None) -> ActivationResult:
    p = Process.create("svit://conformance/ketos", limits=limits,
                       scripts={"subject": f"(define (main input) {body})"})
    return activate(p, "subject", input)


def out(body: str, input: Any = None, **kw: Any) -> Any:
    return run(body, input, **kw).output


def fails(body: str, input: Any = None, **kw: Any) -> SvitError:
    with pytest.raises(SvitError) as info:
        run(body, input, **kw)
    return info.value


def _message(record: Any) -> str:
    """A log record's text, whether records are strings or ``{message, fields}`` maps."""
    return record if isinstance(record, str) else str(record["message"])


def test_power() -> None:
    assert out("(value-array (^ 2 10) (^ -3 3) (^ 7 0) (^ 0 0) (^ 1 4000000000))") == [
        1024, -27, 1, 1, 1]
    assert out("(value-array (^ 2 -2) (^ 2.0 0.5) (^ 4 0.5) (^ 2.5 2))") == [
        0.25, math.sqrt(2.0), 2.0, 6.25]
    assert out("(^ 2 62)") == 2**62
    for huge in ("(^ 2 63)", "(^ 3 40)", "(^ 10 4000000000)"):
        started = time.monotonic()
        error = fails(huge)
        assert isinstance(error, LimitExceeded) and error.code == ErrorCode.RESOURCE_LIMIT_EXCEEDED
        assert time.monotonic() - started < 2  # refused before the number is built
    wide = dataclasses.replace(Limits(), max_integer_bits=128)
    assert out("(- (^ 2 100) (^ 2 100))", limits=wide) == 0
    for bad in ("(^ 0 -1)", "(^ -8.0 0.5)", "(^ 10.0 400)", '(^ "2" 2)', "(^ 2)",
                "(^ 2 5000000000)"):
        assert isinstance(fails(bad), ScriptFailed), bad


def test_shifts() -> None:
    assert out("(value-array (<< 1 10) (<< -3 2) (<< 0 4000000000) (>> 1024 3) (>> -9 1)"
               " (>> 5 4000000000) (>> -5 4000000000))") == [1024, -12, 0, 128, -5, 0, -1]
    assert out("(<< 1 62)") == 2**62
    started = time.monotonic()
    for big in ("(<< 1 63)", "(<< 3 4000000000)"):
        error = fails(big)
        assert isinstance(error, LimitExceeded) and "integer bits" in error.message
    assert time.monotonic() - started < 2
    for bad in ("(<< 1 -1)", "(>> 1 -1)", "(<< 1.0 2)", "(>> 4 1.0)", "(<< 1 4294967296)"):
        assert isinstance(fails(bad), ScriptFailed), bad


def test_rounding() -> None:
    assert out("(value-array (ceil 1.2) (floor 1.8) (round 2.5) (round -2.5)"
               " (round 0.49999999999999994) (trunc -1.7) (ceil 7) (floor -7) (round 3)"
               " (trunc 9))") == [
        2.0, 1.0, 3.0, -3.0, 0.0, -1.0, 7, -7, 3, 9]
    kinds = out("(value-array (is 'float (ceil 1.2)) (is 'integer (ceil 1)))")
    assert kinds == [True, True]
    negative_zero = out("(value-array (round -0.4) (ceil -0.5) (trunc -0.2))")
    assert all(v == 0.0 and math.copysign(1.0, v) < 0 for v in negative_zero)
    assert out("(round 1e300)") == 1e300
    for name in ("ceil", "floor", "round", "trunc"):
        assert isinstance(fails(f'({name} "1")'), ScriptFailed)
        assert isinstance(fails(f"({name} 1 2)"), ScriptFailed)


def test_int_and_float() -> None:
    assert out("(value-array (int 3.9) (int -3.9) (int 7) (float 3) (float 2.5) (float -0))") == [
        3, -3, 7, 3.0, 2.5, 0.0]
    assert out("(is 'float (float 3))") is True
    error = fails("(int 1e30)")
    assert isinstance(error, LimitExceeded) and "integer bits" in error.message
    assert isinstance(fails('(int "3")'), ScriptFailed)
    assert isinstance(fails("(float true)"), ScriptFailed)


def test_inf_and_nan_are_predicates_over_finite_floats() -> None:
    assert out("(value-array (inf 1.0) (inf 1.0 2.0) (nan 0.5) (nan 1e308))") == [
        False, False, False, False]
    for bad in ("(inf)", "(nan)"):
        error = fails(bad)
        assert isinstance(error, ScriptFailed) and "non-finite" in error.message
    for bad in ("(inf 1)", '(nan "x")'):
        assert isinstance(fails(bad), ScriptFailed)


def test_rationals_work_over_integers() -> None:
    assert out("(value-array (numer 7) (denom 7) (numer -3) (denom -3) (rat 5) (rat 8 4)"
               " (rat -6 3) (rat 4.0) (recip 1) (recip -1) (recip 4.0))") == [
        7, 1, -3, 1, 5, 2, -2, 4, 1, -1, 0.25]
    assert out("(value-array (fract 2.75) (fract -2.75) (fract 3.0))") == [0.75, -0.75, 0.0]
    for ratio in ("(rat 1 3)", "(rat 0.5)", "(recip 3)"):
        error = fails(ratio)
        assert isinstance(error, ScriptFailed) and "ratios are not supported" in error.message
    for bad in ("(numer 1.5)", "(denom 1.5)", "(fract 2)", "(rat 1 0)", "(recip 0)",
                "(recip 0.0)", "(rat 1.5 2)", '(rat "1")'):
        assert isinstance(fails(bad), ScriptFailed), bad


def test_dot_and_dot_eq_on_maps() -> None:
    m = {"a": 1, "b": {"c": [2]}}
    assert out("(. input :a)", m) == 1
    assert out("(. (. input :b) :c)", m) == [2]
    assert out("(.= input :a 10 :b (list 3))", m) == {"a": 10, "b": [3]}
    assert out("(do (.= input :a 10) input)", m) == m  # maps are immutable values
    assert out("(.= input)", m) == m
    for bad in ("(. input :zz)", '(. input "a")', "(. (list 1) :a)", "(.= input :zz 1)",
                "(.= input :a)", "(.= input 'a 1)", "(.= 5 :a 1)"):
        assert isinstance(fails(bad, m), ScriptFailed), bad
    error = fails("(.= input :a (lambda () 1))", m)
    assert isinstance(error, InvalidInput) and error.code == ErrorCode.INVALID_VALUE


def test_print_and_println_append_to_the_activation_log() -> None:
    result = run('(do (print "count=~a" 3) (println "list ~s" (list 1 "x")) (println "done~%")'
                 " (log-info! \"after\") 7)")
    assert result.output == 7
    assert [_message(r) for r in result.logs] == [
        "count=3", 'list (1 "x")\n', "done\n", "after"]
    for bad in ("(print)", "(print 1)", '(println "~a")'):
        assert isinstance(fails(bad), ScriptFailed), bad
    few = dataclasses.replace(Limits(), max_logs=2)
    error = fails('(do (print "a") (print "b") (print "c"))', limits=few)
    assert isinstance(error, LimitExceeded)


def test_left_out_functions_fail_with_a_clear_error() -> None:
    for body, word in (('(bytes "abc")', "byte-string"), ("(new 'point :x 1)", "struct"),
                       ("(is-instance 'point (value-map))", "struct")):
        error = fails(body)
        assert isinstance(error, ScriptFailed), body
        assert "not supported in Svit Lisp" in error.message and word in error.message


def test_fuel_is_deterministic() -> None:
    body = """(do
      (print "~a" (^ 3 20))
      (value-array (<< 1 40) (>> (^ 2 40) 3) (round 2.5) (int 9.9) (float 2) (fract 1.5)
                   (rat 10 5) (recip 1) (numer 4) (denom 4) (. input :k)
                   (.= input :k 2) (inf 1.0) (nan 1.0)))"""
    spent = {run(body, {"k": 1}).fuel_used for _ in range(3)}
    assert len(spent) == 1 and spent.pop() > 0
    # a tight loop over these functions stops at the same fuel point every time
    loop = "(define (spin n) (spin (round (+ (float (<< 1 (int 2.0))) n))))"
    limits = dataclasses.replace(Limits(), max_fuel=3_000, max_execution_millis=20_000)
    messages = set()
    for _ in range(2):
        p = Process.create("svit://conformance/ketos-fuel", limits=limits,
                           scripts={"subject": f"{loop} (define (main input) (spin 0))"})
        with pytest.raises(LimitExceeded) as info:
            activate(p, "subject", None)
        messages.add(info.value.message)
    assert len(messages) == 1 and "fuel" in messages.pop()
