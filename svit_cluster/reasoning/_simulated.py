"""A deterministic, scripted reasoner: tests and demos need no model.

Without a script it follows the latest user message, read as a tiny command
language (the same input always gives the same steps):

* ``/read PATH``, ``/discover PATH`` -- one tool call, then a reply quoting
  the result;
* ``/exec SCRIPT [JSON]`` -- activate ``/lib/SCRIPT`` with the JSON input
  (default null), then a reply quoting the result;
* ``/port NAME [JSON]`` -- call the host port ``NAME`` with the JSON input
  (the ``port`` tool, offered when ``/ports`` grants any), then a reply
  quoting the result;
* ``/sleep SECONDS REST`` -- wait (first step of a turn only), then handle
  ``REST``;
* ``/fail`` -- raise an exception whose text holds a fake secret (it must
  never reach observers);
* ``/malformed`` -- answer with a tool call for a tool that does not exist;
* anything else -- reply ``echo: <text>``.

With ``script``, each step instead returns the next scripted
:class:`ReasonReply` (or dict ``{content, tool_calls}``), then falls back to
the command language once the script is used up.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

from svit_cluster.reasoning._model import ReasonReply, ReasonRequest

__all__ = ["SimulatedReasoner"]

_MAX_SLEEP_S = 600.0


def _last_user(messages: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") == "user":
            return str(messages[i].get("content", "")), messages[i + 1:]
    return "", []


class SimulatedReasoner:
    """See the module docstring.

    Args:
        script: optional scripted replies, one per reasoning step.
        delay_s: seconds to wait in every step (default 0).
    """

    def __init__(self, script: Sequence[ReasonReply | dict[str, Any]] | None = None, *,
                 delay_s: float = 0.0) -> None:
        self._script = list(script or [])
        self.delay_s = float(delay_s)
        self.steps = 0

    def __repr__(self) -> str:
        return f"SimulatedReasoner(script={len(self._script)} steps, delay_s={self.delay_s})"

    async def aclose(self) -> None:
        return None

    async def reason(self, request: ReasonRequest) -> ReasonReply:
        self.steps += 1
        if self.delay_s > 0:
            await asyncio.sleep(self.delay_s)
        if self._script:
            item = self._script.pop(0)
            if isinstance(item, ReasonReply):
                return item
            return ReasonReply(item.get("content"), list(item.get("tool_calls") or []))
        text, since = _last_user(request.messages)
        results = [m for m in since if m.get("role") == "tool"]
        if text.startswith("/sleep "):
            _, _, rest = text.partition(" ")
            amount, _, text = rest.partition(" ")
            if not since:
                try:
                    await asyncio.sleep(min(max(float(amount), 0.0), _MAX_SLEEP_S))
                except ValueError:
                    pass
        if text.startswith("/fail"):
            raise RuntimeError("simulated failure with api_key=sk-SIMULATED-SECRET-0000")
        if text.startswith("/malformed"):
            return ReasonReply(None, [{"id": "call-1", "name": "rm -rf /", "arguments": "{"}])
        command, _, arg = text.partition(" ")
        if command in ("/read", "/discover", "/exec", "/port"):
            if results:
                return ReasonReply(f"{command[1:]} {arg.split(' ')[0]}: "
                                   f"{results[-1].get('content', '')}")
            if command in ("/exec", "/port"):
                target, _, raw = arg.partition(" ")
                try:
                    value = json.loads(raw) if raw.strip() else None
                except ValueError:
                    value = raw
                args: dict[str, Any] = {"script" if command == "/exec" else "name": target,
                                        "input": value}
            else:
                args = {"path": arg.strip() or "/"}
            return ReasonReply(None, [{"id": "call-1", "name": command[1:], "arguments": args}])
        return ReasonReply(f"echo: {text}")
