"""A Ray-free gateway :class:`~svit_cluster.gateway.Router` over the real fenced
Redis commit log: one owner (token 1) per process, ``RedisBackend`` +
``ProcessController``, signals in memory. Gateway tests that need real commits
without a cluster serve the gateway app over it."""

from __future__ import annotations

import asyncio
from typing import Any

import redis

from svit_cluster.control import ControlAnswer, ControlRequest, ProcessController
from svit_cluster.errors import NotFound
from svit_cluster.inprocess import MemorySignals
from svit_cluster.process import Process, Script, Value
from svit_cluster.store import RedisBackend, StoreConfig


class RedisRouter:
    """Create, control, read, request status and inbox for processes of one Redis.

    Args:
        client: the redis-py client of the commit log.
        config: the store's options (default ``StoreConfig()``).
    """

    def __init__(self, client: redis.Redis, config: StoreConfig | None = None) -> None:
        self.client = client
        self.config = config or StoreConfig()
        self.backends: dict[str, RedisBackend] = {}
        self.ctrls: dict[str, ProcessController] = {}
        self.signals = MemorySignals()

    def _get(self, pid: str) -> ProcessController:
        if pid not in self.ctrls:
            raise NotFound(f"unknown process {pid}")
        return self.ctrls[pid]

    async def control(self, request: ControlRequest, partition: str,
                      body: bytes | None = None) -> ControlAnswer:
        ctrl = self._get(request.process_id)
        return ControlAnswer.of(
            await asyncio.to_thread(ctrl.execute, request, tenant=partition))

    async def create(self, process_id: str, memory: Value, scripts: dict[str, Script]
                     ) -> dict[str, Any]:
        backend = RedisBackend(self.client, process_id, 1, self.config)
        backend.claim()
        proc = Process.create(process_id, memory=memory, scripts=dict(scripts))
        backend.create(proc)
        self.backends[process_id] = backend
        self.ctrls[process_id] = ProcessController(proc, backend)
        return {"process_id": process_id, "version": 0, "root_hash": proc.root_hash}

    async def state(self, process_id: str, path: str) -> tuple[Value, int]:
        return self._get(process_id).read_versioned(path)

    async def request_status(self, process_id: str, partition: str, client_id: str,
                             request_id: str) -> dict[str, Any]:
        status = self._get(process_id).request_status(client_id, request_id, tenant=partition)
        return status.to_json()

    async def inbox(self, process_id: str, message: Value, dedup_key: str | None
                    ) -> dict[str, Any]:
        appended, version, _ = await asyncio.to_thread(
            self._get(process_id).append_inbox, message, dedup_key=dedup_key)
        return {"appended": appended, "version": version}

    async def health(self) -> dict[str, Any]:
        return {"ok": True}

    def signal_source(self) -> MemorySignals:
        return self.signals
