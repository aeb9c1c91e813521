"""The harness's view of a cluster: what it starts, reaches and breaks.

:class:`ChaosCluster` is everything a run needs from a cluster; a
:data:`Launcher` starts one. :func:`local_launcher` starts the embedded
``svit_cluster.local.LocalCluster`` with every host behind its own proxies and
adapts it to :class:`~svit_chaos.target.FaultTarget`.

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
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import psutil
import redis

from svit_cluster.defaults import LOCAL_CLUSTER
from svit_cluster.dispatch.testing import UNSAFE_IGNORE_CANCELS_ENV
from svit_cluster.local import ClusterSpec, LocalCluster, RayNode, ServerError

from .errors import HarnessError
from .load import HostLoad, start_load
from .observer import etcd_host_records, etcd_owners
from .proxy import HubLinks
from .target import FaultTarget, Link

__all__ = [
    "ETCD_MEMBERS",
    "SCALED_TOPOLOGY",
    "TOPOLOGIES",
    "ChaosCluster",
    "LaunchSpec",
    "Launcher",
    "LocalClusterTarget",
    "ScaledStores",
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
        topology: ``"single"`` (one redis-server and ``etcd_members`` etcd
            members, each host behind its own proxies: one per member and one
            for Redis) or ``"scaled"`` (:data:`SCALED_TOPOLOGY`: a Redis
            Cluster of 3 masters x 1 replica and a 3-member etcd; no per-host
            proxies, since a Redis Cluster client follows ``MOVED`` to node
            addresses that a per-host TCP proxy cannot rewrite).
        etcd_members: etcd members of the single topology: 3 (default, as in
            production) or 1 (``kill-etcd`` then stops all of etcd); 1, 3 or 5.
        wait_replicas: ``SVIT_REDIS_WAIT_REPLICAS`` for every process of the
            cluster (``WAIT`` after each write script; None: leave the
            environment as it is, which means 0 = off unless set).
    """

    state_dir: Path
    hosts: int
    lease_ttl_s: int
    snapshot_every: int
    negative_control: bool
    hub: HubLinks[Any]
    progress: Callable[[str], None] = field(default=lambda _m: None)
    ports: dict[str, Any] = field(default_factory=dict)
    topology: str = "single"
    wait_replicas: int | None = None
    etcd_members: int = 3


#: Topologies ``svit-chaos run --topology`` starts.
TOPOLOGIES = ("single", "scaled")
#: etcd members the single topology may run (``--etcd-members``).
ETCD_MEMBERS = (1, 3, 5)
#: The scaled topology's shape: a Redis Cluster and a 3-member etcd.
SCALED_TOPOLOGY = {"redis_masters": 3, "redis_replicas": 1, "etcd_members": 3}


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

#: Seconds a fault aimed at the etcd leader waits for the members to agree on
#: one: several election timeouts (1 s each locally, ``EtcdClusterServer``).
LEADER_WAIT_S = 10.0


def _member_states(ec: Any) -> str:
    """Each member of ``ec`` as ``name: stopped | not answering (error) | leader <id>``."""
    parts = []
    for m in ec.members:
        if not m.running:
            parts.append(f"{m.name}: stopped")
            continue
        try:
            doc = m.status()
        except Exception as exc:  # what it found, whatever it was
            parts.append(f"{m.name}: not answering ({type(exc).__name__}: {exc})")
            continue
        parts.append(f"{m.name}: names leader {doc.get('leader')}")
    return "; ".join(parts)


