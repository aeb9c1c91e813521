"""The reasoner contract: chat messages in, a reply or tool calls out.

A :class:`Reasoner` is one reasoning step: given the conversation so far and
the model-facing tools, it answers with text (the turn's reply) or with tool
calls (the loop runs them and asks again). Messages use the common chat
shape::

    {"role": "system" | "user" | "assistant" | "tool", "content": str,
     "tool_calls": [{"id", "name", "arguments": {...}}],   # assistant only
     "tool_call_id": str}                                   # tool only
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from svit_cluster.errors import ErrorCode, SvitError

__all__ = [
    "ReasonReply",
    "ReasonRequest",
    "Reasoner",
    "ReasonerError",
    "ToolCall",
    "TurnFailed",
]


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One validated tool call: id, tool name, arguments (a JSON object)."""

    id: str
    name: str
    arguments: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "arguments": self.arguments}


@dataclass(frozen=True, slots=True)
class ReasonRequest:
    """One reasoning step's input.

    Attributes:
        process_id: the process whose loop asks.
        turn: the turn number within the session (1, 2, ...).
        messages: the conversation (system prompt first).
        tools: model-facing tool specs (JSON Schema function definitions).
    """

    process_id: str
    turn: int
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ReasonReply:
    """One reasoning step's output: text, or raw tool calls (validated by the loop).

    ``tool_calls`` items are ``{"id", "name", "arguments"}`` where ``arguments``
    is a JSON object or its JSON text.
    """

    content: str | None = None
    tool_calls: list[Any] = field(default_factory=list)


class Reasoner(Protocol):
    """One model (or a simulation of one) behind the reasoning loop.

    Implementations raise :class:`ReasonerError` for failures they recognize
    (HTTP errors, malformed answers); anything else they raise is treated as
    a failed turn with a generic diagnostic (its text never reaches observers).
    The loop enforces the step timeout.
    """

    async def reason(self, request: ReasonRequest) -> ReasonReply:
        """Run one reasoning step."""
        ...

    async def aclose(self) -> None:
        """Release connections."""
        ...


class TurnFailed(SvitError):
    """A turn failed; its inbox item stays committed for recovery.

    Attributes:
        cause: a short stable cause (``reasoner_timeout``, ``reasoner_malformed``,
            ``reasoner_failed``, ``invalid_inbox``, ``turn_limit``,
            ``turn_timeout``, ``unavailable``, ``inbox_conflict``, ``internal``).
        retry_after_s: seconds before the turn may be tried again, as the
            model server asked (its ``Retry-After``), or None. The loop never
            retries sooner, not even when a new message arrives.

    The message is composed by this package from fixed text and validated
    values only, so it may be shown to observers.
    """

    default_code = ErrorCode.INTERNAL

    def __init__(self, cause: str, message: str, *, retry_after_s: float | None = None,
                 **fields: Any) -> None:
        super().__init__(message, **fields)
        self.cause = cause
        self.retry_after_s = retry_after_s


class ReasonerError(TurnFailed):
    """A reasoner failed in a way it recognized (its message is safe to show)."""

    def __init__(self, message: str, *, cause: str = "reasoner_failed",
                 retry_after_s: float | None = None, **fields: Any) -> None:
        super().__init__(cause, message, retry_after_s=retry_after_s, **fields)
