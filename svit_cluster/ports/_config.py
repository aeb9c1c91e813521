"""The operator's port configuration: which ports a deployment grants, and their bounds.

One :class:`PortsConfig` per deployment (``ClusterConfig.ports``, the local
cluster's ``cluster.json`` ``ports`` block, the Helm values' ``ports:`` block
rendered into ``SVIT_PORTS_JSON``). Nothing is granted by default: every port
is ``enabled: false`` until the operator turns it on (reference: docs/ports.md,
ports are explicit authority).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from svit_cluster.errors import ConfigurationError

__all__ = ["HttpPortConfig", "LlmPortConfig", "PortsConfig", "SpawnPortConfig"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class HttpPortConfig(_Strict):
    """The ``http`` port.

    Attributes:
        enabled: grant the port (default False).
        allow_hosts: host names (``example.org``) or ``host:port`` entries a
            request may target; matched exactly, case-insensitively. Empty
            means no host is reachable.
        max_response_bytes: response body bytes read at most (1..16 MiB); a
            larger body fails the call.
        timeout_s: seconds for connect + read of one request (0 < t <= 120).
    """

    enabled: bool = False
    allow_hosts: list[str] = Field(default_factory=list, max_length=256)
    max_response_bytes: int = Field(default=65_536, ge=1, le=16 * 1024 * 1024)
    timeout_s: float = Field(default=10.0, gt=0, le=120)


class LlmPortConfig(_Strict):
    """The ``llm`` port: one call of the deployment's configured reasoner.

    Attributes:
        enabled: grant the port (default False).
        max_messages: chat messages one call may carry (1..256).
    """

    enabled: bool = False
    max_messages: int = Field(default=32, ge=1, le=256)


class SpawnPortConfig(_Strict):
    """The ``spawn`` port: fork the committed state into a child and run one child activation.

    Attributes:
        enabled: grant the port (default False).
    """

    enabled: bool = False


class PortsConfig(_Strict):
    """Every port of a deployment plus the per-activation bounds of port calls.

    Attributes:
        http, llm, spawn: the built-in ports.
        max_calls: port calls per activation (0..64; nested ``exec`` shares it).
        max_input_bytes: canonical JSON bytes of one call's input (1..1 MiB).
        max_output_bytes: canonical JSON bytes of one call's result (1..16 MiB).
        fuel_per_call: fuel charged per port call (0..1_000_000), on top of
            the fuel the guest spends converting input and result.
    """

    http: HttpPortConfig = Field(default_factory=HttpPortConfig)
    llm: LlmPortConfig = Field(default_factory=LlmPortConfig)
    spawn: SpawnPortConfig = Field(default_factory=SpawnPortConfig)
    max_calls: int = Field(default=8, ge=0, le=64)
    max_input_bytes: int = Field(default=65_536, ge=1, le=1024 * 1024)
    max_output_bytes: int = Field(default=262_144, ge=1, le=16 * 1024 * 1024)
    fuel_per_call: int = Field(default=1_000, ge=0, le=1_000_000)

    @classmethod
    def parse(cls, doc: Any) -> PortsConfig:
        """Validate a plain ``ports`` mapping (None or ``{}`` grants nothing).

        Raises:
            ConfigurationError: an unknown key or a value out of range; the
                message names the field.
        """
        try:
            return cls.model_validate(doc or {})
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "ports"
            raise ConfigurationError(f"bad ports setting {where}: {first['msg']}") from None

    def enabled(self) -> list[str]:
        """Names of the granted ports, sorted."""
        return sorted(n for n in ("http", "llm", "spawn") if getattr(self, n).enabled)