class ScaledStores:
    """Fault actions on a Redis Cluster and a multi-member etcd (the scaled topology).

    Args:
        redis_cluster: a ``svit_cluster.local.RedisClusterServer`` (or None).
        etcd_cluster: a ``svit_cluster.local.EtcdClusterServer`` (or None).
        on_restart: called ``(service, node port or member name, new pid)``
            after a node or member was started again.

    Every method blocks until done and raises :class:`HarnessError` when the
    topology lacks the store it acts on.
    """

    def __init__(self, redis_cluster: Any, etcd_cluster: Any, *,
                 on_restart: Callable[[str, str, int | None], None] = lambda *_: None) -> None:
        self.redis_cluster = redis_cluster
        self.etcd_cluster = etcd_cluster
        self._on_restart = on_restart

    def _rc(self) -> Any:
        if self.redis_cluster is None:
            raise HarnessError("this cluster has no Redis Cluster (run with --topology "
                               "scaled)", stage="inject")
        return self.redis_cluster

    def _ec(self) -> Any:
        if self.etcd_cluster is None:
            raise HarnessError("this cluster has no multi-member etcd (run with --topology "
                               "scaled)", stage="inject")
        return self.etcd_cluster

    def redis_ready(self) -> bool:
        """Every node runs, sees ``cluster_state:ok``, every replica is in sync, and
        as many masters serve as the cluster was created with."""
        rc = self._rc()
        if len(rc.live_nodes()) != len(rc.nodes):
            return False
        try:
            rc.wait_healthy(timeout_s=0.3)
        except ServerError:
            return False
        return True

    def etcd_ready(self) -> bool:
        """Every member answers ``/health`` and all agree on one leader."""
        ec = self._ec()
        return all(etcd_ready(m.endpoint) for m in ec.members) and ec.leader() is not None

    def kill_redis_master(self, key: str) -> int:
        """SIGKILL the master of ``key``'s hash slot; returns its port.

        Its replica is promoted after ``cluster-node-timeout`` (1 s locally).
        """
        return int(self._rc().kill_master_of(key).port)

    def start_redis_node(self, port: int) -> None:
        """Start the node on ``port`` again: it rejoins as a replica of the promoted one."""
        for node in self._rc().nodes:
            if node.port == port:
                if not node.running:
                    node.start()
                self._on_restart("redis", str(port), node.pid)
                return
        raise HarnessError(f"no Redis Cluster node on port {port}", stage="heal")

    def _member(self, name: str) -> Any:
        for member in self._ec().members:
            if member.name == name:
                return member
        raise HarnessError(f"no etcd member {name!r}", stage="heal")

    def etcd_member(self, role: str) -> str:
        """The name of a running member that is ``role`` (``leader`` or ``follower``).

        Waits up to :data:`LEADER_WAIT_S` for the running members to agree on a
        leader: right after a member was killed or restarted they do not for
        about an election timeout (the survivors still name the dead leader, a
        restarted member does not answer yet), and a fault drawn then is
        injected once the election is over.

        Raises:
            HarnessError: no leader within :data:`LEADER_WAIT_S`; the message
                gives each member's state (stopped, not answering, or the
                leader it names).
        """
        ec = self._ec()
        deadline = time.monotonic() + LEADER_WAIT_S
        leader = ec.leader()
        while leader is None and time.monotonic() < deadline:
            time.sleep(0.1)
            leader = ec.leader()
        if leader is None:
            raise HarnessError(f"the etcd members agreed on no leader within "
                               f"{LEADER_WAIT_S:g} s: {_member_states(ec)}", stage="inject")
        if role == "leader":
            return str(leader.name)
        followers = [m for m in ec.members if m is not leader and m.running]
        if not followers:
            raise HarnessError("no running etcd follower", stage="inject")
        return str(followers[0].name)

    def kill_etcd_member(self, name: str) -> None:
        """SIGKILL etcd member ``name``."""
        self._member(name).kill9()

    def start_etcd_member(self, name: str) -> None:
        """Start etcd member ``name`` again on its data directory and ports."""
        member = self._member(name)
        if not member.running:
            member.start()
        self._on_restart("etcd", name, member.pid)

    def isolate_etcd_member(self, name: str) -> None:
        """Cut etcd member ``name`` off from its peers and every client.

        Done by SIGSTOP: its TCP connections stay open and nothing is answered,
        as in a partition that drops packets. Unlike a real partition the member
        does not run meanwhile, so it cannot campaign and raise its term (which
        etcd 3.4 without pre-vote would do, disturbing the leader when it
        rejoins): this nemesis does not cover that.
        """
        self._member(name).pause()

    def rejoin_etcd_member(self, name: str) -> None:
        """End :meth:`isolate_etcd_member` (SIGCONT)."""
        self._member(name).resume()


