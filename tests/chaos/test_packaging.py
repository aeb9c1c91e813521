"""A checkout and an installed wheel expose the same modules.

The chaos harness lives in ``./chaos`` but installs as ``svit_chaos``
(``[tool.setuptools] package-dir``), and every ``svit_cluster`` subpackage must be
listed in ``[tool.setuptools] packages``. This builds the wheel from a copy of the
checkout (setuptools, no network, no build isolation) and compares its modules
with the checkout's files: a module missing from the wheel fails here, not on a
user's machine. The console's static files (package data) are checked too.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _modules(root: Path, package: str) -> set[str]:
    return {f"{package}/{p.relative_to(root).as_posix()}" for p in root.rglob("*.py")
            if "__pycache__" not in p.parts}


@pytest.fixture(scope="module")
def wheel_files(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    src = tmp_path_factory.mktemp("src")
    for name in ("svit_cluster", "chaos"):
        shutil.copytree(ROOT / name, src / name,
                        ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(out), str(src)], check=True, capture_output=True,
                   timeout=300)
    [wheel] = out.glob("*.whl")
    with zipfile.ZipFile(wheel) as z:
        return set(z.namelist())


@pytest.fixture(scope="module")
def wheel_modules(wheel_files: set[str]) -> set[str]:
    return {n for n in wheel_files if n.endswith(".py")}


def test_the_wheel_installs_every_chaos_module_as_svit_chaos(wheel_modules: set[str]) -> None:
    assert {m for m in wheel_modules if m.startswith("svit_chaos/")} == _modules(
        ROOT / "chaos", "svit_chaos")


def test_the_wheel_installs_every_svit_cluster_module(wheel_modules: set[str]) -> None:
    assert {m for m in wheel_modules if m.startswith("svit_cluster/")} == _modules(
        ROOT / "svit_cluster", "svit_cluster")


def test_the_checkout_imports_the_same_chaos_modules() -> None:
    import svit_chaos

    here = Path(svit_chaos.__file__).resolve().parent
    assert here == (ROOT / "chaos").resolve()  # svit_chaos is this checkout's chaos/
    assert _modules(here, "svit_chaos") == _modules(ROOT / "chaos", "svit_chaos")


def test_the_wheel_ships_the_console_files(wheel_files: set[str]) -> None:
    """The browser console's static files are package data (served at ``/ui/``)."""
    folder = ROOT / "svit_cluster" / "gateway" / "console"
    shipped = {f"svit_cluster/gateway/console/{p.name}" for p in folder.iterdir()}
    assert "svit_cluster/gateway/console/index.html" in shipped
    assert shipped <= wheel_files, shipped - wheel_files
