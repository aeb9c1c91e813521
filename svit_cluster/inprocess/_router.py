"""The in-process router: every process in this Python process, nothing durable.

:class:`InProcessRouter` implements the gateway's
:class:`~svit_cluster.gateway.Router` contract with one
:class:`~svit_cluster.control.ProcessController` per process and in-memory
signals (:class:`~svit_cluster.inprocess.MemorySignals`). It serves tests,
benchmarks and examples; no production path imports it (import-linter
contract ``no-inprocess`` in ``pyproject.toml``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from svit_cluster.control import (
    DEFAULT_RECEIPTS,
    ControlAnswer,
    ControlRequest,
    ProcessController,
)
from svit_cluster.errors import ConflictError, NotFound
from svit_cluster.events import SignalSource
from svit_cluster.gateway import ProcessInfo
from svit_cluster.inprocess._signals import MemoryEventLog, MemorySignals, SignalingMemoryBackend
from svit_cluster.process import Process, Script, Value, to_plain_json
from svit_cluster.reasoning import TurnLoop, history_prefix_seq

if TYPE_CHECKING:
    from svit_cluster.reasoning import Reasoner, ReasonerConfig

__all__ = ["InProcessRouter"]


class InProcessRouter:
    """In-memory router: one :class:`ProcessController` per process, no durability.

    Signals are kept in memory (:class:`~svit_cluster.events.MemorySignals`).
    With ``reasoner`` (a factory), each process also runs the reasoning loop.

    Args:
        max_receipts: receipts kept per process (``control.DEFAULT_RECEIPTS``).
        reasoner: ``() -> Reasoner``; None (default) runs no reasoning loop.
        reasoner_config: loop bounds (``ReasonerConfig``; defaults otherwise).
    """

    def __init__(self, max_receipts: int = DEFAULT_RECEIPTS, *,
                 reasoner: Callable[[], Reasoner] | None = None,
                 reasoner_config: ReasonerConfig | None = None) -> None:
        self._controllers: dict[str, ProcessController] = {}
        self._residency: dict[str, float] = {}
        self._max_receipts = max_receipts
        self._lock = asyncio.Lock()
        self.signals = MemorySignals()
        self._reasoner = reasoner
        self._reasoner_config = reasoner_config
        self.loops: dict[str, TurnLoop] = {}

    def _controller(self, proc: Process) -> ProcessController:
        ctrl = ProcessController(
            proc, SignalingMemoryBackend(self.signals, proc.id, self._max_receipts))
        if self._reasoner is not None:
            loop = TurnLoop(ctrl, MemoryEventLog(self.signals, proc.id), self._reasoner(),
                            config=self._reasoner_config)
            self.loops[proc.id] = loop
            loop.start()
        return ctrl

    def signal_source(self) -> SignalSource:
        return self.signals

    async def aclose(self) -> None:
        """Stop every reasoning loop."""
        for loop in list(self.loops.values()):
            await loop.stop()
        self.loops.clear()

    def _get(self, process_id: str) -> ProcessController:
        ctrl = self._controllers.get(process_id)
        if ctrl is None:
            raise NotFound(f"unknown process {process_id[:200]}")
        return ctrl

    async def control(self, request: ControlRequest, partition: str,
                      body: bytes | None = None) -> ControlAnswer:
        ctrl = self._get(request.process_id)
        response = await asyncio.to_thread(ctrl.execute, request, tenant=partition)
        return ControlAnswer.of(response)

    async def create(
        self, process_id: str, memory: Value, scripts: dict[str, Script]
    ) -> ProcessInfo:
        """Create a process at version 0 (see ``Router.create``).

        Raises:
            ConflictError: (409) ``process_id`` exists.
            ScriptFailed, InvalidInput, LimitExceeded: from ``Process.create``.
        """
        async with self._lock:
            if process_id in self._controllers:
                raise ConflictError(f"process {process_id[:200]} already exists")
            proc = Process.create(process_id, memory=memory, scripts=dict(scripts))
            self._controllers[process_id] = self._controller(proc)
        return {"process_id": process_id, "version": proc.version, "root_hash": proc.root_hash}

    async def inbox(self, process_id: str, message: Value, dedup_key: str | None
                    ) -> dict[str, Any]:
        ctrl = self._get(process_id)
        appended, version, _ = await asyncio.to_thread(ctrl.append_inbox, message,
                                                       dedup_key=dedup_key)
        loop = self.loops.get(process_id)
        if appended and loop is not None:
            loop.wake()
        return {"appended": appended, "version": version}

    async def inbox_drop(self, process_id: str, *, reason: str, message_id: str | None = None,
                         head_hash: str | None = None) -> dict[str, Any]:
        ctrl = self._get(process_id)
        version, letter = await asyncio.to_thread(ctrl.drop_inbox_head, reason=reason,
                                                  message_id=message_id, head_hash=head_hash)
        loop = self.loops.get(process_id)
        if loop is not None:
            loop.wake()
        return {"dropped": letter, "version": version}

    async def state(self, process_id: str, path: str) -> tuple[Value, int]:
        return self._get(process_id).read_versioned(path)

    async def request_status(self, process_id: str, partition: str, client_id: str,
                             request_id: str) -> dict[str, Any]:
        ctrl = self._get(process_id)
        status = await asyncio.to_thread(ctrl.request_status, client_id, request_id,
                                         tenant=partition)
        return status.to_json()

    async def snapshot(self, process_id: str) -> bytes:
        ctrl = self._get(process_id)
        with ctrl.locked():
            return ctrl.process.snapshot()

    async def fork(self, process_id: str, new_process_id: str, *, history: bool = False
                   ) -> ProcessInfo:
        """Fork into ``new_process_id`` (see ``Router.fork``).

        With ``history``, the child's first session starts with the parent's
        acknowledged events (``MemorySignals.fork_events`` up to the
        ``/thread/session/last_seq`` of the forked state, read under the same
        lock as the fork), copied before the child's loop starts. The answer
        then has ``"history": {"events": int, "upto_seq": int}``.

        Raises:
            NotFound: no process ``process_id``.
            ConflictError: (409) ``new_process_id`` exists, or its event log
                already holds events of its own.
        """
        ctrl = self._get(process_id)
        async with self._lock:
            if new_process_id in self._controllers:
                raise ConflictError(f"process {new_process_id[:200]} already exists")
            with ctrl.locked():
                child = ctrl.process.fork(new_process_id)
                upto = history_prefix_seq(to_plain_json(ctrl.process.read("/thread")))
            copied = (self.signals.fork_events(process_id, new_process_id, upto_seq=upto)
                      if history else None)
            self._controllers[new_process_id] = self._controller(child)
        info: ProcessInfo = {"process_id": new_process_id, "version": child.version,
                             "root_hash": child.root_hash}
        if copied is not None:
            info["history"] = {"events": copied, "upto_seq": upto}
        return info

    async def delete(self, process_id: str) -> dict[str, Any]:
        async with self._lock:
            ctrl = self._get(process_id)
            loop = self.loops.pop(process_id, None)
            if loop is not None:
                await loop.stop()
            with ctrl.locked():
                version = ctrl.process.version
                del self._controllers[process_id]
        return {"process_id": process_id, "deleted": True, "version": version}

    async def set_residency(self, process_id: str, *, passivate_after_s: float | None
                            ) -> dict[str, Any]:
        """Recorded per process (nothing passivates in one Python process)."""
        self._get(process_id)
        if passivate_after_s is None:
            self._residency.pop(process_id, None)
        else:
            self._residency[process_id] = float(passivate_after_s)
        return {"process_id": process_id, "default": passivate_after_s is None,
                "passivate_after_s": self._residency.get(process_id)}

    async def list_processes(self, *, tenant: str | None, limit: int,
                             cursor: str | None) -> dict[str, Any]:
        """Processes sorted by id after ``cursor`` (the last id of the previous
        page); every one is active here (see ``Router.list_processes``)."""
        page: list[dict[str, Any]] = []
        for pid in sorted(self._controllers):
            if cursor is not None and pid <= cursor:
                continue
            if tenant is not None and pid[len("svit://"):].split("/", 1)[0] != tenant:
                continue
            if len(page) == limit:
                return {"processes": page, "next": page[-1]["process_id"]}
            controller = self._controllers[pid]
            page.append({"process_id": pid, "version": controller.process.version,
                         "active": True, "host": "inprocess", "token": controller.token})
        return {"processes": page, "next": None}

    async def health(self) -> dict[str, Any]:
        return {"ok": True, "processes": len(self._controllers)}

    async def owner_changes(self, limit: int) -> list[dict[str, Any]]:
        """None: every process stays in this Python process, under one owner."""
        return []

    async def hosts(self) -> list[dict[str, Any]]:
        """One host, this Python process: no lease, no residency budget."""
        return [{"host": "inprocess", "answered": True, "lease_state": None,
                 "actors": len(self._controllers), "max_active": None}]
