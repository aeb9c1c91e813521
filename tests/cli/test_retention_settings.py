"""What a process keeps in Redis besides its log is set per cluster: the signal
stream's cap and the per-session event log's cap travel from `svit-cluster up`
(or the environment) through cluster.json to every host's ClusterConfig."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from svit_cluster.cli import cli
from svit_cluster.cluster._config import ClusterConfig
from svit_cluster.defaults import DEFAULT_MAX_EVENTS, DEFAULT_SIGNAL_RETENTION
from svit_cluster.errors import ConfigurationError
from svit_cluster.local import ClusterSpec

_DOC = {"cluster": "c", "etcd": {"endpoint": "127.0.0.1:1"}, "redis": {"url": "redis://x"},
        "ray": {"address": "127.0.0.1:2"}, "lease_ttl_s": 5, "snapshot_every": 10,
        "passivate_after_s": 60}


def test_cluster_json_retention_reaches_every_host(tmp_path: Path) -> None:
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps({**_DOC, "signal_retention": 300, "max_events": 1200}))
    config = ClusterConfig.from_cluster_json(path)
    assert (config.signal_retention, config.max_events) == (300, 1200)


def test_a_cluster_json_without_them_keeps_the_defaults(tmp_path: Path) -> None:
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps(_DOC))
    config = ClusterConfig.from_cluster_json(path)
    assert (config.signal_retention, config.max_events) == (
        DEFAULT_SIGNAL_RETENTION, DEFAULT_MAX_EVENTS)


@pytest.mark.parametrize("field", ["signal_retention", "max_events"])
@pytest.mark.parametrize("value", [15, 10_000_001])
def test_the_spec_refuses_a_cap_out_of_range(tmp_path: Path, field: str, value: int) -> None:
    with pytest.raises(ConfigurationError, match=field):
        ClusterSpec(state_dir=tmp_path, **{field: value}).validate()


@pytest.mark.parametrize("flag", ["--signal-retention", "--max-events"])
def test_up_refuses_a_cap_out_of_range_before_starting_anything(tmp_path: Path,
                                                                 flag: str) -> None:
    state = tmp_path / "state"
    result = CliRunner().invoke(cli, ["up", "--state-dir", str(state), flag, "8"])
    assert result.exit_code == 2, result.output
    assert flag in result.output
    assert not (state / "cluster.json").exists()
