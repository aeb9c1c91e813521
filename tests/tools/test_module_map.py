"""docs/architecture.md's module map names every module of svit_cluster and of the
chaos harness, and nothing that no longer exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _map() -> dict[str, set[str]]:
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("## Module map", 1)[1]
    out: dict[str, set[str]] = {}
    folder = ""
    for line in section.splitlines():
        if m := re.fullmatch(r"\*\*`([\w/]+)/`\*\*", line.strip()):
            folder = m.group(1)
        elif m := re.match(r"\| `([\w.]+\.py)` \| (.+) \|$", line):
            assert m.group(2).strip(), f"{folder}/{m.group(1)} has no description"
            out.setdefault(folder, set()).add(m.group(1))
    return out


def _tree() -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for pkg in ("svit_cluster", "chaos"):
        for p in (ROOT / pkg).rglob("*.py"):
            if "__pycache__" in p.parts or p.name == "__main__.py":
                continue
            out.setdefault(str(p.parent.relative_to(ROOT)), set()).add(p.name)
    return out


def test_the_module_map_names_every_module_and_only_those() -> None:
    mapped, tree = _map(), _tree()
    missing = {f"{d}/{m}" for d, ms in tree.items() for m in ms - mapped.get(d, set())}
    stale = {f"{d}/{m}" for d, ms in mapped.items() for m in ms - tree.get(d, set())}
    assert not missing, f"add to docs/architecture.md's module map: {sorted(missing)}"
    assert not stale, f"gone from the tree, still in the module map: {sorted(stale)}"


def test_the_check_sees_a_missing_module() -> None:
    # negative control: the parser finds rows, so a module left out would be reported
    mapped = _map()
    assert "_agent.py" in mapped["svit_cluster/cluster"]
    assert "schedule.py" in mapped["chaos"] and "hosts.py" in mapped["chaos/faults"]
    assert sum(len(v) for v in mapped.values()) == sum(len(v) for v in _tree().values())
