"""The cluster's log files a run keeps (``cluster-logs/``), read back for evidence."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

__all__ = ["texts_with"]


def texts_with(root: Path, marker: str, *, max_bytes: int = 64 * 1024 * 1024
               ) -> Iterator[str]:
    """The text of every file under ``root`` (sorted by path) that contains
    ``marker``. Best effort: a file larger than ``max_bytes`` or unreadable is
    skipped; no ``root``, no text."""
    if not root.exists():
        return
    for path in sorted(root.rglob("*")):
        try:
            if not path.is_file() or path.stat().st_size > max_bytes:
                continue
            text = path.read_text("utf-8", errors="replace")
        except OSError:
            continue
        if marker in text:
            yield text
