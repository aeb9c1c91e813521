"""The benchmarks' local cluster: up, yielded, always downed; a failure to start
or inside prints the tracebacks and ERROR lines of the cluster's logs to stderr first.

The benchmarks keep their cluster's state dir in a temporary directory, which
is gone once they return; the log tails on stderr are what a failed CI run
keeps of the cause.

:func:`load_parser` holds the command-line options every cluster load
benchmark takes.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

from svit_cluster.local import ClusterSpec, LocalCluster

__all__ = [
    "MAX_TAIL_LINES",
    "error_lines",
    "load_parser",
    "local_cluster",
    "log_tails",
    "print_log_tails",
    "running",
]

#: Lines kept per log file by :func:`log_tails` (the newest ones).
MAX_TAIL_LINES = 80

#: A line holding one of these starts an error block: a Python traceback, its
#: chained-exception separators, a ``%(levelname)s`` ERROR record, uvicorn's
#: ``ERROR:`` prefix.
_MARKERS = ("Traceback (most recent call last)",
            "The above exception was the direct cause",
            "During handling of the above exception",
            " ERROR ")


def load_parser(doc: str, quick_help: str) -> argparse.ArgumentParser:
    """A parser described by ``doc``'s first line with the options of a load on a
    local cluster: ``--quick`` (``quick_help`` says what it shrinks to),
    ``--clients`` (16), ``--processes`` (100) and ``--hosts`` (3)."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help=quick_help)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--processes", type=int, default=100)
    ap.add_argument("--hosts", type=int, default=3)
    return ap


def _starts_block(line: str) -> bool:
    return line.startswith("ERROR:") or any(m in line for m in _MARKERS)


def error_lines(path: Path, max_lines: int = MAX_TAIL_LINES) -> list[str]:
    """The newest ``max_lines`` error lines of the text file ``path``.

    An error line is one that starts a block (see :data:`_MARKERS`, or begins
    with ``ERROR:``), the line just before a ``Traceback`` line (the message
    a ``log.exception`` call wrote), and the lines of a traceback after its
    header: indented lines, and the first unindented non-blank line, which
    is the exception itself and ends the traceback.

    Returns:
        At most ``max_lines`` lines, oldest first, without line ends; bytes
        that are not UTF-8 are replaced. The file is read one line at a time.

    Raises:
        OSError: ``path`` cannot be read.
    """
    kept: collections.deque[str] = collections.deque(maxlen=max_lines)
    previous: str | None = None  # the last line not kept, a candidate message line
    in_traceback = False
    with path.open(encoding="utf-8", errors="replace") as f:
        for raw in f:
            line = raw.rstrip("\r\n")
            if _starts_block(line):
                if "Traceback" in line and previous:
                    kept.append(previous)
                kept.append(line)
                in_traceback = "Traceback" in line
                previous = None
            elif in_traceback:
                kept.append(line)
                # the exception line (unindented, not blank) closes the traceback
                in_traceback = not line.strip() or line[:1].isspace()
                previous = None
            else:
                previous = line if line.strip() else None
    return list(kept)


def log_tails(log_dir: Path, max_lines: int = MAX_TAIL_LINES) -> str:
    """Every file in ``log_dir`` with its :func:`error_lines`, as one text.

    ``gateway.log`` comes first, then the other files by name; each under a
    ``==> <name> <==`` heading (with ``(no errors)`` or ``(unreadable: ...)``
    when so). Subdirectories are skipped.

    Returns:
        The text (ends with a newline); a line saying so when ``log_dir``
        does not exist, cannot be listed or holds no files. Never raises
        ``OSError``: it runs while another error is being reported.
    """
    if not log_dir.is_dir():
        return f"==> {log_dir}: no such directory <==\n"
    try:
        files = sorted((p for p in log_dir.iterdir() if p.is_file()),
                       key=lambda p: (p.name != "gateway.log", p.name))
    except OSError as exc:  # never hide the error being reported behind this one
        return f"==> {log_dir}: unreadable ({exc}) <==\n"
    if not files:
        return f"==> {log_dir}: no log files <==\n"
    out: list[str] = []
    for path in files:
        out.append(f"==> {path.name} <==")
        try:
            lines = error_lines(path, max_lines)
        except OSError as exc:
            out.append(f"(unreadable: {exc})")
            continue
        out.extend(lines or ["(no errors)"])
    return "\n".join(out) + "\n"


def print_log_tails(log_dir: Path, stream: TextIO | None = None) -> None:
    """Write :func:`log_tails` of ``log_dir`` to ``stream`` (default: stderr)."""
    out = stream if stream is not None else sys.stderr
    out.write(f"--- error lines of the cluster's logs ({log_dir}) ---\n")
    out.write(log_tails(log_dir))
    out.flush()


@contextlib.contextmanager
def running(cluster: LocalCluster) -> Iterator[LocalCluster]:
    """Yield the already started ``cluster``; always ``down()`` it after.

    Any exception from the block (``KeyboardInterrupt`` too) first prints
    :func:`log_tails` of ``<state_dir>/logs`` to stderr, while the logs still
    exist, and is then re-raised unchanged.
    """
    try:
        yield cluster
    except BaseException:
        print_log_tails(cluster.spec.state_dir / "logs")
        raise
    finally:
        cluster.down()


@contextlib.contextmanager
def local_cluster(spec: ClusterSpec) -> Iterator[LocalCluster]:
    """``LocalCluster.up(spec)``, then as :func:`running`.

    When ``up`` itself fails (e.g. the gateway exits while starting), the
    log tails are printed too and the exception re-raised; ``up`` has stopped
    what it started, so nothing is downed here.

    Raises:
        whatever ``LocalCluster.up`` raises, and whatever the block raises.
    """
    try:
        cluster = LocalCluster.up(spec)
    except BaseException:
        print_log_tails(spec.state_dir / "logs")
        raise
    with running(cluster):
        yield cluster
