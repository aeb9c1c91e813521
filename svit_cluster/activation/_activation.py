"""Activation = one transaction: every effect commits as one new version, or none does.

Steps, in order:

1. resolve ``/lib/<script>`` (``invalid_script_name``, ``script_not_found``);
2. validate the input against the process limits;
3. run ``main(input)`` in a fresh interpreter against a working copy, after
   dropping from ``/system/timers`` every timer due by the activation's
   timestamp;
4. validate the output, and compile every staged script;
5. stamp outbox intents ``<sender>:<new version>:<index>`` onto ``/system/outbox``,
   first removing its oldest entries past ``OUTBOX_WINDOW`` (the intents of
   this activation always stay); remove the timers this activation cancelled
   from ``/system/timers`` and append the ones it set;
6. seal: version N -> N+1 with every change, or nothing at all.

Timers. The host takes one wall-clock timestamp per activation (``wall_clock_ms``,
ms since the epoch). A delayed ``send!`` is stamped ``due_ms = timestamp +
delay_ms``; guest code never sees the clock, and replay applies the recorded
mutations, so it never re-stamps anything. ``messages`` holds, in staging order
and sharing one index counter (and ``max_messages``):

* an intent ``{"message_id", "to", "body"}``;
* a delayed intent ``{"message_id", "to", "body", "delay_ms", "due_ms"}``;
* a cancel ``{"message_id", "cancel"}`` naming a pending timer's id (never in
  ``/system/outbox``; the dispatcher resolves it against the timer).

:func:`prepare_activation` does 1-6 without committing; the caller commits the
returned :class:`~svit_cluster.process.Transition` (directly, or through the
fenced store) and then applies it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from svit_cluster.activation._ports import PortContext, PortHost, idempotency_key
from svit_cluster.errors import (
    ErrorCode,
    InvalidInput,
    LimitExceeded,
    NotFound,
    ScriptFailed,
    SvitError,
)
from svit_cluster.lisp import Meter, Program, compile_script
from svit_cluster.process import (
    MAX_DELAY_MS,
    MAX_PENDING_TIMERS,
    OUTBOX_WINDOW,
    ArrayNode,
    MapNode,
    Node,
    Process,
    ScriptNode,
    Transition,
    WorkingCopy,
    get_node,
    lookup_node,
    node_from_value,
    stat_record,
    value_from_node,
)
from svit_cluster.values import (
    Limits,
    Value,
    canonical_json,
    parse_path,
    to_plain_json,
    validate_address,
    validate_script_name,
)

__all__ = ["ActivationResult", "activate", "prepare_activation", "wall_clock_ms"]

_MAX_LOG_BYTES = 4096

_TIMERS = "/system/timers"


def wall_clock_ms() -> int:
    """The host's wall clock in whole milliseconds since the Unix epoch."""
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class ActivationResult:
    """The result of one committed activation (control protocol: ``activation``).

    Attributes:
        output: ``main``'s return value.
        logs: ``log-info!`` records ``{message, fields}`` in order (``fields``
            a plain map, possibly empty; the reference's log record shape).
        messages: what ``send!`` and ``cancel!`` staged, in order: intents
            ``{message_id, to, body}``, delayed intents ``{message_id, to,
            body, delay_ms, due_ms}`` and cancels ``{message_id, cancel}``
            (see the module docstring); all go to the outbox stream.
        version: the new process version.
        root_hash: hex root hash after the commit.
        changed: sorted changed paths.
        fuel_used: deterministic fuel spent (see ``Limits.max_fuel``).
        transition: the sealed transition (record + change).
        port_calls: one :class:`~svit_cluster.ports.PortCall` per port call, in
            order (each also logged with the owner's fencing token).
    """

    output: Value
    logs: tuple[dict[str, Any], ...]
    messages: tuple[dict[str, Any], ...]
    version: int
    root_hash: str
    changed: tuple[str, ...]
    fuel_used: int
    transition: Transition
    port_calls: tuple[Any, ...] = ()


