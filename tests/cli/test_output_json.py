"""Every ``svit-cluster`` command that prints results takes ``--output json``.

Each command runs through click's runner against the stand-in cluster of
``conftest.py`` (real gateway app over loopback HTTP, real Redis and etcd,
``sleep`` processes as hosts); stdout must parse as JSON and carry the result,
and nothing but JSON may be on stdout (progress goes to stderr).
"""

from __future__ import annotations

import asyncio
import json
import signal
import tempfile
from pathlib import Path
from typing import Any

import click
import httpx
import psutil
import pytest
from click.testing import CliRunner

from svit_cluster.cli import cli
from tests.cli.conftest import ADMIN, FakeCluster

#: Commands that print no result document: long-running servers, and the
#: completion script (shell source by definition). (`chat --output json` prints
#: JSON Lines: test_chat_output_json_lines.)
NO_RESULT = {"gateway", "host-agent", "dispatcher run", "completion"}


def _commands(group: click.Group, prefix: str = "") -> dict[str, click.Command]:
    out: dict[str, click.Command] = {}
    for name, cmd in group.commands.items():
        full = f"{prefix}{name}"
        if isinstance(cmd, click.Group):
            out.update(_commands(cmd, full + " "))
        else:
            out[full] = cmd
    return out


def run_json(args: list[str], code: int = 0) -> Any:
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == code, (args, result.output, result.stderr)
    assert "Traceback" not in result.stderr
    return json.loads(result.stdout)


def test_every_result_command_has_output_and_json_alias() -> None:
    commands = _commands(cli)
    for name, cmd in commands.items():
        params = {p.name for p in cmd.params}
        if name in NO_RESULT:
            continue
        assert {"output", "as_json"} <= params, name
        output = next(p for p in cmd.params if p.name == "output")
        assert isinstance(output.type, click.Choice)
        assert list(output.type.choices) == ["text", "json"], name
    # the commands this file exercises below (kept in step with the CLI)
    # up/demo need Ray (test_up_and_down_output_json, the demo run); restart-host and
    # add-host start real hosts (Ray), their argument checks are tests/cli/test_host_cli.py;
    # kill-redis/kill-etcd need `up --redis-cluster/--etcd-members` (a Redis Cluster);
    # timers list/cancel need a dispatcher's parked timers
    # (tests/dispatch/test_timers_surface.py::test_cli_lists_and_cancels_with_exit_codes);
    # create/activate/state/list: tests/cli/test_process_commands.py
    assert set(commands) - NO_RESULT == COVERED | {"up", "demo", "restart-host", "add-host",
                                                   "kill-redis", "kill-etcd",
                                                   "timers list", "timers cancel",
                                                   "create", "activate", "state", "list"}


COVERED = {"status", "env", "down", "kill-host", "pause-host", "resume-host", "healthcheck",
           "smoke", "delete", "etcd-restored", "dispatcher status", "dead-letters list",
           "dead-letters redrive", "chat", "inbox drop", "fork"}


def test_status_env_and_health(fake_cluster: FakeCluster) -> None:
    sd = str(fake_cluster.state_dir)
    info = run_json(["status", "--state-dir", sd, "--output", "json"])
    assert info["gateway"]["healthy"] is True
    assert [h["name"] for h in info["hosts"]] == ["h1", "h2"]
    assert all(h["alive"] for h in info["hosts"])
    assert run_json(["status", "--state-dir", sd, "--json"]) == info  # the alias
    env = run_json(["env", "--state-dir", sd, "-o", "json"])
    assert env == {"SVIT_URL": fake_cluster.url, "SVIT_TOKEN": ADMIN}
    health = run_json(["healthcheck", "--url", fake_cluster.url + "/healthz",
                       "--output", "json"])
    assert health == {"url": fake_cluster.url + "/healthz", "healthy": True, "status": 200}


