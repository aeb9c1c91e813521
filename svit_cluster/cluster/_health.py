"""Is this host able to serve? Raylet liveness and Ray's node state.

A host's etcd lease must mean the host can serve. The host agent is an ordinary
Ray worker process: when only its raylet is stopped (SIGSTOP) or dead, the
agent itself keeps running and, without a check, its lease would stay alive
while Ray has already declared the node dead and nothing on it can be reached.
The agent checks :meth:`HostHealth.problem` before it joins; its lease keeper
watches the raylet process itself, and Ray's verdict reaches the keeper through
:attr:`HostHealth.on_problem`; either revokes the lease at once.

Two signals:

* the raylet process (an ancestor of every Ray worker process, found with
  psutil): missing, a zombie, or stopped (``T``) means unhealthy; read from
  ``/proc`` on every call, so a stop is seen within one keepalive interval;
* Ray's node table (``ray.nodes()`` from the GCS, polled by a daemon thread
  every ``poll_s`` seconds): our node listed as not alive means unhealthy. A
  GCS that does not answer is no evidence either way (a paused GCS must not
  fail every host), so the last answer stands.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import psutil

__all__ = ["HostHealth", "find_raylet_pid", "raylet_problem"]

log = logging.getLogger(__name__)

_BAD_STATUS = {psutil.STATUS_STOPPED, psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD,
               psutil.STATUS_TRACING_STOP}


def find_raylet_pid() -> int | None:
    """PID of the raylet that started this worker process, or None outside Ray."""
    try:
        for parent in psutil.Process().parents():
            if parent.name() == "raylet":
                return int(parent.pid)
    except psutil.Error:
        return None
    return None


def raylet_problem(pid: int) -> str | None:
    """None while process ``pid`` runs; else why it cannot serve (gone, stopped, zombie)."""
    try:
        status = psutil.Process(pid).status()
    except psutil.NoSuchProcess:
        return f"raylet {pid} is gone"
    except psutil.Error as exc:  # access denied etc.: no evidence
        log.debug("raylet %s status unreadable: %s", pid, exc)
        return None
    if status in _BAD_STATUS:
        return f"raylet {pid} is {status}"
    return None


class HostHealth:
    """Health of the host this process runs on (callable from any thread).

    Args:
        raylet_pid: the raylet to watch (None: not checked).
        node_id: this host's Ray node id, hex (None: Ray's node table not checked).
        poll_s: period of the node-table poll in seconds (default 1).
    """

    def __init__(self, raylet_pid: int | None, node_id: str | None, *,
                 poll_s: float = 1.0) -> None:
        self.raylet_pid = raylet_pid
        self.node_id = node_id
        self.poll_s = poll_s
        self.node_dead = False
        #: Called (from the poll thread) with the reason when Ray lists this node
        #: dead; the agent has its lease keeper revoke the lease.
        self.on_problem: Callable[[str], None] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @classmethod
    def of_this_worker(cls) -> HostHealth:
        """The health of the Ray node running this worker (checks nothing outside Ray)."""
        node_id: str | None = None
        try:
            import ray

            if ray.is_initialized():
                node_id = ray.get_runtime_context().get_node_id()
        except Exception:  # no Ray: nothing to watch
            log.debug("no Ray runtime context", exc_info=True)
        return cls(find_raylet_pid(), node_id)

    def problem(self) -> str | None:
        """None while the host can serve; else the reason it cannot."""
        if self.raylet_pid is not None:
            reason = raylet_problem(self.raylet_pid)
            if reason is not None:
                return reason
        if self.node_dead:
            return f"Ray reports node {self.node_id} dead"
        return None

    def start(self) -> None:
        """Start polling Ray's node table (no-op without a node id)."""
        if self.node_id is None or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._poll, daemon=True, name="host-health")
        self._thread.start()

    def stop(self) -> None:
        """Stop polling (the thread ends within ``poll_s``)."""
        self._stop.set()

    def _poll(self) -> None:
        import ray

        while not self._stop.wait(self.poll_s):
            try:
                nodes: list[dict[str, Any]] = ray.nodes()  # type: ignore[no-untyped-call]
            except Exception:  # GCS unreachable: no evidence, keep the last answer
                continue
            for node in nodes:
                # Only an explicit ``Alive: False`` is a verdict (an entry
                # without it is no evidence, as in _placement.NodeTable).
                if node.get("NodeID") == self.node_id and isinstance(node.get("Alive"), bool):
                    was_dead, self.node_dead = self.node_dead, not node["Alive"]
                    if self.node_dead and not was_dead and self.on_problem is not None:
                        try:
                            self.on_problem(f"Ray reports node {self.node_id} dead")
                        except Exception:  # the poll goes on
                            log.exception("host health callback failed")
                    break