def _value_or_none(node: Node | None) -> Value:
    return None if node is None else value_from_node(node)


class _Session:
    """The :class:`svit_cluster.lisp.GuestHost` of one activation (shared by nested exec)."""

    def __init__(self, process: Process, wc: WorkingCopy, meter: Meter,
                 ports: PortHost | None = None,
                 token: int = 0, now_ms: int = 0,
                 pending: list[str] | None = None) -> None:
        self.process = process
        self.ports = ports
        self.token = token
        self.port_calls: list[Any] = []
        self.port_call_fuel = 0 if ports is None else int(ports.fuel_per_call)
        self.limits: Limits = process.limits
        self.wc = wc
        self.meter = meter
        self.logs: list[dict[str, Any]] = []
        self.log_bytes = 0
        self.messages: list[dict[str, Any]] = []
        self.staged_scripts: set[str] = set()
        self.library_changes = 0
        self.depth = 0
        self.new_version = process.version + 1
        #: The activation's timestamp (ms since the epoch) and the timers
        #: pending at it (ids from ``/system/timers``, minus those cancelled here).
        self.now_ms = now_ms
        self.pending: set[str] = set(pending or ())
        self.cancelled: set[str] = set()
        self.new_timers: list[dict[str, Any]] = []

    # -- reads ----------------------------------------------------------------
    # Below /mounts/<name> the process's attached providers answer (the mount's
    # current content: a write this activation made reaches it at the commit).
    def read(self, path: str) -> Value:
        if path.startswith("/mounts/"):
            return self.process.read(path)
        return _value_or_none(lookup_node(self.wc.root, parse_path(path)))

    def discover(self, path: str) -> Value:
        if path.startswith("/mounts/"):
            return list(self.process.discover(path))
        node = lookup_node(self.wc.root, parse_path(path))
        if isinstance(node, MapNode):
            return list(node.keys())
        if isinstance(node, ArrayNode):
            return [str(i) for i in range(len(node.items))]
        what = "nothing" if node is None else f"a {node.kind}"
        raise InvalidInput(f"cannot discover {path[:200]}: {what} is there",
                           code=ErrorCode.INVALID_PATH)

    def stat(self, path: str) -> Value:
        if path.startswith("/mounts/"):
            return self.process.stat(path)
        node = lookup_node(self.wc.root, parse_path(path))
        if node is None:
            return None
        return stat_record(path, node)

    # -- writes ---------------------------------------------------------------
    def _count_library_change(self) -> None:
        # Every library write or removal counts against max_staged_scripts, as in
        # the reference (a count of changes, not of distinct names).
        self.library_changes += 1
        if self.library_changes > self.limits.max_staged_scripts:
            raise LimitExceeded("too many staged scripts (max_staged_scripts)")

    def write(self, path: str, value: Value) -> None:
        if self.process.stage_mount_write(self.wc, path, value):
            return
        segs = self.wc.write(path, value)
        if segs[0] == "lib":
            self.staged_scripts.add(segs[1])
            self._count_library_change()

    def remove(self, path: str) -> None:
        if self.process.stage_mount_write(self.wc, path, None):
            return
        segs = self.wc.remove(path)
        if segs[0] == "lib":
            self._count_library_change()

    def send(self, to: str, body: Value, delay_ms: int | None = None) -> str:
        """Stage an intent (a timer with ``delay_ms``); returns its id.

        Raises:
            ScriptFailed: a bad address or ``delay_ms``.
            LimitExceeded: ``max_messages`` staged already, a body over the
                value bounds, or a timer past ``MAX_PENDING_TIMERS`` pending.
        """
        if type(to) is not str:
            raise ScriptFailed("send! needs a string address")
        try:  # reference: the address must parse, else the script fails (see validate_address)
            validate_address(to)
        except InvalidInput as exc:
            raise ScriptFailed(f"send! address: {exc.message}") from None
        if len(self.messages) >= self.limits.max_messages:
            raise LimitExceeded("too many messages (max_messages)")
        node_from_value(  # the intent {message_id, to, body} wraps the body one level deeper
            body,
            max_depth=max(0, self.limits.max_value_depth - 1),
            max_entries=self.limits.max_value_entries,
            max_text_bytes=self.limits.max_text_bytes,
        )
        intent_id = f"{self.process.id}:{self.new_version}:{len(self.messages)}"
        intent: dict[str, Any] = {"message_id": intent_id, "to": to, "body": body}
        if delay_ms is not None:
            if type(delay_ms) is not int or not 0 <= delay_ms <= MAX_DELAY_MS:
                raise ScriptFailed(f"send! delay_ms must be 0..{MAX_DELAY_MS} (MAX_DELAY_MS)")
            if len(self.pending) + len(self.new_timers) >= MAX_PENDING_TIMERS:
                raise LimitExceeded(
                    f"too many pending timers (MAX_PENDING_TIMERS={MAX_PENDING_TIMERS})",
                    limit="pending timers")
            due_ms = self.now_ms + delay_ms
            intent.update(delay_ms=delay_ms, due_ms=due_ms)
            self.new_timers.append({"id": intent_id, "to": to, "due_ms": due_ms})
        self.messages.append(intent)
        return intent_id

    def cancel(self, timer_id: str) -> bool:
        """Stage the cancel of the pending timer ``timer_id``.

        Returns:
            True when ``timer_id`` is pending (in ``/system/timers`` at this
            activation's timestamp, not cancelled yet) and the cancel
            ``{message_id, cancel}`` is staged; it commits with the activation
            and removes the entry from ``/system/timers``. False, staging
            nothing, otherwise: a timer set in this same activation is not
            pending yet. True does not mean the cancel wins: the dispatcher
            decides between a cancel and a firing, and reports which won.

        Raises:
            ScriptFailed: ``timer_id`` is not a string.
            LimitExceeded: ``max_messages`` staged already (a cancel counts).
        """
        if type(timer_id) is not str:
            raise ScriptFailed("cancel! needs a string timer id")
        if timer_id not in self.pending:
            return False
        if len(self.messages) >= self.limits.max_messages:
            raise LimitExceeded("too many messages (max_messages)")
        self.pending.discard(timer_id)
        self.cancelled.add(timer_id)
        cancel_id = f"{self.process.id}:{self.new_version}:{len(self.messages)}"
        self.messages.append({"message_id": cancel_id, "cancel": timer_id})
        return True

    def log_info(self, message: str, fields: dict[str, Value] | None = None) -> None:
        if len(self.logs) >= self.limits.max_logs:
            raise LimitExceeded("too many log records (max_logs)")
        text = message if type(message) is str else str(message)
        record_fields = dict(fields or {})
        self.log_bytes += len(text.encode("utf-8"))
        if record_fields:
            node_from_value(  # the record {message, fields} wraps each field one level deeper
                record_fields,
                max_depth=max(0, self.limits.max_value_depth - 1),
                max_entries=self.limits.max_value_entries,
                max_text_bytes=self.limits.max_text_bytes,
            )
            self.log_bytes += len(canonical_json(to_plain_json(record_fields)))
        if self.log_bytes > self.limits.max_text_bytes:
            raise LimitExceeded("log records exceed max_text_bytes")
        self.logs.append({"message": text, "fields": record_fields})

    def exec(self, script: str, input: Value) -> Value:
        name = script[len("/lib/") :] if script.startswith("/lib/") else script
        if "/" in name:
            raise ScriptFailed("exec may only run scripts stored under /lib")
        if self.depth + 1 > self.limits.max_exec_depth:
            raise LimitExceeded("nested exec depth exceeded (max_exec_depth)")
        program = self._program(name)
        self._check_input(input)
        self.depth += 1
        try:
            return program.run_main(input, self, self.meter)  # type: ignore[no-any-return]
        finally:
            self.depth -= 1

    def port_call(self, name: str, input: Value) -> Value:
        """One ``port-call``: the guest waits while the host runs the port once.

        The call is recorded (:attr:`port_calls`, and logged with the owner's
        fencing token) whether it succeeds or not; the result joins the
        activation like any value, and the activation still commits once.

        Raises:
            ScriptFailed: no such port is granted by this host (a stale
                ``/ports`` catalog grants nothing), or the port failed.
            LimitExceeded: more than ``max_calls`` calls in this activation,
                or the input or result above its byte bound.
        """
        if self.ports is None or not self.ports.grants(name):
            raise ScriptFailed(f"no port named {name[:200]} is granted to this process")
        index = len(self.port_calls)
        if index >= self.ports.max_calls:
            raise LimitExceeded(f"too many port calls (max_calls={self.ports.max_calls})",
                                limit="port calls")
        self._check_input(input)
        key = idempotency_key(self.process.id, self.new_version, index, name, input)
        ctx = PortContext(self.process.id, self.new_version, index, self.token, self.process,
                          key)
        return self.ports.call(name, input, ctx,
                               record=self.port_calls.append)

    # -- helpers --------------------------------------------------------------
    def _program(self, name: str) -> Program:
        validate_script_name(name)
        node = get_node(self.wc.root, ("lib", name))
        if not isinstance(node, ScriptNode):
            raise NotFound(f"script /lib/{name} not found", code=ErrorCode.SCRIPT_NOT_FOUND)
        return compile_script(node.script.source, name=name, limits=self.limits)

    def _check_input(self, value: Value) -> None:
        node_from_value(
            value,
            max_depth=self.limits.max_value_depth,
            max_entries=self.limits.max_value_entries,
            max_text_bytes=self.limits.max_text_bytes,
        )


