"""The process benchmark runs and reports the documented JSON shape (tiny sizes)."""

from __future__ import annotations

import json

from benchmarks import bench_process


def test_benchmark_reports_both_sizes_and_the_ratio(capsys: object) -> None:
    result = bench_process.run(small=50, big=500, rounds=2, writes=20)
    assert result["small"]["memory_nodes"] == 50 and result["big"]["memory_nodes"] == 500
    assert result["small"]["us_per_write"] > 0 and result["big"]["us_per_write"] > 0
    assert result["ratio_big_over_small"] > 0 and result["target_ratio_max"] == 3.0
    json.dumps(result)
