"""docs/conformance.md names only tests that exist."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_test_named_in_docs_conformance_exists() -> None:
    text = (ROOT / "docs" / "conformance.md").read_text(encoding="utf-8")
    ids = re.findall(r"`(tests/conformance/[\w/]+\.py)::(test_\w+)`", text)
    assert len(ids) >= 20
    for path, name in ids:
        module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
        assert callable(getattr(module, name, None)), f"{path}::{name} does not exist"


def test_every_row_of_the_bounds_table_names_tests_that_exist() -> None:
    """docs/capacity.md section 3: each structure names a test that fills it past
    its bound (``path::name``; a bare ``::name`` continues the cell's last path)."""
    text = (ROOT / "docs" / "capacity.md").read_text(encoding="utf-8")
    section = text.split("## 3. Bounds of every growing structure", 1)[1]
    rows = [line for line in section.splitlines()
            if line.startswith("| ") and not line.startswith(("| structure", "| ---"))]
    assert len(rows) >= 20
    for row in rows:
        cell = row.rstrip(" |").rsplit(" | ", 1)[1]
        named: list[tuple[str, str]] = []
        path = ""
        for found in re.finditer(r"(tests/[\w/]+\.py)?::(test_\w+)", cell):
            path = found.group(1) or path
            named.append((path, found.group(2)))
        assert named or "tests/" in cell, f"no test named for: {row[:80]}"
        for path, name in named:
            module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
            assert callable(getattr(module, name, None)), f"{path}::{name} does not exist"
