"""Pin the public surface of svit_chaos, and the packaging that installs it."""

from __future__ import annotations

import pkgutil
import tomllib
from pathlib import Path

import svit_chaos

import svit_cluster

EXPECTED = {
    "DEFAULT_INVARIANTS", "SCENARIOS", "SCRIPT", "Anomaly", "ChaosCluster", "CheckResult",
    "Clock", "Context", "FaultTarget", "HarnessError", "HistoryError", "HistoryWriter",
    "Invariant", "LaunchSpec", "LinkMode", "ManualClock", "MonotonicClock", "NemesisRunner",
    "NemesisSpec", "ProcessProxyHub", "ProxyHub", "RunConfig", "RunOutcome", "Schedule",
    "StaleWriter",
    "StoreObserver", "StoredLogs", "TcpProxy", "Window", "Workload", "WorkloadConfig",
    "build_schedule", "check", "dump_processes", "local_launcher", "random_schedule",
    "read_history", "read_logs", "run", "write_history", "write_logs",
}


def test_public_names_are_pinned() -> None:
    assert set(svit_chaos.__all__) == EXPECTED
    for name in EXPECTED:
        assert getattr(svit_chaos, name) is not None


def test_every_package_is_listed_in_pyproject() -> None:
    root = Path(__file__).resolve().parents[2]
    doc = tomllib.loads((root / "pyproject.toml").read_text())
    listed = set(doc["tool"]["setuptools"]["packages"])
    assert doc["tool"]["setuptools"]["package-dir"]["svit_chaos"] == "chaos"
    assert doc["project"]["scripts"]["svit-chaos"] == "svit_chaos.cli:main"
    found = {"svit_cluster"} | {
        f"svit_cluster.{m.name}" for m in pkgutil.iter_modules(svit_cluster.__path__)
        if m.ispkg}
    missing = found - listed
    assert not missing, f"add {sorted(missing)} to [tool.setuptools] packages in pyproject.toml"
    assert "svit_chaos" in listed