def prepare_activation(
    process: Process,
    script: str,
    input: Value,
    *,
    clock: Callable[[], float] = time.monotonic,
    ports: PortHost | None = None,
    token: int = 0,
    wall_clock: Callable[[], int] = wall_clock_ms,
    input_checked: bool = False,
) -> ActivationResult:
    """Run one activation against a working copy and seal it, without committing.

    Args:
        process: the process (read only; it is not changed).
        script: a script name (``"counter"``) in ``/lib``.
        input: the activation input (plain value).
        clock: monotonic seconds for the wall-clock limit; fuel is deterministic.
        ports: the host's :class:`~svit_cluster.ports.PortRegistry` (None: no
            port is granted).
        token: the owner's fencing token, recorded with each port call.
        wall_clock: the host's wall clock, ms since the epoch; read once per
            activation (timer ``due_ms`` stamps and ``/system/timers`` pruning).
        input_checked: the caller already checked ``input`` against
            ``process.limits`` (``node_from_value``, as the controller does
            before its version check), so it is not checked again.

    Returns:
        An :class:`ActivationResult` whose ``transition`` must be committed.

    Raises:
        InvalidInput: ``invalid_script_name``, ``invalid_value``, ``invalid_path``.
        NotFound: ``script_not_found``.
        LimitExceeded: ``execution_limit_exceeded`` (fuel, time) or
            ``resource_limit_exceeded`` (stack, memory, counts, sizes).
        ScriptFailed: ``script_failed`` (panic, type/arity error, missing main,
            a staged script that does not compile).
    """
    wc = process.working_copy()
    now_ms = int(wall_clock())
    pending = _prune_timers(wc, now_ms)
    meter = Meter(process.limits, clock=clock)
    session = _Session(process, wc, meter, ports, token, now_ms, pending)
    program = session._program(script)
    if not input_checked:
        session._check_input(input)
    try:
        output = program.run_main(input, session, meter)
    except SvitError:
        raise
    except Exception as exc:  # fail closed: never a traceback, never a partial commit
        raise ScriptFailed(f"internal interpreter error ({type(exc).__name__})") from exc
    lim = process.limits
    node_from_value(
        output,
        max_depth=lim.max_value_depth,
        max_entries=lim.max_value_entries,
        max_text_bytes=lim.max_text_bytes,
    )
    for name in sorted(session.staged_scripts):
        staged = get_node(wc.root, ("lib", name))
        if isinstance(staged, ScriptNode):
            compile_script(staged.script.source, name=name, limits=lim)
    _stamp_outbox(wc, [m for m in session.messages if "cancel" not in m])
    _stamp_timers(wc, session.cancelled, session.new_timers)
    transition = process.seal(wc, "activation")
    return ActivationResult(
        output=output,
        logs=tuple(session.logs),
        messages=tuple(session.messages),
        version=transition.record.process_version_after,
        root_hash=transition.record.resulting_root_hash,
        changed=transition.change.paths,
        fuel_used=meter.fuel_used,
        transition=transition,
        port_calls=tuple(session.port_calls),
    )


