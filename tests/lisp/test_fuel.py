"""Deterministic fuel: the documented unit, and the same failure at the same step."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from svit_cluster.errors import ErrorCode, LimitExceeded
from svit_cluster.lisp import Meter, compile_script
from svit_cluster.values import Limits
from tests.lisp._support import COUNTER, FakeHost, run

SLOW_CLOCK = dataclasses.replace(Limits(), max_execution_millis=60_000)


def fuel(src: str, input: object = None, limits: Limits = SLOW_CLOCK) -> int:
    return run(src, input, limits=limits)[2].fuel_used


def test_fuel_unit_per_form() -> None:
    # (define (main input) BODY): define 1 + lambda 1, the call to main 1, then BODY.
    base = fuel("(define (main input) 1)")
    assert base == 4
    assert fuel("(define (main input) (+ 1 2))") == base - 1 + 4  # app, +, 1, 2
    assert fuel("(define (main input) (if true 1 2))") == base - 1 + 3  # if, test, branch
    assert fuel("(define (main input) (let ((a 1)) a))") == base - 1 + 3
    assert fuel("(define (main input) (do 1 2 3))") == base - 1 + 4
    assert fuel("(define (main input) '(1 2 3))") == base  # quote is one form


def test_builtins_charge_per_64_touched() -> None:
    short = fuel('(define (main input) (len "ab"))')
    long = fuel(f'(define (main input) (len "{"a" * 640}"))')
    assert long - short == 10


def test_both_evaluation_paths_charge_the_same() -> None:
    # Shallow subtrees run as direct closures, deep ones on the evaluator loop.
    def nested(depth: int) -> str:
        return "(define (main input) " + "(+ 1 " * depth + "0" + ")" * depth + ")"

    assert fuel(nested(40)) - fuel(nested(10)) == 30 * 3
    calls = "(define (f x) (+ x 1)) (define (main input) (f 1))"
    assert fuel(calls) == 2 + 2 + 1 + 3 + 4  # two defines, main, (f 1), f's body


def test_same_program_same_fuel_regardless_of_clock() -> None:
    src = (
        "(define (f n acc) (if (= n 0) acc (f (- n 1) (+ acc n))))"
        "(define (main input) (f input 0))"
    )
    counts = set()
    for step in (0.0, 1e-6, 1e-4):
        ticks = itertools.count()

        def clock(ticks: itertools.count[int] = ticks, step: float = step) -> float:
            return next(ticks) * step

        out, _, meter = run(src, 500, limits=SLOW_CLOCK, clock=clock)
        assert out == 125250
        counts.add(meter.fuel_used)
    assert len(counts) == 1


@pytest.mark.parametrize(
    "src",
    [
        "(define (f n) (f (+ n 1))) (define (main input) (f 0))",
        "(define (f n) (+ 1 (f (+ n 1)))) (define (main input) (f 0))",
        "(define (f s) (f (concat s \"x\"))) (define (main input) (f \"\"))",
        "(define (f n) (do (safe-call panic n) (f (+ n 1)))) (define (main input) (f 0))",
    ],
)
def test_failure_at_the_same_step(src: str) -> None:
    limits = dataclasses.replace(SLOW_CLOCK, max_fuel=50_000, max_call_stack=4096,
                                 max_value_stack=100_000)
    seen = set()
    for _ in range(3):
        with pytest.raises(LimitExceeded) as info:
            run(src, limits=limits)
        error = info.value
        seen.add((error.code, error.message, error.fields.get("at")))
    assert len(seen) == 1


def test_fuel_failure_fuel_used_is_reproducible() -> None:
    limits = dataclasses.replace(SLOW_CLOCK, max_fuel=10_000)
    program = compile_script(
        "(define (f n) (f (+ n 1))) (define (main input) (f 0))", name="spin", limits=limits
    )
    used = set()
    for _ in range(3):
        meter = Meter(limits)
        with pytest.raises(LimitExceeded) as info:
            program.run_main(None, FakeHost(limits=limits), meter)
        assert info.value.code == ErrorCode.EXECUTION_LIMIT_EXCEEDED
        assert "fuel" in info.value.message
        used.add(meter.fuel_used)
    assert len(used) == 1
    (spent,) = used
    assert 10_000 < spent <= 10_000 + 8


def test_counter_fuel_is_stable_and_meter_is_shared() -> None:
    limits = Limits()
    program = compile_script(COUNTER, name="counter", limits=limits)
    host = FakeHost({"count": 0})
    meter = Meter(limits)
    program.run_main({"by": 1}, host, meter)
    first = meter.fuel_used
    program.run_main({"by": 1}, host, meter)
    assert meter.fuel_used == 2 * first
    assert host.root["memory"]["count"] == 2
