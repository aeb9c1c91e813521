"""Every SVIT_* variable the chart renders is a field of svit_cluster.settings.

For the default values and every values file under helm/svit-cluster/ci/, the
chart is rendered with ``helm template``; every ``SVIT_*`` name it gives a
container (ConfigMap and Secret keys, ``env`` entries of every container,
including hook Pods and RayCluster groups) must be the variable of a field of
one of :data:`svit_cluster.settings.SETTINGS_CLASSES`. So the chart cannot set
a variable that no code reads (a renamed setting, a typo), and every variable
it sets is validated at start.

The launcher ``deploy/svit-node.sh`` reads some variables in shell; its
``${SVIT_X:-default}`` defaults must equal :class:`NodeSettings`'s.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from svit_cluster.settings import NodeSettings, env_names

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "svit-cluster"
CI_VALUES = sorted((CHART / "ci").glob("*.yaml"))
SVIT_NODE = REPO / "deploy" / "svit-node.sh"

Manifest = dict[str, Any]


def _env_entries(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "env" and isinstance(value, list):
                yield from (e["name"] for e in value if isinstance(e, dict) and "name" in e)
            else:
                yield from _env_entries(value)
    elif isinstance(node, list):
        for item in node:
            yield from _env_entries(item)


def rendered_svit_variables(manifests: list[Manifest]) -> set[str]:
    """The ``SVIT_*`` names the manifests give containers."""
    names: set[str] = set()
    for doc in manifests:
        if doc.get("kind") in ("ConfigMap", "Secret"):
            for section in ("data", "stringData"):
                names.update((doc.get(section) or {}).keys())
        names.update(_env_entries(doc))
    return {n for n in names if n.startswith("SVIT_")}


@pytest.mark.parametrize("values", [None, *CI_VALUES],
                         ids=["default", *(p.stem for p in CI_VALUES)])
def test_every_rendered_variable_is_a_settings_field(
        render: Callable[..., list[Manifest]], values: Path | None) -> None:
    rendered = rendered_svit_variables(render(values))
    assert {"SVIT_ETCD_ENDPOINTS", "SVIT_LEASE_TTL_S", "SVIT_TOKENS_FILE"} <= rendered
    unknown = sorted(rendered - env_names())
    assert not unknown, f"the chart renders variables no settings class declares: {unknown}"


def test_the_walker_sees_env_entries_and_configmap_keys() -> None:
    """Negative control: an unknown rendered name is found (the check can fail)."""
    docs = [{"kind": "ConfigMap", "data": {"SVIT_NOPE": "1", "OTHER": "2"}},
            {"kind": "Deployment", "spec": {"template": {"spec": {"containers": [
                {"env": [{"name": "SVIT_TYPO_S", "value": "3"}]}]}}}}]
    assert rendered_svit_variables(docs) == {"SVIT_NOPE", "SVIT_TYPO_S"}
    assert not {"SVIT_NOPE", "SVIT_TYPO_S"} <= env_names()


def test_launcher_variables_and_defaults_match_node_settings() -> None:
    text = SVIT_NODE.read_text()
    used = set(re.findall(r"\$\{?(SVIT_[A-Z0-9_]+)", text))
    assert used and not used - env_names(), sorted(used - env_names())
    defaults = dict(re.findall(r"\$\{(SVIT_[A-Z0-9_]+):-([^}]*)\}", text))
    fields = NodeSettings.model_fields
    checked = 0
    for name, default in defaults.items():
        field = name.removeprefix("SVIT_").lower()
        if field in fields:
            want = fields[field].default
            assert ("" if want is None else str(want)).lower() == default.lower(), (
                name, default, want)
            checked += 1
    assert checked >= 5, defaults
