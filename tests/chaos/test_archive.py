"""What a run keeps of its cluster's files before removing the state directory."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

# the package exports the function ``run``, which hides the module of that name
run_module = importlib.import_module("svit_chaos.run")


def test_the_agents_worker_output_is_kept_beside_the_logs(tmp_path: Path) -> None:
    state, target = tmp_path / "state", tmp_path / "run" / "cluster-logs"
    logs = state / "ray" / "session_1" / "logs"
    logs.mkdir(parents=True)
    (state / "gateway.log").write_text("gateway\n")
    (logs / "raylet.log").write_text("raylet\n")
    (logs / "worker-ab-01.out").write_text("host h2 lost its lease\n")
    (logs / "worker-ab-01.err").write_text("lease-keeper[7] WARNING\n")
    (logs / "worker-cd-02.err").write_text("")  # empty: nothing to keep
    (logs / "raylet.out").write_text("not a worker's output\n")
    run_module._archive(state, target)
    kept = sorted(str(p.relative_to(target)) for p in target.rglob("*") if p.is_file())
    assert kept == ["gateway.log", "ray/session_1/logs/raylet.log",
                    "ray/session_1/logs/worker-ab-01.err", "ray/session_1/logs/worker-ab-01.out"]
    assert (target / "ray/session_1/logs/worker-ab-01.out").read_text() == \
        "host h2 lost its lease\n"
    assert not state.exists()


def test_the_archive_stops_at_its_total_bound(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    state, target = tmp_path / "state", tmp_path / "kept"
    state.mkdir()
    for n in range(5):
        (state / f"worker-{n}.out").write_bytes(b"x" * 100)
    monkeypatch.setattr(run_module, "ARCHIVE_TOTAL_MAX_BYTES", 250)
    run_module._archive(state, target)
    assert len(list(target.iterdir())) == 2
