"""Where a client finds its gateway: ``SVIT_URL`` and ``SVIT_TOKEN``, then ``.svit/cluster.json``.

One rule for the SDK (``SvitClient()`` with no arguments) and every CLI command
that talks to a gateway, in this order of precedence:

1. explicit arguments (``url=``, ``token=``; ``--url``, ``--token``);
2. the environment: ``SVIT_URL`` (gateway base URL) and ``SVIT_TOKEN`` (bearer
   token), read with pydantic-settings;
3. ``./.svit/cluster.json`` in the current directory, written by
   ``svit-cluster up``: its ``gateway.url`` and ``tokens.admin``.

``svit-cluster up`` prints the two ``export`` lines that select its cluster.

The gateway server reads :class:`GatewaySettings` (``SVIT_CORS_ORIGINS``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

from pydantic import field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from svit_cluster.errors import ConfigurationError

__all__ = ["DEFAULT_CLUSTER_JSON", "ClientSettings", "GatewaySettings", "resolve_gateway"]

#: The cluster file ``svit-cluster up`` writes (relative to the current directory).
DEFAULT_CLUSTER_JSON = Path(".svit") / "cluster.json"


class ClientSettings(BaseSettings):
    """``SVIT_URL`` and ``SVIT_TOKEN`` from the environment (both optional)."""

    model_config = SettingsConfigDict(env_prefix="SVIT_", extra="ignore")

    url: str | None = None
    token: str | None = None


class GatewaySettings(BaseSettings):
    """Gateway server settings from the environment.

    ``SVIT_CORS_ORIGINS``: comma list of browser origins (``scheme://host[:port]``,
    or ``*``) allowed cross-origin access, e.g. a web page subscribing to
    ``/v1/processes/events`` with an observe token; empty (default): none.
    Validated when the gateway app is built
    (:func:`svit_cluster.gateway.parse_origins`).
    """

    model_config = SettingsConfigDict(env_prefix="SVIT_", extra="ignore")

    cors_origins: Annotated[list[str], NoDecode] = []

    @field_validator("cors_origins", mode="before")
    @classmethod
    def _comma_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [v.strip() for v in value.split(",") if v.strip()]
        return value


def _from_cluster_json(path: Path) -> tuple[str | None, str | None]:
    try:
        doc: Any = json.loads(path.read_text())
    except FileNotFoundError:
        return None, None
    except (OSError, ValueError) as exc:
        raise ConfigurationError(f"cannot read {path}: {exc}") from exc
    if not isinstance(doc, dict):
        return None, None
    gateway = doc.get("gateway")
    tokens = doc.get("tokens")
    gateway = gateway if isinstance(gateway, dict) else {}
    tokens = tokens if isinstance(tokens, dict) else {}
    url = gateway.get("url") if isinstance(gateway.get("url"), str) else None
    token = tokens.get("admin") if isinstance(tokens.get("admin"), str) else None
    return url, token


def resolve_gateway(
    url: str | None = None, token: str | None = None, *, state_dir: Path | None = None,
) -> tuple[str, str | None]:
    """The gateway ``(url, token)`` by the precedence in this module's docstring.

    Args:
        url, token: explicit values (win over everything).
        state_dir: read ``STATE_DIR/cluster.json`` (before the environment) when given.

    Returns:
        ``(url, token)``; ``token`` may be None (a gateway without auth refuses later).

    Raises:
        ConfigurationError: no URL anywhere, or the cluster file is unreadable.
    """
    if state_dir is not None:
        file_url, file_token = _from_cluster_json(state_dir / "cluster.json")
        url, token = url or file_url, token or file_token
    env = ClientSettings()
    url, token = url or env.url, token or env.token
    if url is None or token is None:
        file_url, file_token = _from_cluster_json(DEFAULT_CLUSTER_JSON)
        url, token = url or file_url, token or file_token
    if not url:
        raise ConfigurationError(
            "no gateway URL: pass url=/--url, export SVIT_URL, or run in the folder "
            "holding .svit/cluster.json (svit-cluster up)")
    return url, token or None
