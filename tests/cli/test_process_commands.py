"""``svit-cluster create | activate | state | list`` and ``GET /v1/processes``.

The real gateway app under uvicorn on loopback (``gateway`` fixture of
``conftest.py``: auth, tenant checks, error bodies) in front of the in-memory
``InProcessRouter``; the SDK (sync and async) and the CLI through click's
runner. The listing's Redis side (``SCAN`` paging, single server and Redis
Cluster) is tested in tests/store/test_list_processes.py, and the whole
path on a real cluster by tests/cli/test_readme_agent.py.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner, Result

from svit_cluster.cli import cli
from svit_cluster.client import AsyncSvitClient, SvitClient
from svit_cluster.errors import Forbidden
from tests.cli.conftest import ACME, ADMIN, CliRouter

_n = itertools.count(1)

SET_STATUS = Path(__file__).parents[2] / "docs" / "examples" / "set-status.svit"


def run(args: list[str], url: str, token: str = ADMIN, code: int = 0) -> Result:
    result = CliRunner().invoke(cli, [*args, "--url", url, "--token", token])
    assert result.exit_code == code, (args, result.output)
    assert "Traceback" not in result.output
    return result


def run_json(args: list[str], url: str, token: str = ADMIN, code: int = 0) -> Any:
    return json.loads(run([*args, "--output", "json"], url, token, code).stdout)


def test_create_activate_state_from_the_cli(gateway: tuple[str, CliRouter],
                                           tmp_path: Path) -> None:
    url, _ = gateway
    pid = f"svit://acme/cli-{next(_n)}"
    memory = tmp_path / "memory.json"
    memory.write_text('{"status": "idle", "n": 1}')
    made = run_json(["create", pid, "--memory", f"@{memory}", "--script",
                     f"set-status={SET_STATUS}", "--passivate-after", "60"], url, ACME)
    assert made["process_id"] == pid and made["version"] == 0
    assert made["residency"]["passivate_after_s"] == 60
    assert run_json(["state", pid, "/memory"], url, ACME) == {
        "process_id": pid, "path": "/memory", "version": 0,
        "value": {"n": 1, "status": "idle"}}

    done = run_json(["activate", pid, "set-status", '{"status": "busy"}'], url, ACME)
    assert (done["status"], done["version"], done["output"]) == ("committed", 1, "busy")
    assert done["expected_version"] == 0 and done["changed"] == ["/memory/status"]
    text = run(["state", pid, "/memory/status"], url, ACME).output
    assert text.strip() == '/memory/status at version 1: "busy"'

    # a stale --expected-version is a conflict: exit 1, nothing committed
    stale = run(["activate", pid, "set-status", '{"status": "x"}', "--expected-version",
                 "0"], url, ACME, code=1)
    assert "conflict" in stale.output and "version 1" in stale.output
    # the same request id again replays the first outcome (exit 0, not a second commit)
    again = run_json(["activate", pid, "set-status", '{"status": "busy"}',
                      "--request-id", done["request_id"], "--expected-version", "0"],
                     url, ACME)
    assert again["replayed"] is True and again["version"] == 1
    # a script that fails is rejected: exit 1
    bad = run(["activate", pid, "no-such-script"], url, ACME, code=1)
    assert "script_not_found" in bad.output
    # a second create of the same id is refused (409: exit 1), one line
    dup = run(["create", pid], url, ACME, code=1)
    assert "conflict" in dup.output


def test_usage_errors_exit_2(gateway: tuple[str, CliRouter], tmp_path: Path) -> None:
    url, _ = gateway
    pid = f"svit://acme/cli-{next(_n)}"
    for args in (["create", pid, "--memory", "{not json"],
                 ["create", pid, "--memory", "[1]"],
                 ["create", pid, "--memory", f"@{tmp_path / 'missing.json'}"],
                 ["create", pid, "--script", "no-equals-sign"],
                 ["create", pid, "--script", f"x={tmp_path / 'missing.svit'}"],
                 ["activate", pid, "s", "{bad"]):
        result = run(args, url, ACME, code=2)
        assert "Traceback" not in result.output


def test_list_is_tenant_scoped_and_paged(gateway: tuple[str, CliRouter]) -> None:
    url, _ = gateway
    n = next(_n)
    acme = {f"svit://acme/list{n}-{i}" for i in range(5)}
    other = f"svit://other{n}/x"
    with SvitClient(url, ADMIN) as admin:
        for pid in sorted(acme | {other}):
            admin.create_process(pid)
        everyone = _every(admin, None)
        assert acme | {other} <= everyone
        assert _every(admin, f"other{n}") == {other}  # an admin's tenant filter
    with SvitClient(url, ACME) as tenant:
        mine = _every(tenant, None)
        assert acme <= mine and all(p.startswith("svit://acme/") for p in mine)
        assert _every(tenant, "acme") == mine
        with pytest.raises(Forbidden):
            tenant.list_processes(tenant=f"other{n}")
        page = tenant.list_processes(limit=2)
        assert len(page.processes) == 2 and page.next_after is not None
        entry = page.processes[0]
        assert entry.active is True and entry.host == "inprocess" and entry.version >= 0
        # the owner's fencing token; no commit time from a gateway without Redis
        assert entry.token == 0 and entry.last_commit_at is None
    refused = httpx.get(url + "/v1/processes", params={"limit": 0},
                        headers={"Authorization": f"Bearer {ADMIN}"})
    assert refused.status_code == 400

    doc = run_json(["list", "--limit", "3"], url, ACME)
    assert len(doc["processes"]) == 3 and doc["next"] is not None
    rest = run_json(["list", "--after", doc["next"], "--limit", "1000"], url, ACME)
    assert {p["process_id"] for p in doc["processes"] + rest["processes"]} == mine
    assert rest["next"] is None
    text = run(["list", "--tenant", f"other{n}"], url, ADMIN).output
    assert other in text and "acme" not in text
    forbidden = run(["list", "--tenant", f"other{n}"], url, ACME, code=1)
    assert "forbidden" in forbidden.output


async def test_async_list(gateway: tuple[str, CliRouter]) -> None:
    url, _ = gateway
    pid = f"svit://acme/async-{next(_n)}"
    async with AsyncSvitClient(url, ACME) as client:
        await client.create_process(pid)
        seen: set[str] = set()
        after = None
        while True:
            page = await client.list_processes(limit=50, after=after)
            seen |= {p.process_id for p in page.processes}
            after = page.next_after
            if after is None:
                break
    assert pid in seen


def _every(client: SvitClient, tenant: str | None) -> set[str]:
    seen: set[str] = set()
    after = None
    while True:
        page = client.list_processes(tenant=tenant, limit=3, after=after)
        seen |= {p.process_id for p in page.processes}
        after = page.next_after
        if after is None:
            return seen


def test_an_unknown_outcome_exits_3_and_says_how_to_repeat_it() -> None:
    from svit_cluster.local import free_port

    dead = f"http://127.0.0.1:{free_port()}"
    result = run(["activate", "svit://acme/x", "inc", "--expected-version", "4",
                  "--request-id", "r-42"], dead, ACME, code=3)
    (line,) = [ln for ln in result.stderr.splitlines() if ln.startswith("error:")]
    assert line.startswith("error: unavailable: ")
    assert "outcome is unknown: repeat with --request-id r-42 --expected-version 4" in line
