"""Hostile scripts: each one must fail with a project error naming the right cause."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from svit_cluster.errors import (
    ErrorCode,
    InvalidInput,
    LimitExceeded,
    NotFound,
    ScriptFailed,
    SvitError,
)
from svit_cluster.values import HARD_MAXIMA, Limits
from tests.lisp._support import run

#: Fuel, not the wall clock, must be what stops the CPU-bound scripts below.
LIMITS = dataclasses.replace(Limits(), max_execution_millis=30_000, max_fuel=2_000_000)


@dataclasses.dataclass(frozen=True)
class Fails:
    """What a hostile script must raise: an instance of ``exc`` with ``code``, whose
    message contains ``fragment``."""

    exc: type[SvitError]
    code: ErrorCode
    fragment: str


def too_much(fragment: str) -> Fails:
    """A resource limit (``resource_limit_exceeded``) named by ``fragment``."""
    return Fails(LimitExceeded, ErrorCode.RESOURCE_LIMIT_EXCEEDED, fragment)


def failed(fragment: str) -> Fails:
    """Guest code failed (``script_failed``)."""
    return Fails(ScriptFailed, ErrorCode.SCRIPT_FAILED, fragment)


def invalid(fragment: str, code: ErrorCode = ErrorCode.INVALID_VALUE) -> Fails:
    """The script's input or output is not allowed (``invalid_value`` unless ``code``)."""
    return Fails(InvalidInput, code, fragment)


#: Out of fuel (``execution_limit_exceeded``).
FUEL = Fails(LimitExceeded, ErrorCode.EXECUTION_LIMIT_EXCEEDED, "fuel")
MEMORY = too_much("guest memory")

HOSTILE: list[tuple[str, str, Fails]] = [
    ("unbounded recursion",
     "(define (f n) (+ 1 (f n))) (define (main input) (f 0))",
     too_much("call stack")),
    ("infinite tail recursion",
     "(define (f n) (f (+ n 1))) (define (main input) (f 0))",
     FUEL),
    ("infinite mutual tail recursion",
     "(define (a n) (b n)) (define (b n) (a n)) (define (main input) (a 0))",
     FUEL),
    ("infinite tail recursion through cond and let",
     "(define (f n) (let ((m (+ n 1))) (cond ((< m 0) 0) (else (f m))))) "
     "(define (main input) (f 0))",
     FUEL),
    ("main calls itself forever",
     "(define (main input) (main input))",
     FUEL),
    ("exponential list building",
     "(define (grow l n) (if (= n 0) l (grow (concat l l) (- n 1))))"
     "(define (main input) (len (grow '(1 2 3 4) 64)))",
     MEMORY),
    ("huge string doubling",
     "(define (grow s) (grow (concat s s))) (define (main input) (grow \"xxxxxxxx\"))",
     MEMORY),
    ("quadratic string building",
     "(define (grow s) (grow (concat s \"0123456789abcdef0123456789abcdef\")))"
     "(define (main input) (grow \"\"))",
     MEMORY),
    ("huge integer",
     "(define (sq x) (sq (* x x))) (define (main input) (sq 3))",
     too_much("integer bits")),
    ("integer literal too large",
     "(define (main input) 99999999999999999999999)",
     too_much("integer bits")),
    ("deep syntax nesting",
     "(define (main input) " + "(id " * 70 + "1" + ")" * 70 + ")",
     too_much("syntax depth")),
    ("huge syntax",
     "(define (main input) '(" + "x " * 40000 + "))",
     too_much("script bytes")),
    ("wrong arity",
     "(define (f a b) a) (define (main input) (f 1))",
     failed("expects 2")),
    ("wrong type",
     "(define (main input) (+ \"a\" 1))",
     failed("expects a number")),
    ("missing main",
     "(define (helper x) x)",
     failed("must define main")),
    ("main is not a function",
     "(define main 5)",
     failed("main must be a function")),
    ("storing a lambda via write",
     "(define (main input) (write \"/memory/f\" (lambda (x) x)))",
     invalid("cannot be stored")),
    ("returning a lambda",
     "(define (main input) (lambda (x) x))",
     invalid("cannot be stored")),
    ("use",
     "(use math :all) (define (main input) 1)",
     failed("not available")),
    ("export",
     "(export (main)) (define (main input) 1)",
     failed("not available")),
    ("namespace flood",
     " ".join(f"(define g{i} {i})" for i in range(300)) + " (define (main input) 1)",
     too_much("guest namespace")),
    ("value stack flood through apply",
     "(define (main input) (apply + (chars (format \"~5000a\" \"\"))))",
     too_much("value stack")),
    ("deep list nesting stored",
     "(define (nest n acc) (if (= n 0) acc (nest (- n 1) (list acc))))"
     "(define (main input) (write \"/memory/x\" (nest 100 1)))",
     invalid("value depth")),  # reference: invalid_value
    ("deep typed nesting",
     "(define (nest n acc) (if (= n 0) acc (nest (- n 1) (value-array acc))))"
     "(define (main input) (nest 100000 1))",
     invalid("value depth")),  # reference: invalid_value
    ("huge format padding",
     "(define (main input) (format \"~999999999a\" 1))",
     MEMORY),
    ("retrying failures forever inside safe-call (error results are accounted)",
     "(define (f n) (do (safe-call panic \"again\") (f n))) (define (main input) (f 0))",
     MEMORY),
    ("a limit inside safe-call is not caught",
     "(define (spin n) (spin n)) (define (main input) (safe-call spin 0))",
     FUEL),
    ("unbound variable",
     "(define (main input) undefined-thing)",
     failed("unbound name")),
    ("calling a non-function",
     "(define (main input) (\"str\" 1))",
     failed("cannot call")),
    ("panic",
     "(define (main input) (panic \"stop\"))",
     failed("panic: stop")),
    ("infinite exec recursion",
     "(define (main input) (exec \"/lib/subject\" input))",
     too_much("exec depth")),
    ("exec outside /lib",
     "(define (main input) (exec \"/memory/x\" 1))",
     invalid("only scripts stored under /lib", ErrorCode.INVALID_PATH)),
    ("exec of a missing script",
     "(define (main input) (exec \"/lib/nope\" 1))",
     Fails(NotFound, ErrorCode.SCRIPT_NOT_FOUND, "not found")),
    ("write outside /memory",
     "(define (main input) (write \"/system/x\" 1))",
     invalid("cannot write", ErrorCode.INVALID_PATH)),
    ("huge list through chars",
     "(define (grow s n) (if (= n 0) s (grow (concat s s) (- n 1))))"
     "(define (main input) (len (chars (grow \"abcdefgh\" 17))))",
     MEMORY),
    ("deep json text",
     "(define (rep s n) (if (= n 0) s (rep (concat s s) (- n 1))))"
     "(define (main input) (json-parse (rep \"[\" 11)))",
     invalid("not valid JSON", ErrorCode.DECODE_ERROR)),
    ("bad lambda syntax",
     "(define (main input) (lambda x x))",
     failed("lambda takes")),
    ("a condition that is not a bool",
     "(define (main input) (if () 1 2))",
     failed("must be a bool")),
]


