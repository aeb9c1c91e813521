"""Configuration from the environment: one typed place, clear errors.

In-process tests of :mod:`svit_cluster.settings` (names, defaults, validation),
and subprocess tests of the components the chart runs: a bad ``SVIT_*`` value
makes ``svit-cluster gateway`` / ``host-agent`` / ``dispatcher run`` exit 2
with one line on stderr that names the variable, and no traceback, before any
connection is attempted.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from svit_cluster.cluster._config import ClusterConfig
from svit_cluster.errors import ConfigurationError
from svit_cluster.settings import (
    ClusterSettings,
    DispatcherSettings,
    StoreSettings,
    env_names,
    load_settings,
)
from svit_cluster.store._log_config import StoreConfig
from svit_cluster.store._redis import cluster_from_env

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in list(os.environ):
        if name.startswith("SVIT_"):
            monkeypatch.delenv(name)
    return monkeypatch


def test_from_env_reads_every_cluster_variable(clean_env: pytest.MonkeyPatch) -> None:
    values = {
        "SVIT_CLUSTER": "prod", "SVIT_ETCD_ENDPOINTS": "e0:2379, e1:2379,e2:2379",
        "SVIT_REDIS_URL": "redis://r:6379/1", "SVIT_RAY_ADDRESS": "head:6379",
        "SVIT_LEASE_TTL_S": "7", "SVIT_SNAPSHOT_EVERY": "50", "SVIT_PASSIVATE_AFTER_S": "12.5",
        "SVIT_SIGNAL_RETENTION": "500", "SVIT_MAX_EVENTS": "700", "SVIT_REDIS_CLUSTER": "true",
        "SVIT_REDIS_ALLOW_UNVERIFIED_EVICTION_POLICY": "yes", "SVIT_REASONER_KIND": "openai",
        "SVIT_REASONER_MODEL": "m1", "SVIT_PORTS_JSON": "{}",
    }
    for k, v in values.items():
        clean_env.setenv(k, v)
    config = ClusterConfig.from_env()
    assert (config.cluster, config.etcd_endpoint, config.redis_url, config.ray_address) == (
        "prod", "e0:2379,e1:2379,e2:2379", "redis://r:6379/1", "head:6379")
    assert (config.lease_ttl_s, config.snapshot_every, config.passivate_after_s,
            config.signal_retention, config.max_events) == (7, 50, 12.5, 500, 700)
    assert config.redis_cluster and config.redis_allow_unverified_eviction_policy
    assert config.reasoner == {"kind": "openai", "model": "m1"}
    assert config.ports == {}


def test_defaults_match_the_cluster_config(clean_env: pytest.MonkeyPatch) -> None:
    """Empty variables are unset; the env defaults equal ClusterConfig's (no drift)."""
    clean_env.setenv("SVIT_LEASE_TTL_S", "")
    env = load_settings(ClusterSettings)
    plain = ClusterConfig()
    for name in ("cluster", "lease_ttl_s", "snapshot_every", "passivate_after_s",
                 "signal_retention", "max_events", "max_active_per_host",
                 "max_actors_pss_mib", "max_starting_per_host",
                 "redis_url", "ray_address", "redis_cluster",
                 "redis_allow_unverified_eviction_policy"):
        assert getattr(env, name) == getattr(plain, name), name
    assert env.etcd_endpoints == plain.etcd_endpoint
    store = StoreConfig()
    assert (store.wait_replicas, store.wait_timeout_ms) == (
        env.redis_wait_replicas, env.redis_wait_timeout_ms)


