"""Long-running cluster processes: the gateway server and the host-agent launcher."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import logging
import signal
import threading
from pathlib import Path
from typing import Any

from svit_cluster.cluster._config import ClusterConfig
from svit_cluster.cluster._heartbeat import write_heartbeat
from svit_cluster.cluster._names import agent_name
from svit_cluster.errors import ConfigurationError
from svit_cluster.settings import (
    AgentSettings,
    GatewaySettings,
    NodeSettings,
    load_settings,
)

__all__ = ["gateway_server_config", "http_stack", "run_gateway", "run_host_agent",
           "serve_gateway"]

log = logging.getLogger(__name__)


def _load(state_dir: Path | None) -> tuple[ClusterConfig, str, int]:
    """Config, tokens file and body cap from ``cluster.json`` or ``SVIT_*`` variables."""
    if state_dir is not None:
        path = state_dir.resolve() / "cluster.json"
        if not path.exists():
            raise ConfigurationError(f"no cluster.json in {state_dir}")
        doc = json.loads(path.read_text())
        return (ClusterConfig.from_cluster_json(path), doc["tokens_file"],
                int(doc["max_request_bytes"]))
    env = load_settings(GatewaySettings)
    load_settings(NodeSettings)  # the launcher's variables: refuse a bad one at start
    if not env.tokens_file:
        raise ConfigurationError("set SVIT_TOKENS_FILE (or pass --state-dir)")
    return ClusterConfig.from_settings(env), env.tokens_file, env.max_request_bytes


def http_stack() -> tuple[str, str]:
    """The ``(loop, http)`` pair uvicorn should use for the gateway.

    ``("uvloop", "httptools")`` when both are installed (``uvicorn[standard]``, a
    project dependency): the C event loop and HTTP parser instead of the default
    asyncio loop and pure-Python h11, which take a large share of the gateway's
    CPU. Falls back to ``("asyncio", "h11")`` when either is missing
    (e.g. a platform without uvloop wheels), so the gateway still starts.
    """
    if importlib.util.find_spec("uvloop") and importlib.util.find_spec("httptools"):
        return "uvloop", "httptools"
    return "asyncio", "h11"


def gateway_server_config(app: Any, *, host: str, port: int) -> Any:
    """The ``uvicorn.Config`` of the gateway: :func:`http_stack` (its HTTP protocol
    sending each response in one write, :func:`svit_cluster.gateway.coalescing`),
    warnings only, no lifespan."""
    import uvicorn
    from uvicorn.config import HTTP_PROTOCOLS
    from uvicorn.importer import import_from_string

    from svit_cluster.gateway import coalescing

    loop, http = http_stack()
    protocol = coalescing(import_from_string(HTTP_PROTOCOLS[http]))
    return uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="off",
                          loop=loop, http=protocol)


def run_gateway(*, state_dir: Path | None, host: str, port: int,
                max_request_bytes: int | None) -> None:
    """Run :func:`serve_gateway` to completion on the event loop :func:`http_stack` picks.

    Raises:
        ConfigurationError: as :func:`serve_gateway`.
    """
    main = serve_gateway(state_dir=state_dir, host=host, port=port,
                         max_request_bytes=max_request_bytes)
    if http_stack()[0] == "uvloop":
        import uvloop

        uvloop.run(main)
    else:
        asyncio.run(main)


async def serve_gateway(*, state_dir: Path | None, host: str, port: int,
                        max_request_bytes: int | None) -> None:
    """Connect to Ray and etcd, then serve the gateway until interrupted.

    CORS origins come from ``SVIT_CORS_ORIGINS``
    (:class:`svit_cluster.settings.GatewaySettings`).

    Raises:
        ConfigurationError: missing configuration or tokens file; a malformed
            CORS origin.
    """
    import ray
    import uvicorn

    from svit_cluster.cluster._router import RayRouter
    from svit_cluster.cluster._routes import RouteCache
    from svit_cluster.gateway import GatewayMetrics, TokenStore, create_app, parse_origins
    from svit_cluster.ownership import open_client

    config, tokens_file, cap = _load(state_dir)
    tokens = TokenStore.from_file(tokens_file)
    cors = parse_origins(GatewaySettings().cors_origins)  # fail before connecting
    ray.init(address=config.ray_address or "auto", namespace=config.namespace,
             logging_level=logging.ERROR, log_to_driver=False)
    cache = RouteCache(open_client(config.etcd_endpoint), config.cluster).start()
    metrics = GatewayMetrics()
    router = RayRouter(config, cache, metrics)
    router.start_node_watch()
    router.start_inbox_redrive()
    app = create_app(router, tokens, max_request_bytes=max_request_bytes or cap,
                     metrics=metrics, redis_url=config.redis_url, cors_origins=cors)
    server = uvicorn.Server(gateway_server_config(app, host=host, port=port))
    try:
        await server.serve()
    finally:
        await router.close()
        await cache.close()
        ray.shutdown()


def run_host_agent(host_id: str, *, heartbeat_file: str | None = None,
                   period_s: float = 5.0, shutdown_timeout_s: float = 20.0) -> None:
    """Create this node's detached host agent (Kubernetes), then watch it until it dies.

    Every ``period_s`` seconds it asks the agent for its ``status()`` (30 s
    deadline) and rewrites ``heartbeat_file`` (default ``SVIT_AGENT_HEARTBEAT_FILE``
    or ``/tmp/svit-agent-heartbeat.json``), which the pod's probes read with
    ``svit-cluster healthcheck --heartbeat`` (no Ray driver per probe).

    On SIGTERM it asks the agent to release every process and revoke the host
    lease (``HostAgent.shutdown``, at most ``shutdown_timeout_s`` seconds), then
    returns, so the container exits within the pod's termination grace period.

    Raises:
        ray.exceptions.RayError: the agent is gone or did not answer in 30 s,
            so the container exits and restarts.
        OSError: the heartbeat file cannot be written.
    """
    import ray

    from svit_cluster.cluster.bootstrap import start_agents

    env = load_settings(AgentSettings)
    load_settings(NodeSettings)  # the launcher's variables: refuse a bad one at start
    path = heartbeat_file or env.agent_heartbeat_file
    config = ClusterConfig.from_settings(env)
    ray.init(address=config.ray_address or "auto", namespace=config.namespace,
             logging_level=logging.ERROR, log_to_driver=False)
    start_agents(config, [host_id])
    handle = ray.get_actor(agent_name(host_id), namespace=config.namespace)
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda _signo, _frame: stopping.set())
    while not stopping.is_set():
        status: Any = ray.get(handle.status.remote(), timeout=30)
        write_heartbeat(path, status)
        stopping.wait(period_s)
    # SIGTERM (pod deletion, drain): release the processes and revoke the lease
    # so another host serves them now, not after the lease TTL.
    result: Any = ray.get(handle.shutdown.remote("SIGTERM"), timeout=shutdown_timeout_s)
    log.warning("host %s stopped on SIGTERM: %s", host_id, result)

