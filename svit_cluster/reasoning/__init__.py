"""Reasoning: the owner's inbox-driven turn loop and pluggable reasoners.

Public names, by importance:

* :class:`TurnLoop` -- inbox head -> one turn -> canonical events ->
  acknowledge + completion (one commit); :class:`LoopState`.
* :class:`Reasoner` -- the model contract; :class:`ReasonRequest`,
  :class:`ReasonReply`, :class:`ToolCall`.
* :class:`SimulatedReasoner` -- deterministic and scripted (no model).
* :class:`OpenAICompatReasoner` -- an OpenAI-compatible HTTP endpoint.
* :class:`ReasonerConfig`, :func:`build_reasoner` -- configuration.
* :class:`ProcessTools`, :data:`TOOL_SPECS` -- ``discover``, ``read``, ``stat``,
  ``write``, ``remove``, ``exec`` (and ``port`` when ``/ports`` lists ports).
* :data:`THREAD_FORMAT`, :func:`check_thread`, :func:`system_prompt_for` --
  the bounded ``/thread`` session metadata.
* :class:`TurnFailed`, :class:`ReasonerError` -- why a turn failed.
"""

from typing import TYPE_CHECKING, Any

from svit_cluster.reasoning._config import (
    DEFAULT_MAX_ITERATIONS,
    DEFAULT_SYSTEM_PROMPT,
    ReasonerConfig,
    build_reasoner,
)
from svit_cluster.reasoning._loop import SESSION_FORMAT, EventLog, LoopState, TurnLoop
from svit_cluster.reasoning._model import (
    Reasoner,
    ReasonerError,
    ReasonReply,
    ReasonRequest,
    ToolCall,
    TurnFailed,
)
from svit_cluster.reasoning._simulated import SimulatedReasoner
from svit_cluster.reasoning._thread import (
    THREAD_FORMAT,
    ThreadRefused,
    check_thread,
    history_prefix_seq,
    system_prompt_for,
    thread_metadata,
)
from svit_cluster.reasoning._tools import (
    TOOL_NAMES,
    TOOL_SPECS,
    PortRunner,
    ProcessTools,
    port_tool_specs,
    validate_tool_calls,
)

if TYPE_CHECKING:
    from svit_cluster.reasoning._openai import OpenAICompatReasoner

__all__ = [
    "DEFAULT_MAX_ITERATIONS",
    "DEFAULT_SYSTEM_PROMPT",
    "SESSION_FORMAT",
    "THREAD_FORMAT",
    "TOOL_NAMES",
    "TOOL_SPECS",
    "EventLog",
    "LoopState",
    "OpenAICompatReasoner",
    "PortRunner",
    "ProcessTools",
    "ReasonReply",
    "ReasonRequest",
    "Reasoner",
    "ReasonerConfig",
    "ReasonerError",
    "SimulatedReasoner",
    "ThreadRefused",
    "ToolCall",
    "TurnFailed",
    "TurnLoop",
    "build_reasoner",
    "check_thread",
    "history_prefix_seq",
    "port_tool_specs",
    "system_prompt_for",
    "thread_metadata",
    "validate_tool_calls",
]


def __getattr__(name: str) -> Any:
    """Import :class:`OpenAICompatReasoner` on first use (PEP 562).

    It imports httpx, which imports its command line (click, rich, pygments) when
    they are installed; a process actor with the default simulated reasoner never
    needs it (each active process is its own Ray worker, which must stay light).

    Raises:
        AttributeError: ``name`` is not a public name of this package.
    """
    if name == "OpenAICompatReasoner":
        from svit_cluster.reasoning._openai import OpenAICompatReasoner

        return OpenAICompatReasoner
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
