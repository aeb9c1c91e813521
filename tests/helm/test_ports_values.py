"""The chart's ``ports:`` block reaches the hosts as a valid ``SVIT_PORTS_JSON``."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from svit_cluster.cluster._config import ClusterConfig
from svit_cluster.ports import PortsConfig, build_registry

RELEASE = "svit"


def _ports_json(manifests: list[dict[str, Any]]) -> str:
    (cm,) = [m for m in manifests
             if m["kind"] == "ConfigMap" and m["metadata"]["name"] == f"{RELEASE}-config"]
    raw: str = cm["data"]["SVIT_PORTS_JSON"]
    return raw


def test_default_values_grant_no_port(render: Callable[..., Any]) -> None:
    config = PortsConfig.parse(json.loads(_ports_json(render())))
    assert config.enabled() == [] and build_registry(config).catalog() == {}


def test_ports_values_render_into_the_config_the_hosts_read(
        render: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> None:
    raw = _ports_json(render(None, "ports.http.enabled=true",
                             "ports.http.allowHosts={api.example.org,10.0.0.5:8080}",
                             "ports.http.maxResponseBytes=1024", "ports.llm.enabled=true",
                             "ports.maxCalls=0", "ports.fuelPerCall=0"))
    monkeypatch.setenv("SVIT_PORTS_JSON", raw)
    config = PortsConfig.parse(ClusterConfig.from_env().ports)
    assert config.enabled() == ["http", "llm"]
    assert config.http.allow_hosts == ["api.example.org", "10.0.0.5:8080"]
    assert config.http.max_response_bytes == 1024
    assert (config.max_calls, config.fuel_per_call) == (0, 0)  # zero is kept, not defaulted
