"""``svit-cluster chat``: send a message to a process and stream its turn.

One turn, as a user meets it:

1. subscribe to the process's signals (from now on), so nothing of the turn
   is missed;
2. commit ``{"content": TEXT, "id": MESSAGE_ID}`` to its inbox through the
   gateway (``MESSAGE_ID`` is random, or the caller's);
3. print the turn's presentation messages as they are published (the user
   message, the model's tool calls, the tool results, the answer) until the
   ``completion`` of exactly that message, or a ``failed`` signal of the same
   inbox item.

The turn itself runs on the process's owner (the reasoning loop); this module
only observes it. Tool results are shortened to :data:`MAX_SHOWN_CHARS` for
display.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from svit_cluster.client import AsyncSvitClient
from svit_cluster.events import Lagged, Signal

__all__ = ["MAX_SHOWN_CHARS", "OnEvent", "TurnOutcome", "chat_turn", "format_message"]

#: Characters of a tool result or tool-call argument list shown per line.
MAX_SHOWN_CHARS = 300

Emit = Callable[[str], None]
#: Receives one structured event of a turn (``svit-cluster chat --output json``).
OnEvent = Callable[[dict[str, Any]], None]


@dataclass(frozen=True)
class TurnOutcome:
    """How a chat turn ended.

    Attributes:
        ok: True when the completion arrived, False when the turn failed.
        answer: the assistant's answer (``ok``), else None.
        failure: ``{code, message}`` of the ``failed`` signal (not ``ok``).
        version: the process version of the acknowledge (``ok``), else None.
    """

    ok: bool
    answer: str | None = None
    failure: dict[str, Any] | None = None
    version: int | None = None


def _short(text: str) -> str:
    text = text.replace("\n", " ")
    return text if len(text) <= MAX_SHOWN_CHARS else text[:MAX_SHOWN_CHARS] + "…"


def format_message(message: dict[str, Any]) -> list[str]:
    """Display lines for one presentation message (see ``events.project_message``)."""
    role, content = message.get("role"), str(message.get("content") or "")
    if role == "user":
        return [f"you> {content}"]
    if role == "tool":
        return [f"  [{message.get('name')}] {_short(content)}"]
    lines = [f"assistant> {content}"] if content else []
    for call in message.get("tool_calls") or []:
        args = json.dumps(call.get("arguments"), ensure_ascii=False,
                          separators=(",", ":"))
        lines.append(f"  calls {call.get('name')} {_short(args)}")
    return lines


async def chat_turn(client: AsyncSvitClient, process_id: str, text: str, *,
                    emit: Emit = print, message_id: str | None = None,
                    timeout_s: float = 120.0, on_event: OnEvent | None = None
                    ) -> TurnOutcome:
    """Send ``text`` to ``process_id`` and stream its turn until it ends.

    Args:
        client: an authenticated gateway client.
        process_id: the process (it must exist and run a reasoning loop).
        text: the user message.
        emit: receives each display line (default ``print``).
        message_id: the inbox message id (default: random ``chat-<hex>``).
        timeout_s: seconds to wait for the completion or failure (default 120).
        on_event: also receives each event as a plain-JSON dict:
            ``{"event": "message", "message_id", "message": {role, content, ...}}``
            per presentation message, ``{"event": "lagged", "message_id"}``
            when signals were missed, ``{"event": "failed", "message_id",
            "code", "message"}`` when the turn failed.

    Returns:
        :class:`TurnOutcome`.

    Raises:
        TimeoutError: neither arrived within ``timeout_s`` (the message stays
            committed; its turn may still complete later).
        SvitError: the gateway refused the message (e.g. ``inbox_closed``,
            ``not_found``, ``unauthenticated``).
    """
    mid = message_id or f"chat-{secrets.token_hex(8)}"
    inbox_hash: str | None = None
    async with client.events(process_id,
                             kinds=("canonical_event", "message", "completion", "failed")
                             ) as sub:
        await client.inbox(process_id, {"content": text, "id": mid})

        async def follow() -> TurnOutcome:
            nonlocal inbox_hash
            mine = False
            async for item in sub:
                if isinstance(item, Lagged):
                    emit("  (some events were missed)")
                    if on_event is not None:
                        on_event({"event": "lagged", "message_id": mid})
                    continue
                assert isinstance(item, Signal)
                data = item.data
                if item.kind == "canonical_event":
                    event = data.get("event") or {}
                    if event.get("kind") == "user" and \
                            (event.get("data") or {}).get("message_id") == mid:
                        inbox_hash = event.get("inbox_hash")
                        mine = True
                    elif event.get("kind") == "user":
                        mine = False
                elif item.kind == "message" and mine:
                    for line in format_message(data.get("message") or {}):
                        emit(line)
                    if on_event is not None:
                        on_event({"event": "message", "message_id": mid,
                                  "message": data.get("message") or {}})
                elif item.kind == "completion" and data.get("message_id") == mid:
                    response = data.get("response") or {}
                    return TurnOutcome(True, answer=str(response.get("content", "")),
                                       version=data.get("version"))
                elif item.kind == "failed" and inbox_hash is not None \
                        and data.get("inbox_hash") == inbox_hash:
                    failure = {"code": data.get("code"), "message": data.get("message")}
                    emit(f"turn failed: {failure['code']}: {failure['message']}")
                    if on_event is not None:
                        on_event({"event": "failed", "message_id": mid, **failure})
                    return TurnOutcome(False, failure=failure)
            raise TimeoutError("the event stream ended before the turn did")

        return await asyncio.wait_for(follow(), timeout_s)