@pytest.mark.parametrize(("name", "value"), [
    ("SVIT_LEASE_TTL_S", "abc"), ("SVIT_LEASE_TTL_S", "0"),
    ("SVIT_PASSIVATE_AFTER_S", "-1"), ("SVIT_SNAPSHOT_EVERY", "1.5"),
    ("SVIT_ETCD_ENDPOINTS", "etcd-0"), ("SVIT_ETCD_ENDPOINTS", " , "),
    ("SVIT_REDIS_CLUSTER", "maybe"), ("SVIT_PORTS_JSON", "[1]"),
    ("SVIT_PORTS_JSON", "{not json"), ("SVIT_PORTS_JSON", '{"nope": 1}'),
    ("SVIT_REDIS_WAIT_REPLICAS", "17"), ("SVIT_SIGNAL_RETENTION", "x"),
    ("SVIT_MAX_EVENTS", "15"), ("SVIT_MAX_EVENTS", "10000001"),
])
def test_a_bad_value_names_the_variable(clean_env: pytest.MonkeyPatch, name: str,
                                        value: str) -> None:
    clean_env.setenv(name, value)
    with pytest.raises(ConfigurationError) as caught:
        ClusterConfig.from_env()
    assert name in caught.value.message
    assert "\n" not in caught.value.message


def test_booleans_are_validated_not_guessed(clean_env: pytest.MonkeyPatch) -> None:
    for raw, want in (("true", True), ("1", True), ("on", True), ("false", False),
                      ("0", False), ("no", False), ("", False)):
        clean_env.setenv("SVIT_REDIS_CLUSTER", raw)
        assert cluster_from_env() is want, raw
    clean_env.setenv("SVIT_REDIS_CLUSTER", "ture")  # a typo no longer means "false"
    with pytest.raises(ConfigurationError, match="SVIT_REDIS_CLUSTER"):
        cluster_from_env()
    clean_env.setenv("SVIT_REDIS_CLUSTER", "false")
    clean_env.setenv("SVIT_REDIS_WAIT_TIMEOUT_MS", "0")
    with pytest.raises(ConfigurationError, match="SVIT_REDIS_WAIT_TIMEOUT_MS"):
        StoreConfig()
    assert "SVIT_REDIS_WAIT_TIMEOUT_MS" in env_names(StoreSettings)


def test_dispatcher_settings_fall_back_to_svit_url(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("SVIT_URL", "http://gw:8080")
    clean_env.setenv("SVIT_TOKEN", "t")
    env = load_settings(DispatcherSettings)
    assert (env.gateway_url or env.url, env.token, env.redis_url) == (
        "http://gw:8080", "t", None)


def _run(args: list[str], env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("SVIT_")}
    # Nothing listens on these: a component that got past its settings would hang
    # or fail later with a different message.
    base.update({"SVIT_REDIS_URL": "redis://127.0.0.1:9/0",
                 "SVIT_ETCD_ENDPOINTS": "127.0.0.1:9", "SVIT_RAY_ADDRESS": "127.0.0.1:9"})
    base.update(env)
    return subprocess.run([sys.executable, "-m", "svit_cluster.cli", *args], env=base,
                          cwd=tmp_path, capture_output=True, text=True, timeout=60,
                          check=False)


@pytest.mark.parametrize(("args", "name", "value"), [
    (["gateway"], "SVIT_LEASE_TTL_S", "five"),
    (["gateway"], "SVIT_RAY_WAIT_S", "soon"),
    (["gateway"], "SVIT_MAX_REQUEST_BYTES", "0"),
    (["host-agent", "--host-id", "h1"], "SVIT_ETCD_ENDPOINTS", "etcd-0:notaport"),
    (["dispatcher", "run"], "SVIT_REDIS_CLUSTER", "maybe"),
], ids=["gateway-int", "gateway-launcher", "gateway-range", "agent-etcd", "dispatcher-bool"])
def test_a_component_exits_with_one_line_naming_the_variable(
        tmp_path: Path, args: list[str], name: str, value: str) -> None:
    tokens = tmp_path / "tokens.json"
    tokens.write_text('{"tokens": []}')
    proc = _run(args, {"SVIT_TOKENS_FILE": str(tokens), name: value}, tmp_path)
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert "Traceback" not in proc.stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert name in lines[0] and repr(value) in lines[0], lines[0]
