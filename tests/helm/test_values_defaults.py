"""The chart's default values are the Python defaults (no drift between the layers).

``helm/svit-cluster/values.yaml`` cannot import :mod:`svit_cluster.defaults`, so
this pure test (no Helm binary) reads it and ``values.schema.json`` and compares
each value the chart renders into a ``SVIT_*`` variable with the constant the
code falls back to when that variable is unset, and the schema's bounds with the
code's ranges where both state one.

The chart's ``clusterName`` (``svit``) is the release's own choice, not
:data:`svit_cluster.defaults.DEFAULT_CLUSTER`: the chart always sets
``SVIT_CLUSTER``, so the code's fallback never applies to it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from svit_cluster import defaults as d
from svit_cluster.settings import DEFAULT_MAX_REQUEST_BYTES

CHART = Path(__file__).resolve().parents[2] / "helm" / "svit-cluster"

#: values.yaml path -> (the Python default, the variable it is rendered into).
VALUE_DEFAULTS: dict[str, tuple[Any, str]] = {
    "runtime.leaseTtlS": (d.DEFAULT_LEASE_TTL_S, "SVIT_LEASE_TTL_S"),
    "runtime.snapshotEvery": (d.DEFAULT_SNAPSHOT_EVERY, "SVIT_SNAPSHOT_EVERY"),
    "runtime.passivateAfterS": (d.DEFAULT_PASSIVATE_AFTER_S, "SVIT_PASSIVATE_AFTER_S"),
    "runtime.maxRequestBytes": (DEFAULT_MAX_REQUEST_BYTES, "SVIT_MAX_REQUEST_BYTES"),
    "runtime.signalRetention": (d.DEFAULT_SIGNAL_RETENTION, "SVIT_SIGNAL_RETENTION"),
    "runtime.maxEvents": (d.DEFAULT_MAX_EVENTS, "SVIT_MAX_EVENTS"),
    "ray.workers.residency.maxActive": (
        d.DEFAULT_MAX_ACTIVE_PER_HOST, "SVIT_MAX_ACTIVE_PER_HOST"),
    "ray.workers.residency.maxActorsPssMib": (
        d.DEFAULT_MAX_ACTORS_PSS_MIB, "SVIT_MAX_ACTORS_PSS_MIB"),
    "ray.workers.residency.maxStarting": (
        d.DEFAULT_MAX_STARTING_PER_HOST, "SVIT_MAX_STARTING_PER_HOST"),
    "redis.external.waitReplicas": (d.DEFAULT_WAIT_REPLICAS, "SVIT_REDIS_WAIT_REPLICAS"),
    "redis.external.waitTimeoutMs": (d.DEFAULT_WAIT_TIMEOUT_MS, "SVIT_REDIS_WAIT_TIMEOUT_MS"),
    "gateway.port": (d.DEFAULT_GATEWAY_PORT, "SVIT_GATEWAY_PORT"),
}

#: values.yaml path -> (schema minimum, schema maximum) the code accepts too.
SCHEMA_BOUNDS: dict[str, tuple[int, int]] = {
    "runtime.leaseTtlS": (d.LEASE_TTL_S_MIN, d.LEASE_TTL_S_MAX),
    "runtime.signalRetention": (d.RETENTION_MIN, d.RETENTION_MAX),
    "runtime.maxEvents": (d.RETENTION_MIN, d.RETENTION_MAX),
    "ray.workers.residency.maxActive": (0, d.MAX_ACTIVE_PER_HOST_MAX),
    "ray.workers.residency.maxStarting": (0, d.MAX_STARTING_PER_HOST_MAX),
    "redis.external.waitReplicas": (0, d.WAIT_REPLICAS_MAX),
    "redis.external.waitTimeoutMs": (1, d.WAIT_TIMEOUT_MS_MAX),
}


def _values() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text())
    return doc


def _schema() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((CHART / "values.schema.json").read_text())
    return doc


def _get(doc: dict[str, Any], path: str) -> Any:
    node: Any = doc
    for key in path.split("."):
        node = node[key]
    return node


def _schema_node(schema: dict[str, Any], path: str) -> dict[str, Any]:
    node = schema
    for key in path.split("."):
        node = node["properties"][key]
        ref = node.get("$ref")
        if isinstance(ref, str):
            node = _get(schema, ref.removeprefix("#/").replace("/", "."))
    return node


@pytest.mark.parametrize("path", sorted(VALUE_DEFAULTS))
def test_chart_default_is_the_python_default(path: str) -> None:
    want, variable = VALUE_DEFAULTS[path]
    got = _get(_values(), path)
    assert got == want, f"values.yaml {path} = {got!r}, but {variable} defaults to {want!r}"


@pytest.mark.parametrize("path", sorted(SCHEMA_BOUNDS))
def test_chart_schema_bounds_are_the_python_ranges(path: str) -> None:
    node = _schema_node(_schema(), path)
    assert (node["minimum"], node["maximum"]) == SCHEMA_BOUNDS[path], path


def test_every_compared_value_is_rendered_into_its_variable() -> None:
    """The comparison is about the variables the chart sets: each path above is
    read by a template that renders the named variable (or the launcher's)."""
    lines = "\n".join(p.read_text() for p in (CHART / "templates").rglob("*")
                      if p.is_file()).splitlines()
    for path, (_want, variable) in VALUE_DEFAULTS.items():
        # a ConfigMap key ("SVIT_X: {{ ... }}") or an env entry ("- name: SVIT_X" and
        # its "value:" on the next line)
        at = next((i for i, text in enumerate(lines)
                   if f"{variable}:" in text or text.strip() == f"- name: {variable}"), None)
        assert at is not None, f"no template renders {variable}"
        assert f".Values.{path}" in " ".join(lines[at:at + 2]), (variable, path, lines[at])
