"""The operator's ports block on the local cluster: `svit-cluster up --ports FILE`."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from svit_cluster.cli import cli
from svit_cluster.cluster._config import ClusterConfig


def test_up_refuses_an_invalid_ports_file_before_starting_anything(tmp_path: Path) -> None:
    bad = tmp_path / "ports.json"
    bad.write_text(json.dumps({"http": {"enabled": True, "allow_host": ["example.org"]}}))
    state = tmp_path / "state"
    result = CliRunner().invoke(cli, ["up", "--state-dir", str(state), "--ports", str(bad)])
    assert result.exit_code == 2, result.output
    assert "bad ports setting http.allow_host" in result.output
    assert not (state / "cluster.json").exists()


def test_cluster_json_ports_reach_every_host(tmp_path: Path) -> None:
    doc = {"cluster": "c", "etcd": {"endpoint": "127.0.0.1:1"}, "redis": {"url": "redis://x"},
           "ray": {"address": "127.0.0.1:2"}, "lease_ttl_s": 5, "snapshot_every": 10,
           "passivate_after_s": 60, "ports": {"spawn": {"enabled": True}}}
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps(doc))
    assert ClusterConfig.from_cluster_json(path).ports == {"spawn": {"enabled": True}}
