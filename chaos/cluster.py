"""The harness's view of a cluster: what it starts, reaches and breaks.

:class:`ChaosCluster` is everything a run needs from a cluster; a
:data:`Launcher` starts one. :func:`local_launcher` starts the embedded
``svit_cluster.local.LocalCluster`` with every host behind its own proxies and
adapts it to :class:`~svit_chaos.nemesis.FaultTarget`.

Hooks relied on in ``LocalCluster`` (also listed in ``chaos/README.md``):

* ``LocalCluster.up(spec, *, progress, proxy_factory, unsafe_disable_fencing)``;
  ``proxy_factory(host, etcd_endpoint, redis_url) -> (etcd_endpoint, redis_url)``
  is called once per host, and every host agent and process actor of that host
  uses the returned endpoints; ``unsafe_disable_fencing=True`` makes process
  actors commit without the fence check (negative control only).
* ``cluster.redis`` / ``cluster.etcd``: the ``RedisServer`` / ``EtcdServer``
  objects (``kill9()``, ``start()``, ``running``) when started in-process.
* ``kill_host(name)``, ``pause_host(name)``, ``resume_host(name)``, ``down()``,
  optionally ``restart_host(name)``; ``doc`` with ``gateway.url``,
  ``tokens.admin``, ``redis.url``, ``etcd.endpoint`` and ``hosts``.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import signal
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import psutil
import redis

from .errors import HarnessError
from .nemesis import FaultTarget, Link
from .proxy import ProxyHub

__all__ = [
    "ChaosCluster",
    "LaunchSpec",
    "Launcher",
    "LocalClusterTarget",
    "etcd_ready",
    "local_launcher",
    "redis_ready",
]


def redis_ready(url: str, *, timeout_s: float = 0.5) -> bool:
    """True if Redis at ``url`` answers ``PING`` (and is done loading its AOF)."""
    client = redis.Redis.from_url(url, socket_timeout=timeout_s,
                                  socket_connect_timeout=timeout_s)
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False
    finally:
        client.close()


def etcd_ready(endpoint: str, *, timeout_s: float = 0.5) -> bool:
    """True if etcd at ``host:port`` reports ``/health`` true."""
    try:
        with urllib.request.urlopen(f"http://{endpoint}/health", timeout=timeout_s) as resp:
            return b'"true"' in resp.read()
    except OSError:
        return False


@dataclass
class LaunchSpec:
    """What to start.

    Attributes:
        state_dir: where the cluster keeps its data and logs.
        hosts: number of hosts.
        lease_ttl_s: host lease TTL in seconds.
        snapshot_every: commits between snapshots.
        negative_control: start with fencing switched off in the process actors.
        hub: the proxy hub (one etcd and one Redis proxy per host).
        progress: status messages while starting.
        ports: the deployment's ports (``svit_cluster.ports.PortsConfig``
            fields; default none granted).
    """

    state_dir: Path
    hosts: int
    lease_ttl_s: int
    snapshot_every: int
    negative_control: bool
    hub: ProxyHub
    progress: Callable[[str], None] = field(default=lambda _m: None)
    ports: dict[str, Any] = field(default_factory=dict)


class ChaosCluster(Protocol):
    """A running cluster as the harness uses it."""

    gateway_url: str
    admin_token: str
    redis_url: str
    etcd_endpoint: str
    #: etcd prefix ``/svit/<cluster_name>/`` of ownership records (None: not in etcd)
    cluster_name: str | None
    target: FaultTarget
    host_restart: bool
    # Optional: ``dispatchers`` (int) -- outbox dispatcher workers running; the
    # run sends intents (invariant 7) only when it is at least 1.

    def host_names(self) -> list[str]: ...

    def close(self) -> None:
        """Stop every process of the cluster (idempotent, never raises)."""
        ...


Launcher = Callable[[LaunchSpec], ChaosCluster]


class LocalClusterTarget:
    """Adapts a ``LocalCluster`` (plus its proxies) to :class:`FaultTarget`."""

    def __init__(self, cluster: Any, hub: ProxyHub, lease_ttl_s: float) -> None:
        self.cluster = cluster
        self.hub = hub
        self._ttl = lease_ttl_s

    @property
    def lease_ttl_s(self) -> float:
        return self._ttl

    def hosts(self) -> list[str]:
        return sorted(self.cluster.doc.get("hosts", {}))

    def kill_host(self, host: str) -> Any:
        return self.cluster.kill_host(host)

    def restart_host(self, host: str) -> bool:
        restart = getattr(self.cluster, "restart_host", None)
        if restart is None:
            return False
        restart(host)
        return True

    def pause_host(self, host: str) -> Any:
        return self.cluster.pause_host(host)

    def resume_host(self, host: str) -> Any:
        return self.cluster.resume_host(host)

    def _server(self, name: str) -> Any:
        server = getattr(self.cluster, name, None)
        if server is None:
            raise HarnessError(f"LocalCluster has no in-process {name} server object "
                               f"(cluster.{name}); cannot kill and restart it", stage="inject")
        return server

    def _restart(self, name: str) -> None:
        server = self._server(name)
        server.start()
        # keep cluster.json's PID current, so ``down`` never signals a stale (reused) PID
        record = self.cluster.doc.get(name)
        if isinstance(record, dict) and "pid" in record:
            record["pid"] = server.pid

    def kill_redis(self) -> None:
        self._server("redis").kill9()

    def start_redis(self) -> None:
        self._restart("redis")

    def kill_etcd(self) -> None:
        self._server("etcd").kill9()

    def start_etcd(self) -> None:
        self._restart("etcd")

    def service_ready(self, service: str) -> bool:
        doc = self.cluster.doc
        if service == "redis":
            return redis_ready(doc["redis"]["url"])
        return etcd_ready(doc["etcd"]["endpoint"])

    def link(self, host: str, service: str) -> Link:
        return self.hub.link(host, service)

    # -- single processes of a node (stop-raylet, kill-agent, term-host, pause-gcs) ---------

    def _node_procs(self, node: Any) -> list[psutil.Process]:
        out = []
        for pid in node.pids():
            with contextlib.suppress(psutil.Error):
                out.append(psutil.Process(pid))
        return out

    @staticmethod
    def _signal(pids: list[int], sig: int) -> list[int]:
        done = []
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
                done.append(pid)
        return done

    def _matching(self, node: Any, what: str, match: Callable[[psutil.Process], bool]
                  ) -> list[int]:
        pids = []
        for proc in self._node_procs(node):
            with contextlib.suppress(psutil.Error):
                if match(proc):
                    pids.append(proc.pid)
        if not pids:
            raise HarnessError(f"no {what} process found", stage="inject")
        return pids

    def signal_raylet(self, host: str, sig: int) -> list[int]:
        """Send ``sig`` to host ``host``'s raylet process only."""
        pids = self._matching(self.cluster.node(host), f"raylet of {host}",
                              lambda p: p.name() == "raylet")
        return self._signal(pids, sig)

    def host_alive(self, host: str) -> bool:
        """True while host ``host``'s node still has a raylet process (even a stopped one)."""
        for proc in self._node_procs(self.cluster.node(host)):
            with contextlib.suppress(psutil.Error):
                if proc.name() == "raylet" and proc.status() != psutil.STATUS_ZOMBIE:
                    return True
        return False

    def kill_agent(self, host: str) -> list[int]:
        """SIGKILL the worker process running host ``host``'s ``HostAgent`` actor.

        Ray titles an actor's worker ``ray::<Class>`` (``ray::<Class>.<method>``
        while it runs a method).
        """
        pids = self._matching(
            self.cluster.node(host), f"HostAgent worker of {host}",
            lambda p: " ".join(p.cmdline()).startswith("ray::HostAgent"))
        return self._signal(pids, signal.SIGKILL)

    def term_host(self, host: str) -> list[int]:
        """SIGTERM every process of host ``host`` (``ray start``, raylet, workers)."""
        return self._signal(list(self.cluster.node(host).pids()), signal.SIGTERM)

    def signal_gcs(self, sig: int) -> list[int]:
        """Send ``sig`` to the GCS server of the head node."""
        from svit_cluster.local import RayNode

        head = RayNode.from_json(self.cluster.doc["ray"]["head"])
        return self._signal(self._matching(head, "gcs_server",
                                           lambda p: p.name() == "gcs_server"), sig)

    def owner(self, process: str) -> str | None:
        """The host of ``process``'s etcd ownership record (None: none, or etcd down)."""
        from .observer import etcd_owners

        doc = self.cluster.doc
        try:
            owners = etcd_owners(doc["etcd"]["endpoint"], str(doc.get("cluster", "local")))
        except (OSError, ValueError):
            return None
        record = owners.get(process)
        return record[0] if record is not None and record[0] in self.hosts() else None


