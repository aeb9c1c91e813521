"""Property tests: the reader and evaluator only ever return values or raise project errors."""

from __future__ import annotations

import dataclasses
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from svit_cluster.errors import SvitError
from svit_cluster.lisp import Meter, compile_script
from svit_cluster.values import Limits, Script
from tests.lisp._support import FakeHost

LIMITS = dataclasses.replace(
    Limits(), max_fuel=20_000, max_execution_millis=5_000, max_guest_memory=200_000,
    max_call_stack=200,
)

BUILTIN_NAMES = [
    "+", "-", "*", "/", "//", "rem", "abs", "min", "max", "=", "/=", "<", "<=", ">", ">=",
    "not", "xor", "zero", "list", "first", "second", "last", "init", "tail", "elt", "len",
    "append", "concat", "reverse", "slice", "null", "join", "chars", "string", "format",
    "type-of", "is", "id", "value-get", "value-map", "value-array", "value-null?", "read",
    "discover", "stat", "write", "remove", "exec", "send!", "log-info!", "json-parse",
    "json-stringify", "map-get", "map-has?", "map-set", "list?", "string?", "number?",
    "boolean?", "null?", "result-ok", "result-error", "result-ok?", "result-value",
    "safe-call", "apply", "panic", "exec-safe", "json-parse-safe",
    # the reference's runtime helper catalog and the Ketos core functions
    "runtime-builtins", "map?", "map-get-safe", "list-get", "result-error-message",
    "result-map", "result-and-then", "result-or-else", "value-at", "value-at-safe",
    "value-has-path?", "dispatch-table", "dispatch", "dispatch-safe", "jq", "search",
    "port-call", "^", "<<", ">>", "ceil", "floor", "round", "trunc", "int", "float", "inf",
    "nan", "denom", "fract", "numer", "rat", "recip", "bytes", "is-instance", ".", ".=",
    "new", "print", "println",
]

TOKENS = [
    "(", "(", "(", ")", ")", ")", "'", "define", "main", "input", "lambda", "let", "if",
    "cond", "case", "else", "and", "or", "do", "quote", "use", "x", "y", "f", "0", "1", "-7",
    "2.5", "1e3", "99999999999999999999", '"s"', '"/memory/a"', '"/by"', '"a\\n"', ":key",
    ":optional", ":rest", "true", "false", "()", "#'c'", ";c\n", '"', "\\", "#", "\x00", "é",
    *BUILTIN_NAMES,
]


def _plain(value: Any, depth: int = 0) -> bool:
    assert depth < 200
    t = type(value)
    if value is None or t in (bool, int, float, str, Script):
        return True
    if t is list:
        return all(_plain(v, depth + 1) for v in value)
    if t is dict:
        return all(type(k) is str and _plain(v, depth + 1) for k, v in value.items())
    return False


def _run(source: str, input: Any = None) -> Any:
    host = FakeHost({"a": 1, "count": 0}, {"sub": "(define (main i) i)"}, LIMITS)
    meter = Meter(LIMITS)
    host.meter = meter
    try:
        program = compile_script(source, name="fuzz", limits=LIMITS)
        out = program.run_main(input, host, meter)
    except SvitError as e:
        assert len(e.message.encode()) <= 1024
        return ("error", type(e).__name__, e.code, e.message, meter.fuel_used)
    assert _plain(out), out
    return ("ok", out, meter.fuel_used)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(TOKENS), max_size=60))
def test_random_token_streams(tokens: list[str]) -> None:
    _run(" ".join(tokens))
    _run("(define (main input) " + " ".join(tokens) + ")")


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=80))
def test_random_text(text: str) -> None:
    _run(text)


ATOMS = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**63 - 1).map(str),
    st.floats(allow_nan=False, allow_infinity=False, width=32).map(lambda f: repr(float(f))),
    st.sampled_from(['"s"', '""', '"/a"', '"/memory/a"', "true", "false", "()", "input",
                     "x", "y", "'sym", ":k", "(value-array)", "(value-map)", "'(1 (\"a\"))",
                     "'()", "+", "f", '"."', '".[] | .a?"', "1e300", "-1", "4000000000"]),
)


def _fmt(template: str) -> Any:
    return lambda parts: template.format(*parts)


def _forms(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    args = st.lists(children, max_size=4).map(" ".join)
    tests = st.one_of(
        st.sampled_from(["true", "false", "(= x 1)"]),
        children.map(lambda c: f"(number? {c})"),
        children,
    )
    two = st.tuples(children, children)
    return st.one_of(
        st.tuples(st.sampled_from(BUILTIN_NAMES), args).map(_fmt("({} {})")),
        st.tuples(tests, children, children).map(_fmt("(if {} {} {})")),
        two.map(_fmt("(let ((x {})) {})")),
        two.map(_fmt("((lambda (x :optional y) {}) {})")),
        two.map(_fmt("(f {} {})")),
        st.lists(children, min_size=1, max_size=3).map(lambda xs: f"(do {' '.join(xs)})"),
        st.tuples(tests, children).map(_fmt("(cond ({} {}) (else 0))")),
        st.tuples(tests, children).map(_fmt("(and {} {})")),
        two.map(_fmt("(safe-call (lambda () {}) {})")),
        children.map(lambda c: f"(apply list (list {c}))"),
    )


PROGRAM_BODIES = st.recursive(ATOMS, _forms, max_leaves=25)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(PROGRAM_BODIES, st.sampled_from([None, 0, 3, "s", [], {"by": 1}, [1, [2]]]))
def test_random_well_formed_programs_are_deterministic(body: str, input: Any) -> None:
    source = (
        "(define (f x y) (if (number? x) (+ x 1) y))\n"
        f"(define (main input) (let ((x 1) (y \"two\")) {body}))"
    )
    first = _run(source, input)
    assert _run(source, input) == first
