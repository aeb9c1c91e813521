"""A reasoning process for the ported agent/reasoning-loop tests.

One process behind a real :class:`ProcessController` whose backend publishes
signals (``SignalingMemoryBackend``, the one ``InProcessRouter`` serves with), an
in-memory event log and a :class:`TurnLoop` driven by a scripted
:class:`SimulatedReasoner`. The reference's ``Svit`` maps onto it: ``inbox.send``
is :meth:`Agent.send`, ``block`` is :meth:`Agent.block` (close the inbox and
wait until the loop drained it and stopped), ``messages`` is :meth:`Agent.messages`,
``recent_messages`` is :meth:`Agent.recent_messages` (the event log). The reference's
durable store is :class:`DurableHost` (the fenced Redis log and event log).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable
from typing import Any

from svit_cluster.control import ProcessController
from svit_cluster.events import (
    RedisEventLog,
    Signal,
    SignalKind,
    fork_events,
    project_message,
    session_for,
)
from svit_cluster.inprocess import MemoryEventLog, MemorySignals, SignalingMemoryBackend
from svit_cluster.ports import HttpPortConfig, PortRegistry, PortsConfig, build_registry
from svit_cluster.process import Limits, Process, Transaction, to_plain_json
from svit_cluster.reasoning import (
    LoopState,
    ReasonerConfig,
    ReasonReply,
    ReasonRequest,
    SimulatedReasoner,
    TurnLoop,
)
from svit_cluster.store import RedisBackend, StoreConfig
from tests.conformance.reference._http import fixture_server


class ScriptedReasoner(SimulatedReasoner):
    """The scripted simulated model, keeping every request it was asked."""

    def __init__(self, script: list[ReasonReply]) -> None:
        super().__init__(script)
        self.requests: list[ReasonRequest] = []

    async def reason(self, request: ReasonRequest) -> ReasonReply:
        self.requests.append(request)
        return await super().reason(request)


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
                 limits: Limits | None = None, ports: Any = None,
                 signals: MemorySignals | None = None, backend: Any = None,
                 log: Any = None, **config: Any) -> None:
        """``signals``: share one host's in-memory signals and event logs (default:
        a new store); ``backend``/``log``: a durable owner's commit backend and
        event log (``RedisBackend``, ``RedisEventLog``) instead of the in-memory ones."""
        if isinstance(process, str):
            process = Process.create(process, memory=memory, scripts=scripts, limits=limits)
        self.signals_store = signals if signals is not None else MemorySignals()
        self.backend = backend if backend is not None else SignalingMemoryBackend(
            self.signals_store, process.id)
        self.ctrl = ProcessController(process, self.backend, ports=ports)
        # The host installs its /ports catalog, as every owner does after create,
        # fork or restore (one ``ports.refresh`` commit when it differs).
        self.ctrl.grant_ports()
        self.log = log if log is not None else MemoryEventLog(self.signals_store, process.id)
        self.reasoner = ScriptedReasoner(script or [])
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

    def recent_messages(self, limit: int = 128) -> list[dict[str, Any]]:
        """The messages projected from the newest ``limit`` canonical events of the
        process's current session in its event log (the reference's paged
        ``recent_messages``; a fork that shared history starts with the prefix)."""
        session = session_for(self.process.id)
        meta = self.process.node("/thread/session")
        if meta is not None:
            current = self.read("/thread/session")
            if current.get("process") == self.process.id:
                session = current["id"]
        return [project_message(r.event) for r in self.log.recent(session, limit)]

    def completions(self) -> list[dict[str, Any]]:
        return [s.data for s in self.signals(SignalKind.COMPLETION)]

    async def stop(self) -> None:
        await self.loop.stop()


async def two_live_turns(process_id: str) -> Agent:
    """A new agent at ``process_id`` whose one started loop answers two messages, the
    second sent after the first turn completed, then drains its closed inbox and stops.

    Asserts each answer (``"first answer"``, ``"second answer"``) and that the loop's
    task is the same live task throughout (the loop waits after a completed turn; it
    is never restarted). Returns the stopped agent for the caller's checks.
    """
    agent = Agent(process_id, [text("first answer"), text("second answer")])
    agent.start()
    try:
        task = agent.loop._task
        agent.send("first question")
        await agent.wait(lambda: len(agent.completions()) == 1)
        assert agent.completions()[0]["response"]["content"] == "first answer"
        agent.send("second question")
        await agent.wait(lambda: len(agent.completions()) == 2)
        assert agent.completions()[1]["response"]["content"] == "second answer"
        assert agent.loop._task is task and task is not None and not task.done()
        await agent.block()
    finally:
        await agent.stop()
    return agent


class DurableHost:
    """One Redis key prefix standing in for the reference's durable process store.

    *create* is ``claim`` + ``create``; *resume* is a new owner (the next fencing
    token) restoring from the log; both return an :class:`Agent` whose commits go
    through the fenced :class:`RedisBackend` and whose canonical events go to the
    :class:`RedisEventLog` under the same token (as the cluster's process actor
    wires them). *fork* creates the child from the parent's committed state and,
    with ``history``, shares the parent's acknowledged event prefix
    (:func:`~svit_cluster.events.fork_events`).
    """

    _ids = itertools.count()

    def __init__(self, client: Any) -> None:
        self.client = client
        self.config = StoreConfig(prefix=f"agentport{next(self._ids)}", max_receipts=16)
        self._tokens = itertools.count(1)

    def _agent(self, backend: RedisBackend, process: Process, script: list[ReasonReply],
               **kwargs: Any) -> Agent:
        log = RedisEventLog(self.client, process.id, backend.token, prefix=self.config.prefix)
        return Agent(process, script, backend=backend, log=log, **kwargs)

    def create(self, process: Process, script: list[ReasonReply] | None = None,
               **kwargs: Any) -> Agent:
        backend = RedisBackend(self.client, process.id, next(self._tokens), self.config)
        backend.claim()
        backend.create(process)
        return self._agent(backend, process, script or [], **kwargs)

    def resume(self, process_id: str, script: list[ReasonReply] | None = None,
               **kwargs: Any) -> Agent:
        backend = RedisBackend(self.client, process_id, next(self._tokens), self.config)
        backend.claim()
        process = backend.restore()
        assert process is not None, f"{process_id} was never created"
        return self._agent(backend, process, script or [], **kwargs)

    def fork(self, parent: Agent, child_id: str, script: list[ReasonReply] | None = None,
             **kwargs: Any) -> Agent:
        """The child, created from ``parent``'s committed state, with its history."""
        with parent.ctrl.locked():
            child = parent.process.fork(child_id)
            upto = 0  # the acknowledged prefix only (no turn in flight)
            if parent.process.node("/thread/session/last_seq") is not None:
                upto = to_plain_json(parent.process.read("/thread/session/last_seq"))
        agent = self.create(child, script, **kwargs)
        fork_events(self.client, parent.process.id, child_id, prefix=self.config.prefix,
                    upto_seq=upto)
        return agent

    def transactions(self, agent: Agent) -> list[Transaction]:
        backend: RedisBackend = agent.backend
        return [Transaction.decode(e.record) for e in backend.entries()]


