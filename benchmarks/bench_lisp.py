"""Guest interpreter throughput: counter-script evaluations per second (fake host).

Run: ``.venv/bin/python benchmarks/bench_lisp.py [--runs N]``. Prints one JSON
object. Times are CPU seconds (``time.process_time``), best of 5 rounds
(``--quick``: 100 runs and a 2 000-step loop, best of 2).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from typing import Any

from svit_cluster.lisp import Meter, compile_script
from svit_cluster.values import Limits

COUNTER = """(define (main input)
  (let ((count (+ (read "/memory/count") (value-get input "/by"))))
    (do
      (write "/memory/count" count)
      (value-map "count" count))))
"""

LOOP = "(define (f n acc) (if (= n 0) acc (f (- n 1) (+ acc n)))) (define (main n) (f n 0))"


class DictHost:
    """The smallest useful host: ``/memory/<key>`` reads and writes in a dict."""

    def __init__(self) -> None:
        self.memory: dict[str, Any] = {"count": 0}

    def read(self, path: str) -> Any:
        return self.memory.get(path[len("/memory/") :])

    def write(self, path: str, value: Any) -> None:
        self.memory[path[len("/memory/") :]] = value


def _best(rounds: int, fn: Any) -> float:
    best = float("inf")
    for _ in range(rounds):
        start = time.process_time()
        fn()
        best = min(best, time.process_time() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=20_000)
    parser.add_argument("--quick", action="store_true",
                        help="CI smoke run: 100 runs, a 2 000-step loop, best of 2 rounds")
    parsed = parser.parse_args()
    runs = 100 if parsed.quick else parsed.runs
    rounds, loop_n = (2, 2_000) if parsed.quick else (5, 20_000)
    limits = Limits()
    host = DictHost()
    program = compile_script(COUNTER, name="counter", limits=limits)
    meter = Meter(limits)
    program.run_main({"by": 1}, host, meter)
    fuel = meter.fuel_used

    def counter() -> None:
        for _ in range(runs):
            compile_script(COUNTER, name="counter", limits=limits).run_main(
                {"by": 1}, host, Meter(limits)
            )

    seconds = _best(rounds, counter)
    loop_limits = dataclasses.replace(limits, max_fuel=100_000_000, max_execution_millis=60_000)
    loop = compile_script(LOOP, name="loop", limits=loop_limits)
    loop_meter = Meter(loop_limits)

    def spin() -> None:
        loop.run_main(loop_n, host, Meter(loop_limits))

    loop.run_main(loop_n, host, loop_meter)
    loop_seconds = _best(rounds, spin)
    print(json.dumps({
        "counter_runs_per_s": round(runs / seconds),
        "counter_us_per_run": round(seconds / runs * 1e6, 2),
        "counter_fuel_per_run": fuel,
        "tail_loop_ns_per_fuel": round(loop_seconds / loop_meter.fuel_used * 1e9, 1),
        "note": "includes compile-cache lookup and Meter construction per run",
    }))


if __name__ == "__main__":
    main()
