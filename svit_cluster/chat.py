"""``svit-cluster chat``: send a message to a process and stream its turn.

One turn, as a user meets it:

1. subscribe to the process's signals (from now on), so nothing of the turn
   is missed;
2. commit ``{"content": TEXT, "id": MESSAGE_ID}`` to its inbox through the
   gateway (``MESSAGE_ID`` is random, or the caller's);
3. print the turn's presentation messages as they are published (the user
   message, the model's tool calls, the tool results, the answer) until the
   ``completion`` of exactly that message, or a ``failed`` signal of the same
   inbox item, or a ``failed`` signal of the inbox head ahead of it (a
   message whose turn fails blocks every later one; the loop retries it when
   a new message arrives, so that signal comes at once).

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
from svit_cluster.errors import SvitError
from svit_cluster.events import Lagged, Signal
from svit_cluster.process import from_plain_json, node_from_value, to_plain_json

__all__ = ["MAX_SHOWN_CHARS", "OnEvent", "TurnOutcome", "chat_turn", "format_message",
           "inbox_hash_of"]

#: Characters of a tool result or tool-call argument list shown per line.
MAX_SHOWN_CHARS = 300

Emit = Callable[[str], None]
#: Receives one structured event of a turn (``svit-cluster chat --output json``).
OnEvent = Callable[[dict[str, Any]], None]


@dataclass(frozen=True)
class TurnOutcome:
    """How a chat turn ended.

    Attributes:
        ok: True when the completion arrived, False when the turn failed or
            is blocked by an earlier message whose turn failed.
        answer: the assistant's answer (``ok``), else None.
        failure: when not ``ok``: ``{code, message, message_id, inbox_hash,
            blocking}`` of the ``failed`` signal. ``blocking`` False: this
            message's own turn failed (``message_id`` is this message's id);
            True: the inbox head ahead of it failed (``message_id`` is the
            head's id, None when the head has none), and this message waits
            behind it. Either way the failed message stays at the head of the
            inbox until a turn of it succeeds or it is dropped
            (``svit-cluster inbox drop``).
        version: the process version of the acknowledge (``ok``), else None.
        message_id: this message's inbox id.
    """

    ok: bool
    answer: str | None = None
    failure: dict[str, Any] | None = None
    version: int | None = None
    message_id: str | None = None


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


def inbox_hash_of(item: Any) -> str:
    """The content hash the reasoning loop names an inbox item by (``inbox_hash``
    of its events and ``failed`` signals): the item's node hash.

    Raises:
        InvalidInput: ``item`` is not plain JSON the gateway would accept.
    """
    return node_from_value(from_plain_json(item)).hex


async def _head_message_id(client: AsyncSvitClient, process_id: str, head_hash: str | None,
                           seen: dict[str, str | None]) -> str | None:
    """The message id of the inbox head named ``head_hash``: from its ``user``
    event when one was seen, else read from ``/inbox/0`` when that is still the
    head; None when it has none (or the head moved on)."""
    if head_hash is not None and head_hash in seen:
        return seen[head_hash]
    try:
        head, _ = await client.state(process_id, "/inbox/0")
    except SvitError:
        return None
    mid = head.get("id") if isinstance(head, dict) else None
    if not isinstance(mid, str) or (head_hash is not None and inbox_hash_of(
            to_plain_json(head)) != head_hash):
        return None
    return mid


async def chat_turn(client: AsyncSvitClient, process_id: str, text: str, *,
                    emit: Emit = print, message_id: str | None = None,
                    timeout_s: float = 120.0, on_event: OnEvent | None = None,
                    echo_user: bool = True) -> TurnOutcome:
    """Send ``text`` to ``process_id`` and stream its turn until it ends.

    The turn ends with the message's ``completion``, its own ``failed``
    signal, or -- at once, without waiting for the timeout -- a ``failed``
    signal of another message: the inbox head ahead of this one, whose turn
    the loop retried when this message arrived. A failed head blocks every
    later message until a turn of it succeeds or it is dropped.

    Args:
        client: an authenticated gateway client.
        process_id: the process (it must exist and run a reasoning loop).
        text: the user message.
        emit: receives each display line (default ``print``).
        message_id: the inbox message id (default: random ``chat-<hex>``).
        timeout_s: seconds to wait for the end of the turn (default 120).
        on_event: also receives each event as a plain-JSON dict:
            ``{"event": "message", "message_id", "message": {role, content, ...}}``
            per presentation message, ``{"event": "lagged", "message_id"}``
            when signals were missed, ``{"event": "failed", "message_id",
            "code", "message"}`` when the turn failed, ``{"event": "blocked",
            "message_id", "head_message_id", "head_hash", "code", "message"}``
            when the head ahead of it failed.
        echo_user: also show this message itself (``you> ...``); False when
            the user just typed it after a prompt.

    Returns:
        :class:`TurnOutcome`.

    Raises:
        TimeoutError: the turn did not end within ``timeout_s`` (the message
            stays committed; its turn may still complete later).
        SvitError: the gateway refused the message (e.g. ``inbox_closed``,
            ``not_found``, ``unauthenticated``).
    """
    mid = message_id or f"chat-{secrets.token_hex(8)}"
    item = {"content": text, "id": mid}
    own_hash = inbox_hash_of(item)
    #: inbox hash -> message id, from the ``user`` events of turns seen
    seen: dict[str, str | None] = {}
    async with client.events(process_id,
                             kinds=("canonical_event", "message", "completion", "failed")
                             ) as sub:
        await client.inbox(process_id, item)

        async def follow() -> TurnOutcome:
            mine = False
            async for signal in sub:
                if isinstance(signal, Lagged):
                    emit("  (some events were missed)")
                    if on_event is not None:
                        on_event({"event": "lagged", "message_id": mid})
                    continue
                assert isinstance(signal, Signal)
                data = signal.data
                if signal.kind == "canonical_event":
                    event = data.get("event") or {}
                    if event.get("kind") == "user":
                        head = event.get("inbox_hash")
                        user_mid = (event.get("data") or {}).get("message_id")
                        mine = head == own_hash
                        if isinstance(head, str):
                            seen[head] = user_mid if isinstance(user_mid, str) else None
                elif signal.kind == "message" and mine:
                    message = data.get("message") or {}
                    if echo_user or message.get("role") != "user":
                        for line in format_message(message):
                            emit(line)
                    if on_event is not None:
                        on_event({"event": "message", "message_id": mid, "message": message})
                elif signal.kind == "completion" and data.get("message_id") == mid:
                    response = data.get("response") or {}
                    return TurnOutcome(True, answer=str(response.get("content", "")),
                                       version=data.get("version"), message_id=mid)
                elif signal.kind == "failed":
                    return await failed(data)
            raise TimeoutError("the event stream ended before the turn did")

        async def failed(data: dict[str, Any]) -> TurnOutcome:
            code, why, head = data.get("code"), data.get("message"), data.get("inbox_hash")
            head_mid = None if head == own_hash else await _head_message_id(
                client, process_id, head, seen)
            if head == own_hash or head_mid == mid:
                failure = {"code": code, "message": why, "message_id": mid,
                           "inbox_hash": head, "blocking": False}
                emit(f"turn failed: {code}: {why} (message {mid})")
                if on_event is not None:
                    on_event({"event": "failed", "message_id": mid, "code": code,
                              "message": why})
                return TurnOutcome(False, failure=failure, message_id=mid)
            failure = {"code": code, "message": why, "message_id": head_mid,
                       "inbox_hash": head, "blocking": True}
            name = head_mid if head_mid is not None else f"with hash {head}"
            emit(f"inbox head {name} failed: {code}: {why}; message {mid} waits behind it")
            if on_event is not None:
                on_event({"event": "blocked", "message_id": mid, "head_message_id": head_mid,
                          "head_hash": head, "code": code, "message": why})
            return TurnOutcome(False, failure=failure, message_id=mid)

        return await asyncio.wait_for(follow(), timeout_s)
