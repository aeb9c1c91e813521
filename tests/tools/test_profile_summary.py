"""benchmarks/_profile.summarize: shares of py-spy raw stacks (pure logic)."""

from __future__ import annotations

from pathlib import Path

from benchmarks._profile import summarize

_MAIN = "thread (1): MainThread;run (asyncio/runners.py:118)"
RAW = "\n".join([
    f"{_MAIN};handle (svit_cluster/gateway/_control.py:40);dumps (json/__init__.py:231) 6",
    f"{_MAIN};handle (svit_cluster/gateway/_control.py:41) 3",
    "thread (2): worker;_worker (concurrent/futures/thread.py:81);"
    "evalsha (redis/commands/core.py:5) 1",
    "not a stack line",
])


def test_self_inclusive_and_package_shares_add_up(tmp_path: Path) -> None:
    raw = tmp_path / "g.txt"
    raw.write_text(RAW)
    s = summarize([raw, tmp_path / "missing.txt"])
    assert s["samples"] == 10
    assert s["self"][0] == ["json.__init__.dumps", 0.6]
    assert dict(map(tuple, s["self"]))["svit_cluster.gateway._control.handle"] == 0.3
    incl = dict(map(tuple, s["inclusive"]))
    assert incl["svit_cluster.gateway._control.handle"] == 0.9  # counted once per sample
    assert incl["asyncio.runners.run"] == 0.9
    assert s["packages"] == {"json": 0.6, "svit_cluster": 0.3, "redis": 0.1}


def test_no_samples_gives_empty_lists(tmp_path: Path) -> None:
    assert summarize([tmp_path / "none.txt"]) == {"samples": 0, "self": [], "inclusive": [],
                                                  "packages": {}}
