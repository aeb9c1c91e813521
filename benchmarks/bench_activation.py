"""In-process activation benchmark: counter activations per second on one core.

Run::

    python -m benchmarks.bench_activation [--seconds 3]

Measures, in one run and interleaved: (a) ``activate()`` (compile cache hit,
fresh interpreter, run, validate, seal the svit-cluster-transaction@1 record, commit,
incremental hashing), and (b) the same through the VAST controller with an
in-memory backend (decode, receipt lookup, version check, activation, receipt).
Prints JSON. Target: >= 10 000 activations/s for (a).
"""

from __future__ import annotations

import argparse
import json
import time

from svit_cluster.activation import activate
from svit_cluster.control import MemoryBackend, ProcessController, decode_request
from svit_cluster.process import Process, encode_value

COUNTER = """(define (main input)
  (let ((count (+ (read "/memory/count") (value-get input "/by"))))
    (do
      (write "/memory/count" count)
      (value-map "count" count))))
"""
PID = "svit://local/bench/counter"


def run_activate(seconds: float) -> tuple[int, float]:
    proc = Process.create(PID, memory={"count": 0}, scripts={"counter": COUNTER})
    n = 0
    start = time.perf_counter()
    end = start + seconds
    while time.perf_counter() < end:
        for _ in range(200):
            activate(proc, "counter", {"by": 1})
        n += 200
    elapsed = time.perf_counter() - start
    assert proc.read("/memory/count") == n and proc.version == n
    return n, elapsed


def run_controller(seconds: float) -> tuple[int, float]:
    proc = Process.create(PID, memory={"count": 0}, scripts={"counter": COUNTER})
    ctrl = ProcessController(proc, MemoryBackend(4096))
    inp = encode_value({"by": 1})
    n = 0
    start = time.perf_counter()
    end = start + seconds
    while time.perf_counter() < end:
        body = json.dumps({"protocol": "svit-control@1", "client_id": "bench",
                           "request_id": f"r{n}", "process_id": PID, "expected_version": n,
                           "command": {"operation": "activate", "script": "counter",
                                       "input": inp}})
        resp = ctrl.execute(decode_request(body))
        assert resp.outcome.status == "committed"
        n += 1
    return n, time.perf_counter() - start


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="CI smoke run: 0.2 s, 2 rounds")
    args = ap.parse_args()
    if args.quick:
        args.seconds, args.rounds = 0.2, 2
    results: dict[str, list[float]] = {"activate_per_s": [], "controller_per_s": []}
    for _ in range(args.rounds):  # interleaved rounds, same process
        n, t = run_activate(args.seconds / args.rounds)
        results["activate_per_s"].append(n / t)
        n, t = run_controller(args.seconds / args.rounds)
        results["controller_per_s"].append(n / t)
    best = {k: max(v) for k, v in results.items()}
    print(json.dumps({
        "activate_per_s": round(best["activate_per_s"]),
        "controller_per_s": round(best["controller_per_s"]),
        "activate_us": round(1e6 / best["activate_per_s"], 1),
        "controller_us": round(1e6 / best["controller_per_s"], 1),
        "rounds": {k: [round(x) for x in v] for k, v in results.items()},
        "target_activate_per_s": 10_000,
    }, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
