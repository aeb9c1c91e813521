"""The chart's ``mounts:`` block: grants reach the hosts as a valid ``SVIT_MOUNTS_JSON``,
and the volumes and environment they need reach every pod that runs process actors.

Process actors run only on the Ray worker hosts (``svit-node host``: the node
that advertises the ``svit_host:<pod>`` resource the actors are pinned with);
the head runs no svit actor and the gateway only calls them. So the worker host
pods of both ray modes get ``mounts.volumes`` and ``mounts.env``, and no other
pod does.
"""

from __future__ import annotations

import json
import posixpath
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from svit_cluster.cluster._config import ClusterConfig
from svit_cluster.mounts import MountGrant, MountsConfig

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "svit-cluster"
MOUNTS = CHART / "ci" / "mounts-values.yaml"
RELEASE = "svit"

Manifest = dict[str, Any]
Render = Callable[..., list[Manifest]]
RunHelm = Callable[..., subprocess.CompletedProcess[str]]


def _mounts_json(manifests: list[Manifest]) -> str:
    (cm,) = [m for m in manifests
             if m["kind"] == "ConfigMap" and m["metadata"]["name"] == f"{RELEASE}-config"]
    raw: str = cm["data"]["SVIT_MOUNTS_JSON"]
    return raw


def _pod_specs(manifests: list[Manifest]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(owner, pod spec) of every pod the manifests create (RayCluster groups included)."""
    for m in manifests:
        owner = f"{m['kind']}/{m['metadata']['name']}"
        if m["kind"] in ("Deployment", "StatefulSet"):
            yield owner, m["spec"]["template"]["spec"]
        elif m["kind"] == "Pod":
            yield owner, m["spec"]
        elif m["kind"] == "RayCluster":
            yield owner + "/head", m["spec"]["headGroupSpec"]["template"]["spec"]
            for group in m["spec"]["workerGroupSpecs"]:
                yield f"{owner}/{group['groupName']}", group["template"]["spec"]


def _hosts_actors(spec: dict[str, Any]) -> bool:
    """A pod runs process actors iff a container runs ``svit-node host``."""
    return any((c.get("args") or [])[:2] == ["svit-node", "host"] for c in spec["containers"])


def _split(manifests: list[Manifest]) -> tuple[list[tuple[str, dict[str, Any]]],
                                               list[tuple[str, dict[str, Any]]]]:
    pods = list(_pod_specs(manifests))
    return [p for p in pods if _hosts_actors(p[1])], [p for p in pods if not _hosts_actors(p[1])]


def _under(path: str, root: str) -> bool:
    root = root.rstrip("/") or "/"
    return path == root or path.startswith(root + "/")


def _write(tmp_path: Path, doc: dict[str, Any]) -> Path:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_default_values_mount_nothing(render: Render) -> None:
    manifests = render()
    assert _mounts_json(manifests) == "[]"
    assert MountsConfig.parse(json.loads(_mounts_json(manifests))).grants == []
    hosts, _ = _split(manifests)
    assert hosts
    for owner, spec in hosts:
        assert {v["name"] for v in spec["volumes"]} == {"tmp", "dshm"}, owner
        (c,) = spec["containers"]
        assert {m["mountPath"] for m in c["volumeMounts"]} == {"/tmp", "/dev/shm"}, owner


def test_grants_render_into_the_config_the_hosts_read(
        render: Render, monkeypatch: pytest.MonkeyPatch) -> None:
    raw = _mounts_json(render(MOUNTS))
    # The real parser, and the path a host takes (SVIT_MOUNTS_JSON -> ClusterConfig).
    monkeypatch.setenv("SVIT_MOUNTS_JSON", raw)
    config = MountsConfig.parse(ClusterConfig.from_env().mounts)
    by_name = {g.name: g for g in config.grants}
    assert list(by_name) == ["workspace", "handbook", "customers", "policy"]
    ws = by_name["workspace"]
    assert (ws.kind, ws.source, ws.processes) == (
        "writable_folder", "/srv/svit/workspace", ["svit://acme/*"])
    assert by_name["handbook"].kind == "folder"
    sql = by_name["customers"]
    assert (sql.kind, sql.dsn, sql.dsn_env, sql.label) == (
        "sql_query", None, "CUSTOMERS_DSN", "customers by region")
    assert (sql.query, sql.params) == ("SELECT id, name FROM customers WHERE region = %s", ["eu"])
    assert (sql.statement_timeout_ms, sql.cache_ttl_s) == (2000, 60.0)
    assert by_name["policy"].value == {"max_refund": 50, "currency": "EUR"}
    # camelCase in the values, MountsConfig's field names in the JSON; unset keys stay unset.
    doc = json.loads(raw)
    assert {k for g in doc for k in g} <= set(MountGrant.model_fields)
    assert "statement_timeout_ms" not in doc[0]
    assert not any("dsn" in g for g in doc)
    assert [g.name for g in config.for_process("svit://acme/support-1")] == [
        "workspace", "handbook", "customers", "policy"]
    assert [g.name for g in config.for_process("svit://globex/x")] == ["handbook", "policy"]


@pytest.mark.parametrize("mode", ["pods", "kuberay"])
def test_volumes_reach_every_pod_that_runs_process_actors(render: Render, mode: str) -> None:
    manifests = render(MOUNTS, f"ray.mode={mode}")
    grants = MountsConfig.parse(json.loads(_mounts_json(manifests))).grants
    values = yaml.safe_load(MOUNTS.read_text())["mounts"]
    hosts, others = _split(manifests)
    assert len(hosts) == 1  # the worker StatefulSet, or the RayCluster's worker group
    for owner, spec in hosts:
        volumes = {v["name"]: v for v in spec["volumes"]}
        assert volumes["svit-workspace"] == {
            "name": "svit-workspace", "persistentVolumeClaim": {"claimName": "svit-workspace"}}
        assert volumes["handbook"] == {"name": "handbook", "nfs": {
            "server": "nfs.example.org", "path": "/exports/handbook", "readOnly": True}}
        (c,) = spec["containers"]
        mounts = {m["name"]: m for m in c["volumeMounts"]}
        assert mounts["svit-workspace"] == {"name": "svit-workspace", "mountPath": "/srv/svit"}
        assert mounts["handbook"] == {
            "name": "handbook", "mountPath": "/srv/handbook", "readOnly": True}
        assert {m["name"] for m in c["volumeMounts"]} <= set(volumes), owner
        # Every folder grant's source is on a mounted volume, read-write when writable.
        for g in grants:
            if g.kind not in ("folder", "writable_folder"):
                continue
            (mount,) = [m for m in c["volumeMounts"] if _under(g.source or "", m["mountPath"])]
            assert posixpath.isabs(g.source or "")
            if g.kind == "writable_folder":
                assert not mount.get("readOnly"), (owner, g.name)
    for owner, spec in others:
        names = {v["name"] for v in spec.get("volumes") or []}
        assert not names & {v["name"] for v in values["volumes"]}, owner
        for c in spec["containers"]:
            assert "CUSTOMERS_DSN" not in {e["name"] for e in c.get("env") or []}, owner


@pytest.mark.parametrize("mode", ["pods", "kuberay"])
def test_sql_grant_reads_its_connection_string_from_a_secret(render: Render, mode: str) -> None:
    manifests = render(MOUNTS, f"ray.mode={mode}")
    (sql,) = [g for g in json.loads(_mounts_json(manifests)) if g["kind"] == "sql_query"]
    hosts, _ = _split(manifests)
    for owner, spec in hosts:
        (c,) = spec["containers"]
        (var,) = [e for e in c["env"] if e["name"] == sql["dsn_env"]]
        assert var == {"name": "CUSTOMERS_DSN", "valueFrom": {
            "secretKeyRef": {"name": "svit-customers-db", "key": "dsn"}}}, owner
    # Nothing but the variable's name is in the ConfigMap.
    assert "postgres" not in _mounts_json(manifests)
    assert "dsn" not in sql


def _fails(run_helm: RunHelm, values: Path) -> str:
    proc = run_helm("template", RELEASE, str(CHART), "-f", str(values))
    assert proc.returncode != 0, "rendered, but must be rejected"
    return proc.stderr


def test_folder_outside_every_volume_fails(run_helm: RunHelm, tmp_path: Path) -> None:
    err = _fails(run_helm, _write(tmp_path, {"mounts": {
        "grants": [{"name": "workspace", "kind": "writable_folder", "source": "/data/ws",
                    "processes": ["*"]}],
        "volumes": [{"name": "ws", "mountPath": "/srv/svit",
                     "persistentVolumeClaim": {"claimName": "ws"}}]}}))
    assert ("mounts.grants[0] (workspace): source /data/ws is not under any "
            "mounts.volumes[].mountPath (/srv/svit)") in err
    # No volume at all: the same refusal.
    err = _fails(run_helm, _write(tmp_path, {"mounts": {"grants": [
        {"name": "docs", "kind": "folder", "source": "/srv/docs", "processes": ["*"]}]}}))
    assert "source /srv/docs is not under any mounts.volumes[].mountPath (none)" in err


VOLUME = {"name": "ws", "mountPath": "/srv/svit", "persistentVolumeClaim": {"claimName": "ws"}}
WRITABLE = {"name": "ws", "kind": "writable_folder", "source": "/srv/svit/ws", "processes": ["*"]}
SQL = {"name": "crm", "kind": "sql_query", "label": "crm", "query": "SELECT 1",
       "dsnEnv": "CRM_DSN", "processes": ["*"]}
DSN_ENV = {"name": "CRM_DSN", "valueFrom": {"secretKeyRef": {"name": "crm", "key": "dsn"}}}


@pytest.mark.parametrize("mounts, message", [
    ({"grants": [{**WRITABLE, "source": "/srv/svitx/ws"}], "volumes": [VOLUME]},
     "source /srv/svitx/ws is not under any mounts.volumes[].mountPath"),
    ({"grants": [{**WRITABLE, "source": "/srv/svit/../etc"}], "volumes": [VOLUME]},
     "must be a clean absolute directory path"),
    ({"grants": [WRITABLE], "volumes": [{**VOLUME, "readOnly": True}]},
     "is on the read-only volume ws; a writable_folder needs it mounted read-write"),
    # the deepest volume holding the source decides
    ({"grants": [{**WRITABLE, "source": "/srv/svit/ro/x"}],
      "volumes": [VOLUME, {**VOLUME, "name": "ro", "mountPath": "/srv/svit/ro", "readOnly": True}]},
     "is on the read-only volume ro"),
    ({"grants": [{**WRITABLE, "kind": "folder"}],
      "volumes": [{"name": "ws", "mountPath": "/srv/svit", "emptyDir": {}}]},
     "is on the emptyDir volume ws, a different directory in every pod"),
    ({"grants": [WRITABLE], "volumes": [{"name": "ws", "mountPath": "/srv/svit"}]},
     "mounts.volumes[0] (ws) needs exactly one volume source"),
    ({"volumes": [{**VOLUME, "name": "tmp"}]}, "taken by the chart's scratch volumes"),
    ({"grants": [WRITABLE, {**WRITABLE, "kind": "folder"}], "volumes": [VOLUME]},
     "the mount name ws is granted twice"),
    ({"grants": [SQL]}, "dsnEnv CRM_DSN is not set on the worker hosts"),
    ({"grants": [{k: v for k, v in SQL.items() if k != "dsnEnv"}], "env": [DSN_ENV]},
     "a sql_query grant needs dsnEnv"),
    ({"grants": [{**SQL, "dsn": "postgresql://u:pw@db/crm"}], "env": [DSN_ENV]},
     "an inline dsn would be rendered into the ConfigMap"),
    ({"env": [{**DSN_ENV, "name": "SVIT_CRM_DSN"}]}, "names starting with SVIT_"),
    ({"grants": [{k: v for k, v in WRITABLE.items() if k != "processes"}],
      "volumes": [VOLUME]}, "missing property 'processes'"),
    ({"grants": [{**WRITABLE, "processes": []}], "volumes": [VOLUME]},
     "/mounts/grants/0/processes': minItems"),
    ({"volumes": [{**VOLUME, "persistentVolumeClame": {"claimName": "ws"}}]},
     "additional properties 'persistentVolumeClame' not allowed"),
], ids=["prefix-is-not-a-parent", "dot-dot", "read-only-volume", "deepest-volume-wins",
        "emptydir", "no-volume-source", "scratch-name", "duplicate-name", "dsn-env-unset",
        "sql-without-dsn-env", "inline-dsn", "svit-env-name", "no-processes",
        "empty-processes", "misspelled-volume-source"])
def test_bad_mounts_fail_rendering_with_a_clear_message(
        run_helm: RunHelm, tmp_path: Path, mounts: dict[str, Any], message: str) -> None:
    assert message in _fails(run_helm, _write(tmp_path, {"mounts": mounts}))


def test_a_dsn_env_from_runtime_extra_env_and_nested_volumes_are_accepted(
        render: Render, tmp_path: Path) -> None:
    values = _write(tmp_path, {
        "runtime": {"extraEnv": [DSN_ENV]},
        "mounts": {"grants": [SQL, {**WRITABLE, "source": "/srv/svit"}],
                   "volumes": [VOLUME, {**VOLUME, "name": "ro", "mountPath": "/srv/svit/ro",
                                        "readOnly": True}]}})
    grants = MountsConfig.parse(json.loads(_mounts_json(render(values)))).grants
    assert [(g.name, g.kind) for g in grants] == [("crm", "sql_query"), ("ws", "writable_folder")]
