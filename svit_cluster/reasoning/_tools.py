"""Model-facing tools mapped to process operations: ``read``, ``discover``, ``exec``.

``read`` and ``discover`` observe the process at the controller's
serialization point. ``exec`` activates a ``/lib`` script through the same
fenced, receipted commit path as any client: a svit-control@1 request from the
reasoner's client id. Its request id is derived from the session, turn, call
index, attempt and call content, so a turn re-run after a failover replays the
stored receipt instead of committing the same call twice.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from svit_cluster.control import ProcessController, decode_request
from svit_cluster.errors import FencedError, SvitError, UnavailableError
from svit_cluster.process import (
    PROTOCOL,
    canonical_json,
    encode_value,
    from_plain_json,
    to_plain_json,
)
from svit_cluster.reasoning._model import ToolCall, TurnFailed

__all__ = ["MAX_RESULT_BYTES", "TOOL_SPECS", "ProcessTools", "validate_tool_calls"]

#: A tool result larger than this (canonical JSON bytes) is replaced by a notice.
MAX_RESULT_BYTES = 16 * 1024
_MAX_CALLS = 16

_PATH = {"type": "string", "description": "absolute process path, e.g. /memory/count"}
#: OpenAI-style function definitions of the tools.
TOOL_SPECS: list[dict[str, Any]] = [
    {"type": "function", "function": {
        "name": "read", "description": "Read the value at an absolute process path.",
        "parameters": {"type": "object", "properties": {"path": _PATH},
                       "required": ["path"]}}},
    {"type": "function", "function": {
        "name": "discover",
        "description": "List the child names of a map (or indexes of an array) at a path.",
        "parameters": {"type": "object", "properties": {"path": _PATH},
                       "required": ["path"]}}},
    {"type": "function", "function": {
        "name": "exec",
        "description": "Activate the /lib script with a JSON input as one transaction.",
        "parameters": {"type": "object", "properties": {
            "script": {"type": "string", "description": "script name or /lib/<name>"},
            "input": {"description": "the script input (any JSON value)"}},
            "required": ["script"]}}},
]
_REQUIRED = {"read": ("path",), "discover": ("path",), "exec": ("script",)}


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
    """

    def __init__(self, ctrl: ProcessController, *, client_id: str = "svit-reasoner",
                 partition: str = "@reasoner") -> None:
        self.ctrl = ctrl
        self.client_id = client_id
        self.partition = partition

    def run(self, call: ToolCall, ref: str) -> dict[str, Any]:
        """Run ``call``; ``ref`` is ``<session>.t<turn>.c<index>`` (request ids).

        Returns:
            The JSON result shown to the model; process errors become
            ``{"error": {"code", "message"}}`` (not a failed turn).

        Raises:
            FencedError, UnavailableError: the commit path failed (turn fails).
        """
        try:
            if call.name == "read":
                value, version = self.ctrl.read_versioned(call.arguments["path"])
                return _bounded({"path": call.arguments["path"], "version": version,
                                 "value": to_plain_json(value)})
            if call.name == "discover":
                with self.ctrl.locked():
                    proc = self.ctrl.process
                    children = proc.discover(call.arguments["path"])
                    version = proc.version
                return _bounded({"path": call.arguments["path"], "version": version,
                                 "children": children})
            return _bounded(self._exec(call, ref))
        except SvitError as exc:
            if isinstance(exc, FencedError | UnavailableError):
                raise
            return {"error": exc.to_failure()}

    def _exec(self, call: ToolCall, ref: str) -> dict[str, Any]:
        script = call.arguments["script"].removeprefix("/lib/")
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

