"""Helpers for the fault tests: a counter process over the fenced Redis log."""

from __future__ import annotations

import hashlib
from typing import Any

import redis

from svit_cluster.control import ControlResponse, ProcessController, decode_request
from svit_cluster.process import Process
from svit_cluster.store import RedisBackend, StoreConfig
from svit_cluster.store._scripts import COMMIT

COUNTER = """(define (main input)
  (let ((count (+ (read "/memory/count") 1)))
    (do
      (write "/memory/count" count)
      (value-map "count" count))))
"""

#: SHA-1 of the commit script, as redis-py sends it in ``EVALSHA``.
COMMIT_SHA = hashlib.sha1(COMMIT.encode()).hexdigest().encode()




def is_commit(args: list[bytes]) -> bool:
    """The command is a call of the commit script."""
    return len(args) > 1 and args[0].upper() == b"EVALSHA" and args[1] == COMMIT_SHA


def any_command(args: list[bytes]) -> bool:
    return True


def load_commit_script(ctrl: ProcessController) -> None:
    """Load the commit script into Redis's script cache (``SCRIPT LOAD``), so
    the next commit's ``EVALSHA`` runs at once instead of answering ``NOSCRIPT``."""
    backend = ctrl.backend
    assert isinstance(backend, RedisBackend)
    assert backend._client.script_load(COMMIT) == COMMIT_SHA.decode()


def counter_process(pid: str) -> Process:
    return Process.create(pid, memory={"count": 0}, scripts={"counter": COUNTER})


def new_controller(client: redis.Redis, pid: str, token: int, config: StoreConfig,
                   *, create: bool) -> ProcessController:
    """Claim ``pid`` with ``token``; create it (version 0) or restore it; a controller."""
    backend = RedisBackend(client, pid, token, config)
    backend.claim()
    if create:
        proc = counter_process(pid)
        backend.create(proc)
    else:
        restored = backend.restore()
        assert restored is not None
        proc = restored
    return ProcessController(proc, backend)


def activate(ctrl: ProcessController, pid: str, rid: str, version: int,
             client: str = "c1") -> ControlResponse:
    """Run ``counter`` (+1) with ``expected_version=version`` under ``(client, rid)``."""
    doc: dict[str, Any] = {
        "protocol": "svit-control@1", "client_id": client, "request_id": rid,
        "process_id": pid, "expected_version": version,
        "command": {"operation": "activate", "script": "counter",
                    "input": {"type": "map", "value": {}}},
    }
    return ctrl.execute(decode_request(doc))
