"""Progress of long waits goes to stderr (a rich spinner on a
terminal, plain lines otherwise), and ``--output json`` keeps stdout pure JSON.

Against the stand-in cluster of ``conftest.py`` (real gateway over loopback HTTP,
real Redis and etcd, ``sleep`` processes as hosts). ``FORCE_COLOR`` makes rich
treat click's captured stderr as a terminal.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner, Result

from svit_cluster.cli import cli
from svit_cluster.errors import UnavailableError
from svit_cluster.process import Script, Value
from tests.cli.conftest import ADMIN, FakeCluster


def _run(args: list[str]) -> Result:
    return CliRunner().invoke(cli, args)


def test_down_json_with_a_spinner_on_a_terminal_stderr(
        fake_cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FORCE_COLOR", "1")
    result = _run(["down", "--state-dir", str(fake_cluster.state_dir), "--output", "json"])
    assert result.exit_code == 0, (result.stdout, result.stderr)
    doc = json.loads(result.stdout)  # nothing but the JSON document on stdout
    assert doc["down"] is True
    assert "stopping" not in result.stdout
    # rich's progress on stderr: each finished step kept with its duration
    assert "✓" in result.stderr and "stopping gateway" in result.stderr
    assert "\x1b[" in result.stderr  # rendered for a terminal


def test_down_plain_progress_lines_when_stderr_is_not_a_terminal(
        fake_cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.setenv("TERM", "dumb")
    result = _run(["down", "--state-dir", str(fake_cluster.state_dir), "--output", "json"])
    assert result.exit_code == 0, (result.stdout, result.stderr)
    assert json.loads(result.stdout)["down"] is True
    assert "  … stopping gateway" in result.stderr.splitlines()
    assert "\x1b[" not in result.stderr


@pytest.mark.parametrize("terminal", [False, True])
def test_smoke_retries_are_shown_on_stderr_and_json_stays_pure(
        fake_cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch, terminal: bool) -> None:
    if terminal:
        monkeypatch.setenv("FORCE_COLOR", "1")
        monkeypatch.setenv("COLUMNS", "200")
    else:
        monkeypatch.delenv("FORCE_COLOR", raising=False)
    router = fake_cluster.router
    real_create = router.create
    calls = 0

    async def warming_up(process_id: str, memory: Value, scripts: dict[str, Script]
                         ) -> dict[str, Any]:
        nonlocal calls
        calls += 1
        if calls <= 2:
            raise UnavailableError("no live host yet")
        return await real_create(process_id, memory, scripts)

    monkeypatch.setattr(router, "create", warming_up)
    pid = f"svit://smoke/progress-{terminal}-{fake_cluster.state_dir.parent.name[-10:]}"
    result = _run(["smoke", "--url", fake_cluster.url, "--token", ADMIN, "--attempts", "5",
                   "--process-id", pid, "--output", "json"])
    assert result.exit_code == 0, (result.stdout, result.stderr)
    doc = json.loads(result.stdout)
    assert doc["ok"] is True and doc["process_id"] == pid and calls == 3
    assert "attempt 1/5 failed (unavailable); retrying in" in result.stderr
    assert "attempt 2/5 failed (unavailable); retrying in" in result.stderr
    assert "attempt 3/5" not in result.stderr