def http_registry(*hosts: str) -> PortRegistry:
    """A registry granting only ``http``, to ``hosts`` (``127.0.0.1:<port>``
    entries; none: an empty allowlist, every URL refused)."""
    return build_registry(PortsConfig(http=HttpPortConfig(enabled=True,
                                                          allow_hosts=list(hosts))))


def tool_results(agent: Agent) -> list[str]:
    """The content of every tool-result message of the current session, in order."""
    return [m["content"] for m in agent.messages() if m["role"] == "tool"]


async def http_turn(tool_call: Callable[[dict[str, str]], ReasonReply], *, allowed: bool,
                    scripts: dict[str, str] | None = None) -> tuple[Agent, str, list[str]]:
    """One turn whose single tool call asks the ``http`` port for ``GET /data`` of
    a live loopback fixture server, with that server allowlisted (``allowed``)
    or with an empty allowlist.

    Args:
        tool_call: builds the model's tool call from the port's request
            (``{"method": "GET", "url": ...}``).
        allowed: allowlist the fixture server.
        scripts: the process's ``/lib`` scripts at creation.

    Returns:
        The agent (process ``svit://local/native-network-allowed`` or
        ``-denied``), the one tool result, and the paths the server was asked for.
    """
    outcome = "allowed" if allowed else "denied"
    with fixture_server() as server:
        agent = Agent(f"svit://local/native-network-{outcome}",
                      [tool_call({"method": "GET", "url": server.url("/data")}),
                       text(f"network {outcome}")],
                      scripts=scripts,
                      ports=http_registry(*([server.host] if allowed else [])))
        await agent.one_turn("read the fixture" if allowed else "try the network")
    (result,) = tool_results(agent)
    return agent, result, server.paths


#: An answer of 8 KiB, over the 4 KiB ``max_text_bytes`` of :func:`oversized_turn`.
OVERSIZED_ANSWER = "x" * (8 * 1024)


async def oversized_turn() -> tuple[Agent, Signal]:
    """One live turn whose model answers :data:`OVERSIZED_ANSWER` to a process
    limited to ``max_text_bytes`` 4 KiB (``svit://local/bounded-agent``).

    Returns:
        The stopped agent and the turn's ``failed`` signal.
    """
    agent = Agent("svit://local/bounded-agent", [text(OVERSIZED_ANSWER)],
                  limits=Limits(max_text_bytes=4 * 1024))
    agent.start()
    try:
        agent.send("produce too much output")
        failed = await agent.until_failed()
    finally:
        await agent.stop()
    return agent, failed
