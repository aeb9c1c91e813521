"""Fixtures for the Helm chart tests: a real Helm binary and rendered manifests.

Helm is found through $HELM_BIN, defaulting to <repo>/.helm/bin/helm (installed
by .ci/helm.sh). When CI=true a missing Helm or kubernetes-validate fails the
tests; elsewhere they are skipped with the reason.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "svit-cluster"
RELEASE = "svit"
NAMESPACE = "svit"

Manifest = dict[str, Any]


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def _missing(reason: str) -> None:
    if _in_ci():
        pytest.fail(f"{reason} (CI=true: this is a failure, not a skip; run .ci/helm.sh)")
    pytest.skip(f"{reason}; run .ci/helm.sh to install it (tests fail instead when CI=true)")


@pytest.fixture(scope="session")
def helm_bin() -> Path:
    path = Path(os.environ.get("HELM_BIN") or REPO / ".helm" / "bin" / "helm")
    if not (path.is_file() and os.access(path, os.X_OK)):
        _missing(f"Helm binary not found at {path} (set HELM_BIN)")
    return path


@pytest.fixture(scope="session")
def helm_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    env = dict(os.environ)
    home = REPO / ".helm"
    for var, sub in (
        ("HELM_CACHE_HOME", "cache"),
        ("HELM_CONFIG_HOME", "config"),
        ("HELM_DATA_HOME", "data"),
    ):
        env.setdefault(var, str(home / sub))
    return env


@pytest.fixture(scope="session")
def run_helm(
    helm_bin: Path, helm_env: dict[str, str]
) -> Callable[..., subprocess.CompletedProcess[str]]:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(helm_bin), *args],
            env=helm_env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    return run


@pytest.fixture(scope="session")
def render(
    run_helm: Callable[..., subprocess.CompletedProcess[str]],
) -> Callable[..., list[Manifest]]:
    """render(values_file=None, *set_args, kube_version=None) -> list of manifests (cached)."""
    cache: dict[tuple[Any, ...], list[Manifest]] = {}

    def _render(
        values: Path | None = None, *sets: str, kube_version: str | None = None
    ) -> list[Manifest]:
        key = (values, sets, kube_version)
        if key not in cache:
            args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE]
            if values is not None:
                args += ["-f", str(values)]
            for s in sets:
                args += ["--set", s]
            if kube_version:
                args += ["--kube-version", kube_version]
            proc = run_helm(*args)
            assert proc.returncode == 0, f"helm template failed:\n{proc.stderr}"
            cache[key] = [d for d in yaml.safe_load_all(proc.stdout) if d]
        return cache[key]

    return _render


@pytest.fixture(scope="session")
def kubernetes_validate() -> Any:
    try:
        import kubernetes_validate
    except ImportError:
        _missing("kubernetes-validate is not installed (pip install kubernetes-validate)")
    return kubernetes_validate
