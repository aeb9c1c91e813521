"""Reasoner configuration (from ``ClusterConfig.reasoner``) and construction."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any

from svit_cluster.errors import ConfigurationError
from svit_cluster.reasoning._model import Reasoner
from svit_cluster.reasoning._simulated import SimulatedReasoner

__all__ = ["DEFAULT_MAX_ITERATIONS", "DEFAULT_SYSTEM_PROMPT", "ReasonerConfig",
           "build_reasoner"]

DEFAULT_SYSTEM_PROMPT = ""  # empty: the generated prompt of ``system_prompt_for``

#: Default reason/act steps per turn. The reference's default lets nine
#: tool-calling steps and the answering step finish one turn.
DEFAULT_MAX_ITERATIONS = 10


@dataclass(frozen=True)
class ReasonerConfig:
    """Which reasoner a process actor runs, and the loop's bounds.

    Attributes:
        kind: ``"simulated"`` (default; deterministic, no model) or ``"openai"``.
        base_url, model: the OpenAI-compatible endpoint and model name.
        api_key: bearer key (secret: not in ``repr``, never logged). When
            empty, the variable named by ``api_key_env`` is read instead.
        api_key_env: environment variable holding the key (default
            ``SVIT_REASONER_API_KEY``).
        enabled: run the reasoning loop at all (default True).
        max_iterations: reason/act steps per turn (1..64, default 10, see
            :data:`DEFAULT_MAX_ITERATIONS`); a turn that still calls tools at
            the last step fails with ``turn_limit`` and its item stays queued.
        step_timeout_s: seconds one step may take (default 30).
        turn_timeout_s: seconds one whole turn may take (default 120).
        history_events: canonical events given to the model as context
            (1..4096, default 64).
        retry_after_s: seconds before a failed turn is retried (default 30,
            doubling up to ``max_retry_after_s`` = 300); a new inbox message
            retries at once, except within the wait a refusing model server
            asked for (``Retry-After``, capped at ``max_retry_after_s``).
        client_id: svit-control@1 client id of the reasoner's ``exec`` calls.
        system_prompt: tool guidance replacing the generated one (default
            empty: the generated prompt, see ``reasoning._thread``); the
            process id and the instructions are always added.
        instructions: the operator's instructions for processes that have
            none yet in ``/thread/instructions`` (default None).
        allow_scripts: the ``/lib`` script names the model's ``exec`` tool may
            activate (default None: every script; reference: a process-owned
            agent's script allowlist). A refused call commits nothing.

    Raises:
        ConfigurationError: a value is out of range or the kind is unknown.
    """

    kind: str = "simulated"
    base_url: str = ""
    model: str = ""
    api_key: str = field(default="", repr=False)
    api_key_env: str = "SVIT_REASONER_API_KEY"
    enabled: bool = True
    max_iterations: int = DEFAULT_MAX_ITERATIONS
    step_timeout_s: float = 30.0
    turn_timeout_s: float = 120.0
    history_events: int = 64
    retry_after_s: float = 30.0
    max_retry_after_s: float = 300.0
    client_id: str = "svit-reasoner"
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    instructions: str | None = None
    allow_scripts: tuple[str, ...] | None = None
    simulated_delay_s: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in ("simulated", "openai"):
            raise ConfigurationError("reasoner kind must be 'simulated' or 'openai'")
        if self.kind == "openai" and not (self.base_url and self.model):
            raise ConfigurationError("an openai reasoner needs base_url and model")
        if not 1 <= self.max_iterations <= 64:
            raise ConfigurationError("max_iterations must be in 1..64")
        if self.allow_scripts is not None:
            if isinstance(self.allow_scripts, str) or not all(
                    isinstance(n, str) for n in self.allow_scripts):
                raise ConfigurationError("allow_scripts must be a list of script names")
            object.__setattr__(self, "allow_scripts", tuple(self.allow_scripts))
        if self.instructions is not None and not isinstance(self.instructions, str):
            raise ConfigurationError("instructions must be text")
        if not 1 <= self.history_events <= 4096:
            raise ConfigurationError("history_events must be in 1..4096")
        for name in ("step_timeout_s", "turn_timeout_s", "retry_after_s", "max_retry_after_s"):
            if not float(getattr(self, name)) > 0:
                raise ConfigurationError(f"{name} must be positive")

    @classmethod
    def from_dict(cls, doc: dict[str, Any] | None) -> ReasonerConfig:
        """From ``ClusterConfig.reasoner`` (unknown keys ignored).

        Raises:
            ConfigurationError: invalid values.
        """
        names = {f.name for f in dataclasses.fields(cls)}
        try:
            return cls(**{k: v for k, v in (doc or {}).items() if k in names})
        except TypeError as exc:
            raise ConfigurationError(f"bad reasoner setting: {type(exc).__name__}") from None

    def key(self) -> str | None:
        """The API key (config first, then ``api_key_env``), or None."""
        return self.api_key or os.environ.get(self.api_key_env) or None


def build_reasoner(config: ReasonerConfig) -> Reasoner:
    """The reasoner ``config`` names."""
    if config.kind == "openai":
        from svit_cluster.reasoning._openai import OpenAICompatReasoner

        return OpenAICompatReasoner(config.base_url, config.model, config.key(),
                                    timeout_s=config.step_timeout_s)
    return SimulatedReasoner(delay_s=config.simulated_delay_s)