class LocalClusterTarget:
    """Adapts a ``LocalCluster`` (plus its proxies) to :class:`FaultTarget`."""

    def __init__(self, cluster: Any, hub: HubLinks[Any], lease_ttl_s: float) -> None:
        self.cluster = cluster
        self.hub = hub
        self._ttl = lease_ttl_s
        #: etcd members killed by kill-etcd(-majority), started again by start_etcd
        self._killed_etcd: list[str] = []
        #: host -> restarts under way (heals run in daemon threads, several at once)
        self._restarting: Counter[str] = Counter()
        self._restarting_lock = threading.Lock()

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
        with self._restarting_lock:
            self._restarting[host] += 1
        try:
            restart(host)
        finally:
            with self._restarting_lock:
                self._restarting[host] -= 1
        return True

    def host_restarting(self, host: str) -> bool:
        """True while a :meth:`restart_host` of ``host`` is under way (its raylet
        may be up while its agent is not yet)."""
        with self._restarting_lock:
            return self._restarting[host] > 0

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
        """SIGKILL etcd: the one server, or with several members the leader only
        (the others elect a new one; :meth:`start_etcd` starts it again)."""
        stores = self._stores()
        if stores.etcd_cluster is None:
            self._server("etcd").kill9()
            return
        name = stores.etcd_member("leader")
        stores.kill_etcd_member(name)
        self._killed_etcd.append(name)

    def kill_etcd_majority(self) -> list[str]:
        """SIGKILL a majority of the etcd members (the leader first): etcd loses
        its quorum. Returns their names; :meth:`start_etcd` starts them again.

        Raises:
            HarnessError: etcd has a single member (use ``kill-etcd``), or the
                members agree on no leader.
        """
        stores = self._stores()
        if stores.etcd_cluster is None:
            raise HarnessError("kill-etcd-majority needs several etcd members "
                               "(--etcd-members 3)", stage="inject")
        members = stores.etcd_cluster.members
        leader = stores.etcd_member("leader")
        names = [leader] + [m.name for m in members if m.name != leader and m.running]
        for name in names[:len(members) // 2 + 1]:
            stores.kill_etcd_member(name)
            self._killed_etcd.append(name)
        return names[:len(members) // 2 + 1]

    def start_etcd(self) -> None:
        """Start what :meth:`kill_etcd` or :meth:`kill_etcd_majority` killed."""
        if self._stores().etcd_cluster is None:
            self._restart("etcd")
            return
        killed, self._killed_etcd = self._killed_etcd, []
        for name in killed:
            self._stores().start_etcd_member(name)

    def service_ready(self, service: str) -> bool:
        doc = self.cluster.doc
        stores = self._stores()
        if service == "redis" and stores.redis_cluster is not None:
            return stores.redis_ready()
        if service == "etcd" and stores.etcd_cluster is not None:
            return stores.etcd_ready()
        if service == "redis":
            return redis_ready(doc["redis"]["url"])
        return etcd_ready(doc["etcd"]["endpoint"])

    # -- the scaled topology: a Redis Cluster and a multi-member etcd ---------------------

    def _stores(self) -> ScaledStores:
        return ScaledStores(getattr(self.cluster, "redis_cluster", None),
                            getattr(self.cluster, "etcd_cluster", None),
                            on_restart=self._record_store_pid)

    def _record_store_pid(self, svc: str, name: str, pid: int | None) -> None:
        """Keep cluster.json's PID of a restarted node or member current."""
        key, many = ("port", "nodes") if svc == "redis" else ("name", "members")
        for entry in (self.cluster.doc.get(svc) or {}).get(many, []):
            if str(entry.get(key)) == name:
                entry["pid"] = pid

    def kill_redis_master(self, key: str) -> int:
        return self._stores().kill_redis_master(key)

    def start_redis_node(self, port: int) -> None:
        self._stores().start_redis_node(port)

    def etcd_member(self, role: str) -> str:
        return self._stores().etcd_member(role)

    def kill_etcd_member(self, name: str) -> None:
        self._stores().kill_etcd_member(name)

    def start_etcd_member(self, name: str) -> None:
        self._stores().start_etcd_member(name)

    def isolate_etcd_member(self, name: str) -> None:
        self._stores().isolate_etcd_member(name)

    def rejoin_etcd_member(self, name: str) -> None:
        self._stores().rejoin_etcd_member(name)

    def link(self, host: str, service: str) -> Link:
        link: Link = self.hub.link(host, service)
        return link

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

    def kill_agent(self, host: str, *, wait_s: float = 2.0) -> list[int]:
        """SIGKILL the worker process running host ``host``'s ``HostAgent`` actor.

        Ray titles an actor's worker ``ray::<Class>`` (``ray::<Class>.<method>``
        while it runs a method). A live host may have no agent worker for a
        moment (one being started); it is looked for during ``wait_s`` seconds.

        Returns:
            The PIDs killed; empty when the host runs no agent worker.
        """
        deadline = time.monotonic() + wait_s
        while True:
            try:
                pids = self._matching(
                    self.cluster.node(host), f"HostAgent worker of {host}",
                    lambda p: " ".join(p.cmdline()).startswith("ray::HostAgent"))
            except HarnessError:
                if time.monotonic() >= deadline:
                    return []
                time.sleep(0.2)
                continue
            return self._signal(pids, signal.SIGKILL)

    def host_processes(self, host: str) -> list[str]:
        """``"<pid> <title>"`` of every process of host ``host``'s node (for a
        fault's detail when it did not find what it looked for)."""
        out = []
        for proc in self._node_procs(self.cluster.node(host)):
            with contextlib.suppress(psutil.Error):
                out.append(f"{proc.pid} {' '.join(proc.cmdline())[:60] or proc.name()}")
        return out

    def term_host(self, host: str) -> list[int]:
        """SIGTERM every process of host ``host`` (``ray start``, raylet, workers)."""
        return self._signal(list(self.cluster.node(host).pids()), signal.SIGTERM)

    def signal_gcs(self, sig: int) -> list[int]:
        """Send ``sig`` to the GCS server of the head node."""
        head = RayNode.from_json(self.cluster.doc["ray"]["head"])
        return self._signal(self._matching(head, "gcs_server",
                                           lambda p: p.name() == "gcs_server"), sig)

    def start_load(self, host: str, *, cpu: int, memory_mib: int) -> HostLoad:
        """Start a ``load-host`` load beside host ``host``'s node (this machine).

        Raises:
            ConfigurationError: no such host, or nothing to load.
        """
        self.cluster.node(host)  # an unknown host raises, naming the hosts
        return start_load(host, cpu=cpu, memory_mib=memory_mib)

    def warm_hosts(self) -> set[str]:
        """The hosts whose agent has its warm spares up now: its record says
        ``warm`` and, when it states them, ``ready`` >= ``spares`` (empty when
        etcd cannot be read)."""
        doc = self.cluster.doc
        try:
            records = etcd_host_records(doc["etcd"]["endpoint"],
                                        str(doc.get("cluster", LOCAL_CLUSTER)))
        except (OSError, ValueError):
            return set()
        warm = set()
        for host, record in records.items():
            ready, target = record.get("ready"), record.get("spares")
            if record.get("warm") is True and (
                    not isinstance(ready, int) or not isinstance(target, int) or ready >= target):
                warm.add(host)
        return warm

    def owner(self, process: str) -> str | None:
        """The host of ``process``'s etcd ownership record (None: none, or etcd down)."""
        doc = self.cluster.doc
        try:
            owners = etcd_owners(doc["etcd"]["endpoint"], str(doc.get("cluster", LOCAL_CLUSTER)))
        except (OSError, ValueError):
            return None
        record = owners.get(process)
        return record[0] if record is not None and record[0] in self.hosts() else None


class _LocalChaosCluster:
    def __init__(self, cluster: Any, hub: HubLinks[Any], lease_ttl_s: float) -> None:
        doc = cluster.doc
        self.cluster = cluster
        self.gateway_url: str = doc["gateway"]["url"]
        self.admin_token: str = doc["tokens"]["admin"]
        self.redis_url: str = doc["redis"]["url"]
        self.etcd_endpoint: str = doc["etcd"]["endpoint"]
        self.cluster_name: str | None = str(doc.get("cluster", LOCAL_CLUSTER))
        self.target: FaultTarget = LocalClusterTarget(cluster, hub, lease_ttl_s)
        self.host_restart = hasattr(cluster, "restart_host")
        #: Redis is a Redis Cluster: connect with ``cluster=True``.
        self.redis_cluster = bool(doc["redis"].get("cluster"))
        self.dispatchers: int = int(getattr(getattr(cluster, "spec", None), "dispatchers", 0))
        self._closed = False
        self._env: dict[str, str | None] | None = None

    def host_names(self) -> list[str]:
        return sorted(self.cluster.doc.get("hosts", {}))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self.cluster.down()
        finally:
            for name in ("redis", "etcd", "redis_cluster", "etcd_cluster"):
                # a server restarted by a nemesis runs under a new PID: stop it by its handle
                server = getattr(self.cluster, name, None)
                if server is not None:
                    with contextlib.suppress(Exception):
                        server.stop()
            if self._env is not None:
                restore_env(self._env)
                self._env = None


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
    params = inspect.signature(LocalCluster.up).parameters
    missing = [k for k in ("proxy_factory", "unsafe_disable_fencing") if k not in params]
    if missing:
        raise HarnessError(f"LocalCluster.up does not accept {', '.join(missing)} yet; the "
                           "chaos harness needs them", stage="start")
    if spec.topology not in TOPOLOGIES:
        raise HarnessError(f"unknown topology {spec.topology!r}; topologies: "
                           f"{', '.join(TOPOLOGIES)}", stage="start")
    scaled = spec.topology == "scaled"
    cluster_spec = ClusterSpec(state_dir=spec.state_dir, hosts=spec.hosts,
                               lease_ttl_s=spec.lease_ttl_s, snapshot_every=spec.snapshot_every,
                               dispatchers=1, dispatch_options=dict(DISPATCH_OPTIONS),
                               ports=dict(spec.ports),
                               redis_masters=SCALED_TOPOLOGY["redis_masters"] if scaled else 0,
                               redis_replicas=SCALED_TOPOLOGY["redis_replicas"] if scaled else 0,
                               etcd_members=SCALED_TOPOLOGY["etcd_members"] if scaled
                               else spec.etcd_members)
    # Ray nodes, their workers, the gateway and the dispatchers inherit the
    # environment at start: WAIT reaches every writer that way.
    # The negative leg's dispatcher ignores committed cancels (test-only switch,
    # read by the dispatcher worker alone): the ``timers`` invariant must catch it.
    env = set_env({WAIT_ENV: None if spec.wait_replicas is None else str(spec.wait_replicas),
                   UNSAFE_IGNORE_CANCELS_ENV: "1" if spec.negative_control else None})
    # LocalCluster.up sets SVIT_REDIS_CLUSTER for a Redis Cluster; undone at close
    env.setdefault("SVIT_REDIS_CLUSTER", os.environ.get("SVIT_REDIS_CLUSTER"))
    up: Any = LocalCluster.up
    try:
        cluster = up(cluster_spec, progress=spec.progress,
                     proxy_factory=None if scaled else spec.hub.factory(),
                     unsafe_disable_fencing=spec.negative_control)
    except Exception as exc:
        restore_env(env)
        raise HarnessError(f"the local cluster did not start: {exc}", stage="start") from exc
    out = _LocalChaosCluster(cluster, spec.hub, spec.lease_ttl_s)
    out._env = env
    return out


#: ``SVIT_REDIS_WAIT_REPLICAS`` (svit_cluster.store.StoreConfig.wait_replicas).
WAIT_ENV = "SVIT_REDIS_WAIT_REPLICAS"


def set_env(values: dict[str, str | None]) -> dict[str, str | None]:
    """Set the variables whose value is not None; return the old values of those set."""
    old: dict[str, str | None] = {}
    for key, value in values.items():
        if value is not None:
            old[key] = os.environ.get(key)
            os.environ[key] = value
    return old


def restore_env(old: dict[str, str | None]) -> None:
    """Undo :func:`set_env`."""
    for key, value in old.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
