"""``svit-cluster status`` right after ``kill-host`` / ``kill-redis``: the killed
component is reported down, although nobody has reaped it.

The stand-in hosts of ``conftest.py`` are ``sleep`` processes this test process
started and does not wait for, so a killed one stays a zombie, exactly as a
host process does once the ``svit-cluster up`` that started it has returned and
the machine's init does not reap orphans.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

import psutil
from click.testing import CliRunner

from svit_cluster.cli import cli
from tests.cli.conftest import FakeCluster


def _run(args: list[str]) -> str:
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, (args, result.output, result.stderr)
    return result.stdout


def _status(state_dir: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(_run(["status", "--state-dir", state_dir, "-o", "json"]))
    return doc


def test_status_shows_a_killed_host_down_once_kill_host_returns(
        fake_cluster: FakeCluster) -> None:
    sd = str(fake_cluster.state_dir)
    h2 = fake_cluster.hosts["h2"]
    assert {h["name"]: h["alive"] for h in _status(sd)["hosts"]} == {"h1": True, "h2": True}

    _run(["kill-host", "--state-dir", sd, "h2"])

    assert psutil.pid_exists(h2.pid)  # not reaped: a zombie still has its pid
    hosts = {h["name"]: h for h in _status(sd)["hosts"]}
    assert (hosts["h1"]["alive"], hosts["h2"]["alive"]) == (True, False)
    assert hosts["h2"]["pids"] == []  # nothing of it runs
    text = _run(["status", "--state-dir", sd])
    assert "h1: process up" in text and "h2: process DOWN" in text


def test_status_shows_a_killed_redis_down_once_kill_redis_returns(
        fake_cluster: FakeCluster) -> None:
    sd = str(fake_cluster.state_dir)
    stand_in = subprocess.Popen(["sleep", "120"])  # a Redis node of our own to kill
    try:
        doc = json.loads((fake_cluster.state_dir / "cluster.json").read_text())
        doc["redis"]["pid"] = stand_in.pid
        (fake_cluster.state_dir / "cluster.json").write_text(json.dumps(doc))
        assert [n["alive"] for n in _status(sd)["redis"]["nodes"]] == [True]

        _run(["kill-redis", "--state-dir", sd, "redis"])

        assert [n["alive"] for n in _status(sd)["redis"]["nodes"]] == [False]
        assert "redis: redis DOWN" in _run(["status", "--state-dir", sd])
    finally:
        stand_in.kill()
        stand_in.wait(5)
