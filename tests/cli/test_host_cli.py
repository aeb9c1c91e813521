"""`svit-cluster restart-host` and `add-host`: their argument
checks, Ray-free (starting real hosts needs a Ray cluster: the cluster suite)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from svit_cluster.cli import cli


def recorded_cluster(tmp_path: Path) -> Path:
    doc = {"hosts": {"h1": {}, "h2": {}}, "lease_ttl_s": 5, "snapshot_every": 100,
           "passivate_after_s": 300.0, "max_request_bytes": 1 << 20, "cluster": "t"}
    (tmp_path / "cluster.json").write_text(json.dumps(doc))
    return tmp_path


def test_restart_host_names_the_known_hosts_for_an_unknown_one(tmp_path: Path) -> None:
    state = recorded_cluster(tmp_path)
    result = CliRunner().invoke(cli, ["restart-host", "h9", "--state-dir", str(state)])
    assert result.exit_code != 0
    assert "no host 'h9'" in result.output and "h1, h2" in result.output


def test_add_host_refuses_an_existing_or_bad_name(tmp_path: Path) -> None:
    state = recorded_cluster(tmp_path)
    result = CliRunner().invoke(cli, ["add-host", "h2", "--state-dir", str(state)])
    assert result.exit_code != 0 and "already exists" in result.output
    result = CliRunner().invoke(cli, ["add-host", "a/b", "--state-dir", str(state)])
    assert result.exit_code != 0 and "host name" in result.output


def test_both_need_a_recorded_cluster(tmp_path: Path) -> None:
    for args in (["restart-host", "h1"], ["add-host"]):
        result = CliRunner().invoke(cli, [*args, "--state-dir", str(tmp_path)])
        assert result.exit_code != 0 and "no cluster in" in result.output
