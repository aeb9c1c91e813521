"""The public surface of svit_cluster.lisp and the compile cache."""

from __future__ import annotations

import dataclasses

import pytest

import svit_cluster.lisp as lisp
from svit_cluster.errors import LimitExceeded, ScriptFailed
from svit_cluster.lisp import Meter, Program, compile_script
from svit_cluster.lisp._builtins import BUILTINS, CONSTANTS
from svit_cluster.values import Limits
from tests.lisp._support import COUNTER, FakeHost


def test_exported_names_are_pinned() -> None:
    assert sorted(lisp.__all__) == ["CACHE_SIZE", "GuestHost", "Meter", "Program", "compile_script"]


def test_environment_is_an_explicit_allowlist() -> None:
    required = {
        "+", "-", "*", "/", "//", "rem", "abs", "min", "max", "=", "/=", "<", "<=", ">", ">=",
        "not", "xor", "zero", "list", "first", "second", "last", "init", "tail", "elt", "len",
        "append", "concat", "reverse", "slice", "null", "join", "chars", "string", "format",
        "type-of", "is", "id", "panic", "apply", "value-get", "value-map", "value-array",
        "value-null?", "read", "discover", "stat", "write", "remove", "exec", "send!",
        "log-info!", "json-parse", "json-stringify", "map-get", "map-has?", "map-set",
        "list?", "string?", "number?", "boolean?", "null?", "result-ok", "result-error",
        "result-ok?", "result-value", "safe-call",
    }
    assert required <= set(BUILTINS)
    extras = set(BUILTINS) - required
    catalog_helpers = {
        "runtime-builtins", "map?", "map-get-safe", "list-get", "result-error-message",
        "result-map", "result-and-then", "result-or-else", "value-at", "value-at-safe",
        "value-has-path?", "dispatch-table", "dispatch", "dispatch-safe", "jq", "search",
        "port-call",
    }
    ketos_core = {
        "^", "<<", ">>", "ceil", "floor", "round", "trunc", "int", "float", "inf", "nan",
        "denom", "fract", "numer", "rat", "recip", "bytes", "is-instance", ".", ".=", "new",
        "print", "println",
    }
    timers = {"cancel!"}  # durable timers, beyond the reference
    assert extras == {"exec-safe", "json-parse-safe"} | catalog_helpers | ketos_core | timers
    assert CONSTANTS == {"*svit-version*": "Svit Lisp 2"}
    for forbidden in ("eval", "open", "import", "getattr", "random", "time", "env"):
        assert forbidden not in BUILTINS


def test_compile_is_cached_per_source_name_and_limits() -> None:
    limits = Limits()
    first = compile_script(COUNTER, name="counter", limits=limits)
    assert isinstance(first, Program)
    assert compile_script(COUNTER, name="counter", limits=limits) is first
    assert compile_script(COUNTER, name="other", limits=limits) is not first
    deeper = dataclasses.replace(limits, max_syntax_depth=100)
    assert compile_script(COUNTER, name="counter", limits=deeper) is not first
    assert compile_script(COUNTER, name="counter", limits=dataclasses.replace(
        limits, max_fuel=5)) is first


def test_compile_failures_are_cached_and_positioned() -> None:
    for _ in range(2):
        with pytest.raises(ScriptFailed) as info:
            compile_script("(define (main input)\n  (if))", name="bad", limits=Limits())
        assert info.value.message.startswith("/lib/bad.svit-script:2:3: ")
    with pytest.raises(LimitExceeded):
        compile_script("(" * 65 + ")" * 65, name="deep", limits=Limits())


def test_cache_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lisp, "CACHE_SIZE", 4)
    limits = Limits()
    programs = [
        compile_script(f"(define (main input) {i})", name="n", limits=limits) for i in range(6)
    ]
    assert len(lisp._cache) <= 4
    assert compile_script("(define (main input) 5)", name="n", limits=limits) is programs[5]
    assert compile_script("(define (main input) 0)", name="n", limits=limits) is not programs[0]


def test_meter_defaults_and_programs_are_reusable() -> None:
    limits = Limits()
    meter = Meter(limits)
    assert meter.fuel_used == 0 and meter.memory_used == 0
    program = compile_script(COUNTER, name="counter", limits=limits)
    host = FakeHost({"count": 0})
    outputs = [program.run_main({"by": 3}, host, Meter(limits)) for _ in range(3)]
    assert outputs == [{"count": 3}, {"count": 6}, {"count": 9}]
    assert repr(program) == "<Program /lib/counter.svit-script>"


def test_a_bare_python_error_from_the_host_is_converted() -> None:
    class Broken(FakeHost):
        def read(self, path: str) -> object:
            raise KeyError(path)

    program = compile_script('(define (main input) (read "/memory/x"))', name="b",
                             limits=Limits())
    with pytest.raises(ScriptFailed) as info:
        program.run_main(None, Broken(), Meter(Limits()))
    assert "internal interpreter error (KeyError)" in info.value.message


def test_expired_deadline_stops_a_nested_run() -> None:
    now = [0.0]
    limits = Limits()
    meter = Meter(limits, clock=lambda: now[0])
    host = FakeHost(lib={"inner": "(define (main i) 1)"})
    host.meter = meter
    program = compile_script('(define (main input) (exec "/lib/inner" 1))', name="outer",
                             limits=limits)
    now[0] = 10.0
    with pytest.raises(LimitExceeded) as info:
        program.run_main(None, host, meter)
    assert "execution time" in info.value.message
