"""Host-agent heartbeat file: written by ``svit-cluster host-agent``, read by probes.

The Kubernetes probes of a host pod must be cheap: starting a Ray driver per
probe (about 3 s and 400 MiB) is not. The host-agent launcher already pings its
agent every few seconds; after each answer it rewrites a small JSON file, and
``svit-cluster healthcheck --heartbeat FILE`` only reads that file.

File contents: ``{"ts": <unix seconds>, "host": str, "lease_state": str | null,
"actors": int}``, replaced atomically (write to a temporary file, then rename).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from svit_cluster.settings import DEFAULT_HEARTBEAT_FILE

__all__ = ["DEFAULT_HEARTBEAT_FILE", "check_heartbeat", "write_heartbeat"]


def write_heartbeat(path: str | Path, status: dict[str, Any], *,
                    now: float | None = None) -> None:
    """Atomically replace ``path`` with a heartbeat built from an agent ``status()``.

    Args:
        path: heartbeat file; its folder must exist and be writable.
        status: the agent's ``status()`` answer (``host``, ``lease_state``, ``actors``).
        now: unix time to record (default: ``time.time()``).

    Raises:
        OSError: the file cannot be written.
    """
    path = Path(path)
    doc = {"ts": time.time() if now is None else now, "host": status.get("host"),
           "lease_state": status.get("lease_state"), "actors": status.get("actors", 0)}
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(doc, fh)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def check_heartbeat(path: str | Path, *, max_age_s: float, require_lease: bool,
                    now: float | None = None) -> tuple[bool, str]:
    """Whether the heartbeat at ``path`` is fresh (and, if asked, the lease is held).

    Args:
        path: the heartbeat file.
        max_age_s: oldest acceptable heartbeat, in seconds.
        require_lease: also require ``lease_state == "held"`` (readiness: the
            host can take new processes); liveness leaves it off, since a host
            that is rejoining with a new lease is alive and must not be restarted.
        now: unix time to compare with (default: ``time.time()``).

    Returns:
        ``(ok, reason)``; ``reason`` says what failed, or summarises the heartbeat.
        Never raises: a missing or unreadable file is ``(False, reason)``.
    """
    try:
        doc = json.loads(Path(path).read_text())
        ts = float(doc["ts"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return False, f"no readable heartbeat at {path}: {exc}"
    age = (time.time() if now is None else now) - ts
    if age > max_age_s:
        return False, f"heartbeat is {age:.1f}s old (max {max_age_s:g}s)"
    state = doc.get("lease_state")
    if require_lease and state != "held":
        return False, f"host lease is {state!r}, not 'held'"
    return True, f"heartbeat {age:.1f}s old, lease {state!r}"
