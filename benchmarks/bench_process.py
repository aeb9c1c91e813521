"""Single-path host writes on a small and a big flat ``/memory`` map, in one run.

Measures ``Process.write("/memory/k<i>", i)`` on trees of 1 000 and 100 000 memory
nodes. Rounds alternate small, big, small, big, ... so that machine noise hits both
sizes alike; per-write time is the median over rounds. The content hash is
incremental (a hash trie under each map), so the big/small ratio should stay small:
the target is at most 3.

Run ``python -m benchmarks.bench_process`` or ``python benchmarks/bench_process.py``;
the result is one JSON object on stdout.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from svit_cluster.process import Limits, Process

TARGET_RATIO = 3.0


def build(n: int) -> Process:
    """A process whose ``/memory`` is a flat map ``{"k<i>": i}`` of ``n`` entries."""
    limits = Limits(max_value_entries=n + 1, max_tree_nodes=n + 10_000)
    return Process.create(
        f"svit://bench/{n}", memory={f"k{i}": i for i in range(n)}, limits=limits
    )


def _round(p: Process, n: int, writes: int, start: int) -> float:
    """Seconds per write for ``writes`` single-path writes spread over the map."""
    keys = [((start + j) * 7919) % n for j in range(writes)]  # stride over the whole map
    paths = [f"/memory/k{i}" for i in keys]
    write = p.write
    t0 = time.perf_counter()
    for path, i in zip(paths, keys, strict=True):
        write(path, i)
    return (time.perf_counter() - t0) / writes


def run(
    small: int = 1_000, big: int = 100_000, rounds: int = 15, writes: int = 400
) -> dict[str, Any]:
    """Run the benchmark and return the result document."""
    t0 = time.perf_counter()
    procs = {small: build(small), big: build(big)}
    build_s = time.perf_counter() - t0
    for n, p in procs.items():  # warm up
        _round(p, n, min(writes, 50), 0)
    samples: dict[int, list[float]] = {small: [], big: []}
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for r in range(rounds):
            order = (small, big) if r % 2 == 0 else (big, small)
            for n in order:
                samples[n].append(_round(procs[n], n, writes, r * writes))
            gc.collect()
    finally:
        if gc_was_enabled:
            gc.enable()

    def summary(n: int) -> dict[str, Any]:
        us = [s * 1e6 for s in samples[n]]
        return {
            "memory_nodes": n,
            "tree_nodes": procs[n].root.size,
            "us_per_write": round(statistics.median(us), 2),
            "us_per_write_min": round(min(us), 2),
            "us_per_write_max": round(max(us), 2),
            "final_version": procs[n].version,
        }

    s, b = summary(small), summary(big)
    ratio = b["us_per_write"] / s["us_per_write"]
    return {
        "benchmark": "process_single_path_write",
        "operation": 'Process.write("/memory/k<i>", i)',
        "rounds": rounds,
        "writes_per_round": writes,
        "interleaved": True,
        "small": s,
        "big": b,
        "ratio_big_over_small": round(ratio, 3),
        "target_ratio_max": TARGET_RATIO,
        "meets_target": ratio <= TARGET_RATIO,
        "build_seconds": round(build_s, 2),
        "python": sys.version.split()[0],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--small", type=int, default=1_000, help="memory entries (default 1000)")
    parser.add_argument("--big", type=int, default=100_000, help="memory entries (default 100000)")
    parser.add_argument("--rounds", type=int, default=15, help="interleaved rounds (default 15)")
    parser.add_argument("--writes", type=int, default=400, help="writes per round (default 400)")
    parser.add_argument("--quick", action="store_true",
                        help="CI smoke run: 10 000 entries, 3 rounds of 100 writes")
    args = parser.parse_args(argv)
    if args.quick:
        args.big, args.rounds, args.writes = 10_000, 3, 100
    result = run(args.small, args.big, args.rounds, args.writes)
    json.dump(result, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
