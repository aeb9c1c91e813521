"""The repository's documents point only at what a clone has.

* Every relative Markdown link in a document resolves to a file or folder of
  the repository, and its ``#fragment``, when it points into a Markdown file,
  names a heading there (GitHub's anchor rule).
* A code span that climbs out of a document's folder (``../...``) names a path
  of the repository, so no document sends its reader outside the clone.
* No file names the design notes of the workspace the project was developed in
  (``DESIGN.md``): the architecture lives in ``docs/architecture.md``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: Folders whose Markdown files are documentation (never .venv, build output, runs).
DOC_ROOTS = ("docs", "svit_cluster", "chaos", "deploy", "helm", "benchmarks", "tools",
             "schemas")
#: Files scanned for references to the workspace's design notes.
SOURCE_SUFFIXES = {".md", ".py", ".sh", ".yaml", ".yml", ".toml", ".json", ".txt", ""}

_FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.M | re.S)
_CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.S)
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t#]*$", re.M)


def documents() -> list[Path]:
    docs = [ROOT / "README.md"]
    for folder in DOC_ROOTS:
        docs += sorted((ROOT / folder).rglob("*.md"))
    return docs


def _prose(text: str) -> str:
    """``text`` without fenced code blocks (their lines kept as blank lines)."""
    return _FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: the text of links kept, lower case, every
    character but letters, digits, ``_``, ``-`` and spaces dropped, spaces -> ``-``."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(doc: Path) -> set[str]:
    seen: dict[str, int] = {}
    out: set[str] = set()
    for match in _HEADING.finditer(_prose(doc.read_text())):
        base = slug(match.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(doc: Path) -> Iterator[str]:
    """Relative link targets of ``doc``'s prose (URLs with a scheme left out)."""
    prose = _CODE_SPAN.sub("", _prose(doc.read_text()))
    for match in _LINK.finditer(prose):
        target = match.group(1)
        if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):
            continue  # https:, mailto:, ...
        yield target


def climbing_spans(doc: Path) -> Iterator[str]:
    """Code spans of ``doc``'s prose that start with ``../``."""
    for match in _CODE_SPAN.finditer(_prose(doc.read_text())):
        span = match.group(2).strip()
        if span.startswith("../"):
            yield span.split()[0]


def broken(doc: Path, target: str) -> str | None:
    """Why ``target`` (relative to ``doc``) does not resolve; None when it does."""
    path_part, _, fragment = target.partition("#")
    dest = (doc.parent / path_part).resolve() if path_part else doc
    if not dest.is_relative_to(ROOT):
        return "leaves the repository"
    if not dest.exists():
        return "no such file in the repository"
    if fragment and dest.suffix == ".md" and fragment not in anchors(dest):
        return f"no heading #{fragment} in {dest.relative_to(ROOT)}"
    return None


@pytest.mark.parametrize("doc", documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(doc: Path) -> None:
    bad = [(target, why) for target in links(doc)
           if (why := broken(doc, target)) is not None]
    bad += [(span, why) for span in climbing_spans(doc)
            if (why := broken(doc, span)) is not None]
    assert bad == []


def test_the_link_check_sees_what_it_must() -> None:
    """The check itself: links in prose are found, code is not, anchors follow
    GitHub's rule, and a path out of the repository is refused."""
    readme = ROOT / "README.md"
    assert "docs/architecture.md" in set(links(readme))
    assert slug("Residency: how many process actors a host runs") == \
        "residency-how-many-process-actors-a-host-runs"
    assert slug("3. Bounds of `every` growing [structure](x.md)") == \
        "3-bounds-of-every-growing-structure"
    assert broken(readme, "../shared/DESIGN.md") == "leaves the repository"
    assert broken(readme, "docs/nothing-here.md") == "no such file in the repository"
    assert broken(readme, "docs/architecture.md#no-such-heading") is not None
    assert broken(readme, "docs/architecture.md#the-picture") is None


def test_no_file_names_the_workspace_design_notes() -> None:
    """``DESIGN.md`` lived outside the repository; a clone does not have it."""
    this = Path(__file__).resolve()
    found = []
    for folder in (*DOC_ROOTS, "tests", ".ci"):
        for path in (ROOT / folder).rglob("*"):
            if (path.is_file() and path.suffix in SOURCE_SUFFIXES and path != this
                    and "__pycache__" not in path.parts
                    and "DESIGN.md" in path.read_text(errors="replace")):
                found.append(str(path.relative_to(ROOT)))
    for name in ("README.md", "pyproject.toml"):
        if "DESIGN.md" in (ROOT / name).read_text():
            found.append(name)
    assert found == []
