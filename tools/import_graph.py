"""Print the import graph between svit_cluster's top-level subpackages.

Usage: ``python tools/import_graph.py [--root svit_cluster] [--check]``.

Parses every module under the package with :mod:`ast` (nothing is imported or
executed), maps each ``import``/``from ... import`` that names ``svit_cluster.<pkg>``
to an edge ``<this pkg> -> <pkg>``, and prints:

- per package, the packages it imports with the number of import statements;
- the cycles between packages (strongly connected components of size > 1);
- the *reach-ins*: imports of another package's private ``_module``
  (``svit_cluster.x._y`` from outside ``x``), which bypass ``x/__init__``.

With ``--check`` it exits 1 when there is a cycle or a reach-in (``.ci/run`` runs it
beside ``lint-imports``: packages import each other only through their ``__init__``).

Top-level single modules (``errors.py``, ``cli.py``, ...) count as packages of their
own name. Imports inside functions count as well (lazy imports still form a cycle).
"""

from __future__ import annotations

import argparse
import ast
from collections import defaultdict
from pathlib import Path

ROOT_PKG = "svit_cluster"


def _unit_of(rel: Path) -> str:
    """Top-level unit (subpackage or module stem) a file belongs to."""
    parts = rel.parts
    if len(parts) == 1:
        return "__init__" if parts[0] == "__init__.py" else Path(parts[0]).stem
    return parts[0]


def _module_name(rel: Path) -> list[str]:
    parts = list(rel.with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return [ROOT_PKG, *parts]


def _targets(tree: ast.AST, rel: Path) -> list[str]:
    out: list[str] = []
    is_pkg = rel.name == "__init__.py"
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = _module_name(rel)
                if not is_pkg:
                    base = base[:-1]
                base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
                mod = ".".join([*base, *([node.module] if node.module else [])])
            else:
                mod = node.module or ""
            # `from pkg import name` may name a submodule: record pkg.name too
            out.extend(f"{mod}.{a.name}" for a in node.names if a.name != "*")
            out.append(mod)
    return out


def graph(root: Path) -> tuple[dict[str, dict[str, int]], list[tuple[str, str]]]:
    """Return ({pkg: {imported pkg: statement count}}, [(file, private module)])."""
    edges: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    reach: set[tuple[str, str]] = set()
    units = {_unit_of(p.relative_to(root)) for p in root.rglob("*.py")}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        src = _unit_of(rel)
        edges[src]  # every unit appears
        deps: set[str] = set()
        for tgt in _targets(ast.parse(path.read_text(), str(path)), rel):
            parts = tgt.split(".")
            if parts[0] != ROOT_PKG or len(parts) < 2 or parts[1] not in units:
                continue
            dst = parts[1]
            if dst == src:
                continue
            deps.add(dst)
            if len(parts) >= 3 and parts[2].startswith("_") and parts[2] != "__init__":
                reach.add((f"{ROOT_PKG}/{rel}", ".".join(parts[:3])))
        for dst in deps:  # one count per (file, imported package)
            edges[src][dst] += 1
    return edges, sorted(reach)


def cycles(edges: dict[str, dict[str, int]]) -> list[list[str]]:
    """Strongly connected components with more than one package (Tarjan)."""
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
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=ROOT_PKG, type=Path)
    ap.add_argument("--check", action="store_true",
                    help="exit 1 when a cycle or a private reach-in is found")
    args = ap.parse_args()
    edges, reach = graph(args.root)
    for src in sorted(edges):
        deps = ", ".join(f"{d}({n})" for d, n in sorted(edges[src].items())) or "-"
        print(f"{src:12} -> {deps}")
    cyc = cycles(edges)
    print(f"\ncycles between packages: {len(cyc)}")
    for c in cyc:
        print("  " + " <-> ".join(c))
    print(f"\nreach-ins into another package's private _module: {len(reach)}")
    for f, m in reach:
        print(f"  {f} -> {m}")
    if args.check and (cyc or reach):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