def _stamp_outbox(wc: WorkingCopy, intents: list[dict[str, Any]]) -> None:
    """Append ``intents`` to ``/system/outbox``, keeping the newest ``OUTBOX_WINDOW``.

    The oldest entries go first (one ``remove_front`` each, recorded with the
    activation and so replayed exactly), then the new ones are appended: the
    tree never holds more than the window plus this activation's intents.
    """
    if not intents:
        return
    outbox = get_node(wc.root, ("system", "outbox"))
    held = len(outbox.items) if isinstance(outbox, ArrayNode) else 0
    for _ in range(min(held, max(0, held + len(intents) - OUTBOX_WINDOW))):
        wc.remove_front("/system/outbox")
    for intent in intents:
        wc.append("/system/outbox", intent)


def _timer_entries(wc: WorkingCopy) -> list[tuple[str, int]]:
    """``(id, due_ms)`` of each ``/system/timers`` entry, in order ([] when absent)."""
    timers = get_node(wc.root, ("system", "timers"))
    if not isinstance(timers, ArrayNode):
        return []
    out: list[tuple[str, int]] = []
    for entry in timers.items:  # {id, to, due_ms} maps: validate_root checks the shape
        timer_id: Any = entry.get("id")  # type: ignore[attr-defined]
        due: Any = entry.get("due_ms")  # type: ignore[attr-defined]
        out.append((timer_id.value, due.value))
    return out


