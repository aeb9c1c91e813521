"""The reasoning loop of one owned process: inbox head -> turn -> events -> ack.

One turn, in order (reference: events.md sequence diagram):

1. take the inbox head (its content hash identifies the exact item);
2. append the ``user`` canonical event, then run reasoning steps; each step's
   tool calls (``reason``) and results (``act``) are appended as canonical
   events, and the final text as a ``reply`` event. Every append is fenced
   and publishes ``canonical_event`` then its derived ``message``;
3. acknowledge exactly that head (``remove_front``, checked by hash) and
   record the turn counter under ``/thread/session`` in ONE commit, whose
   script also publishes ``committed`` and then the turn's ``completion``.

The bounded session metadata (``/thread/{format, instructions, process_id,
session_id, system_prompt}``, see ``reasoning._thread``) rides in the commit
of the first inbox append (``ProcessController.append_stage``), so it adds no
version and no signal; a turn that finds it missing or stale anyway (items
queued before the loop was attached, a fork with queued items) commits it
first (source ``thread.metadata``). The model can read it during the turn.

Bounds: at most ``max_iterations`` reason/act steps per turn (default 10);
an answer (or a step's text) larger than the process's ``max_text_bytes``
fails the turn with ``limit_exceeded`` before anything of it is appended or
committed. A loop refuses to start on a ``/thread`` holding a materialised
history (it publishes a ``failed`` signal with ``thread_refused`` and stops).
Once the inbox is closed (``ProcessController.close_inbox``) and drained, the
loop stops.

So a completion exists if and only if its item was acknowledged: one per
inbox item, even when a turn re-runs after a failover (its canonical events
are then appended again by the new owner; a stale owner's appends and acks
are refused by the fence). A failed turn leaves the item committed, publishes
a sanitized ``failed`` signal, and is retried after a back-off or at once when
a new message arrives -- but never before the wait the model server asked for
(``TurnFailed.retry_after_s``, from a 429's or 503's ``Retry-After``; at most
``max_retry_after_s``), since a retry inside that window is refused again.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from svit_cluster.control import ProcessController
from svit_cluster.errors import (
    ConfigurationError,
    ConflictError,
    ErrorCode,
    FencedError,
    SvitError,
    UnavailableError,
    sanitize_message,
)
from svit_cluster.events import EVENT_FORMAT, EventRecord, project_message, session_for
from svit_cluster.process import (
    Transition,
    WorkingCopy,
    canonical_json,
    inbox_closed,
    to_plain_json,
)
from svit_cluster.reasoning._config import ReasonerConfig
from svit_cluster.reasoning._model import (
    Reasoner,
    ReasonRequest,
    ToolCall,
    TurnFailed,
)
from svit_cluster.reasoning._thread import ThreadRefused, check_thread, thread_metadata
from svit_cluster.reasoning._tools import PortRunner, ProcessTools, validate_tool_calls

__all__ = ["SESSION_FORMAT", "EventLog", "LoopState", "TurnLoop"]

log = logging.getLogger(__name__)

#: Format tag of ``/thread/session``.
SESSION_FORMAT = "svit-session@1"
_MAX_FAILED_BYTES = 1024


class EventLog(Protocol):
    """The owner's writer of canonical events and failure signals."""

    def append(self, session: str, items: Sequence[tuple[dict[str, Any], dict[str, Any]]]
               ) -> tuple[int, int]: ...

    def failed(self, payload: Mapping[str, Any]) -> str: ...

    def recent(self, session: str, limit: int) -> list[EventRecord]: ...


class LoopState:
    """What the loop is doing: ``idle`` (inbox empty), ``running`` (a turn),
    ``backoff`` (a turn failed; retried later or on a new message), ``stopped``
    (fenced out or closed: it never commits again)."""

    IDLE = "idle"
    RUNNING = "running"
    BACKOFF = "backoff"
    STOPPED = "stopped"


class _Item:
    __slots__ = ("head_hash", "message", "metadata", "session", "text_limit", "turn")

    def __init__(self, head_hash: str, message: Any, session: str, turn: int,
                 metadata: dict[str, Any] | None = None, text_limit: int = 1 << 20) -> None:
        self.head_hash = head_hash
        self.message = message
        self.session = session
        self.turn = turn
        self.metadata = metadata or {}
        self.text_limit = text_limit


