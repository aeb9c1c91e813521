"""Print the import graph of svit_cluster and the chaos harness, and check it.

Usage: ``python tools/import_graph.py [--root PATH[=NAME] ...] [--check]``.

The default roots are ``svit_cluster`` and ``chaos=svit_chaos`` (the chaos harness
lives in ``./chaos`` but imports as ``svit_chaos``). Every module under a root is
parsed with :mod:`ast` (nothing is imported or executed). For each root it prints:

- per top-level unit (a subpackage, or a single module such as ``errors.py``), the
  units it imports with the number of files that import them;
- the cycles between units (strongly connected components of size > 1);
- the cycles between modules (strongly connected components of the module graph,
  which also finds a cycle between two modules of one package, and a module that
  imports its own package's ``__init__`` while that ``__init__`` imports it);
- the *reach-ins*: imports of another unit's private ``_module``
  (``svit_cluster.x._y`` from outside ``x``), which bypass ``x/__init__``.

What counts as an import edge (the same rule for units and modules):

- an ``import``/``from ... import`` at module level, in a class body, or under a
  module-level ``if``/``try``: it runs when the module is imported;
- an import inside a function: it runs when the function is first called, and it
  still ties the two modules together (a lazy import does not break a cycle, it
  hides it); ``tests/tools/test_lazy_imports.py`` lists every one that is allowed,
  each for an optional dependency or a start-up cost;
- NOT an import under ``if TYPE_CHECKING:``: it never runs (annotations are
  strings under ``from __future__ import annotations``), so it is no runtime
  cycle; the ``else`` branch of such an ``if`` does count.

``from pkg import name`` is an edge to ``pkg.name`` when that is a module under the
root, else to ``pkg`` (its ``__init__``). Importing ``a.b.c`` runs ``a/__init__`` and
``a/b/__init__`` first; those implicit parent edges are not counted (every module of
a package would otherwise be in a cycle with an ``__init__`` that re-exports it).

With ``--check`` it exits 1 when any root has a cycle between units, a cycle
between modules, or a reach-in (``.ci/run`` runs it beside ``lint-imports``).
"""

from __future__ import annotations

import argparse
import ast
import functools
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

ROOT_PKG = "svit_cluster"
REPO = Path(__file__).resolve().parents[1]
DEFAULT_ROOTS = (ROOT_PKG, "chaos=svit_chaos")


class Import(NamedTuple):
    """One name an import statement loads, where it stands, and whether it runs."""

    target: str  # dotted name: the module, or `module.name` for `from module import name`
    source: str | None  # `module` of `from module import name`; None for `import x`
    lineno: int
    function: str | None  # enclosing function ("f" or "f.g"), None at module level
    type_checking: bool  # under `if TYPE_CHECKING:`: never runs

    def module_in(self, modules: set[str]) -> str | None:
        """The module of ``modules`` this import runs: ``target`` if it is one
        (``import a.b``, ``from a import b`` with ``a/b.py``), else the ``source``
        whose attribute it reads."""
        if self.target in modules:
            return self.target
        return self.source if self.source in modules else None


def _unit_of(rel: Path) -> str:
    """Top-level unit (subpackage or module stem) a file belongs to."""
    parts = rel.parts
    if len(parts) == 1:
        return "__init__" if parts[0] == "__init__.py" else Path(parts[0]).stem
    return parts[0]