def _remove_timers(wc: WorkingCopy, indexes: list[int]) -> None:
    """One ``remove /system/timers/<i>`` per index, highest first (so each index
    still names its entry), recorded with the activation."""
    for i in sorted(indexes, reverse=True):
        wc.host_remove(f"{_TIMERS}/{i}")


def _prune_timers(wc: WorkingCopy, now_ms: int) -> list[str]:
    """Drop the timers due by ``now_ms`` (fired or firing, as far as the guest
    can know); return the ids still pending, in order."""
    entries = _timer_entries(wc)
    _remove_timers(wc, [i for i, (_, due) in enumerate(entries) if due <= now_ms])
    return [timer_id for timer_id, due in entries if due > now_ms]


def _stamp_timers(wc: WorkingCopy, cancelled: set[str],
                  new_timers: list[dict[str, Any]]) -> None:
    """Remove the ``cancelled`` timers from ``/system/timers`` and append the
    new ones ``{id, to, due_ms}``, creating the list in a root that lacks it."""
    if cancelled:
        entries = _timer_entries(wc)
        _remove_timers(wc, [i for i, (timer_id, _) in enumerate(entries)
                            if timer_id in cancelled])
    if not new_timers:
        return
    if get_node(wc.root, ("system", "timers")) is None:
        wc.host_set(_TIMERS, [])
    for timer in new_timers:
        wc.append(_TIMERS, timer)


def activate(
    process: Process, script: str, input: Value, *, clock: Callable[[], float] = time.monotonic,
    ports: PortHost | None = None, token: int = 0,
    wall_clock: Callable[[], int] = wall_clock_ms,
) -> ActivationResult:
    """Prepare and commit one activation (see :func:`prepare_activation`).

    On success the process is at ``version + 1``; on any error it is unchanged.
    """
    result = prepare_activation(process, script, input, clock=clock, ports=ports, token=token,
                                wall_clock=wall_clock)
    process.commit(result.transition)
    return result
