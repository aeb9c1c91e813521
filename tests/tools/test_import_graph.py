"""tools/import_graph.py finds cycles and private reach-ins (pure ast, temp trees)."""

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
    """Packages import each other only through their ``__init__``."""
    tool = _tool()
    edges, reach = tool.graph(TOOL.parents[1] / "svit_cluster")
    assert tool.cycles(edges) == []
    assert reach == []


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
