"""Dispatcher worker OS processes for the dispatcher benchmarks
(``svit-cluster dispatcher run``), started and stopped by PID."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

__all__ = ["start_workers", "stop_workers"]


def start_workers(n: int, redis_url: str, options: dict[str, Any], logs: Path,
                  tag: str) -> list[subprocess.Popen[bytes]]:
    """Start ``n`` workers (ids ``bench-<tag>-<i>``) with ``options`` (the
    ``DispatchConfig`` fields, as ``--options`` JSON), logging to
    ``logs/worker-<tag>-<i>.log``; each in a session of its own."""
    procs = []
    for i in range(n):
        with open(logs / f"worker-{tag}-{i}.log", "ab") as log:
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "svit_cluster.cli", "dispatcher", "run",
                 "--redis-url", redis_url, "--worker-id", f"bench-{tag}-{i}",
                 "--options", json.dumps(options), "--log-level", "WARNING"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True))
    return procs


def stop_workers(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM every worker, then SIGKILL any still running after 15 s."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(5)
