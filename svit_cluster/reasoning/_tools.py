"""Model-facing tools mapped to process operations.

The tools (reference: the reasoning loop's model tools): ``discover``,
``read``, ``stat`` observe the process at the controller's serialization
point; ``write`` and ``remove`` change ``/memory`` or ``/lib`` under the guest
write rules; ``exec`` activates a ``/lib`` script. Every change goes through
the controller's one fenced commit path: ``write``/``remove`` as a host-built
transition (:meth:`ProcessController.commit_host`, sources
``reasoning.write``/``reasoning.remove``), ``exec`` as a svit-control@1
request from the reasoner's client id. Its request id is derived from the
session, turn, call index, attempt and call content, so a turn re-run after a
failover replays the stored receipt instead of committing the same call twice;
``write`` and ``remove`` are idempotent (setting the same value again, or
removing a missing key, which reports ``invalid_path`` and commits nothing).

Port calls: when the process carries a ``/ports`` catalog (host-granted
descriptors, see :func:`port_tool_specs`), one ``port`` tool is offered. Its
calls run on the controller's port registry (:attr:`ProcessController.ports`,
the deployment's grants; the same registry ``port-call`` uses), each once, with
the owner's fencing token and an idempotency key derived from the process, the
call's place in the turn (session, turn, step, call index) and its content --
so a turn re-run after a failover that makes the same call sends the same key.
A ``port_runner`` hook given to :class:`ProcessTools` replaces the registry;
with neither, the call reports ``port_unavailable``.

Every result is bounded: a result larger than :data:`MAX_RESULT_BYTES` of
canonical JSON is replaced by a notice.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

from svit_cluster.activation import PortContext
from svit_cluster.control import ProcessController, decode_request
from svit_cluster.errors import FencedError, SvitError, UnavailableError
from svit_cluster.process import (
    PROTOCOL,
    WorkingCopy,
    canonical_json,
    encode_value,
    from_plain_json,
    to_plain_json,
)
from svit_cluster.reasoning._model import ToolCall, TurnFailed

__all__ = [
    "MAX_RESULT_BYTES",
    "TOOL_NAMES",
    "TOOL_SPECS",
    "PortRunner",
    "ProcessTools",
    "port_tool_specs",
    "validate_tool_calls",
]

#: A tool result larger than this (canonical JSON bytes) is replaced by a notice.
MAX_RESULT_BYTES = 16 * 1024
_MAX_CALLS = 16
#: Port descriptors listed in the ``port`` tool's description, at most.
_MAX_PORTS_LISTED = 32

#: ``(port name, input) -> result``: the host's port-call hook (blocking).
PortRunner = Callable[[str, Any], Any]

_PATH = {"type": "string", "description": "absolute process path, e.g. /memory/count"}


def _fn(name: str, description: str, properties: dict[str, Any], required: list[str]
        ) -> dict[str, Any]:
    return {"type": "function", "function": {
        "name": name, "description": description,
        "parameters": {"type": "object", "properties": properties, "required": required}}}


#: OpenAI-style function definitions of the built-in tools.
TOOL_SPECS: list[dict[str, Any]] = [
    _fn("discover", "List the child names of a map (or indexes of an array) at a path.",
        {"path": _PATH}, ["path"]),
    _fn("read", "Read the committed value at an absolute process path.", {"path": _PATH},
        ["path"]),
    _fn("stat", "Facts about the node at a path (kind, hash, access, size) or null.",
        {"path": _PATH}, ["path"]),
    _fn("write", "Set a JSON value at a path under /memory (or a script source at "
        "/lib/<name>) as one committed transaction.",
        {"path": _PATH, "value": {"description": "the JSON value to store"}},
        ["path", "value"]),
    _fn("remove", "Remove the entry at a path under /memory or /lib as one committed "
        "transaction.", {"path": _PATH}, ["path"]),
    _fn("exec", "Activate a /lib script with a JSON input as one transaction.",
        {"path": {"type": "string", "description": "/lib/<name> (or give script)"},
         "script": {"type": "string", "description": "script name or /lib/<name>"},
         "input": {"description": "the script input (any JSON value)"}}, []),
]
#: The built-in tool names, in the order of :data:`TOOL_SPECS`.
TOOL_NAMES = tuple(spec["function"]["name"] for spec in TOOL_SPECS)
_REQUIRED: dict[str, tuple[str, ...]] = {
    "read": ("path",), "discover": ("path",), "stat": ("path",), "write": ("path",),
    "remove": ("path",), "exec": (), "port": ("name",)}


def port_tool_specs(catalog: Any) -> list[dict[str, Any]]:
    """The ``port`` tool for a ``/ports`` catalog, or ``[]`` when it is empty.

    ``catalog`` is the plain value of ``/ports``: a map from port name to its
    descriptor (``description``, ``input`` schema, ...). Only names the current
    host granted appear there (the catalog is replaced on every restore), so
    the tool offers exactly those. At most 32 names are listed.
    """
    if not isinstance(catalog, dict) or not catalog:
        return []
    names = sorted(str(k) for k in catalog)[:_MAX_PORTS_LISTED]
    lines = []
    for name in names:
        desc = catalog.get(name)
        text = desc.get("description") if isinstance(desc, dict) else None
        lines.append(f"{name}: {str(text)[:200]}" if text else name)
    return [_fn("port", "Call one host port with a JSON input (its effect is immediate "
                "and outside the transaction). Ports: " + "; ".join(lines),
                {"name": {"type": "string", "enum": names},
                 "input": {"description": "the port input (see /ports/<name>/input)"}},
                ["name"])]


def _malformed(why: str) -> TurnFailed:
    return TurnFailed("reasoner_malformed", f"the reasoner returned a malformed tool call: {why}")


def validate_tool_calls(raw: Any) -> list[ToolCall]:
    """Validate a reply's raw tool calls.

    Raises:
        TurnFailed: (``reasoner_malformed``) not a list, more than 16 calls, a
            call that is not ``{id, name, arguments}``, an unknown tool, arguments
            that are not a JSON object, or a missing/non-string required argument.
    """
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise _malformed("tool_calls is not a list")
    if len(raw) > _MAX_CALLS:
        raise _malformed(f"more than {_MAX_CALLS} calls")
    calls: list[ToolCall] = []
    for i, item in enumerate(raw):
        if not isinstance(item, dict):
            raise _malformed(f"call {i} is not an object")
        cid, name, args = item.get("id"), item.get("name"), item.get("arguments", {})
        if not isinstance(cid, str) or not 1 <= len(cid) <= 128:
            raise _malformed(f"call {i} has no valid id")
        if name not in _REQUIRED:
            raise _malformed(f"call {i} names an unknown tool")
        if isinstance(args, str):
            try:
                args = json.loads(args) if args.strip() else {}
            except ValueError:
                raise _malformed(f"call {i} arguments are not JSON") from None
        if not isinstance(args, dict):
            raise _malformed(f"call {i} arguments are not an object")
        for key in _REQUIRED[name]:
            if not isinstance(args.get(key), str):
                raise _malformed(f"call {i} ({name}) needs a string '{key}'")
        if name == "write" and "value" not in args:
            raise _malformed(f"call {i} (write) needs a 'value'")
        if name == "exec" and not (isinstance(args.get("path"), str)
                                   or isinstance(args.get("script"), str)):
            raise _malformed(f"call {i} (exec) needs a string 'path' or 'script'")
        calls.append(ToolCall(cid, name, args))
    return calls


def _bounded(result: dict[str, Any]) -> dict[str, Any]:
    size = len(canonical_json(result))
    if size <= MAX_RESULT_BYTES:
        return result
    return {"truncated": True, "bytes": size,
            "note": f"result larger than {MAX_RESULT_BYTES} bytes"}


class ProcessTools:
    """Runs validated tool calls against one process's controller (blocking).

    Args:
        ctrl: the owner's controller (its lock serializes every read and commit).
        client_id: the svit-control@1 client id of the reasoner.
        partition: the receipt partition of the reasoner's requests.
        port_runner: the host's port-call hook for the ``port`` tool (None:
            port calls report ``port_unavailable``).
        allow_scripts: script names ``exec`` may activate (None: all); any
            other script is refused with ``forbidden`` before anything runs.
    """

    def __init__(self, ctrl: ProcessController, *, client_id: str = "svit-reasoner",
                 partition: str = "@reasoner", port_runner: PortRunner | None = None,
                 allow_scripts: tuple[str, ...] | None = None) -> None:
        self.ctrl = ctrl
        self.client_id = client_id
        self.partition = partition
        self.port_runner = port_runner
        self.allow_scripts = allow_scripts

    def specs(self) -> list[dict[str, Any]]:
        """The tools offered now: the built-ins, plus ``port`` when ``/ports`` lists any."""
        with self.ctrl.locked():
            catalog = self.ctrl.process.read("/ports") if self.ctrl.process.node(
                "/ports") is not None else None
        return TOOL_SPECS + port_tool_specs(to_plain_json(catalog))

    def run(self, call: ToolCall, ref: str) -> dict[str, Any]:
        """Run ``call``; ``ref`` is ``<session>.t<turn>.s<step>.c<index>`` (request ids).

        Returns:
            The JSON result shown to the model, at most :data:`MAX_RESULT_BYTES`;
            process errors become ``{"error": {"code", "message"}}`` (not a
            failed turn).

        Raises:
            FencedError, UnavailableError: the commit path failed (turn fails).
        """
        try:
            return _bounded(self._run(call, ref))
        except SvitError as exc:
            if isinstance(exc, FencedError | UnavailableError):
                raise
            return {"error": exc.to_failure()}

    def _run(self, call: ToolCall, ref: str) -> dict[str, Any]:
        args = call.arguments
        if call.name == "read":
            value, version = self.ctrl.read_versioned(args["path"])
            return {"path": args["path"], "version": version, "value": to_plain_json(value)}
        if call.name == "discover":
            with self.ctrl.locked():
                proc = self.ctrl.process
                entries = proc.discover(args["path"])
                version = proc.version
            return {"path": args["path"], "version": version, "entries": entries}
        if call.name == "stat":
            with self.ctrl.locked():
                facts = self.ctrl.process.stat(args["path"])
                version = self.ctrl.process.version
            return {"path": args["path"], "version": version, "stat": to_plain_json(facts)}
        if call.name in ("write", "remove"):
            return self._change(call)
        if call.name == "port":
            return self._port(call, ref)
        return self._exec(call, ref)

    def _change(self, call: ToolCall) -> dict[str, Any]:
        path = call.arguments["path"]
        if call.name == "write":
            value = from_plain_json(call.arguments.get("value"))

            def stage(wc: WorkingCopy) -> None:
                wc.write(path, value)
        else:
            def stage(wc: WorkingCopy) -> None:
                wc.remove(path)

        change = self.ctrl.commit_host(f"reasoning.{call.name}", stage)
        return {"status": "committed", "path": path, "version": change.version}

    def _port(self, call: ToolCall, ref: str) -> dict[str, Any]:
        name = call.arguments["name"]
        with self.ctrl.locked():
            granted = self.ctrl.process.node(f"/ports/{name}") is not None if name else False
        if not granted:
            return {"error": {"code": "port_unavailable",
                              "message": "no such port is granted to this process"}}
        if self.port_runner is not None:
            result = self.port_runner(name, call.arguments.get("input"))
        elif self.ctrl.ports is not None:
            result = self._registry_call(name, call, ref)
        else:
            return {"error": {"code": "port_unavailable",
                              "message": "this host runs no port calls for the model"}}
        return {"port": name, "result": to_plain_json(result)}

    def _registry_call(self, name: str, call: ToolCall, ref: str) -> Any:
        """Run one port call on the controller's registry (see the module docstring).

        Raises:
            ScriptFailed, LimitExceeded: from the registry (shown to the model
                as ``{"error": ...}`` by :meth:`run`).
        """
        with self.ctrl.locked():
            proc = self.ctrl.process
            version = proc.version
        digest = hashlib.sha256(canonical_json(call.to_json())).hexdigest()
        key = "svit-" + hashlib.sha256(f"{proc.id}\n{ref}\n{digest}".encode()).hexdigest()
        index = ref.rpartition(".c")[2]
        ctx = PortContext(proc.id, version + 1, int(index) if index.isdigit() else 0,
                          self.ctrl.token, proc, key)
        return self.ctrl.ports.call(name, from_plain_json(call.arguments.get("input")), ctx)

    def _exec(self, call: ToolCall, ref: str) -> dict[str, Any]:
        named = call.arguments.get("path") or call.arguments.get("script") or ""
        script = str(named).removeprefix("/lib/")
        if self.allow_scripts is not None and script not in self.allow_scripts:
            return {"status": "rejected", "error": {
                "code": "forbidden", "message": "this script is not on the reasoner's "
                "allowlist"}}
        value = from_plain_json(call.arguments.get("input"))
        digest = hashlib.sha256(canonical_json(call.to_json())).hexdigest()[:16]
        for attempt in range(3):
            version, _ = self.ctrl.observe()
            body = {
                "protocol": PROTOCOL, "client_id": self.client_id,
                "request_id": f"{ref}.a{attempt}.{digest}"[-128:],
                "process_id": self.ctrl.process.id, "expected_version": version,
                "command": {"operation": "activate", "script": script,
                            "input": encode_value(value)},
            }
            response = self.ctrl.execute(decode_request(body), tenant=self.partition)
            outcome = response.outcome
            if outcome.status == "committed":
                act = outcome.activation
                return {"status": "committed", "version": act.version,
                        "output": to_plain_json(act.output),
                        "replayed": response.replayed}
            if outcome.status == "rejected":
                if outcome.failure.code == "request_id_reused":
                    return {"status": "already_executed",
                            "note": "an earlier attempt of this turn ran this call"}
                return {"status": "rejected", "error": {"code": outcome.failure.code,
                                                        "message": outcome.failure.message}}
        return {"status": "conflict", "note": "the process kept changing; try again"}

