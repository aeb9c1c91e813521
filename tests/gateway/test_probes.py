"""Probe endpoints and the `svit-cluster healthcheck` command.

Liveness only says the process is alive; readiness says it can serve. A gateway
with no registered hosts is alive but not ready, so Kubernetes must not restart it.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from click.testing import CliRunner
from starlette.testclient import TestClient

from svit_cluster.cli import cli
from svit_cluster.cluster._heartbeat import check_heartbeat, write_heartbeat
from svit_cluster.gateway import TokenStore, create_app
from svit_cluster.inprocess import InProcessRouter


class NoHostsRouter(InProcessRouter):
    """A router that reports what the Ray router reports while no host is registered."""

    async def health(self) -> dict[str, Any]:
        return {"ok": False, "hosts": []}


def test_livez_is_200_while_readiness_is_503_without_hosts() -> None:
    client = TestClient(create_app(NoHostsRouter(), TokenStore(), max_request_bytes=4096))
    assert client.get("/healthz").status_code == 503
    assert client.get("/readyz").status_code == 503
    live = client.get("/livez")  # no token: probes carry none
    assert live.status_code == 200 and live.json() == {"ok": True}


def test_readyz_is_200_when_the_router_can_serve() -> None:
    client = TestClient(create_app(InProcessRouter(), TokenStore(), max_request_bytes=4096))
    assert client.get("/readyz").status_code == 200
    assert client.get("/livez").status_code == 200


def _status(lease_state: str | None) -> dict[str, Any]:
    return {"host": "h0", "lease_state": lease_state, "actors": 2}


def test_heartbeat_fresh_stale_missing_and_lease(tmp_path: Path) -> None:
    hb = tmp_path / "hb.json"
    assert check_heartbeat(hb, max_age_s=10, require_lease=False)[0] is False  # missing
    now = time.time()
    write_heartbeat(hb, _status("held"), now=now)
    assert json.loads(hb.read_text())["lease_state"] == "held"
    assert check_heartbeat(hb, max_age_s=10, require_lease=True, now=now + 5)[0] is True
    ok, reason = check_heartbeat(hb, max_age_s=10, require_lease=False, now=now + 11)
    assert not ok and "old" in reason
    write_heartbeat(hb, _status("suspended"), now=now)
    assert check_heartbeat(hb, max_age_s=10, require_lease=False, now=now + 1)[0] is True
    ok, reason = check_heartbeat(hb, max_age_s=10, require_lease=True, now=now + 1)
    assert not ok and "suspended" in reason
    hb.write_text("{not json")
    assert check_heartbeat(hb, max_age_s=10, require_lease=False)[0] is False
    assert [p.name for p in tmp_path.iterdir()] == ["hb.json"]  # no temp files left


def test_healthcheck_command_reads_the_heartbeat(tmp_path: Path) -> None:
    hb = tmp_path / "hb.json"
    runner = CliRunner()
    args = ["healthcheck", "--heartbeat", str(hb), "--max-age", "30"]
    assert runner.invoke(cli, args).exit_code == 1  # no heartbeat yet
    write_heartbeat(hb, _status("held"))
    assert runner.invoke(cli, args).exit_code == 0
    assert runner.invoke(cli, [*args, "--require-lease"]).exit_code == 0
    write_heartbeat(hb, _status("lost"))
    assert runner.invoke(cli, args).exit_code == 0  # alive: liveness passes
    assert runner.invoke(cli, [*args, "--require-lease"]).exit_code == 1  # not ready
    write_heartbeat(hb, _status("held"), now=time.time() - 60)
    assert runner.invoke(cli, args).exit_code == 1  # stale: the watcher is stuck