class _LocalChaosCluster:
    def __init__(self, cluster: Any, hub: ProxyHub, lease_ttl_s: float) -> None:
        doc = cluster.doc
        self.cluster = cluster
        self.gateway_url: str = doc["gateway"]["url"]
        self.admin_token: str = doc["tokens"]["admin"]
        self.redis_url: str = doc["redis"]["url"]
        self.etcd_endpoint: str = doc["etcd"]["endpoint"]
        self.cluster_name: str | None = str(doc.get("cluster", "local"))
        self.target: FaultTarget = LocalClusterTarget(cluster, hub, lease_ttl_s)
        self.host_restart = hasattr(cluster, "restart_host")
        self.dispatchers: int = int(getattr(getattr(cluster, "spec", None), "dispatchers", 0))
        self._closed = False

    def host_names(self) -> list[str]:
        return sorted(self.cluster.doc.get("hosts", {}))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self.cluster.down()
        finally:
            for name in ("redis", "etcd"):
                # a server restarted by a nemesis runs under a new PID: stop it by its handle
                server = getattr(self.cluster, name, None)
                if server is not None:
                    with contextlib.suppress(Exception):
                        server.stop()


#: The run's dispatcher outlasts every fault window: many attempts, short pauses.
#: (The defaults, 8 attempts with up to 5 s pauses, dead-letter an intent whose
#: destination's host stays paused or cut off for about half a minute.)
DISPATCH_OPTIONS: dict[str, Any] = {"max_attempts": 200, "retry_max_s": 2.0,
                                    "sink_timeout_s": 5.0, "scan_interval_s": 1.0}


