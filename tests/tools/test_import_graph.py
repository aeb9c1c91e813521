"""tools/import_graph.py finds cycles between packages and between modules, and private
reach-ins (pure ast, temp trees; the checkout itself has none)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

TOOL = Path(__file__).resolve().parents[2] / "tools" / "import_graph.py"


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("import_graph", TOOL)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / "svit_cluster" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "svit_cluster"


def test_lazy_import_cycle_and_reach_in_are_found(tmp_path: Path) -> None:
    tool = _tool()
    root = _tree(tmp_path, {
        "__init__.py": "",
        "a/__init__.py": "from svit_cluster.a._x import f\n",
        "a/_x.py": "def f():\n    from svit_cluster.b import g  # lazy\n    return g\n",
        "b/__init__.py": "from ._y import g\n",
        "b/_y.py": "from svit_cluster.a._x import f\ng = f\n",
    })
    edges, reach = tool.graph(root)
    assert edges["a"] == {"b": 1} and edges["b"] == {"a": 1}
    assert tool.cycles(edges) == [["a", "b"]]
    assert reach == [("svit_cluster/b/_y.py", "svit_cluster.a._x")]


def test_layered_tree_has_no_cycle_nor_reach_in(tmp_path: Path) -> None:
    tool = _tool()
    root = _tree(tmp_path, {
        "__init__.py": "",
        "a/__init__.py": "from svit_cluster.b import g\n",
        "b/__init__.py": "from svit_cluster.b._y import g\n",
        "b/_y.py": "g = 1\n",
    })
    edges, reach = tool.graph(root)
    assert edges["a"] == {"b": 1} and dict(edges["b"]) == {}
    assert tool.cycles(edges) == []
    assert reach == []


def test_the_checkout_has_no_cycle_nor_private_reach_in() -> None:
    """Packages import each other only through their ``__init__``, and no two modules
    of svit_cluster or of the chaos harness import each other, even lazily."""
    tool = _tool()
    edges, reach = tool.graph(TOOL.parents[1] / "svit_cluster")
    assert tool.cycles(edges) == []
    assert reach == []
    for root, name in (("svit_cluster", "svit_cluster"), ("chaos", "svit_chaos")):
        assert tool.cycles(tool.module_graph(TOOL.parents[1] / root, name)) == [], root


def test_a_lazy_import_between_two_modules_of_one_package_is_a_cycle(tmp_path: Path) -> None:
    tool = _tool()
    root = _tree(tmp_path, {
        "__init__.py": "",
        "a/__init__.py": "from svit_cluster.a._x import f\n",
        "a/_x.py": "from svit_cluster.a._y import g\ndef f():\n    return g\n",
        "a/_y.py": "def g():\n    from svit_cluster.a._x import f  # lazy\n    return f\n",
    })
    edges, _reach = tool.graph(root)
    assert tool.cycles(edges) == []  # one package: no cycle between packages
    assert tool.cycles(tool.module_graph(root)) == [["svit_cluster.a._x", "svit_cluster.a._y"]]


def test_a_type_checking_import_is_no_cycle_but_its_else_branch_is(tmp_path: Path) -> None:
    """``if TYPE_CHECKING:`` never runs (annotations only); its ``else`` does."""
    tool = _tool()
    files = {
        "__init__.py": "",
        "a/__init__.py": "",
        "a/_x.py": "from svit_cluster.a._y import g\n",
        "a/_y.py": ("from typing import TYPE_CHECKING\n"
                    "if TYPE_CHECKING:\n    from svit_cluster.a._x import X\n"),
    }
    root = _tree(tmp_path, files)
    assert tool.cycles(tool.module_graph(root)) == []
    else_branch = "else:\n    from svit_cluster.a import _x\n"
    (root / "a" / "_y.py").write_text(files["a/_y.py"] + else_branch)
    assert tool.cycles(tool.module_graph(root)) == [["svit_cluster.a._x", "svit_cluster.a._y"]]


def test_a_module_importing_its_own_package_facade_is_a_cycle(tmp_path: Path) -> None:
    """``__init__`` imports ``_x`` and ``_x`` imports the package: a cycle; the implicit
    import of a parent package (``import a._y`` runs ``a/__init__``) is not counted."""
    tool = _tool()
    root = _tree(tmp_path, {
        "__init__.py": "",
        "a/__init__.py": "from svit_cluster.a._x import f\nfrom svit_cluster.a._y import g\n",
        "a/_x.py": "from svit_cluster.a._y import g\nf = g\n",
        "a/_y.py": "g = 1\n",
    })
    assert tool.cycles(tool.module_graph(root)) == []
    (root / "a" / "_y.py").write_text("from svit_cluster.a import f\ng = 1\n")
    assert tool.cycles(tool.module_graph(root)) == [
        ["svit_cluster.a", "svit_cluster.a._x", "svit_cluster.a._y"]]


def test_check_flag_fails_on_a_planted_module_cycle(tmp_path: Path) -> None:
    """Negative control: ``--check`` exits 1 on a cycle inside one package (a flat
    package like the chaos harness, under a name of its own), 0 once it is broken."""
    pkg = tmp_path / "harness"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "checker.py").write_text("from .ports import run\nclass Anomaly: ...\n")
    (pkg / "ports.py").write_text("def run():\n    from .checker import Anomaly\n"
                                  "    return Anomaly\n")
    cmd = [sys.executable, str(TOOL), "--root", f"{pkg}=svit_harness", "--check"]
    bad = subprocess.run(cmd, capture_output=True, text=True)
    assert bad.returncode == 1
    assert "module cycles: 1" in bad.stdout
    assert "svit_harness.checker <-> svit_harness.ports" in bad.stdout
    (pkg / "types.py").write_text("class Anomaly: ...\n")
    (pkg / "checker.py").write_text("from .ports import run\nfrom .types import Anomaly\n")
    (pkg / "ports.py").write_text("from .types import Anomaly\ndef run():\n    return Anomaly\n")
    good = subprocess.run(cmd, capture_output=True, text=True)
    assert good.returncode == 0, good.stdout
    assert "module cycles: 0" in good.stdout


def test_check_flag_fails_on_a_reach_in(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "__init__.py": "",
        "a/__init__.py": "",
        "a/_x.py": "f = 1\n",
        "b/__init__.py": "from svit_cluster.a._x import f\n",
    })
    bad = subprocess.run([sys.executable, str(TOOL), "--root", str(root), "--check"],
                         capture_output=True, text=True)
    assert bad.returncode == 1 and "svit_cluster.a._x" in bad.stdout
    (root / "b" / "__init__.py").write_text("from svit_cluster.a import f\n")
    (root / "a" / "__init__.py").write_text("from svit_cluster.a._x import f\n")
    good = subprocess.run([sys.executable, str(TOOL), "--root", str(root), "--check"],
                          capture_output=True, text=True)
    assert good.returncode == 0, good.stdout