def test_smoke(fake_cluster: FakeCluster, clean_env: object,
               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SVIT_URL", fake_cluster.url)
    monkeypatch.setenv("SVIT_TOKEN", ADMIN)
    doc = run_json(["smoke", "--output", "json"])  # everything from SVIT_URL/SVIT_TOKEN
    assert doc["status"] == "committed" and doc["ok"] is True
    assert doc["process_id"] == "svit://smoke/helm-test"  # reused by every run


def test_delete(fake_cluster: FakeCluster, clean_env: object,
                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SVIT_URL", fake_cluster.url)
    monkeypatch.setenv("SVIT_TOKEN", ADMIN)
    pid = "svit://json/delete-me"
    run_json(["smoke", "--process-id", pid, "--output", "json"])
    doc = run_json(["delete", pid, "--output", "json"])
    assert doc == {"process_id": pid, "deleted": True, "version": 1}
    gone = run_json(["delete", pid, "--missing-ok", "--json"])
    assert gone == {"process_id": pid, "deleted": False, "missing": True}


def test_fork(fake_cluster: FakeCluster, clean_env: object,
              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SVIT_URL", fake_cluster.url)
    monkeypatch.setenv("SVIT_TOKEN", ADMIN)
    pid = "svit://json/fork-parent"
    run_json(["smoke", "--process-id", pid, "--output", "json"])
    doc = run_json(["fork", pid, pid + "-child", "--history", "--output", "json"])
    assert doc["process_id"] == pid + "-child"
    assert doc["history"] == {"events": 0, "upto_seq": 0}


def test_host_signals_and_down(fake_cluster: FakeCluster) -> None:
    sd = str(fake_cluster.state_dir)
    h1, h2 = fake_cluster.hosts["h1"], fake_cluster.hosts["h2"]
    paused = run_json(["pause-host", "--state-dir", sd, "h1", "--output", "json"])
    assert paused == {"command": "pause-host", "host": "h1", "pids": [h1.pid]}
    assert psutil.Process(h1.pid).status() == psutil.STATUS_STOPPED
    resumed = run_json(["resume-host", "--state-dir", sd, "h1", "--output", "json"])
    assert resumed["pids"] == [h1.pid]
    assert psutil.Process(h1.pid).status() != psutil.STATUS_STOPPED
    killed = run_json(["kill-host", "--state-dir", sd, "h2", "--output", "json"])
    assert killed == {"command": "kill-host", "host": "h2", "pids": [h2.pid]}
    assert h2.wait(5) == -signal.SIGKILL
    down = run_json(["down", "--state-dir", sd, "--output", "json"])
    assert down["down"] is True and down["cluster"] == fake_cluster.doc["cluster"]
    assert h1.wait(15) is not None
    assert not (fake_cluster.state_dir / "cluster.json").exists()


def test_etcd_restored_and_dispatch_commands(fake_cluster: FakeCluster) -> None:
    sd = str(fake_cluster.state_dir)
    report = run_json(["etcd-restored", "--state-dir", sd, "--output", "json"])
    assert {"epoch_before", "epoch_after", "released", "kept"} <= set(report)
    status = run_json(["dispatcher", "status", "--state-dir", sd, "--output", "json",
                       "svit://acme/nothing-sent"])
    assert status == []
    letters = run_json(["dead-letters", "list", "--state-dir", sd, "--output", "json"])
    assert letters["count"] == len(letters["dead_letters"])
    redriven = run_json(["dead-letters", "redrive", "--state-dir", sd, "--output", "json",
                         "0-1"])
    assert redriven["missing"] == ["0-1"] and redriven["redriven"] == []


@pytest.mark.cluster
def test_up_and_down_output_json() -> None:
    """``up --output json`` on a real 1-host local cluster (Ray); ``down`` again."""
    # short path: Ray's AF_UNIX sockets live under the state dir (107-byte limit)
    with tempfile.TemporaryDirectory(prefix="svit-", dir="/tmp") as tmp:
        sd = str(Path(tmp) / "s")
        doc = run_json(["up", "--state-dir", sd, "--hosts", "1", "--dispatchers", "0",
                        "--output", "json"])
        try:
            assert doc["hosts"] == ["h1"]
            assert doc["gateway_url"].startswith("http://127.0.0.1:")
            info = run_json(["status", "--state-dir", sd, "--output", "json"])
            assert info["gateway"]["healthy"] is True
        finally:
            assert run_json(["down", "--state-dir", sd, "--output", "json"])["down"] is True


def test_chat_output_json_lines() -> None:
    """``chat --output json``: stdout is JSON Lines, one object per event, then one
    ``turn`` summary per message (a real gateway with the simulated reasoner)."""
    from svit_cluster.gateway import Principal, TokenStore, create_app
    from svit_cluster.inprocess import InProcessRouter
    from svit_cluster.reasoning import ReasonerConfig, build_reasoner
    from tests.events._server import serve

    config = ReasonerConfig()  # the simulated reasoner
    router = InProcessRouter(reasoner=lambda: build_reasoner(config), reasoner_config=config)
    tokens = TokenStore()
    tokens.add(ADMIN, Principal(tenant=None, admin=True))
    with serve(create_app(router, tokens)) as url:
        httpx.post(url + "/v1/processes", json={"process_id": "svit://acme/agent"},
                   headers={"Authorization": f"Bearer {ADMIN}"}).raise_for_status()
        result = CliRunner().invoke(cli, ["chat", "svit://acme/agent", "--url", url,
                                          "--token", ADMIN, "--timeout", "30",
                                          "--output", "json"], input="hello\nagain\n\n")
        asyncio.run(router.aclose())
    assert result.exit_code == 0, (result.output, result.stderr)
    docs = [json.loads(line) for line in result.stdout.splitlines()]  # every line parses
    turns = [d for d in docs if d["event"] == "turn"]
    assert [(t["ok"], t["answer"]) for t in turns] == [(True, "echo: hello"),
                                                       (True, "echo: again")]
    first = [d for d in docs if d["message_id"] == turns[0]["message_id"]]
    assert first[0] == {"event": "message", "message_id": turns[0]["message_id"],
                        "message": first[0]["message"]}
    assert first[0]["message"]["role"] == "user"
    assert first[0]["message"]["content"] == "hello"
    assert first[-1] == turns[0]  # the summary closes the turn's events
    assert any(d["event"] == "message" and d["message"].get("role") == "assistant"
               for d in first)


def test_inbox_drop(fake_cluster: FakeCluster) -> None:
    """``inbox drop`` dead-letters exactly the named head; another id changes nothing."""
    from svit_cluster.client import SvitClient

    sd = str(fake_cluster.state_dir)
    pid = f"svit://acme/drop-{fake_cluster.doc['cluster']}"
    with SvitClient(fake_cluster.url, ADMIN) as client:
        client.create_process(pid, memory={})
        client.inbox(pid, {"content": "/fail", "id": "m-bad"})
        client.inbox(pid, {"content": "next", "id": "m-next"})
        _, version = client.state(pid, "/inbox")
    wrong = CliRunner().invoke(cli, ["inbox", "drop", pid, "--state-dir", sd, "--message-id",
                                     "m-next", "--reason", "stuck", "-o", "json"])
    assert wrong.exit_code == 1 and "inbox_conflict" in wrong.stderr
    usage = CliRunner().invoke(cli, ["inbox", "drop", pid, "--state-dir", sd, "--reason", "x"])
    assert usage.exit_code == 2
    doc = run_json(["inbox", "drop", pid, "--state-dir", sd, "--message-id", "m-bad",
                    "--reason", "the model fails on it", "--output", "json"])
    assert doc["process_id"] == pid and doc["version"] == version + 1
    letter = doc["dropped"]
    assert letter["message_id"] == "m-bad" and letter["reason"] == "the model fails on it"
    assert letter["message"] == {"content": "/fail", "id": "m-bad"}
    with SvitClient(fake_cluster.url, ADMIN) as client:
        inbox, _ = client.state(pid, "/inbox")
        dead, _ = client.state(pid, "/thread/dead_letters")
    assert inbox == [{"content": "next", "id": "m-next"}] and dead == [letter]
    text = CliRunner().invoke(cli, ["inbox", "drop", pid, "--state-dir", sd, "--hash",
                                    letter["inbox_hash"], "--reason", "again"])
    assert text.exit_code == 1  # that head is gone: the next one has another hash
