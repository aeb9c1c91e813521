"""``svit-cluster status`` right after ``kill-host`` / ``kill-redis``: the killed
component is reported down, although nobody has reaped it.

The stand-in hosts of ``conftest.py`` are ``sleep`` processes this test process
started and does not wait for, so a killed one stays a zombie, exactly as a
host process does once the ``svit-cluster up`` that started it has returned and
the machine's init does not reap orphans.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from typing import Any

import psutil
from click.testing import CliRunner

from svit_cluster.cli import cli
from svit_cluster.ownership import host_key, open_client
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


def test_kill_host_says_what_it_signalled_and_how_to_undo_it_and_status_marks_the_stale_lease(
        fake_cluster: FakeCluster) -> None:
    sd = str(fake_cluster.state_dir)
    h1, h2 = fake_cluster.hosts["h1"], fake_cluster.hosts["h2"]
    lease_id = asyncio.run(_register_host(fake_cluster, "h2"))

    paused = _run(["pause-host", "--state-dir", sd, "h1"])
    assert f"pause-host h1: SIGSTOP sent to 1 processes (pids {h1.pid})" in paused, paused
    assert f"undo: svit-cluster resume-host h1 --state-dir {sd}" in paused, paused
    resumed = _run(["resume-host", "--state-dir", sd, "h1"])
    assert "SIGCONT sent to 1 processes" in resumed and "undo" not in resumed, resumed

    killed = _run(["kill-host", "--state-dir", sd, "h2"])
    assert f"kill-host h2: SIGKILL sent to 1 processes (pids {h2.pid})" in killed, killed
    assert f"undo: svit-cluster restart-host h2 --state-dir {sd}" in killed, killed
    text = _run(["status", "--state-dir", sd])
    # the killed host's lease is still in etcd (TTL 30 s): said so, not shown as if held
    assert f"h2: process DOWN, lease {lease_id} (in etcd until its TTL ends)" in text, text
    assert "h1: process up, lease -," in text, text


async def _register_host(cluster: FakeCluster, host: str) -> int:
    """Write ``host``'s registration under a fresh 30-s lease, as its agent does."""
    client = open_client(str(cluster.doc["etcd"]["endpoint"]))  # type: ignore[index]
    try:
        lease = await client.lease(30)
        await client.put(host_key(str(cluster.doc["cluster"]), host),
                         json.dumps({"host": host}).encode(), lease=lease)
        return int(lease.id)
    finally:
        await client.close()
