"""``.ci/setup --check``: the packages it would install, each with its reason, and
the versions in use, printed plainly; and the README's Quick start names them all."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _check() -> list[str]:
    result = subprocess.run(
        ["bash", str(ROOT / ".ci" / "setup"), "--check"], cwd=ROOT, capture_output=True,
        text=True, timeout=30, env={**os.environ, "PYTHON": sys.executable})
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def _packages(lines: list[str]) -> dict[str, str]:
    """``{package: "present|missing <why>"}`` from the package lines."""
    out = {}
    for line in lines:
        m = re.match(r"\[setup\]   (\S+) +(present|missing) +(.+)$", line)
        if m:
            out[m.group(1)] = f"{m.group(2)} {m.group(3)}"
    return out


def test_check_lists_every_package_with_its_reason_and_installs_nothing() -> None:
    lines = _check()
    packages = _packages(lines)
    assert {"etcd-server", "redis-server", "npm", "chromium"} <= set(packages)
    assert all(len(v.split(" ", 1)[1]) > 10 for v in packages.values()), packages
    assert "Helm" in packages["npm"] and "browser" in packages["chromium"]
    assert any(line.startswith("[setup] check only, nothing installed") for line in lines)


def test_the_version_line_names_each_tool_and_its_bare_version() -> None:
    line = next(x for x in _check() if x.startswith("[setup] versions: "))
    # PostgreSQL numbers its releases major.minor (15.14)
    assert re.fullmatch(r"\[setup\] versions: Python \d+\.\d+\.\d+, etcd \d+\.\d+\.\d+, "
                        r"redis-server \d+\.\d+\.\d+, postgres \d+\.\d+", line), line


def test_the_readme_quick_start_names_every_package_setup_installs() -> None:
    readme = (ROOT / "README.md").read_text()
    quick_start = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"`([a-z0-9-]+)`", quick_start))
    packages = set(_packages(_check()))
    assert {"etcd-server", "redis-server"} <= packages
    assert packages <= named, packages - named


def test_the_venv_carries_bytecode_for_what_every_ray_worker_imports() -> None:
    """Each Ray worker imports Ray, grpc and pydantic at start; where processes may
    not write bytecode (``PYTHONDONTWRITEBYTECODE``, a read-only venv) only the
    installer's compile step gives them cached bytecode. Without it every
    worker compiles them again at start, which slows every cluster test and
    can starve a host's lease keeping under a burst."""
    import importlib.util

    import grpc
    import pydantic
    import ray

    missing = [mod.__name__ for mod in (ray, grpc, pydantic)
               if mod.__file__ is None
               or not Path(importlib.util.cache_from_source(mod.__file__)).is_file()]
    assert not missing, f"no cached bytecode for {missing}: install with bytecode compiled"
