"""Code and documents state the rule that holds, not the tracker entry it came from.

An ``issue N`` reference in a comment, docstring or document tells the story of
how a rule was found; the story belongs in the commit message (or in
``docs/decisions/`` as a design decision, without the number). This test runs
``grep -rnE "issue [0-9]+" svit_cluster chaos tests docs`` over the Python and
Markdown files of those folders, in any case and with ``issue-N`` and
``issues N`` too, and lists every hit. A reference to another project's tracker
names it by its address (``etcd-io/etcd#16028``), which does not match.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: The folders the rule covers.
FOLDERS = ("svit_cluster", "chaos", "tests", "docs")
#: The file kinds that hold comments, docstrings and prose.
SUFFIXES = {".py", ".md"}
#: The grep's pattern, in any case, also with a hyphen or a plural.
ISSUE_REF = re.compile(r"\bissues?[ -][0-9]+", re.IGNORECASE)


def _files() -> Iterator[Path]:
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix in SUFFIXES and path.is_file() and "__pycache__" not in path.parts:
                yield path


def issue_refs() -> list[str]:
    """Every ``path:line: text`` whose text matches :data:`ISSUE_REF`."""
    hits = []
    for path in _files():
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if ISSUE_REF.search(line):
                hits.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    return hits


def test_no_issue_number_in_code_tests_or_docs() -> None:
    hits = issue_refs()
    assert not hits, (f"{len(hits)} line(s) name an issue number; state the rule "
                      "instead:\n" + "\n".join(hits))


def test_the_scan_covers_every_folder() -> None:
    for folder in FOLDERS:
        assert any(p.parts[len(ROOT.parts)] == folder for p in _files()), folder
