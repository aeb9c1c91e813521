"""Dispatcher worker processes of the local cluster (``svit-cluster up``/``down``).

Each worker is an OS process (``svit-cluster dispatcher run --state-dir …``),
not a Ray actor: it needs only Redis and HTTP, and costs no Ray worker. PIDs
are recorded in ``cluster.json`` under ``dispatch.workers`` and stopped by PID.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import psutil

from svit_cluster.dispatch import DispatchConfig
from svit_cluster.errors import UnavailableError
from svit_cluster.local._servers import stop_pid
from svit_cluster.store import CLUSTER_ENV, connect

__all__ = [
    "LOCAL_DEFAULTS",
    "ClusterRecord",
    "kill_dispatcher",
    "start_dispatcher",
    "start_dispatchers",
    "stop_dispatchers",
]

#: Options of local-cluster workers unless ``ClusterSpec.dispatch_options`` says
#: otherwise: faster takeover than the production defaults.
LOCAL_DEFAULTS: dict[str, Any] = {"claim_ttl_s": 5.0, "claim_idle_s": 5.0,
                                  "scan_interval_s": 1.0}

_children: dict[int, subprocess.Popen[bytes]] = {}


class _StateDir(Protocol):
    @property
    def state_dir(self) -> Path: ...


class ClusterRecord(Protocol):
    """The part of a local cluster these functions use (``LocalCluster`` is one).

    They sit below the cluster that starts them, so they take this instead of
    importing it: ``doc`` is its ``cluster.json`` document, changed in place
    (``dispatch.options``, ``dispatch.workers``); ``spec.state_dir`` is where the
    workers' logs go; ``save()`` writes ``doc`` back.
    """

    @property
    def doc(self) -> dict[str, Any]: ...

    @property
    def spec(self) -> _StateDir: ...

    def save(self) -> None: ...


def _section(cluster: ClusterRecord) -> dict[str, Any]:
    section: dict[str, Any] = cluster.doc.setdefault("dispatch", {})
    section.setdefault("options", {})
    section.setdefault("workers", {})
    return section


def _worker_env(doc: dict[str, Any]) -> dict[str, str]:
    """The environment of a dispatcher process: ours, plus ``SVIT_REDIS_CLUSTER``
    when the cluster's Redis is a Redis Cluster (its clients read it)."""
    env = dict(os.environ)
    if doc.get("redis", {}).get("cluster"):
        env[CLUSTER_ENV] = "true"
    return env


def start_dispatchers(cluster: ClusterRecord, count: int, options: dict[str, Any],
                      progress: Callable[[str], None] = lambda _m: None) -> None:
    """Record ``options`` and start ``count`` workers ``d1..dN``; wait until each heartbeats.

    Raises:
        ConfigurationError: bad options.  UnavailableError: a worker did not start.
    """
    section = _section(cluster)
    section["options"] = {**LOCAL_DEFAULTS, **options}
    DispatchConfig.from_cluster_json_doc(cluster.doc)  # validate before starting anything
    for i in range(count):
        progress(f"starting dispatcher worker d{i + 1}")
        start_dispatcher(cluster, f"d{i + 1}")


def start_dispatcher(cluster: ClusterRecord, name: str, *, timeout_s: float = 30.0) -> int:
    """Start worker ``name`` (a fresh consumer name ``<name>-<random>``); return its PID.

    Raises:
        UnavailableError: it exited or did not heartbeat within ``timeout_s``.
    """
    section = _section(cluster)
    state = cluster.spec.state_dir
    (state / "logs").mkdir(parents=True, exist_ok=True)
    worker_id = f"{name}-{secrets.token_hex(3)}"
    log_path = state / "logs" / f"dispatcher-{name}.log"
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "svit_cluster.cli", "dispatcher", "run",
             "--state-dir", str(state), "--worker-id", worker_id],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, env=_worker_env(cluster.doc),
        )
    _children[proc.pid] = proc
    section["workers"][name] = {"pid": proc.pid, "worker_id": worker_id,
                                "log": str(log_path)}
    cluster.save()
    config = DispatchConfig.from_cluster_json_doc(cluster.doc)
    client = connect(config.redis_url,
                     cluster=bool(cluster.doc.get("redis", {}).get("cluster", False)))
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise UnavailableError(f"dispatcher {name} exited with {proc.returncode}; "
                                       f"see {log_path}")
            if client.zscore(config.keys.workers, worker_id) is not None:
                return proc.pid
            time.sleep(0.1)
    finally:
        client.close()
    raise UnavailableError(f"dispatcher {name} did not start within {timeout_s} s; "
                           f"see {log_path}")


def _reap(pid: int, timeout_s: float) -> None:
    proc = _children.pop(pid, None)
    with contextlib.suppress(subprocess.TimeoutExpired, psutil.Error):
        if proc is not None:
            proc.wait(timeout_s)
        else:
            psutil.Process(pid).wait(timeout_s)


def kill_dispatcher(cluster: ClusterRecord, name: str) -> int | None:
    """SIGKILL worker ``name`` (no clean shutdown: its claims and pending entries stay)."""
    entry = _section(cluster)["workers"].get(name)
    if not entry:
        return None
    pid = int(entry["pid"])
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    _reap(pid, 10.0)
    entry["pid"] = None
    cluster.save()
    return pid


def stop_dispatchers(cluster: ClusterRecord,
                     progress: Callable[[str], None] = lambda _m: None) -> None:
    """SIGTERM every recorded worker (SIGKILL after 10 s), by PID."""
    workers = cluster.doc.get("dispatch", {}).get("workers", {})
    for name in sorted(workers, reverse=True):
        pid = workers[name].get("pid")
        if pid:
            progress(f"stopping dispatcher worker {name}")
            stop_pid(pid)
            _reap(pid, 1.0)
            workers[name]["pid"] = None
