"""The operator's mount grants (MountsConfig): parsing, matching, providers, secrets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from svit_cluster.cluster import ClusterConfig
from svit_cluster.errors import ConfigurationError, MountUnavailable
from svit_cluster.mounts import FolderMount, MountsConfig, SqlQueryMount, ValueMount
from svit_cluster.values import Limits

DSN = "postgresql://svit:hunter2-secret@db.internal:5432/crm"


def test_nothing_is_mounted_by_default_and_grants_match_process_ids(tmp_path: Path) -> None:
    assert MountsConfig.parse(None).grants == [] and MountsConfig.parse([]).grants == []
    config = MountsConfig.parse([
        {"name": "ws", "kind": "writable_folder", "source": str(tmp_path),
         "processes": ["svit://acme/*"]},
        {"name": "policy", "kind": "value", "value": {"max": 5}, "processes": ["*"]},
    ])
    assert [g.name for g in config.for_process("svit://acme/agent-1")] == ["ws", "policy"]
    assert [g.name for g in config.for_process("svit://other/agent-1")] == ["policy"]
    ws, policy = config.grants
    folder = ws.provider(Limits())
    assert isinstance(folder, FolderMount) and folder.descriptor().access == "read-write"
    value = policy.provider(Limits())
    assert isinstance(value, ValueMount) and value.descriptor().source == "policy"


@pytest.mark.parametrize(("grant", "names"), [
    ({"name": "a b", "kind": "value", "processes": ["*"]}, "grant 0 (a b), field name"),
    ({"name": "ws", "kind": "folder", "processes": ["*"]}, "needs source"),
    ({"name": "ws", "kind": "folder", "source": "relative/dir", "processes": ["*"]},
     "absolute path"),
    ({"name": "ws", "kind": "value", "processes": []}, "grant 0 (ws), field processes"),
    ({"name": "ws", "kind": "value"}, "grant 0 (ws), field processes: Field required"),
    ({"name": "ws", "kind": "value", "processes": ["*"], "sourec": "/x"},
     "grant 0 (ws), field sourec: Extra inputs"),
    ({"name": "ws", "kind": "nfs", "processes": ["*"]}, "grant 0 (ws), field kind"),
    # a typo in a required field names both the typo and the missing field
    ({"name": "ws", "kind": "value", "procesess": ["*"]},
     "field processes: Field required; grant 0 (ws), field procesess: Extra inputs"),
    (5, "grant 0: must be an object of grant fields"),
    ({"name": "q", "kind": "sql_query", "label": "l", "query": "SELECT 1",
      "processes": ["*"]}, "exactly one of dsn and dsn_env"),
])
def test_a_bad_grant_is_refused_naming_the_grant_and_the_field(grant: object,
                                                                names: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        MountsConfig.parse([grant])
    assert names in info.value.message


def test_a_folder_source_missing_on_this_machine_is_refused_by_check_sources(
        tmp_path: Path) -> None:
    config = MountsConfig.parse([{"name": "ws", "kind": "writable_folder",
                                  "source": str(tmp_path / "absent"), "processes": ["*"]}])
    with pytest.raises(ConfigurationError, match=r"ws: source .*absent is not a directory"):
        config.check_sources()
    # The grant's identity is known without the folder: committed, shown detached.
    assert config.grants[0].descriptor().to_value() == {
        "access": "read-write", "kind": "folder", "locality": "local",
        "source": str(tmp_path / "absent")}
    (tmp_path / "absent").mkdir()
    config.check_sources()
    assert config.grants[0].provider(Limits()).descriptor() == config.grants[0].descriptor()


def test_duplicate_names_and_a_non_list_are_refused() -> None:
    grant = {"name": "ws", "kind": "value", "processes": ["*"]}
    with pytest.raises(ConfigurationError, match="unique: ws"):
        MountsConfig.parse([grant, grant])
    with pytest.raises(ConfigurationError, match="list"):
        MountsConfig.parse(5)


def test_a_dsn_never_shows_in_a_repr_or_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    grant = {"name": "crm", "kind": "sql_query", "label": "customers", "dsn": DSN,
             "query": "SELECT 1", "processes": ["*"]}
    config = MountsConfig.parse([grant])
    assert "hunter2" not in repr(config) and "hunter2" not in str(config.grants[0])
    provider = config.grants[0].provider(Limits())
    assert isinstance(provider, SqlQueryMount)
    assert "hunter2" not in repr(provider.descriptor())
    # An invalid SVIT_MOUNTS_JSON is reported without its value.
    monkeypatch.setenv("SVIT_MOUNTS_JSON", f'{{"dsn": "{DSN}"}}')
    with pytest.raises(ConfigurationError) as bad_shape:
        ClusterConfig.from_env()
    monkeypatch.setenv("SVIT_MOUNTS_JSON", f'[{{"dsn": "{DSN}", "name": "x"}}]')
    with pytest.raises(ConfigurationError) as bad_grant:
        ClusterConfig.from_env()
    for info in (bad_shape, bad_grant):
        assert "SVIT_MOUNTS_JSON" in info.value.message
        assert "hunter2" not in info.value.message


def test_a_dsn_env_unset_on_this_host_is_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SVIT_TEST_CRM_DSN", raising=False)
    grant = MountsConfig.parse([{"name": "crm", "kind": "sql_query", "label": "customers",
                                 "dsn_env": "SVIT_TEST_CRM_DSN", "query": "SELECT 1",
                                 "processes": ["*"]}]).grants[0]
    with pytest.raises(MountUnavailable, match="SVIT_TEST_CRM_DSN is not set"):
        grant.provider(Limits())
    monkeypatch.setenv("SVIT_TEST_CRM_DSN", DSN)
    assert grant.provider(Limits()).descriptor().source == "customers"


def test_the_cluster_config_carries_the_grants_from_the_environment(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    grants = [{"name": "ws", "kind": "folder", "source": str(tmp_path), "processes": ["*"]}]
    monkeypatch.setenv("SVIT_MOUNTS_JSON", json.dumps(grants))
    assert ClusterConfig.from_env().mounts == grants
