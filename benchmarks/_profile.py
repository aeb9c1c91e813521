"""Sampling profiles of running processes with py-spy, summarized as top frames.

:func:`record` starts one ``py-spy record`` per PID (raw collapsed stacks, idle
threads left out, so a sample is a moment the process ran Python code or waited
in a call it made); :func:`summarize` reads such a file and gives, for the
``top`` functions, their *self* share (the leaf frame: where the CPU went) and
their *inclusive* share (anywhere on the stack: what a call costs in all), and
the self share per top-level package (``ray``, ``asyncio``, ``svit_cluster``,
``redis``...). Shares are fractions of all samples of that file.

py-spy runs with ``--nonblocking`` (the target is never paused; a stack can be
torn now and then, which a share over thousands of samples absorbs) at
``rate_hz`` samples per second.
"""

from __future__ import annotations

import collections
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

__all__ = ["record", "summarize"]

#: ``function (path/to/module.py:123)`` as py-spy writes a frame.
_FRAME = re.compile(r"^(?P<fn>.*?) \((?P<file>[^():]+)(?::\d+)?\)$")


def record(pids: dict[str, int], out_dir: Path, duration_s: float, *,
           rate_hz: int = 250) -> list[tuple[str, Path, subprocess.Popen[bytes]]]:
    """Start ``py-spy record --gil`` on each ``{label: pid}`` for ``duration_s`` s.

    Only samples of the thread holding the GIL are kept: Python work. Native
    work that releases the GIL (Ray's C++ core worker threads, a blocking
    socket read) is not in them; the benchmark's per-process CPU is.

    Returns ``(label, raw_file, process)`` per PID; wait on the processes, then
    :func:`summarize` the files.

    Raises:
        FileNotFoundError: ``py-spy`` is not on ``PATH`` (``pip install py-spy``).
    """
    exe = shutil.which("py-spy")
    if exe is None:
        raise FileNotFoundError("py-spy is not on PATH (pip install py-spy)")
    out_dir.mkdir(parents=True, exist_ok=True)
    started = []
    for label, pid in pids.items():
        raw = out_dir / f"{label}.txt"
        proc = subprocess.Popen(
            [exe, "record", "--pid", str(pid), "--duration", str(max(1, round(duration_s))),
             "--rate", str(rate_hz), "--format", "raw", "--gil", "--nonblocking",
             "--output", str(raw)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        started.append((label, raw, proc))
    return started


def _function(frame: str) -> tuple[str, str]:
    """``(qualified function, top-level package)`` of one py-spy frame."""
    m = _FRAME.match(frame.strip())
    if m is None:
        return frame.strip(), "?"
    path = m.group("file")
    module = path.removesuffix(".py").replace("/", ".")
    package = module.split(".")[0] or "?"
    return f"{module}.{m.group('fn')}", package


def summarize(raws: list[Path], *, top: int = 15) -> dict[str, Any]:
    """Top frames of raw py-spy files, taken together (e.g. several actors).

    Returns ``{"samples": n, "self": [[function, share], ...],
    "inclusive": [[function, share], ...], "packages": {package: self share}}``,
    shares rounded to 3 decimals, each list the ``top`` largest first. Empty
    or missing files give ``{"samples": 0, ...}`` with empty lists.
    """
    own: collections.Counter[str] = collections.Counter()
    incl: collections.Counter[str] = collections.Counter()
    packages: collections.Counter[str] = collections.Counter()
    total = 0
    lines = [line for raw in raws if raw.exists()
             for line in raw.read_text(errors="replace").splitlines()]
    for line in lines:
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = [_function(f) for f in stack.split(";") if f and not f.startswith("process ")
                  and not f.startswith("thread ")]
        if not frames:
            continue
        total += n
        leaf, package = frames[-1]
        own[leaf] += n
        packages[package] += n
        for fn in {f for f, _ in frames}:
            incl[fn] += n

    def share(counter: collections.Counter[str]) -> list[list[Any]]:
        return [[fn, round(c / total, 3)] for fn, c in counter.most_common(top)]

    return {"samples": total, "self": share(own) if total else [],
            "inclusive": share(incl) if total else [],
            "packages": {p: round(c / total, 3) for p, c in packages.most_common(top)}
            if total else {}}