def local_launcher(spec: LaunchSpec) -> ChaosCluster:
    """Start a ``LocalCluster`` whose hosts reach etcd and Redis through ``spec.hub``.

    Raises:
        HarnessError: ``LocalCluster.up`` lacks the ``proxy_factory`` or
            ``unsafe_disable_fencing`` keyword, or the cluster did not start.
    """
    from svit_cluster.local import ClusterSpec, LocalCluster

    params = inspect.signature(LocalCluster.up).parameters
    missing = [k for k in ("proxy_factory", "unsafe_disable_fencing") if k not in params]
    if missing:
        raise HarnessError(f"LocalCluster.up does not accept {', '.join(missing)} yet; the "
                           "chaos harness needs them", stage="start")
    cluster_spec = ClusterSpec(state_dir=spec.state_dir, hosts=spec.hosts,
                               lease_ttl_s=spec.lease_ttl_s, snapshot_every=spec.snapshot_every,
                               dispatchers=1, dispatch_options=dict(DISPATCH_OPTIONS),
                               ports=dict(spec.ports))
    up: Any = LocalCluster.up
    try:
        cluster = up(cluster_spec, progress=spec.progress,
                                  proxy_factory=spec.hub.factory(),
                                  unsafe_disable_fencing=spec.negative_control)
    except Exception as exc:
        raise HarnessError(f"the local cluster did not start: {exc}", stage="start") from exc
    return _LocalChaosCluster(cluster, spec.hub, spec.lease_ttl_s)