@pytest.mark.parametrize(
    ("script", "fails"),
    [h[1:] for h in HOSTILE],
    ids=[h[0] for h in HOSTILE],
)
def test_hostile_script_fails_with_a_project_error(script: str, fails: Fails) -> None:
    with pytest.raises(SvitError) as info:
        run(script, {"by": 1}, lib={"subject": script}, limits=LIMITS)
    assert isinstance(info.value, fails.exc), info.value
    assert info.value.code == fails.code, info.value
    assert fails.fragment in info.value.message, info.value.message
    assert len(info.value.message.encode()) <= 1024


def test_hostile_table_is_large_enough() -> None:
    assert len(HOSTILE) >= 25


def test_wall_clock_deadline() -> None:
    ticks = itertools.count()

    def clock() -> float:
        return next(ticks) * 0.05  # 50 ms per reading

    with pytest.raises(LimitExceeded) as info:
        run("(define (f n) (f (+ n 1))) (define (main input) (f 0))", clock=clock)
    assert info.value.code == ErrorCode.EXECUTION_LIMIT_EXCEEDED
    assert "execution time" in info.value.message


MAXED = dataclasses.replace(
    Limits(),
    max_call_stack=HARD_MAXIMA["max_call_stack"],
    max_syntax_depth=HARD_MAXIMA["max_syntax_depth"],
    max_exec_depth=HARD_MAXIMA["max_exec_depth"],
    max_value_stack=HARD_MAXIMA["max_value_stack"],
    max_fuel=50_000_000,
    max_execution_millis=60_000,
)


def test_deep_recursion_at_hard_maxima_never_exhausts_python() -> None:
    src = "(define (f n) (if (= n 0) 0 (+ 1 (f (- n 1))))) (define (main input) (f input))"
    assert run(src, 4000, limits=MAXED)[0] == 4000
    with pytest.raises(LimitExceeded) as info:
        run(src, 5000, limits=MAXED)
    assert "call stack" in info.value.message


def test_deep_syntax_at_hard_maxima_runs() -> None:
    depth = 1000
    src = "(define (main input) " + "(+ 1 " * depth + "0" + ")" * depth + ")"
    assert run(src, limits=MAXED)[0] == depth
    nested_calls = (
        "(define (g x) x) (define (main input) " + "(g " * depth + "1" + ")" * depth + ")"
    )
    assert run(nested_calls, limits=MAXED)[0] == 1


def test_deep_recursion_with_deep_bodies() -> None:
    body = "(+ 1 " * 60 + "(f (- n 1))" + ")" * 60
    src = f"(define (f n) (if (= n 0) 0 {body})) (define (main input) (f input))"
    assert run(src, 4000, limits=MAXED)[0] == 4000 * 60


def test_nested_exec_at_hard_maximum() -> None:
    lib = {"down": "(define (main n) (if (= n 0) 0 (+ 1 (exec \"/lib/down\" (- n 1)))))"}
    out, _, _ = run('(define (main input) (exec "/lib/down" 63))', lib=lib, limits=MAXED)
    assert out == 63
    with pytest.raises(LimitExceeded):
        run('(define (main input) (exec "/lib/down" 64))', lib=lib, limits=MAXED)
