"""The embedded local cluster: etcd, Redis, a Ray head, N Ray hosts and the gateway.

:class:`LocalCluster` starts everything on this machine (loopback only), one
component after another, and records each component's PIDs, ports and the
tokens in ``<state_dir>/cluster.json`` so that later commands (``down``,
``kill-host``, ``status``) can act on it by PID.
"""

from __future__ import annotations

import compileall
import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

import svit_cluster
from svit_cluster.cluster import node_memory_bytes
from svit_cluster.defaults import (
    DEFAULT_LEASE_TTL_S,
    DEFAULT_LOCAL_DISPATCHERS,
    DEFAULT_LOCAL_HOSTS,
    DEFAULT_MAX_ACTIVE_PER_HOST,
    DEFAULT_MAX_EVENTS,
    DEFAULT_PASSIVATE_AFTER_S,
    DEFAULT_SIGNAL_RETENTION,
    LEASE_TTL_S_MAX,
    LEASE_TTL_S_MIN,
    LOCAL_CLUSTER,
    LOCAL_DISPATCHERS_MAX,
    LOCAL_HOSTS_MAX,
    MAX_ACTIVE_PER_HOST_MAX,
    RETENTION_MAX,
    RETENTION_MIN,
)
from svit_cluster.errors import ConfigurationError, UnavailableError
from svit_cluster.gateway import DEFAULT_MAX_REQUEST_BYTES
from svit_cluster.local._dispatchers import start_dispatchers, stop_dispatchers
from svit_cluster.local._ray import PortAllocator, RayNode, ray_env, stop_nodes
from svit_cluster.local._rcluster import EtcdClusterServer, RedisClusterServer
from svit_cluster.local._servers import (
    EtcdServer,
    RedisServer,
    pid_alive,
    stop_pid,
    wait_exited,
)
from svit_cluster.mounts import MountsConfig
from svit_cluster.ports import PortsConfig
from svit_cluster.reasoning import ReasonerConfig
from svit_cluster.store import CLUSTER_ENV, DEFAULT_SNAPSHOT_EVERY
from svit_cluster.store.testing import UNFENCED_BACKEND_FACTORY

__all__ = ["ClusterSpec", "LocalCluster"]

Progress = Callable[[str], None]
#: ``(host, etcd_endpoint, redis_url) -> (etcd_endpoint, redis_url)`` for that host.
ProxyFactory = Callable[[str, str, str], tuple[str, str]]


def _precompile() -> None:
    """Write the bytecode of ``svit_cluster`` where it is missing or stale.

    Every active process is a Ray worker that imports our modules; without
    cached bytecode each one compiles them again (with ``PYTHONDONTWRITEBYTECODE``
    set, or an unwritable install, it never caches it) and its heap keeps much
    of the compiler's garbage: 1-3 MiB of PSS per worker. A package that cannot
    be written is left as it is.
    """

    with contextlib.suppress(OSError):
        compileall.compile_dir(str(Path(svit_cluster.__file__).parent), quiet=2)


