"""The README's agent walkthrough, run command by command on a real local cluster.

Every ``sh`` block of README.md's "Host an agent" section that follows a
``<!-- walkthrough: ... -->`` line is run, in order, as written: each
``svit-cluster`` command (``.venv/bin/`` dropped, ``\\`` continuations joined)
goes through click's runner in a folder whose ``.svit`` is the cluster's state
folder and whose ``docs`` is this checkout's, with no ``SVIT_URL``/``SVIT_TOKEN``
set -- what a new user in a clone gets after ``svit-cluster up``. Each command
must exit 0, or the code its ``# exits N`` comment gives, and print the
``#   ...`` lines under it, in order (``...`` matches anything). So the README
cannot drift from the CLI: changing either breaks this test.

One local cluster (1 host, the simulated reasoner, no dispatcher) for the module;
it also runs ``list`` through the Ray router (tenant scope, owner hosts).
"""

from __future__ import annotations

import re
import shlex
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from click.testing import CliRunner

from svit_cluster.cli import cli
from svit_cluster.local import ClusterSpec, LocalCluster

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).parents[2]
MARKER = "<!-- walkthrough:"


@dataclass
class Step:
    """One README command: its arguments, expected exit code and output lines."""

    line: str
    args: list[str]
    exit_code: int = 0
    expect: list[str] = field(default_factory=list)


def walkthrough(readme: str) -> list[Step]:
    """The steps of the marked ``sh`` blocks of the "Host an agent" section."""
    section = readme.split("\n## Host an agent\n", 1)[1].split("\n## ", 1)[0]
    steps: list[Step] = []
    lines = section.splitlines()
    i = 0
    while i < len(lines):
        if not lines[i].startswith(MARKER):
            i += 1
            continue
        assert lines[i + 1] == "```sh", lines[i + 1]
        i += 2
        pending = ""
        while lines[i] != "```":
            text = lines[i]
            i += 1
            if text.startswith("#"):
                assert steps, text
                steps[-1].expect.append(text.removeprefix("#").strip())
                continue
            if text.endswith("\\"):
                pending += text[:-1]
                continue
            command, pending = pending + text, ""
            exits = re.search(r"#\s*exits\s+(\d)\s*$", command)
            words = shlex.split(command, comments=True)
            assert words[0] in ("svit-cluster", ".venv/bin/svit-cluster"), command
            steps.append(Step(command, words[1:], int(exits.group(1)) if exits else 0))
    return steps


def matches(expect: list[str], output: str) -> bool:
    """``expect`` are lines of ``output``, in order; ``...`` matches any text."""
    patterns = [re.compile(".*".join(re.escape(p) for p in e.split("..."))) for e in expect]
    got = iter(line.strip() for line in output.splitlines())
    return all(any(p.fullmatch(line) for line in got) for p in patterns)


@pytest.fixture(scope="module")
def user_folder() -> Iterator[Path]:
    """A folder holding ``.svit`` (a running 1-host cluster) and this checkout's ``docs``."""
    # short paths: Ray's AF_UNIX sockets live under the state folder (107-byte limit)
    state = Path(tempfile.mkdtemp(prefix="rdm-"))
    cluster = LocalCluster.up(ClusterSpec(state_dir=state / "s", hosts=1, lease_ttl_s=3,
                                          dispatchers=0))
    try:
        folder = state / "clone"
        folder.mkdir()
        (folder / ".svit").symlink_to(state / "s")
        (folder / "docs").symlink_to(ROOT / "docs")
        yield folder
    finally:
        cluster.down()
        shutil.rmtree(state, ignore_errors=True)


def test_the_walkthrough_covers_the_process_commands() -> None:
    steps = walkthrough((ROOT / "README.md").read_text())
    used = {" ".join(s.args[:2]) if s.args[0] == "inbox" else s.args[0] for s in steps}
    assert {"create", "chat", "activate", "state", "list", "inbox drop", "delete"} <= used
    pids = {a for s in steps for a in s.args if a.startswith("svit://")}
    assert pids == {"svit://local/agent"}  # one process for the whole section
    readme = (ROOT / "README.md").read_text()
    assert "curl " not in readme.split("\n## Host an agent\n", 1)[1].split("\n## ", 1)[0]
    assert "python3 -c" not in readme


def test_every_walkthrough_command_runs_as_written(
        user_folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SVIT_URL", raising=False)
    monkeypatch.delenv("SVIT_TOKEN", raising=False)
    monkeypatch.chdir(user_folder)
    steps = walkthrough((ROOT / "README.md").read_text())
    drops = [s for s in steps if s.args[:2] == ["inbox", "drop"]]
    for step in steps:
        result = CliRunner().invoke(cli, step.args, input="")
        assert "Traceback" not in result.output, (step.line, result.output)
        assert result.exit_code == step.exit_code, (step.line, result.output)
        assert matches(step.expect, result.output), (step.line, step.expect, result.output)
        if step.args[0] == "chat" and step.exit_code == 1:
            # the failed turn's hint is the README's recovery command, word for word
            hint = [ln.strip() for ln in result.output.splitlines() if "inbox drop" in ln]
            assert [shlex.split(h)[1:] for h in hint] == [drops[0].args], hint


def test_list_on_the_cluster_is_tenant_scoped_with_owner_hosts(
        user_folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``list`` through the Ray router: the store's SCAN plus the route cache."""
    import json

    monkeypatch.delenv("SVIT_URL", raising=False)
    monkeypatch.delenv("SVIT_TOKEN", raising=False)
    monkeypatch.chdir(user_folder)
    local_token = json.loads((user_folder / ".svit" / "cluster.json").read_text())[
        "tokens"]["local"]
    for pid in ("svit://local/l1", "svit://other/o1"):
        assert CliRunner().invoke(cli, ["create", pid]).exit_code == 0

    def listed(*args: str) -> dict[str, dict[str, object]]:
        result = CliRunner().invoke(cli, ["list", "-o", "json", "--limit", "100", *args])
        assert result.exit_code == 0, result.output
        doc = json.loads(result.stdout)
        return {p["process_id"]: p for p in doc["processes"]}

    everyone = listed()
    assert {"svit://local/l1", "svit://other/o1"} <= set(everyone)
    assert everyone["svit://other/o1"] == {"process_id": "svit://other/o1", "version": 0,
                                           "active": True, "host": "h1"}
    assert set(listed("--tenant", "other")) == {"svit://other/o1"}
    mine = listed("--token", local_token)
    assert "svit://local/l1" in mine and all(p.startswith("svit://local/") for p in mine)
    refused = CliRunner().invoke(cli, ["list", "--token", local_token, "--tenant", "other"])
    assert refused.exit_code == 1 and "forbidden" in refused.output