def _module_name(rel: Path, name: str = ROOT_PKG) -> list[str]:
    parts = list(rel.with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return [name, *parts]


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imports(tree: ast.AST, rel: Path, name: str = ROOT_PKG) -> Iterator[Import]:
    """Every import in ``tree`` (the file ``rel`` under the root named ``name``).

    Relative imports are resolved to absolute names; ``from m import a, b`` yields
    ``m.a`` and ``m.b`` with source ``m`` (a name may be a submodule or an
    attribute); ``from m import *`` yields ``m``.
    """
    is_pkg = rel.name == "__init__.py"

    def resolve(node: ast.ImportFrom) -> str:
        if not node.level:
            return node.module or ""
        base = _module_name(rel, name)
        if not is_pkg:
            base = base[:-1]
        base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
        return ".".join([*base, *([node.module] if node.module else [])])

    def walk(node: ast.AST, func: str | None, tc: bool) -> Iterator[Import]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                for alias in child.names:
                    yield Import(alias.name, None, child.lineno, func, tc)
            elif isinstance(child, ast.ImportFrom):
                mod = resolve(child)
                for alias in child.names:
                    target = mod if alias.name == "*" else f"{mod}.{alias.name}"
                    yield Import(target, mod, child.lineno, func, tc)
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                inner = child.name if func is None else f"{func}.{child.name}"
                yield from walk(child, inner, tc)
            elif isinstance(child, ast.If) and _is_type_checking(child.test):
                for stmt in child.body:
                    yield from walk(ast.Module(body=[stmt], type_ignores=[]), func, True)
                for stmt in child.orelse:
                    yield from walk(ast.Module(body=[stmt], type_ignores=[]), func, tc)
            else:
                yield from walk(child, func, tc)

    yield from walk(tree, None, False)


@functools.lru_cache(maxsize=4096)
def _parse(path: Path, _mtime_ns: int, _size: int) -> ast.AST:
    """The syntax tree of ``path`` (cached while its mtime and size stay the same)."""
    return ast.parse(path.read_text(), str(path))


def _parsed(root: Path) -> Iterator[tuple[Path, Path, ast.AST]]:
    for path in sorted(root.rglob("*.py")):
        st = path.stat()
        yield path, path.relative_to(root), _parse(path, st.st_mtime_ns, st.st_size)


def graph(root: Path, name: str | None = None,
          ) -> tuple[dict[str, dict[str, int]], list[tuple[str, str]]]:
    """Return ({unit: {imported unit: file count}}, [(file, private module)])."""
    name = name or root.name
    edges: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    reach: set[tuple[str, str]] = set()
    units = {_unit_of(p.relative_to(root)) for p in root.rglob("*.py")}
    for _path, rel, tree in _parsed(root):
        src = _unit_of(rel)
        edges[src]  # every unit appears
        deps: set[str] = set()
        for imp in imports(tree, rel, name):
            parts = imp.target.split(".")
            if (imp.type_checking or parts[0] != name or len(parts) < 2
                    or parts[1] not in units):
                continue
            dst = parts[1]
            if dst == src:
                continue
            deps.add(dst)
            if (len(parts) >= 3 and parts[2].startswith("_") and parts[2] != "__init__"
                    and (root / parts[1] / parts[2]).with_suffix(".py").exists()):
                reach.add((f"{name}/{rel}", ".".join(parts[:3])))
        for dst in deps:  # one count per (file, imported unit)
            edges[src][dst] += 1
    return edges, sorted(reach)


def module_graph(root: Path, name: str | None = None) -> dict[str, dict[str, int]]:
    """Return {module: {module under the root it imports: import count}}.

    Only imports that run count (see the module docstring); a module's import of
    itself is dropped.
    """
    name = name or root.name
    files = list(_parsed(root))
    modules = {".".join(_module_name(rel, name)) for _p, rel, _t in files}
    edges: dict[str, dict[str, int]] = {}
    for _path, rel, tree in files:
        src = ".".join(_module_name(rel, name))
        deps: dict[str, int] = defaultdict(int)
        for imp in imports(tree, rel, name):
            dst = None if imp.type_checking else imp.module_in(modules)
            if dst is not None and dst != src:
                deps[dst] += 1
        edges[src] = dict(deps)
    return edges


def lazy_imports(root: Path, name: str | None = None) -> list[tuple[str, str, str]]:
    """Every import inside a function that runs: [(file, function, module)].

    ``file`` is the root directory's name and the path under it
    (``svit_cluster/cli/local.py``, ``chaos/report.py``); ``module`` is the module the
    statement loads: a module under the root as :meth:`Import.module_in` finds
    it, else the ``from`` module (``from rich.table import Table``:
    ``rich.table``), else the name imported (``import matplotlib.pyplot``).
    Imports under ``if TYPE_CHECKING:`` are left out: they never run.
    """
    name = name or root.name
    files = list(_parsed(root))
    modules = {".".join(_module_name(rel, name)) for _p, rel, _t in files}
    out: set[tuple[str, str, str]] = set()
    for _path, rel, tree in files:
        for imp in imports(tree, rel, name):
            if imp.function is None or imp.type_checking:
                continue
            mod = imp.module_in(modules) or imp.source or imp.target
            out.add((f"{root.name}/{rel.as_posix()}", imp.function, mod))
    return sorted(out)


def cycles(edges: dict[str, dict[str, int]]) -> list[list[str]]:
    """Strongly connected components with more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return sorted(out)


def _root(spec: str) -> tuple[Path, str]:
    path, _, name = spec.partition("=")
    p = Path(path)
    if not p.is_absolute() and not p.exists():
        p = REPO / p
    return p, name or p.name


def report(root: Path, name: str) -> int:
    """Print one root's graph; return the number of problems found."""
    edges, reach = graph(root, name)
    print(f"== {name} ({root})")
    for src in sorted(edges):
        deps = ", ".join(f"{d}({n})" for d, n in sorted(edges[src].items())) or "-"
        print(f"{src:12} -> {deps}")
    cyc = cycles(edges)
    print(f"\ncycles between packages: {len(cyc)}")
    for c in cyc:
        print("  " + " <-> ".join(c))
    mcyc = cycles(module_graph(root, name))
    print(f"\nmodule cycles: {len(mcyc)}")
    for c in mcyc:
        print("  " + " <-> ".join(c))
    print(f"\nreach-ins into another package's private _module: {len(reach)}")
    for f, m in reach:
        print(f"  {f} -> {m}")
    print()
    return len(cyc) + len(mcyc) + len(reach)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=(__doc__ or "").splitlines()[0],
        epilog=("An edge is any import that runs: at module level or inside a "
                "function (a lazy import hides a cycle, it does not break it); "
                "imports under `if TYPE_CHECKING:` never run and do not count."))
    ap.add_argument("--root", action="append", metavar="PATH[=NAME]",
                    help="a package directory, and the name it imports as "
                         f"(default: {' and '.join(DEFAULT_ROOTS)})")
    ap.add_argument("--check", action="store_true",
                    help="exit 1 when a root has a cycle between packages, a cycle "
                         "between modules, or a private reach-in")
    args = ap.parse_args()
    problems = sum(report(*_root(spec)) for spec in args.root or DEFAULT_ROOTS)
    if args.check and problems:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