@dataclass
class ClusterSpec:
    """What ``up`` starts.

    Defaults and ranges are the constants of :mod:`svit_cluster.defaults` that
    the ``up`` options show too; :meth:`validate` checks the ranges.

    Attributes:
        state_dir: all data, logs, Ray temp dirs and ``cluster.json``.
        hosts: number of Ray worker hosts (each one host agent),
            1..``LOCAL_HOSTS_MAX`` (``defaults.DEFAULT_LOCAL_HOSTS``).
        lease_ttl_s: etcd lease TTL of every host, seconds,
            ``LEASE_TTL_S_MIN..LEASE_TTL_S_MAX`` (``defaults.DEFAULT_LEASE_TTL_S``).
        snapshot_every: commits between snapshots (``defaults.DEFAULT_SNAPSHOT_EVERY``).
        passivate_after_s: idle seconds before an actor passivates
            (``defaults.DEFAULT_PASSIVATE_AFTER_S``).
        max_request_bytes: gateway body cap in bytes (``gateway.DEFAULT_MAX_REQUEST_BYTES``).
        cluster: cluster name (etcd prefix ``/svit/<cluster>/``;
            ``defaults.LOCAL_CLUSTER``).
        dispatchers: outbox dispatcher worker processes to start,
            0..``LOCAL_DISPATCHERS_MAX`` (``defaults.DEFAULT_LOCAL_DISPATCHERS``).
        dispatch_options: ``DispatchConfig`` options for them (see svit_cluster.dispatch).
        reasoner: ``ReasonerConfig`` options of every process's reasoning loop
            (``kind``, ``base_url``, ``model``, ``api_key_env``, ``instructions``,
            ...), written to ``cluster.json``; default ``{}`` (simulated). An
            ``api_key`` is refused here: the hosts read the key from the
            variable ``api_key_env`` names, never from ``cluster.json``.
        ports: the deployment's port registry (``svit_cluster.ports.PortsConfig``
            fields: which ports, their allowlists and limits; default ``{}``
            grants nothing). Recorded in ``cluster.json`` for every host.
        mounts: the deployment's mount grants (``svit_cluster.mounts.MountsConfig``:
            a list; default ``[]`` mounts nothing). Recorded in ``cluster.json``
            for every host (use ``dsn_env``, not ``dsn``, for a database
            password: cluster.json is a plain file).
        redis_masters: 0 (default) starts one redis-server; 3 or more start a
            Redis Cluster of that many masters (``up --redis-cluster MxR``).
        redis_replicas: replicas per master of that Redis Cluster (0..4).
        etcd_members: 1 (default) or an odd number >= 3 of etcd members
            (``up --etcd-members 3``).
        max_active_per_host: each host's residency budget of process actors
            (``ClusterConfig.max_active_per_host``, 0..``MAX_ACTIVE_PER_HOST_MAX``;
            0, ``defaults.DEFAULT_MAX_ACTIVE_PER_HOST``, derives it
            from the host's share of this machine: every host's Ray node
            advertises ``cpu_count // hosts`` CPUs (at least 1) and
            ``memory // hosts`` bytes, see :meth:`host_share`).
        signal_retention: observer signals kept per process
            (``ClusterConfig.signal_retention``; ``RETENTION_MIN..RETENTION_MAX``,
            ``defaults.DEFAULT_SIGNAL_RETENTION``).
        max_events: canonical reasoning events kept per session of a process
            (``ClusterConfig.max_events``; ``RETENTION_MIN..RETENTION_MAX``,
            ``defaults.DEFAULT_MAX_EVENTS``).
    """

    state_dir: Path
    hosts: int = DEFAULT_LOCAL_HOSTS
    lease_ttl_s: int = DEFAULT_LEASE_TTL_S
    snapshot_every: int = DEFAULT_SNAPSHOT_EVERY
    passivate_after_s: float = DEFAULT_PASSIVATE_AFTER_S
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    cluster: str = LOCAL_CLUSTER
    dispatchers: int = DEFAULT_LOCAL_DISPATCHERS
    dispatch_options: dict[str, Any] = field(default_factory=dict)
    reasoner: dict[str, Any] = field(default_factory=dict)
    ports: dict[str, Any] = field(default_factory=dict)
    mounts: list[Any] = field(default_factory=list)
    redis_masters: int = 0
    redis_replicas: int = 0
    etcd_members: int = 1
    max_active_per_host: int = DEFAULT_MAX_ACTIVE_PER_HOST
    signal_retention: int = DEFAULT_SIGNAL_RETENTION
    max_events: int = DEFAULT_MAX_EVENTS

    def host_share(self) -> tuple[int, int]:
        """``(cpus, memory_bytes)`` one host's Ray node advertises: this machine
        split evenly between the hosts (every host of a local cluster shares it)."""
        return max(1, (os.cpu_count() or 1) // self.hosts), node_memory_bytes() // self.hosts

    def validate(self) -> ClusterSpec:
        if self.redis_masters not in (0, 1) and not 3 <= self.redis_masters <= 16:
            raise ConfigurationError("a Redis Cluster needs 3..16 masters")
        if not 0 <= self.redis_replicas <= 4 or (self.redis_replicas and self.redis_masters < 3):
            raise ConfigurationError("redis replicas must be 0..4, and need a Redis Cluster")
        if self.etcd_members != 1 and (self.etcd_members < 3 or self.etcd_members % 2 == 0
                                       or self.etcd_members > 7):
            raise ConfigurationError("etcd members must be 1, 3, 5 or 7")
        if not 1 <= self.hosts <= LOCAL_HOSTS_MAX:
            raise ConfigurationError(f"hosts must be in 1..{LOCAL_HOSTS_MAX}")
        if not LEASE_TTL_S_MIN <= self.lease_ttl_s <= LEASE_TTL_S_MAX:
            raise ConfigurationError(
                f"lease TTL must be {LEASE_TTL_S_MIN}..{LEASE_TTL_S_MAX} seconds")
        if self.snapshot_every < 1 or self.passivate_after_s <= 0:
            raise ConfigurationError("snapshot_every and passivate_after_s must be positive")
        if not 0 <= self.dispatchers <= LOCAL_DISPATCHERS_MAX:
            raise ConfigurationError(f"dispatchers must be in 0..{LOCAL_DISPATCHERS_MAX}")
        if not 0 <= self.max_active_per_host <= MAX_ACTIVE_PER_HOST_MAX:
            raise ConfigurationError(
                f"max_active_per_host must be in 0..{MAX_ACTIVE_PER_HOST_MAX} (0: derived)")
        for name in ("signal_retention", "max_events"):
            if not RETENTION_MIN <= getattr(self, name) <= RETENTION_MAX:
                raise ConfigurationError(f"{name} must be in {RETENTION_MIN}..{RETENTION_MAX}")
        if "api_key" in self.reasoner:
            raise ConfigurationError("the reasoner's API key is never written to "
                                     "cluster.json: set api_key_env instead")
        ReasonerConfig.from_dict(self.reasoner)
        PortsConfig.parse(self.ports)
        MountsConfig.parse(self.mounts).check_sources()
        return self


@dataclass
class LocalCluster:
    """A running (or recorded) local cluster; see :meth:`up` and :meth:`load`.

    Attributes:
        redis, etcd: the server handles when this process started the cluster
            (``kill9``/``restart``/``stop`` for fault injection); None after
            :meth:`load`.
        redis_cluster, etcd_cluster: the same for a Redis Cluster
            (``--redis-cluster``) and a multi-member etcd (``--etcd-members``).
    """

    spec: ClusterSpec
    doc: dict[str, Any] = field(default_factory=dict)
    redis: RedisServer | None = None
    etcd: EtcdServer | None = None
    redis_cluster: RedisClusterServer | None = None
    etcd_cluster: EtcdClusterServer | None = None
    _proxy_factory: ProxyFactory | None = field(default=None, repr=False)
    _unsafe_disable_fencing: bool = field(default=False, repr=False)
    #: Held while ``doc`` is written out, and while a host takes its ports and
    #: starts: a chaos harness heals several hosts at once from daemon threads.
    _lock: threading.RLock = field(default_factory=threading.RLock, repr=False,
                                   compare=False)

    @property
    def path(self) -> Path:
        return self.spec.state_dir / "cluster.json"

    # -- up --------------------------------------------------------------------------

    @classmethod
    def up(
        cls,
        spec: ClusterSpec,
        *,
        progress: Progress = lambda _m: None,
        proxy_factory: ProxyFactory | None = None,
        unsafe_disable_fencing: bool = False,
    ) -> LocalCluster:
        """Start every component, wait until healthy, write ``cluster.json``.

        On any failure everything already started is stopped again.

        Args:
            spec: what to start.
            progress: called with one line per step.
            proxy_factory: gives each host its own etcd/Redis endpoints (the
                chaos harness interposes proxies to cut a host off).
            unsafe_disable_fencing: TEST-ONLY negative control: process actors
                commit without the Redis fence check. Only the chaos harness
                passes it; no CLI flag or environment variable reaches it.

        Raises:
            ConfigurationError: a cluster is already recorded in ``state_dir``.
            UnavailableError: a component failed to start (message names it).
        """
        spec.validate()
        state = spec.state_dir.resolve()
        spec.state_dir = state
        state.mkdir(parents=True, exist_ok=True)
        self = cls(spec)
        self._proxy_factory = proxy_factory
        self._unsafe_disable_fencing = unsafe_disable_fencing
        if self.path.exists():
            raise ConfigurationError(
                f"{self.path} exists: run `svit-cluster down --state-dir {state}` first"
            )
        admin = secrets.token_urlsafe(24)
        tenant = secrets.token_urlsafe(24)
        tokens_file = state / "tokens.json"
        tokens_file.write_text(json.dumps({"tokens": [
            {"token": admin, "admin": True}, {"token": tenant, "tenant": "local"},
        ]}))
        tokens_file.chmod(0o600)
        self.doc = {
            "cluster": spec.cluster,
            "state_dir": str(state),
            "lease_ttl_s": spec.lease_ttl_s,
            "snapshot_every": spec.snapshot_every,
            "passivate_after_s": spec.passivate_after_s,
            "max_active_per_host": spec.max_active_per_host,
            "signal_retention": spec.signal_retention,
            "max_events": spec.max_events,
            "max_request_bytes": spec.max_request_bytes,
            "ports": dict(spec.ports),
            "mounts": list(spec.mounts),
            "tokens": {"admin": admin, "local": tenant},
            "reasoner": dict(spec.reasoner),
            "tokens_file": str(tokens_file),
            "hosts": {},
            "started_at": time.time(),
        }
        try:
            self._start_all(progress)
        except BaseException:
            progress("start failed; stopping what was started")
            self.down(progress=progress)
            raise
        self.save()
        return self

    def _start_all(self, progress: Progress) -> None:
        state = self.spec.state_dir
        _precompile()
        ports = PortAllocator()
        etcd_endpoint, redis_url = self._start_stores(state, progress)
        progress("starting Ray head")
        head = RayNode("head", state / "ray", state / "logs" / "ray-head.log", head=True)
        head.start(ports)
        address = f"127.0.0.1:{head.gcs_port}"
        self.doc["ray"] = {"address": address, "head": head.to_json()}
        self.save()
        for i in range(self.spec.hosts):
            name = f"h{i + 1}"
            progress(f"starting Ray host {name}")
            cpus, memory = self.spec.host_share()
            node = RayNode(name, state / "ray", state / "logs" / f"ray-{name}.log",
                           address=address, cpus=cpus, memory_bytes=memory)
            node.start(ports)
            entry = node.to_json()
            if self._proxy_factory is not None:
                etcd_ep, host_redis = self._proxy_factory(name, etcd_endpoint, redis_url)
                entry["endpoints"] = {"etcd": etcd_ep, "redis": host_redis}
            self.doc["hosts"][name] = entry
            self.save()
        # The gateway learns of hosts from etcd as their agents register, so it
        # starts (and connects to Ray) while the agents start.
        progress("starting gateway")
        gw_port = ports.take()
        log = open(state / "logs" / "gateway.log", "ab")
        gateway = subprocess.Popen(
            [sys.executable, "-m", "svit_cluster.cli", "gateway", "--state-dir", str(state),
             "--host", "127.0.0.1", "--port", str(gw_port)],
            stdout=log, stderr=subprocess.STDOUT, env=ray_env(), start_new_session=True,
        )
        url = f"http://127.0.0.1:{gw_port}"
        self.doc["next_port"] = ports.next_port
        self.doc["gateway"] = {"pid": gateway.pid, "url": url, "port": gw_port}
        self.save()
        progress("starting host agents")
        self._run_driver(self._agents_args())
        self.wait_healthy(timeout_s=90.0)
        start_dispatchers(self, self.spec.dispatchers, self.spec.dispatch_options, progress)

    def _start_stores(self, state: Path, progress: Progress) -> tuple[str, str]:
        """Start etcd (one member or a cluster) and Redis (one server or a cluster);
        record them in ``cluster.json``; return ``(etcd endpoints, redis url)``."""
        spec = self.spec
        if spec.etcd_members > 1:
            progress(f"starting etcd cluster ({spec.etcd_members} members)")
            members = EtcdClusterServer(state / "etcd-cluster", members=spec.etcd_members)
            members.start()
            self.etcd_cluster = members
            self.doc["etcd"] = {"endpoint": members.endpoints, "members": [
                {"name": m.name, "pid": m.pid, "endpoint": m.endpoint, "port": m.port,
                 "peer_port": m.peer_port} for m in members.members]}
        else:
            progress("starting etcd")
            etcd = self.etcd = EtcdServer(state)
            etcd.start()
            self.doc["etcd"] = {"pid": etcd.pid, "endpoint": etcd.endpoint, "port": etcd.port}
        self.save()
        if spec.redis_masters >= 3:
            progress(f"starting Redis Cluster ({spec.redis_masters} masters x "
                     f"{spec.redis_replicas} replicas, appendfsync always)")
            rc = RedisClusterServer(state / "redis-cluster", masters=spec.redis_masters,
                                    replicas=spec.redis_replicas)
            rc.start()
            self.redis_cluster = rc
            # Every process this one starts (Ray nodes and their workers, the
            # driver, the gateway, dispatchers) inherits it, so each of their
            # clients is a cluster client (store.connect / async_connect).
            os.environ[CLUSTER_ENV] = "true"
            self.doc["redis"] = {"url": rc.urls, "cluster": True, "nodes": [
                {"name": f"n{i}", "pid": n.pid, "port": n.port, "url": n.url}
                for i, n in enumerate(rc.nodes)]}
        else:
            progress("starting redis-server (appendonly yes, appendfsync always)")
            redis = self.redis = RedisServer(state)
            redis.start()
            self.doc["redis"] = {"pid": redis.pid, "url": redis.url, "port": redis.port}
        self.save()
        return self.doc["etcd"]["endpoint"], self.doc["redis"]["url"]

    def _store_pids(self) -> dict[str, list[tuple[str, int | None]]]:
        """``{"redis": [(name, pid)...], "etcd": [...]}`` of the recorded store processes."""
        out: dict[str, list[tuple[str, int | None]]] = {}
        for svc, many in (("redis", "nodes"), ("etcd", "members")):
            sect = self.doc.get(svc) or {}
            if many in sect:
                out[svc] = [(str(x["name"]), x.get("pid")) for x in sect[many]]
            elif sect:
                out[svc] = [(svc, sect.get("pid"))]
        return out

    def _kill_store(self, svc: str, name: str) -> int:
        procs = dict(self._store_pids().get(svc, []))
        if name not in procs:
            raise ConfigurationError(f"no {svc} {name!r}; have: {', '.join(sorted(procs))}")
        pid = procs[name]
        if pid is None:
            raise ConfigurationError(f"{svc} {name} has no recorded pid")
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        wait_exited([pid])
        return pid

    def kill_redis(self, node: str) -> int:
        """SIGKILL Redis node ``node`` (``n0``.. of a Redis Cluster, or ``redis``).

        A killed master is replaced by its replica (if it has one) after the
        cluster node timeout. Returns the PID signalled, once it has exited.

        Raises:
            ConfigurationError: no such node (the message lists them).
            UnavailableError: it still ran 5 s after SIGKILL.
        """
        return self._kill_store("redis", node)

    def kill_etcd(self, member: str) -> int:
        """SIGKILL etcd member ``member`` (``m0``.. of an etcd cluster, or ``etcd``).

        Returns the PID signalled, once it has exited.

        Raises:
            ConfigurationError: no such member (the message lists them).
            UnavailableError: it still ran 5 s after SIGKILL.
        """
        return self._kill_store("etcd", member)

    def _agents_args(self, *hosts: str) -> list[str]:
        args = ["agents", *(f"host={h}" for h in hosts)]
        if self._unsafe_disable_fencing:
            args.append(f"backend-factory={UNFENCED_BACKEND_FACTORY}")
        return args

    def _run_driver(self, args: list[str]) -> None:
        """Run ``python -m svit_cluster.cluster.bootstrap ARGS`` against this cluster."""
        self.save()
        result = subprocess.run(
            [sys.executable, "-m", "svit_cluster.cluster.bootstrap", str(self.path), *args],
            env=ray_env(), capture_output=True, text=True, timeout=180,
        )
        if result.returncode != 0:
            raise UnavailableError(
                f"bootstrap {' '.join(args)} failed: {(result.stderr or result.stdout)[-800:]}"
            )

    def wait_healthy(self, *, timeout_s: float = 60.0) -> dict[str, Any]:
        """Poll the gateway's ``/healthz`` until every host is live.

        Raises:
            UnavailableError: not healthy within ``timeout_s``.
        """
        url = self.doc["gateway"]["url"] + "/healthz"
        deadline = time.monotonic() + timeout_s
        last: Any = None
        while time.monotonic() < deadline:
            gw = self.doc["gateway"]["pid"]
            if not pid_alive(gw):
                raise UnavailableError("gateway exited; see logs/gateway.log")
            try:
                r = httpx.get(url, timeout=2.0)
                last = r.json()
                if r.status_code == 200 and last.get("hosts_live") == self.spec.hosts:
                    return dict(last)
            except (httpx.HTTPError, ValueError):
                pass
            time.sleep(0.3)
        raise UnavailableError(f"cluster not healthy after {timeout_s} s: {last}")

    def save(self) -> None:
        """Write ``doc`` to ``cluster.json`` atomically (a private temporary file,
        mode 0600, then rename), one writer at a time. The temporary file is
        private to the call: two writers sharing one would make the second
        rename fail with FileNotFoundError (e.g. two hosts healed at once)."""
        with self._lock:
            text = json.dumps(self.doc, indent=2, sort_keys=True)
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".cluster.",
                                       suffix=".tmp")  # mode 0600
            try:
                with os.fdopen(fd, "w") as out:
                    out.write(text)
                os.replace(tmp, self.path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise

    # -- load / down / faults ------------------------------------------------------------

    @classmethod
    def load(cls, state_dir: Path) -> LocalCluster:
        """The cluster recorded in ``state_dir/cluster.json``.

        Raises:
            ConfigurationError: nothing is recorded there.
        """
        path = state_dir.resolve() / "cluster.json"
        if not path.exists():
            raise ConfigurationError(
                f"no cluster in {state_dir}: start one with `svit-cluster up --state-dir "
                f"{state_dir}`"
            )
        doc = json.loads(path.read_text())
        if doc.get("redis", {}).get("cluster"):
            os.environ[CLUSTER_ENV] = "true"  # as in up(): clients we start must know
        spec = ClusterSpec(
            state_dir=state_dir.resolve(),
            hosts=len(doc.get("hosts", {})) or 1,
            lease_ttl_s=doc["lease_ttl_s"],
            snapshot_every=doc["snapshot_every"],
            passivate_after_s=doc["passivate_after_s"],
            max_request_bytes=doc["max_request_bytes"],
            cluster=doc["cluster"],
            ports=dict(doc.get("ports") or {}),
            mounts=list(doc.get("mounts") or []),
            max_active_per_host=int(doc.get("max_active_per_host", DEFAULT_MAX_ACTIVE_PER_HOST)),
            signal_retention=int(doc.get("signal_retention", DEFAULT_SIGNAL_RETENTION)),
            max_events=int(doc.get("max_events", DEFAULT_MAX_EVENTS)),
        )
        return cls(spec, doc)

    def node(self, name: str) -> RayNode:
        """The Ray node of host ``name``.

        Raises:
            ConfigurationError: no such host (the message lists the hosts).
        """
        hosts = self.doc.get("hosts", {})
        if name not in hosts:
            raise ConfigurationError(f"no host {name!r}; hosts: {', '.join(sorted(hosts))}")
        return RayNode.from_json(hosts[name])

    def kill_host(self, name: str) -> list[int]:
        """SIGKILL host ``name``'s raylet and all its worker processes.

        Returns the PIDs signalled, once every one of them has exited (so
        :func:`~svit_cluster.local.cluster_status` shows the host down).

        Raises:
            ConfigurationError: no such host.
            UnavailableError: one of its processes still ran 5 s after SIGKILL.
        """
        return self.node(name).kill()

    def restart_host(self, name: str, *, timeout_s: float = 90.0) -> None:
        """Start host ``name`` again (after :meth:`kill_host`) and its agent.

        Returns once the gateway lists ``name`` as live (other hosts may still be
        paused or cut off), all within ``timeout_s``.

        Raises:
            ConfigurationError: no such host.
            UnavailableError: the node or its agent did not come up, or the host
                was not live within ``timeout_s``.
        """
        old = self.node(name)
        old.kill()  # whatever may be left of it
        node = RayNode(name, old.temp_dir, old.log_path, address=self.doc["ray"]["address"],
                       cpus=old.cpus, memory_bytes=old.memory_bytes)
        kept = self.doc["hosts"][name]
        self._start_host(name, node, timeout_s=timeout_s,
                         extra={"endpoints": kept["endpoints"]} if "endpoints" in kept else {})

    def add_host(self, name: str | None = None, *, timeout_s: float = 90.0) -> str:
        """Start a new Ray host and its agent; returns its name (``h<N+1>`` by default).

        The new host reaches etcd and Redis directly (hosts added later get no
        fault-injection proxy). Returns once the gateway lists it as live.

        Raises:
            ConfigurationError: ``name`` is already a host, or not a plain name.
            UnavailableError: the node or its agent did not come up, or the host
                was not live within ``timeout_s``.
        """
        hosts = self.doc["hosts"]
        if name is None:
            n = len(hosts) + 1
            while f"h{n}" in hosts:
                n += 1
            name = f"h{n}"
        if name in hosts:
            raise ConfigurationError(f"host {name!r} already exists")
        if not name.replace("-", "").replace("_", "").isalnum():
            raise ConfigurationError(f"host name {name!r}: use letters, digits, - and _")
        state = self.spec.state_dir
        cpus, memory = self.spec.host_share()
        node = RayNode(name, state / "ray", state / "logs" / f"ray-{name}.log",
                       address=self.doc["ray"]["address"], cpus=cpus, memory_bytes=memory)
        self._start_host(name, node, timeout_s=timeout_s, extra={})
        return name

    def _start_host(self, name: str, node: RayNode, *, timeout_s: float,
                    extra: dict[str, Any]) -> None:
        """Start ``node``, record it as host ``name`` (plus ``extra`` fields), start its
        agent (retried until ``timeout_s``) and wait until the gateway lists it live.

        Raises:
            UnavailableError: the node or its agent did not come up in time.
        """
        # One host at a time takes ports from next_port and starts its node:
        # two at once took the same range (and Ray wants nodes started one
        # after another). The agent start and the wait below run unlocked.
        with self._lock:
            ports = PortAllocator(base=int(self.doc.get("next_port", 25000)))
            node.start(ports)
            self.doc["next_port"] = ports.next_port
            self.doc["hosts"][name] = {**node.to_json(), **extra}
            self.save()
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self._run_driver(self._agents_args(name))
                break
            except UnavailableError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1.0)
        self.wait_host_live(name, timeout_s=max(1.0, deadline - time.monotonic()))

    def wait_host_live(self, name: str, *, timeout_s: float = 60.0) -> dict[str, Any]:
        """Poll the gateway's ``/healthz`` until host ``name`` is among its live ``hosts``.

        Unlike :meth:`wait_healthy` this ignores the other hosts, so it returns
        while another host is paused, killed or cut off.

        Raises:
            UnavailableError: ``name`` not live within ``timeout_s``, or the
                gateway exited.
        """
        url = self.doc["gateway"]["url"] + "/healthz"
        deadline = time.monotonic() + timeout_s
        last: Any = None
        while True:
            gw = self.doc["gateway"]["pid"]
            if not pid_alive(gw):
                raise UnavailableError("gateway exited; see logs/gateway.log")
            try:
                # /healthz answers 503 while the route cache is not ready: read the body anyway
                r = httpx.get(url, timeout=2.0)
                last = r.json()
                hosts = last.get("hosts") if isinstance(last, dict) else None
                if isinstance(hosts, list) and name in hosts:
                    return dict(last)
            except (httpx.HTTPError, ValueError):
                pass
            if time.monotonic() >= deadline:
                raise UnavailableError(f"host {name} not live after {timeout_s:.0f} s: {last}")
            time.sleep(0.3)

    def pause_host(self, name: str) -> list[int]:
        """SIGSTOP every process of host ``name``."""
        return self.node(name).pause()

    def resume_host(self, name: str) -> list[int]:
        """SIGCONT every process of host ``name``."""
        return self.node(name).resume()

    def down(self, *, progress: Progress = lambda _m: None) -> None:
        """Stop every recorded component by PID, newest first, and forget the cluster."""
        stop_dispatchers(self, progress)
        gw = self.doc.get("gateway")
        if gw:
            progress("stopping gateway")
            stop_pid(gw.get("pid"))
        hosts = sorted(self.doc.get("hosts", {}), reverse=True)
        nodes = [RayNode.from_json(self.doc["hosts"][name]) for name in hosts]
        head = self.doc.get("ray", {}).get("head")
        if head:
            nodes.append(RayNode.from_json(head))
        if nodes:
            # one shared wait for all nodes. Ray does not stop on SIGTERM in any
            # useful time (`ray start --block`, the GCS and the runtime-env agent
            # outlive it by more than 6 s), and a Ray node keeps nothing durable
            # (commits live in Redis, ownership in etcd): SIGKILL after 0.5 s
            progress(f"stopping Ray ({', '.join(hosts + (['head'] if head else []))})")
            stop_nodes(nodes, timeout_s=0.5)
        for svc, procs in self._store_pids().items():
            for name, pid in procs:
                progress(f"stopping {svc} {name}")
                stop_pid(pid)
        if self.path.exists():
            self.path.unlink()
