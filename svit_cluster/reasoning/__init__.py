"""Reasoning: the owner's inbox-driven turn loop and pluggable reasoners.

Public names, by importance:

* :class:`TurnLoop` -- inbox head -> one turn -> canonical events ->
  acknowledge + completion (one commit); :class:`LoopState`.
* :class:`Reasoner` -- the model contract; :class:`ReasonRequest`,
  :class:`ReasonReply`, :class:`ToolCall`.
* :class:`SimulatedReasoner` -- deterministic and scripted (no model).
* :class:`OpenAICompatReasoner` -- an OpenAI-compatible HTTP endpoint.
* :class:`ReasonerConfig`, :func:`build_reasoner` -- configuration.
* :class:`ProcessTools`, :data:`TOOL_SPECS` -- ``read``, ``discover``, ``exec``.
* :class:`TurnFailed`, :class:`ReasonerError` -- why a turn failed.
"""

from svit_cluster.reasoning._config import DEFAULT_SYSTEM_PROMPT, ReasonerConfig, build_reasoner
from svit_cluster.reasoning._loop import SESSION_FORMAT, EventLog, LoopState, TurnLoop
from svit_cluster.reasoning._model import (
    Reasoner,
    ReasonerError,
    ReasonReply,
    ReasonRequest,
    ToolCall,
    TurnFailed,
)
from svit_cluster.reasoning._openai import OpenAICompatReasoner
from svit_cluster.reasoning._simulated import SimulatedReasoner
from svit_cluster.reasoning._tools import TOOL_SPECS, ProcessTools, validate_tool_calls

__all__ = [
    "DEFAULT_SYSTEM_PROMPT",
    "SESSION_FORMAT",
    "TOOL_SPECS",
    "EventLog",
    "LoopState",
    "OpenAICompatReasoner",
    "ProcessTools",
    "ReasonReply",
    "ReasonRequest",
    "Reasoner",
    "ReasonerConfig",
    "ReasonerError",
    "SimulatedReasoner",
    "ToolCall",
    "TurnFailed",
    "TurnLoop",
    "build_reasoner",
    "validate_tool_calls",
]
