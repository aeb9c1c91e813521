"""The gateway's view of where processes live: the :class:`Router` contract.

* :class:`LocalRouter` keeps processes in this Python process (tests, and the
  single-host ``svit-cluster serve``); not durable.
* ``svit_cluster.cluster.RayRouter`` routes to Ray process actors through the
  etcd owner cache, activating processes on demand (cluster hosting).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Protocol

from svit_cluster.control import (
    DEFAULT_RECEIPTS,
    ControlRequest,
    ControlResponse,
    ProcessController,
)
from svit_cluster.errors import ErrorCode, InvalidInput, NotFound
from svit_cluster.events import (
    MemoryEventLog,
    MemorySignals,
    SignalingMemoryBackend,
    SignalSource,
)
from svit_cluster.process import Process, Script, Value

if TYPE_CHECKING:
    from svit_cluster.reasoning import Reasoner, ReasonerConfig, TurnLoop

__all__ = [
    "TOKEN_HEADER",
    "LocalRouter",
    "ProcessInfo",
    "Router",
    "capture_owner_token",
    "report_owner_token",
]

ProcessInfo = dict[str, Any]

#: Response header of ``/v1/control`` carrying the answering owner's fencing token.
TOKEN_HEADER = "X-Svit-Token"

# A side channel next to the Router protocol (which returns a bare ControlResponse):
# the gateway installs a box around ``router.control``; a router that knows the
# owner's fencing token reports it into the box.
_OWNER_TOKEN: ContextVar[list[int] | None] = ContextVar("svit_owner_token", default=None)


@contextlib.contextmanager
def capture_owner_token() -> Iterator[list[int]]:
    """Collect tokens reported by :func:`report_owner_token` in this context (the gateway)."""
    box: list[int] = []
    reset = _OWNER_TOKEN.set(box)
    try:
        yield box
    finally:
        _OWNER_TOKEN.reset(reset)


def report_owner_token(token: Any) -> None:
    """Called by a router inside ``control``: the fencing token of the owner that
    answered (ignored when nobody captures, or when ``token`` is not an integer)."""
    box = _OWNER_TOKEN.get()
    if box is None or isinstance(token, bool):
        return
    try:
        box.append(int(token))
    except (TypeError, ValueError):
        return


class Router(Protocol):
    """Process operations behind the gateway. Every method is safe to retry
    except :meth:`create` and :meth:`fork`, which fail with ``conflict`` when
    the target already exists."""

    async def control(self, request: ControlRequest, partition: str) -> ControlResponse:
        """Run one control request; ``partition`` is the trusted receipt partition.

        A router that knows the answering owner's fencing token calls
        :func:`report_owner_token` before returning (the gateway sends it as
        the ``X-Svit-Token`` header)."""
        ...

    async def create(
        self, process_id: str, memory: Value, scripts: dict[str, Script]
    ) -> ProcessInfo:
        """Create a process at version 0; returns ``{process_id, version, root_hash}``."""
        ...

    async def inbox(self, process_id: str, message: Value, dedup_key: str | None
                    ) -> dict[str, Any]:
        """Commit ``message`` to ``/inbox`` (skipped if ``dedup_key`` was delivered);
        returns ``{"appended": bool, "version": int}``."""
        ...

    async def inbox_drop(self, process_id: str, *, reason: str, message_id: str | None = None,
                         head_hash: str | None = None) -> dict[str, Any]:
        """Dead-letter the inbox head named by ``message_id`` and/or ``head_hash``
        (see :meth:`ProcessController.drop_inbox_head`); returns
        ``{"dropped": dead_letter, "version": int}``. Not safe to retry blindly:
        a retry after success finds another head and answers ``inbox_conflict``."""
        ...

    async def state(self, process_id: str, path: str) -> tuple[Value, int]:
        """``(value, version)`` from one observation."""
        ...

    async def snapshot(self, process_id: str) -> bytes:
        """The process snapshot bytes."""
        ...

    async def request_status(self, process_id: str, partition: str, client_id: str,
                             request_id: str) -> dict[str, Any]:
        """Did the request ``(partition, client_id, request_id)`` commit on ``process_id``?

        Returns ``{"committed": bool, "version": int | None,
        "retained_from_version": int}`` from the owner's retained log (see
        :meth:`ProcessController.request_status`). Read-only, safe to retry."""
        ...

    async def fork(self, process_id: str, new_process_id: str) -> ProcessInfo:
        """Fork into ``new_process_id``; returns its info."""
        ...

    async def delete(self, process_id: str) -> dict[str, Any]:
        """Delete the process (fenced like a commit; see ``RedisBackend.delete``).

        Returns ``{"process_id", "deleted": True, "version"}`` (``version``: the
        head version that was deleted). Raises ``NotFound`` when there is no
        such process (never created or already deleted: a retry after an
        unknown outcome answers this), ``FencedError`` when the owner that
        tried lost the process, ``UnavailableError`` when the outcome is
        unknown (retry)."""
        ...

    async def health(self) -> dict[str, Any]:
        """``{"ok": bool, ...details}``."""
        ...

    def signal_source(self) -> SignalSource:
        """Where observers read signals and canonical history (never the owner's path)."""
        ...


class LocalRouter:
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
            from svit_cluster.reasoning import TurnLoop

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

    async def control(self, request: ControlRequest, partition: str) -> ControlResponse:
        ctrl = self._get(request.process_id)
        return await asyncio.to_thread(ctrl.execute, request, tenant=partition)

    async def create(
        self, process_id: str, memory: Value, scripts: dict[str, Script]
    ) -> ProcessInfo:
        async with self._lock:
            if process_id in self._controllers:
                raise InvalidInput(f"process {process_id[:200]} already exists",
                                   code=ErrorCode.CONFLICT)
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

    async def fork(self, process_id: str, new_process_id: str) -> ProcessInfo:
        ctrl = self._get(process_id)
        async with self._lock:
            if new_process_id in self._controllers:
                raise InvalidInput(f"process {new_process_id[:200]} already exists",
                                   code=ErrorCode.CONFLICT)
            with ctrl.locked():
                child = ctrl.process.fork(new_process_id)
            self._controllers[new_process_id] = self._controller(child)
        return {"process_id": new_process_id, "version": child.version,
                "root_hash": child.root_hash}

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

    async def health(self) -> dict[str, Any]:
        return {"ok": True, "processes": len(self._controllers)}
