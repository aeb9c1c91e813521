"""Configuration from the environment, in one typed place (pydantic-settings, ``SVIT_`` prefix).

Every ``SVIT_*`` variable any svit_cluster component reads is a field of one of
the classes here (the Helm chart renders them; ``tests/helm/test_settings_contract.py``
asserts that every variable the chart renders is such a field). Each class is
read with :func:`load_settings`, which turns a bad value into one
:class:`ConfigurationError` naming the variable (the CLI prints it as one line
and exits 2, no traceback). Units are in the names. A default shared with another
layer (``ClusterConfig``, ``ClusterSpec``, the ``up`` options, the chart) is a
constant of :mod:`svit_cluster.defaults`, with its unit and range; the others
live on the fields.

* :class:`ClientSettings` -- ``SVIT_URL``, ``SVIT_TOKEN`` (SDK and CLI);
* :class:`StoreSettings` -- the commit log's Redis options (every Redis client);
* :class:`ClusterSettings` -- what gateways and host agents share
  (``ClusterConfig.from_env``);
* :class:`GatewaySettings`, :class:`AgentSettings`, :class:`DispatcherSettings`
  -- one component each;
* :class:`NodeSettings` -- read by the container launcher ``deploy/svit-node.sh``
  (shell ``${VAR:-default}``; its defaults are checked against these fields).

Empty variables count as unset (``env_ignore_empty``). Booleans accept
``true/false``, ``1/0``, ``yes/no``, ``on/off``; anything else is refused.

Where a client finds its gateway: ``SVIT_URL`` and ``SVIT_TOKEN``, then
``.svit/cluster.json``. One rule for the SDK (``SvitClient()`` with no
arguments) and every CLI command that talks to a gateway, in this order of
precedence:

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
from typing import Annotated, Any, TypeVar

from pydantic import Field, ValidationError, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from svit_cluster.defaults import (
    DEFAULT_CLUSTER,
    DEFAULT_ETCD_ENDPOINT,
    DEFAULT_EVICTION_CHECK_S,
    DEFAULT_GATEWAY_PORT,
    DEFAULT_LEASE_TTL_S,
    DEFAULT_MAX_ACTIVE_PER_HOST,
    DEFAULT_MAX_ACTORS_PSS_MIB,
    DEFAULT_MAX_EVENTS,
    DEFAULT_MAX_STARTING_PER_HOST,
    DEFAULT_PASSIVATE_AFTER_S,
    DEFAULT_REDIS_URL,
    DEFAULT_SIGNAL_RETENTION,
    DEFAULT_SNAPSHOT_EVERY,
    DEFAULT_STATE_DIR,
    DEFAULT_WAIT_REPLICAS,
    DEFAULT_WAIT_TIMEOUT_MS,
    LEASE_TTL_S_MIN,
    MAX_ACTIVE_PER_HOST_MAX,
    MAX_STARTING_PER_HOST_MAX,
    RETENTION_MAX,
    RETENTION_MIN,
    WAIT_REPLICAS_MAX,
    WAIT_TIMEOUT_MS_MAX,
)
from svit_cluster.errors import ConfigurationError

__all__ = [
    "DEFAULT_CLUSTER_JSON",
    "DEFAULT_HEARTBEAT_FILE",
    "DEFAULT_MAX_REQUEST_BYTES",
    "DEFAULT_SNAPSHOT_EVERY",
    "ENV_PREFIX",
    "SETTINGS_CLASSES",
    "AgentSettings",
    "ClientSettings",
    "ClusterSettings",
    "DispatcherSettings",
    "GatewaySettings",
    "NodeSettings",
    "StoreSettings",
    "env_names",
    "load_settings",
    "parse_endpoints",
    "resolve_gateway",
]

#: Prefix of every variable read here.
ENV_PREFIX = "SVIT_"
#: Gateway request body cap in bytes (``SVIT_MAX_REQUEST_BYTES``, 1 MiB); re-exported
#: by ``gateway``.
DEFAULT_MAX_REQUEST_BYTES = 1024 * 1024
#: Where ``svit-cluster host-agent`` writes its heartbeat (``SVIT_AGENT_HEARTBEAT_FILE``).
DEFAULT_HEARTBEAT_FILE = "/tmp/svit-agent-heartbeat.json"

#: The cluster file ``svit-cluster up`` writes (relative to the current directory).
DEFAULT_CLUSTER_JSON = DEFAULT_STATE_DIR / "cluster.json"


def parse_endpoints(endpoints: str) -> list[tuple[str, int]]:
    """``"a:2379, b:2379"`` -> ``[("a", 2379), ("b", 2379)]`` (order kept, duplicates dropped).

    Raises:
        ValueError: the list is empty or an entry is not ``host:port``.
    """
    out: list[tuple[str, int]] = []
    for raw in endpoints.split(","):
        entry = raw.strip()
        if not entry:
            continue
        host, sep, port = entry.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"etcd endpoint must be host:port, got {entry!r}")
        if (host, int(port)) not in out:
            out.append((host, int(port)))
    if not out:
        raise ValueError(f"no etcd endpoint in {endpoints!r}")
    return out


class _Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore",
                                      env_ignore_empty=True, frozen=True)


class ClientSettings(_Settings):
    """``SVIT_URL`` and ``SVIT_TOKEN`` from the environment (both optional)."""

    url: str | None = None
    token: str | None = None


class StoreSettings(_Settings):
    """The commit log's Redis options, read by every Redis client (store, events, dispatcher).

    Attributes:
        redis_cluster: ``SVIT_REDIS_CLUSTER``: the Redis URL names a node of a
            Redis Cluster; connect with a cluster client (default False).
        redis_allow_unverified_eviction_policy:
            ``SVIT_REDIS_ALLOW_UNVERIFIED_EVICTION_POLICY``: accept a Redis whose
            ``maxmemory-policy`` cannot be read, with a warning (default False).
        redis_eviction_check_s: ``SVIT_REDIS_EVICTION_CHECK_S``: seconds a
            node's ``maxmemory-policy`` verdict is trusted; the first write to
            the node after that reads the policy again (``CONFIG GET``), and no
            write goes out while it is not ``noeviction`` (``0 < s <= 60``,
            ``defaults.DEFAULT_EVICTION_CHECK_S``).
        redis_wait_replicas: ``SVIT_REDIS_WAIT_REPLICAS``: ``WAIT`` for this many
            replicas after each commit and claim
            (0..``defaults.WAIT_REPLICAS_MAX``; ``defaults.DEFAULT_WAIT_REPLICAS``,
            0: no WAIT).
        redis_wait_timeout_ms: ``SVIT_REDIS_WAIT_TIMEOUT_MS``: that ``WAIT``'s
            deadline in milliseconds (1..``defaults.WAIT_TIMEOUT_MS_MAX``,
            ``defaults.DEFAULT_WAIT_TIMEOUT_MS``).
    """

    redis_cluster: bool = False
    redis_allow_unverified_eviction_policy: bool = False
    redis_eviction_check_s: float = Field(default=DEFAULT_EVICTION_CHECK_S, gt=0, le=60)
    redis_wait_replicas: int = Field(default=DEFAULT_WAIT_REPLICAS, ge=0, le=WAIT_REPLICAS_MAX)
    redis_wait_timeout_ms: int = Field(default=DEFAULT_WAIT_TIMEOUT_MS, ge=1,
                                       le=WAIT_TIMEOUT_MS_MAX)


class ClusterSettings(StoreSettings):
    """What gateways and host agents share (``ClusterConfig.from_env``).

    Attributes:
        cluster: ``SVIT_CLUSTER``: cluster name (etcd keys under ``/svit/<cluster>/``;
            ``defaults.DEFAULT_CLUSTER``).
        etcd_endpoints: ``SVIT_ETCD_ENDPOINTS``: ``host:port`` of every etcd member,
            comma separated; normalised to ``"h:p,h:p"`` (order kept;
            ``defaults.DEFAULT_ETCD_ENDPOINT``).
        redis_url: ``SVIT_REDIS_URL``: ``redis://host:port/db`` of the commit log
            (``defaults.DEFAULT_REDIS_URL``).
        ray_address: ``SVIT_RAY_ADDRESS``: ``host:port`` of the Ray GCS
            (empty: ``"auto"``).
        lease_ttl_s: ``SVIT_LEASE_TTL_S``: host lease TTL in seconds (>= 1;
            ``defaults.DEFAULT_LEASE_TTL_S``).
        snapshot_every: ``SVIT_SNAPSHOT_EVERY``: commits between snapshots (>= 1;
            ``defaults.DEFAULT_SNAPSHOT_EVERY``).
        passivate_after_s: ``SVIT_PASSIVATE_AFTER_S``: idle seconds before a
            process actor passivates (> 0; ``defaults.DEFAULT_PASSIVATE_AFTER_S``).
        signal_retention: ``SVIT_SIGNAL_RETENTION``: observer signals kept per
            process (``defaults.DEFAULT_SIGNAL_RETENTION``, in
            ``defaults.RETENTION_MIN..RETENTION_MAX``).
        max_events: ``SVIT_MAX_EVENTS``: canonical reasoning events kept per
            session of a process (``defaults.DEFAULT_MAX_EVENTS``, in
            ``defaults.RETENTION_MIN..RETENTION_MAX``).
        ports_json: ``SVIT_PORTS_JSON``: the port registry settings
            (``svit_cluster.ports.PortsConfig``) as a JSON object; validated.
        mounts_json: ``SVIT_MOUNTS_JSON``: the mount grants
            (``svit_cluster.mounts.MountsConfig``) as a JSON list; validated.
        reasoner_kind, reasoner_base_url, reasoner_model, reasoner_api_key_env,
            reasoner_instructions: ``SVIT_REASONER_*``: the reasoning loop's
            settings (``svit_cluster.reasoning.ReasonerConfig`` fields); unset
            ones keep that class's defaults.
        max_active_per_host: ``SVIT_MAX_ACTIVE_PER_HOST``: a host's residency
            budget of process actors (0..``defaults.MAX_ACTIVE_PER_HOST_MAX``;
            0, the default: derived from its node's CPUs and memory;
            ``ClusterConfig.max_active_per_host``).
        max_actors_pss_mib: ``SVIT_MAX_ACTORS_PSS_MIB``: summed PSS (MiB) of a
            host's process actors at which it counts as full (0: half its memory).
        max_starting_per_host: ``SVIT_MAX_STARTING_PER_HOST``: Ray workers a
            host starts at once (0: half its CPUs, at least 1).
    """

    cluster: str = Field(default=DEFAULT_CLUSTER, min_length=1)
    etcd_endpoints: str = DEFAULT_ETCD_ENDPOINT
    redis_url: str = Field(default=DEFAULT_REDIS_URL, min_length=1)
    ray_address: str = ""
    lease_ttl_s: int = Field(default=DEFAULT_LEASE_TTL_S, ge=LEASE_TTL_S_MIN)
    snapshot_every: int = Field(default=DEFAULT_SNAPSHOT_EVERY, ge=1)
    passivate_after_s: float = Field(default=DEFAULT_PASSIVATE_AFTER_S, gt=0)
    signal_retention: int = Field(default=DEFAULT_SIGNAL_RETENTION, ge=RETENTION_MIN,
                                  le=RETENTION_MAX)
    max_events: int = Field(default=DEFAULT_MAX_EVENTS, ge=RETENTION_MIN, le=RETENTION_MAX)
    ports_json: str = ""
    mounts_json: str = Field(default="", repr=False)
    reasoner_kind: str | None = None
    reasoner_base_url: str | None = None
    reasoner_model: str | None = None
    reasoner_api_key_env: str | None = None
    reasoner_instructions: str | None = None
    max_active_per_host: int = Field(default=DEFAULT_MAX_ACTIVE_PER_HOST, ge=0,
                                     le=MAX_ACTIVE_PER_HOST_MAX)
    max_actors_pss_mib: float = Field(default=DEFAULT_MAX_ACTORS_PSS_MIB, ge=0)
    max_starting_per_host: int = Field(default=DEFAULT_MAX_STARTING_PER_HOST, ge=0,
                                       le=MAX_STARTING_PER_HOST_MAX)

    @field_validator("etcd_endpoints")
    @classmethod
    def _every_member(cls, raw: str) -> str:
        return ",".join(f"{host}:{port}" for host, port in parse_endpoints(raw))

    @field_validator("ports_json", "mounts_json")
    @classmethod
    def _json_block(cls, raw: str, info: ValidationInfo) -> str:
        """``ports_json`` a JSON object, ``mounts_json`` a JSON list; their fields
        are checked by ``svit_cluster.ports.PortsConfig`` and
        ``svit_cluster.mounts.MountsConfig`` when the cluster config is built
        (``ClusterConfig.from_settings``)."""
        if not raw.strip():
            return ""
        doc = json.loads(raw)  # ValueError: reported as "Value error, ..."
        if info.field_name == "ports_json" and not isinstance(doc, dict):
            raise ValueError("must be a JSON object")
        if info.field_name == "mounts_json" and not isinstance(doc, list):
            raise ValueError("must be a JSON list of mount grants")
        return raw

    def mounts(self) -> list[Any]:
        """``mounts_json`` as a list (``[]`` when unset)."""
        return list(json.loads(self.mounts_json)) if self.mounts_json else []

    def ports(self) -> dict[str, Any]:
        """``ports_json`` as a mapping (``{}`` when unset)."""
        return dict(json.loads(self.ports_json)) if self.ports_json else {}

    def reasoner(self) -> dict[str, Any]:
        """The ``SVIT_REASONER_*`` variables that are set, without the prefix."""
        out = {k: getattr(self, f"reasoner_{k}") for k in
               ("kind", "base_url", "model", "api_key_env", "instructions")}
        return {k: v for k, v in out.items() if v is not None}


class GatewaySettings(ClusterSettings):
    """``svit-cluster gateway`` (besides :class:`ClusterSettings`).

    Attributes:
        tokens_file: ``SVIT_TOKENS_FILE``: the bearer tokens JSON file (required
            without ``--state-dir``). Re-read when it changes (Secret rotation).
        max_request_bytes: ``SVIT_MAX_REQUEST_BYTES``: request body cap in bytes
            (>= 1, :data:`DEFAULT_MAX_REQUEST_BYTES`).
        cors_origins: ``SVIT_CORS_ORIGINS``: comma list of browser origins
            (``scheme://host[:port]``, or ``*``) allowed cross-origin access,
            e.g. a web page subscribing to ``/v1/processes/events`` with an
            observe token; empty (default): none. Validated when the gateway
            app is built (:func:`svit_cluster.gateway.parse_origins`).
    """

    tokens_file: str | None = None
    max_request_bytes: int = Field(default=DEFAULT_MAX_REQUEST_BYTES, ge=1)
    cors_origins: Annotated[tuple[str, ...], NoDecode] = ()

    @field_validator("cors_origins", mode="before")
    @classmethod
    def _comma_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(v.strip() for v in value.split(",") if v.strip())
        return value


class AgentSettings(ClusterSettings):
    """``svit-cluster host-agent`` (besides :class:`ClusterSettings`).

    Attributes:
        host_id: ``SVIT_HOST_ID``: this host's name (the pod name). The CLI
            option ``--host-id`` reads the same variable (click ``envvar``, so a
            chart without it fails the CLI-contract test at parse time).
        agent_heartbeat_file: ``SVIT_AGENT_HEARTBEAT_FILE``: the heartbeat file
            the probes read (``svit-cluster healthcheck --heartbeat``).
    """

    host_id: str | None = None
    agent_heartbeat_file: str = DEFAULT_HEARTBEAT_FILE


class DispatcherSettings(StoreSettings, ClientSettings):
    """``svit-cluster dispatcher run`` (options win over these).

    Attributes:
        redis_url: ``SVIT_REDIS_URL``: the commit log's Redis.
        gateway_url: ``SVIT_GATEWAY_URL``: gateway for ``svit://`` destinations
            (else ``SVIT_URL``); ``token`` (``SVIT_TOKEN``) is its admin token.
    """

    redis_url: str | None = None
    gateway_url: str | None = None


class NodeSettings(_Settings):
    r"""Read by the container launcher ``deploy/svit-node.sh`` (a shell script).

    Declared here so the chart's variables have one typed list; the gateway and
    the host agent (which that launcher starts with exec) validate them at start.

    Attributes:
        node_ip: ``SVIT_NODE_IP``: this pod's IP, advertised to Ray.
        gateway_port: ``SVIT_GATEWAY_PORT``: the gateway's listen port
            (``defaults.DEFAULT_GATEWAY_PORT``).
        ray_gcs_port: ``SVIT_RAY_GCS_PORT``: GCS port on the Ray head.
        ray_temp_dir: ``SVIT_RAY_TEMP_DIR``: Ray's temp folder.
        ray_wait_s: ``SVIT_RAY_WAIT_S``: seconds a worker waits for the GCS port.
        ray_object_store_bytes: ``SVIT_RAY_OBJECT_STORE_BYTES``: object store
            size (0: Ray's choice).
        ray_dashboard: ``SVIT_RAY_DASHBOARD``: run the dashboard on the head.
        ray_dashboard_port: ``SVIT_RAY_DASHBOARD_PORT``: its port.
    """

    node_ip: str | None = None
    gateway_port: int = Field(default=DEFAULT_GATEWAY_PORT, ge=1, le=65535)
    ray_gcs_port: int = Field(default=6379, ge=1, le=65535)
    ray_temp_dir: str = "/tmp/ray"
    ray_wait_s: int = Field(default=300, ge=0)
    ray_object_store_bytes: int = Field(default=0, ge=0)
    ray_dashboard: bool = False
    ray_dashboard_port: int = Field(default=8265, ge=1, le=65535)


#: Every settings class; :func:`env_names` lists their variables.
SETTINGS_CLASSES: tuple[type[BaseSettings], ...] = (
    ClientSettings, StoreSettings, ClusterSettings, GatewaySettings, AgentSettings,
    DispatcherSettings, NodeSettings)

S = TypeVar("S", bound=BaseSettings)


def env_names(*classes: type[BaseSettings]) -> set[str]:
    """The ``SVIT_*`` variable names of ``classes`` (default: :data:`SETTINGS_CLASSES`)."""
    return {ENV_PREFIX + name.upper()
            for cls in (classes or SETTINGS_CLASSES) for name in cls.model_fields}


def load_settings(cls: type[S]) -> S:
    """Read ``cls`` from the environment, validated.

    Raises:
        ConfigurationError: a variable does not parse or is out of range; the
            message names the first such variable, its value and the rule, e.g.
            ``SVIT_LEASE_TTL_S='abc': Input should be a valid integer, ...``.
    """
    try:
        return cls()
    except ValidationError as exc:
        first = exc.errors()[0]
        name = ENV_PREFIX + str(first["loc"][0]).upper() if first["loc"] else ENV_PREFIX + "*"
        value = first.get("input")
        # SVIT_MOUNTS_JSON may hold a database DSN with its password: never echoed.
        secret = name == ENV_PREFIX + "MOUNTS_JSON"
        shown = f"={value[:200]!r}" if isinstance(value, str) and not secret else ""
        raise ConfigurationError(f"bad setting {name}{shown}: {first['msg']}") from None


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
        ConfigurationError: no URL anywhere, the cluster file is unreadable, or
            ``state_dir`` holds no ``cluster.json`` (a mistyped ``--state-dir``
            never falls back to ``./.svit``: that would drive another cluster).
    """
    if state_dir is not None:
        path = state_dir / "cluster.json"
        if not path.is_file():
            raise ConfigurationError(
                f"no cluster recorded in {state_dir} (no cluster.json there): check "
                f"--state-dir, or start one with `svit-cluster up --state-dir {state_dir}`")
        file_url, file_token = _from_cluster_json(path)
        url, token = url or file_url, token or file_token
    env = load_settings(ClientSettings)
    url, token = url or env.url, token or env.token
    if state_dir is None and (url is None or token is None):
        file_url, file_token = _from_cluster_json(DEFAULT_CLUSTER_JSON)
        url, token = url or file_url, token or file_token
    if not url:
        raise ConfigurationError(
            "no gateway URL: pass url=/--url, export SVIT_URL, or run in the folder "
            "holding .svit/cluster.json (svit-cluster up)")
    return url, token or None
