"""Commit-log helpers shared by the store, ownership, cluster and conformance tests
(no fixtures here): seal and commit host writes, claim and create a log, plant
stream corruption, and a redis-server with extra settings."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import redis

from svit_cluster.control._backend import Receipt
from svit_cluster.local import RedisServer
from svit_cluster.process import Process, Transition
from svit_cluster.store import RedisBackend, StoreConfig


class ConfiguredRedis(RedisServer):
    """``RedisServer`` with extra command-line settings (test-only)."""

    def __init__(self, state_dir: Path, extra: list[str]) -> None:
        super().__init__(state_dir, die_with_parent=True)
        self.extra = extra

    def _command(self, binary: str) -> list[str]:
        return [*super()._command(binary), *self.extra]



def seal_write(process: Process, value: Any, path: str = "/memory/count") -> Transition:
    """Seal (not apply) one host write on ``process``."""
    wc = process.working_copy()
    wc.write(path, value)
    return process.seal(wc, "host.write")


def receipt(request_id: str, response: bytes | None = None, client_id: str = "c1") -> Receipt:
    body = response if response is not None else f'{{"request":"{request_id}"}}'.encode()
    fingerprint = hashlib.sha256(request_id.encode()).hexdigest()
    return Receipt("tenant-a", client_id, request_id, fingerprint, body)


def commit_write(backend: RedisBackend, process: Process, value: Any,
                 request_id: str | None = None) -> Transition:
    """Commit one host write durably, then apply it to ``process``."""
    t = seal_write(process, value)
    backend.commit(t, receipt(request_id) if request_id else None)
    process.commit(t)
    return t


def new_log(client: redis.Redis, pid: str, token: int, config: StoreConfig,
            memory: dict[str, Any] | None = None) -> tuple[RedisBackend, Process]:
    """Claim ``pid`` with ``token``, create it at version 0, return backend and process."""
    backend = RedisBackend(client, pid, token, config)
    backend.claim()
    process = Process.create(pid, memory=memory if memory is not None else {"count": 0})
    backend.create(process)
    return backend, process


def rewrite_stream(client: redis.Redis, key: str,
                   edit: Any) -> None:
    """Rebuild stream ``key`` with ``edit(version, fields) -> fields | None`` (None drops).

    Used to plant corruption: entries cannot be edited in place.
    """
    entries = client.xrange(key)
    client.delete(key)
    for eid, fields in entries:
        version = int(eid.split(b"-")[0])
        new = edit(version, dict(fields))
        if new is not None:
            client.xadd(key, new, id=eid)