def _inbox_text(message: Any) -> tuple[str, str | None]:
    if isinstance(message, str):
        return message, None
    if isinstance(message, dict) and isinstance(message.get("content"), str):
        mid = message.get("id")
        return message["content"], mid if isinstance(mid, str) else None
    raise TurnFailed("invalid_inbox",
                     "the inbox item is not a text message (a string or {content: string})")


class TurnLoop:
    """The reasoning loop of one process under one owner.

    Args:
        ctrl: the owner's controller; its backend must publish signals
            (``RedisBackend`` or ``inprocess.SignalingMemoryBackend``).
        events: the owner's :class:`EventLog` (fenced with the same token).
        reasoner: the model (required: a loop without one is refused at
            construction, as the reference refuses to build a Svit without a
            reasoner, rather than failing every turn later).
        config: bounds and timeouts (:class:`ReasonerConfig`).
        on_fenced: called once when a newer owner fenced this one out.
        attempt_tag: distinguishes this loop's attempts in canonical events
            (the owner's fencing token).
        port_runner: replaces the controller's port registry
            (:attr:`ProcessController.ports`) for the model's ``port`` tool
            (offered only when the process's ``/ports`` catalog lists ports);
            None (default): the registry runs the calls.

    Raises:
        ConfigurationError: ``reasoner`` is None (no model configured).
        TypeError: the controller's backend does not publish signals.
    """

    def __init__(self, ctrl: ProcessController, events: EventLog, reasoner: Reasoner | None, *,
                 config: ReasonerConfig | None = None,
                 on_fenced: Callable[[], None] | None = None,
                 attempt_tag: str = "0", port_runner: PortRunner | None = None) -> None:
        if reasoner is None:
            raise ConfigurationError("a reasoning loop needs a reasoner (none configured)")
        if not getattr(ctrl.backend, "emits_signals", False):
            raise TypeError("the controller's backend does not publish signals")
        self.ctrl = ctrl
        self.events = events
        self.reasoner: Reasoner = reasoner
        self.config = config or ReasonerConfig()
        ctrl.append_stage = self._stage_metadata
        self.tools = ProcessTools(ctrl, client_id=self.config.client_id,
                                  port_runner=port_runner,
                                  allow_scripts=self.config.allow_scripts)
        self.state = LoopState.IDLE
        self.turns_completed = 0
        self.turns_failed = 0
        self._on_fenced = on_fenced
        self._wake = asyncio.Event()
        self._attempts = itertools.count(1)
        self._tag = attempt_tag
        self._task: asyncio.Task[None] | None = None
        #: seconds the last failed turn's reasoner asked to wait (0: none)
        self._hold_s = 0.0

    # -- lifecycle ---------------------------------------------------------------

    @property
    def busy(self) -> bool:
        """True while a turn runs."""
        return self.state == LoopState.RUNNING

    @property
    def pending(self) -> bool:
        """True while the loop has work: a turn runs, or a failed turn's head
        waits in the inbox to be retried (``backoff``)."""
        return self.state in (LoopState.RUNNING, LoopState.BACKOFF)

    def start(self) -> asyncio.Task[None]:
        """Run :meth:`run` as a task on the running event loop (idempotent)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self.run())
        return self._task

    async def stop(self) -> None:
        """Stop for good (cancels a running turn; its item stays committed)."""
        self.state = LoopState.STOPPED
        if self.ctrl.append_stage == self._stage_metadata:
            self.ctrl.append_stage = None
        task, self._task = self._task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        with contextlib.suppress(Exception):
            await self.reasoner.aclose()

    def wake(self) -> None:
        """A new inbox item was committed: look at the inbox now."""
        self._wake.set()

    async def _wait(self, timeout_s: float | None) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout_s)

    async def run(self) -> None:
        """Process inbox items until stopped. Never raises except on cancellation."""
        backoff = self.config.retry_after_s
        while self.state != LoopState.STOPPED:
            self._wake.clear()
            try:
                item = await asyncio.to_thread(self._next_item)
            except FencedError:
                self._fenced()
                return
            except ThreadRefused as exc:
                log.error("reasoning loop of %s refuses its /thread: %s",
                          self.ctrl.process.id, exc.message)
                await self._refuse(exc)
                self.state = LoopState.STOPPED
                return
            except SvitError as exc:
                log.warning("reasoning loop of %s cannot read its inbox: %s",
                            self.ctrl.process.id, exc.code)
                await self._wait(min(backoff, 5.0))
                continue
            if item is None:
                if await asyncio.to_thread(self._closed):
                    self.state = LoopState.STOPPED  # closed and drained
                    return
                self.state = LoopState.IDLE
                await self._wait(None)
                continue
            self.state = LoopState.RUNNING
            ok = await self.run_turn(item)
            if self.state == LoopState.STOPPED:
                return
            if ok:
                backoff = self.config.retry_after_s
                self.state = LoopState.IDLE
            else:
                self.state = LoopState.BACKOFF
                hold_s, self._hold_s = self._hold_s, 0.0
                clock = asyncio.get_running_loop()
                hold_until = clock.time() + hold_s
                await self._wait(max(backoff, hold_s))
                # a new message ends the back-off, not the server's Retry-After
                await asyncio.sleep(max(0.0, hold_until - clock.time()))
                backoff = min(backoff * 2, self.config.max_retry_after_s)

    def _fenced(self) -> None:
        self.state = LoopState.STOPPED
        if self._on_fenced is not None:
            self._on_fenced()

    # -- one turn ------------------------------------------------------------------

    def _closed(self) -> bool:
        with self.ctrl.locked():
            return inbox_closed(self.ctrl.process)

    async def _refuse(self, exc: ThreadRefused) -> None:
        payload = {"code": "thread_refused",
                   "message": sanitize_message(exc.message, _MAX_FAILED_BYTES),
                   "session": session_for(self.ctrl.process.id), "turn": 0,
                   "inbox_hash": None}
        with contextlib.suppress(SvitError):
            await asyncio.to_thread(self.events.failed, payload)

    def _next_item(self) -> _Item | None:
        """The inbox head as a turn, or None when the inbox is empty.

        Raises:
            ThreadRefused: ``/thread`` cannot start a loop (checked first).
        """
        with self.ctrl.locked():
            proc = self.ctrl.process
            thread = to_plain_json(proc.read("/thread"))
            check_thread(thread)
            head = proc.inbox_head_hash()
            if head is None:
                return None
            message = proc.read("/inbox/0")
            text_limit = proc.limits.max_text_bytes
        metadata = thread_metadata(proc.id, thread, self.config.instructions,
                                   self.config.system_prompt or None)
        meta = thread.get("session") if isinstance(thread, dict) else None
        if isinstance(meta, dict) and meta.get("process") == proc.id:
            sid, turns = meta.get("id"), meta.get("turns")
            if isinstance(sid, str) and isinstance(turns, int):
                return _Item(head, message, sid, turns + 1, metadata, text_limit)
        session = session_for(proc.id)
        return _Item(head, message, session, self._first_turn(session), metadata, text_limit)

    def _first_turn(self, session: str) -> int:
        """The turn number of a process's first turn in its own ``session``.

        1 for a new session. A store-level fork (``fork_events``) starts the
        child's session with the parent's immutable event prefix: the child's
        first turn continues after the prefix's last turn, so the prefix is its
        history (reference: a durable fork shares the parent's event prefix,
        then diverges). Events of the session itself (a first turn that ran
        but was never acknowledged) mean that turn is being retried.
        """
        records = self.events.recent(session, 1)
        if not records:
            return 1
        newest = records[-1].event
        turn = newest.get("turn")
        if type(turn) is not int or turn < 1:
            return 1
        return turn if newest.get("session") == session else turn + 1

    def _event(self, item: _Item, attempt: str, kind: str, data: dict[str, Any]
               ) -> dict[str, Any]:
        return {"format": EVENT_FORMAT, "session": item.session, "turn": item.turn,
                "attempt": attempt, "kind": kind, "inbox_hash": item.head_hash, "data": data}

    async def _append(self, item: _Item, event: dict[str, Any]) -> int:
        _, last = await asyncio.to_thread(self.events.append, item.session,
                                          [(event, project_message(event))])
        return last

    def _history(self, item: _Item) -> list[dict[str, Any]]:
        records = self.events.recent(item.session, self.config.history_events)
        done = {(r.event.get("turn"), r.event.get("attempt")) for r in records
                if r.event.get("kind") == "reply"}
        out: list[dict[str, Any]] = []
        for r in records:
            ev = r.event
            if ev.get("turn") == item.turn or (ev.get("turn"), ev.get("attempt")) not in done:
                continue
            out.extend(_chat(ev))
        return out

    async def run_turn(self, item: _Item) -> bool:
        """Run one turn for ``item``; True when acknowledged with its completion."""
        attempt = f"{self._tag}.{next(self._attempts)}"
        try:
            async with asyncio.timeout(self.config.turn_timeout_s):
                await self._turn(item, attempt)
            self.turns_completed += 1
            return True
        except FencedError:
            self._fenced()
            return False
        except TimeoutError:
            failure = TurnFailed("turn_timeout", f"the turn took longer than "
                                 f"{self.config.turn_timeout_s:g} s")
        except TurnFailed as exc:
            failure = exc
        except ConflictError as exc:
            failure = TurnFailed("inbox_conflict" if exc.code == ErrorCode.INBOX_CONFLICT
                                 else "conflict", "the inbox head changed during the turn")
        except UnavailableError:
            failure = TurnFailed("unavailable", "the process store is unavailable")
        except SvitError as exc:
            failure = TurnFailed("internal", f"the turn failed ({exc.code})")
        except Exception as exc:  # a bug: log the type only, never the text
            log.error("reasoning turn of %s failed with %s", self.ctrl.process.id,
                      type(exc).__name__)
            failure = TurnFailed("internal", "the turn failed with an internal error")
        self.turns_failed += 1
        self._hold_s = min(failure.retry_after_s or 0.0, self.config.max_retry_after_s)
        if self.state == LoopState.RUNNING:
            self.state = LoopState.BACKOFF  # before observers can see the failure
        await self._publish_failed(item, failure)
        return False

    async def _publish_failed(self, item: _Item, failure: TurnFailed) -> None:
        payload = {"code": failure.cause,
                   "message": sanitize_message(failure.message, _MAX_FAILED_BYTES),
                   "session": item.session, "turn": item.turn, "inbox_hash": item.head_hash}
        try:
            await asyncio.to_thread(self.events.failed, payload)
        except FencedError:
            self._fenced()
        except SvitError as exc:
            log.warning("could not publish a failed signal for %s: %s",
                        self.ctrl.process.id, exc.code)

    async def _turn(self, item: _Item, attempt: str) -> None:
        text, message_id = _inbox_text(item.message)
        history = await asyncio.to_thread(self._history, item)
        _check_text(item, text, "the inbox message")
        await asyncio.to_thread(self._write_metadata, item)
        messages: list[dict[str, Any]] = [{"role": "system",
                                           "content": item.metadata["system_prompt"]}]
        messages.extend(history)
        messages.append({"role": "user", "content": text})
        first = await self._append(item, self._event(item, attempt, "user", {
            "content": text, "message_id": message_id}))
        last = first
        for step in range(self.config.max_iterations):
            specs = await asyncio.to_thread(self.tools.specs)
            request = ReasonRequest(self.ctrl.process.id, item.turn, list(messages), specs)
            try:
                reply = await asyncio.wait_for(self.reasoner.reason(request),
                                               self.config.step_timeout_s)
            except TimeoutError:
                raise TurnFailed("reasoner_timeout", f"the reasoner did not answer within "
                                 f"{self.config.step_timeout_s:g} s") from None
            except TurnFailed:
                raise
            except Exception as exc:
                log.warning("reasoner of %s raised %s", self.ctrl.process.id,
                            type(exc).__name__)
                raise TurnFailed("reasoner_failed", "the reasoner raised an error") from None
            calls = validate_tool_calls(reply.tool_calls)
            if calls:
                _check_text(item, canonical_json([c.to_json() for c in calls]).decode(),
                            "the tool calls")
            content = reply.content
            if content is not None and not isinstance(content, str):
                raise TurnFailed("reasoner_malformed", "the reasoner's content is not text")
            if content is not None:
                _check_text(item, content, "the answer")
            if not calls:
                if content is None:
                    raise TurnFailed("reasoner_malformed",
                                     "the reasoner answered with neither text nor tool calls")
                last = await self._append(item, self._event(item, attempt, "reply",
                                                            {"content": content}))
                await asyncio.to_thread(self._ack, item, content, message_id, first, last)
                return
            last = await self._append(item, self._event(item, attempt, "reason", {
                "content": content, "tool_calls": [c.to_json() for c in calls]}))
            messages.append({"role": "assistant", "content": content or "",
                             "tool_calls": [c.to_json() for c in calls]})
            for index, call in enumerate(calls):
                result = await asyncio.to_thread(self._run_tool, call,
                                                 f"{item.session}.t{item.turn}.s{step}.c{index}")
                last = await self._append(item, self._event(item, attempt, "act", {
                    "call_id": call.id, "name": call.name, "result": result}))
                messages.append({"role": "tool", "tool_call_id": call.id,
                                 "content": canonical_json(result).decode()})
        raise TurnFailed("turn_limit", "no answer within the maximum reason/act iterations "
                         f"({self.config.max_iterations})")

    def _run_tool(self, call: ToolCall, ref: str) -> dict[str, Any]:
        result: dict[str, Any] = to_plain_json(self.tools.run(call, ref))
        return result

    def _stage_metadata(self, wc: WorkingCopy) -> None:
        """Stage the stale ``/thread`` metadata keys into an inbox append (under
        the controller's lock), so the first message carries them in its commit."""
        proc = self.ctrl.process
        thread = to_plain_json(proc.read("/thread"))
        try:
            check_thread(thread)
        except ThreadRefused:
            return  # the loop refuses to start; the append itself is not refused
        wanted = thread_metadata(proc.id, thread, self.config.instructions,
                                 self.config.system_prompt or None)
        for key, value in wanted.items():
            if not isinstance(thread, dict) or key not in thread or thread[key] != value:
                wc.host_set(f"/thread/{key}", value)

    def _write_metadata(self, item: _Item) -> None:
        """Commit the ``/thread`` metadata keys that differ (first turn, after a fork).

        Only when an inbox item is being served, so a process that never gets a
        message is never changed by its loop.
        """
        with self.ctrl.locked():
            current = to_plain_json(self.ctrl.process.read("/thread"))
        stale = {k: v for k, v in item.metadata.items()
                 if not isinstance(current, dict) or k not in current or current[k] != v}
        if not stale:
            return

        def stage(wc: WorkingCopy) -> None:
            for key, value in stale.items():
                wc.host_set(f"/thread/{key}", value)

        self.ctrl.commit_host("thread.metadata", stage)

    def _ack(self, item: _Item, reply: str, message_id: str | None, first: int, last: int
             ) -> None:
        """Acknowledge exactly ``item``'s head and publish the completion, in one commit
        (through the controller, the process's only committer)."""
        process_id = self.ctrl.process.id

        def stage(wc: WorkingCopy) -> None:
            wc.host_set("/thread/session", {
                "format": SESSION_FORMAT, "id": item.session, "process": process_id,
                "turns": item.turn, "last_seq": last})

        def completion(transition: Transition) -> dict[str, Any]:
            return {
                "session": item.session, "turn": item.turn, "inbox_hash": item.head_hash,
                "message_id": message_id, "version": transition.record.process_version_after,
                "response": {"role": "assistant", "content": reply},
                "events": {"first": first, "last": last},
            }

        self.ctrl.complete_turn(item.head_hash, stage=stage, completion=completion)


def _check_text(item: _Item, text: str, what: str) -> None:
    """Fail the turn when ``text`` exceeds the process's ``max_text_bytes``.

    Raises:
        TurnFailed: (``limit_exceeded``) nothing of it is appended or committed.
    """
    size = len(text.encode("utf-8"))
    if size > item.text_limit:
        raise TurnFailed("limit_exceeded", f"{what} exceeds the text limit: maximum text "
                         f"bytes exceeded ({size} > {item.text_limit})")


def _chat(event: dict[str, Any]) -> list[dict[str, Any]]:
    kind, data = event.get("kind"), event.get("data") or {}
    if kind == "user":
        return [{"role": "user", "content": str(data.get("content", ""))}]
    if kind == "reason":
        return [{"role": "assistant", "content": data.get("content") or "",
                 "tool_calls": list(data.get("tool_calls") or [])}]
    if kind == "act":
        return [{"role": "tool", "tool_call_id": data.get("call_id"),
                 "content": canonical_json(data.get("result")).decode()}]
    if kind == "reply":
        return [{"role": "assistant", "content": str(data.get("content", ""))}]
    return []
