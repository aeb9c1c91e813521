"""A reasoning process for the ported agent/reasoning-loop tests.

One process behind a real :class:`ProcessController` whose backend publishes
signals (``SignalingMemoryBackend``, the one ``InProcessRouter`` serves with), an
in-memory event log and a :class:`TurnLoop` driven by a scripted
:class:`SimulatedReasoner`. The reference's ``Svit`` maps onto it: ``inbox.send``
is :meth:`Agent.send`, ``block`` is :meth:`Agent.block` (close the inbox and
wait until the loop drained it and stopped), ``messages`` is :meth:`Agent.messages`.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from svit_cluster.control import ProcessController
from svit_cluster.events import Signal, SignalKind
from svit_cluster.inprocess import MemoryEventLog, MemorySignals, SignalingMemoryBackend
from svit_cluster.process import Limits, Process
from svit_cluster.reasoning import (
    LoopState,
    ReasonerConfig,
    ReasonReply,
    SimulatedReasoner,
    TurnLoop,
)


def call(name: str, /, **arguments: Any) -> ReasonReply:
    """A scripted step answering with one tool call."""
    return ReasonReply(None, [{"id": f"call-{name}", "name": name, "arguments": arguments}])


def text(content: str) -> ReasonReply:
    """A scripted step answering with text."""
    return ReasonReply(content)


class Agent:
    """One process and its reasoning loop (see the module docstring)."""

    def __init__(self, process: Process | str, script: list[ReasonReply] | None = None, *,
                 memory: dict[str, Any] | None = None, scripts: dict[str, str] | None = None,
                 limits: Limits | None = None, ports: Any = None, **config: Any) -> None:
        if isinstance(process, str):
            process = Process.create(process, memory=memory, scripts=scripts, limits=limits)
        self.signals_store = MemorySignals()
        self.backend = SignalingMemoryBackend(self.signals_store, process.id)
        self.ctrl = ProcessController(process, self.backend, ports=ports)
        # The host installs its /ports catalog, as every owner does after create,
        # fork or restore (one ``ports.refresh`` commit when it differs).
        self.ctrl.grant_ports()
        self.log = MemoryEventLog(self.signals_store, process.id)
        self.reasoner = SimulatedReasoner(script or [])
        self.loop = TurnLoop(self.ctrl, self.log, self.reasoner,
                             config=ReasonerConfig(retry_after_s=60.0, **config))

    @property
    def process(self) -> Process:
        return self.ctrl.process

    def read(self, path: str) -> Any:
        return self.ctrl.read_versioned(path)[0]

    def start(self) -> None:
        self.loop.start()

    def send(self, message: Any) -> None:
        """Commit ``message`` to the inbox (raises ``inbox_closed`` once closed)."""
        self.ctrl.append_inbox(message)
        self.loop.wake()

    def signals(self, kind: SignalKind | None = None) -> list[Signal]:
        out = self.log.signals()
        return [s for s in out if kind is None or s.kind is kind]

    async def wait(self, predicate: Any, timeout_s: float = 10.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not predicate():
            assert time.monotonic() < deadline, "condition not reached in time"
            await asyncio.sleep(0.01)

    async def block(self) -> None:
        """Close the inbox, then wait until the loop drained it and stopped."""
        self.ctrl.close_inbox()
        self.loop.wake()
        await self.wait(lambda: self.loop.state == LoopState.STOPPED)

    async def one_turn(self, message: Any) -> None:
        """Start the loop, send ``message``, close the inbox and wait until the loop
        drained it and stopped (the reference's ``send`` then ``block``)."""
        self.start()
        try:
            self.send(message)
            await self.block()
        finally:
            await self.stop()

    async def until_failed(self) -> Signal:
        await self.wait(lambda: bool(self.signals(SignalKind.FAILED)))
        return self.signals(SignalKind.FAILED)[0]

    def messages(self) -> list[dict[str, Any]]:
        """The presentation messages of the process's current session."""
        return [s.data["message"] for s in self.signals(SignalKind.MESSAGE)]

    def completions(self) -> list[dict[str, Any]]:
        return [s.data for s in self.signals(SignalKind.COMPLETION)]

    async def stop(self) -> None:
        await self.loop.stop()
