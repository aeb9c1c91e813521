"""A Ray-free stand-in cluster for end-to-end harness tests.

Real redis-server and etcd, the real gateway app (uvicorn), the real fenced
store (``RedisBackend`` + ``ProcessController``), and N emulated hosts. Each
host reaches Redis through its own proxy from the run's ``ProxyHub`` (exactly
as ``LocalCluster`` hosts will), so link nemeses act on real sockets.

Ownership is emulated the way ``docs/architecture.md`` describes it: a host whose
"lease" is lost (killed, paused or cut from etcd for longer than the TTL)
loses its processes; the next request re-places them on a healthy host with a
higher token, which claims the fence and restores from Redis. The old
controller stays in memory: a paused host's blocked requests run on it when
it resumes -- the zombie the fence must stop.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import redis
import uvicorn
from svit_chaos.cluster import LaunchSpec, ScaledStores, etcd_ready, redis_ready
from svit_chaos.load import HostLoad, start_load
from svit_chaos.proxy import HubLinks, Link, LinkMode

from svit_cluster.control import ControlAnswer, ControlRequest, ProcessController
from svit_cluster.errors import (
    ConflictError,
    FencedError,
    InvalidInput,
    NotFound,
    UnavailableError,
)
from svit_cluster.gateway import create_app
from svit_cluster.local import (
    EtcdClusterServer,
    EtcdServer,
    RedisClusterServer,
    RedisServer,
    free_port,
)
from svit_cluster.process import Process, Script, Value
from svit_cluster.store import RedisBackend, StoreConfig, connect
from tests.chaos._gateway import ADMIN, tokens


@dataclass
class MiniHost:
    name: str
    redis_url: str
    client: redis.Redis
    running: threading.Event = field(default_factory=threading.Event)
    dead: bool = False
    fault_since: float | None = None  # killed, paused or cut from etcd since

    def __post_init__(self) -> None:
        self.running.set()

    def faulted(self) -> bool:
        return self.dead or not self.running.is_set() or self.fault_since is not None

    def lost(self, ttl_s: float) -> bool:
        return self.fault_since is not None and time.monotonic() - self.fault_since > ttl_s


@dataclass
class Owner:
    host: str
    token: int
    ctrl: ProcessController


class StoreRouter:
    """The gateway Router over the fenced store, with emulated ownership."""

    def __init__(self, hosts: dict[str, MiniHost], ttl_s: float, *, negative: bool,
                 snapshot_every: int, ports: dict[str, Any] | None = None) -> None:
        from svit_cluster.ports import PortsConfig, build_registry

        self.hosts = hosts
        grants = PortsConfig.parse(ports or {})
        # One registry per host; a paused host stops right after a port call
        # returned (as SIGSTOP would), so the call's commit comes after resume.
        self.ports = {name: build_registry(grants, on_call=lambda _c, h=h: h.running.wait())
                      for name, h in hosts.items()}
        self.ttl_s = ttl_s
        self.negative = negative
        self.snapshot_every = snapshot_every
        self._owners: dict[str, Owner] = {}
        self._known: set[str] = set()
        self._tokens = itertools.count(1)
        self._lock: asyncio.Lock | None = None

    def _start(self, pid: str, host: MiniHost, token: int,
               create: tuple[Value, dict[str, Script]] | None) -> Owner:
        backend = RedisBackend(host.client, pid, token,
                               StoreConfig(snapshot_every=self.snapshot_every))
        if self.negative:
            from svit_cluster.store.testing import disable_fencing_for_negative_control

            disable_fencing_for_negative_control(backend)
        backend.claim()
        if create is not None:
            proc = Process.create(pid, memory=create[0], scripts=dict(create[1]))
            backend.create(proc)
        else:
            restored = backend.restore()
            if restored is None:
                raise NotFound(f"unknown process {pid}")
            proc = restored
        ctrl = ProcessController(proc, backend, ports=self.ports[host.name], token=token)
        ctrl.grant_ports()
        return Owner(host.name, token, ctrl)

    async def _owner(self, pid: str,
                     create: tuple[Value, dict[str, Script]] | None = None) -> Owner:
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            owner = self._owners.get(pid)
            if create is not None and (owner is not None or pid in self._known):
                raise ConflictError(f"process {pid} already exists")
            if owner is not None and not self.hosts[owner.host].lost(self.ttl_s):
                return owner
            if owner is None and pid not in self._known and create is None:
                raise NotFound(f"unknown process {pid}")
            healthy = [h for h in sorted(self.hosts.values(), key=lambda h: h.name)
                       if not h.faulted()]
            if not healthy:
                raise UnavailableError("no healthy host")
            host = healthy[hash(pid) % len(healthy)]
            new = await asyncio.to_thread(self._start, pid, host, next(self._tokens), create)
            self._owners[pid] = new
            self._known.add(pid)
            return new

    async def _serve(self, pid: str) -> Owner:
        owner = await self._owner(pid)
        host = self.hosts[owner.host]
        while not host.running.is_set():  # a paused host answers nothing
            await asyncio.sleep(0.02)
        if host.dead:
            raise UnavailableError(f"host {host.name} is down")
        return owner

    def _drop(self, pid: str, owner: Owner) -> None:
        if self._owners.get(pid) is owner:
            del self._owners[pid]

    async def control(self, request: ControlRequest, partition: str,
                      body: bytes | None = None) -> ControlAnswer:
        owner = await self._serve(request.process_id)
        try:
            return ControlAnswer.of(
                await asyncio.to_thread(owner.ctrl.execute, request, tenant=partition))
        except FencedError as exc:
            self._drop(request.process_id, owner)
            raise UnavailableError(f"owner fenced: {exc.message}") from exc

    async def create(self, process_id: str, memory: Value,
                     scripts: dict[str, Script]) -> dict[str, Any]:
        owner = await self._owner(process_id, create=(memory, scripts))
        proc = owner.ctrl.process
        return {"process_id": process_id, "version": proc.version, "root_hash": proc.root_hash}

    async def state(self, process_id: str, path: str) -> tuple[Value, int]:
        owner = await self._serve(process_id)
        value, version = owner.ctrl.read_versioned(path)
        return value, version

    async def request_status(self, process_id: str, partition: str, client_id: str,
                             request_id: str) -> dict[str, Any]:
        owner = await self._serve(process_id)
        status = await asyncio.to_thread(owner.ctrl.request_status, client_id, request_id,
                                         tenant=partition)
        return status.to_json()

    async def snapshot(self, process_id: str) -> bytes:
        owner = await self._serve(process_id)
        with owner.ctrl.locked():
            return owner.ctrl.process.snapshot()

    async def fork(self, process_id: str, new_process_id: str) -> dict[str, Any]:
        raise InvalidInput("the mini cluster does not fork processes")

    async def health(self) -> dict[str, Any]:
        return {"ok": True}


class _EtcdLink:
    """The etcd proxy of a host; a cut starts the host's lease clock."""

    def __init__(self, proxy: Link, host: MiniHost) -> None:
        self.proxy = proxy
        self.host = host

    def set_mode(self, mode: LinkMode | str, *, delay_ms: int = 0) -> None:
        self.proxy.set_mode(mode, delay_ms=delay_ms)
        if LinkMode(mode) in (LinkMode.DROP, LinkMode.STALL):
            self.host.fault_since = self.host.fault_since or time.monotonic()
        elif not self.host.dead and self.host.running.is_set():
            self.host.fault_since = None


class MiniTarget:
    def __init__(self, hosts: dict[str, MiniHost], hub: HubLinks[Any], redis_server: Any,
                 etcd_server: Any, ttl_s: float, router: StoreRouter,
                 scaled: ScaledStores | None = None) -> None:
        self.router = router
        self.hosts_ = hosts
        self.hub = hub
        self.redis = redis_server
        self.etcd = etcd_server
        self._ttl = ttl_s
        self.calls: list[str] = []
        self.scaled = scaled

    # the scaled topology: the harness's own actions on the Redis Cluster and etcd members

    def _scaled(self) -> ScaledStores:
        assert self.scaled is not None, "not a scaled mini cluster"
        return self.scaled

    def kill_redis_master(self, key: str) -> int:
        self.calls.append(f"kill redis master of {key}")
        return self._scaled().kill_redis_master(key)

    def start_redis_node(self, port: int) -> None:
        self._scaled().start_redis_node(port)

    def etcd_member(self, role: str) -> str:
        return self._scaled().etcd_member(role)

    def kill_etcd_member(self, name: str) -> None:
        self.calls.append(f"kill etcd {name}")
        self._scaled().kill_etcd_member(name)

    def start_etcd_member(self, name: str) -> None:
        self._scaled().start_etcd_member(name)

    def isolate_etcd_member(self, name: str) -> None:
        self.calls.append(f"isolate etcd {name}")
        self._scaled().isolate_etcd_member(name)

    def rejoin_etcd_member(self, name: str) -> None:
        self._scaled().rejoin_etcd_member(name)

    @property
    def lease_ttl_s(self) -> float:
        return self._ttl

    def hosts(self) -> list[str]:
        return sorted(self.hosts_)

    def kill_host(self, host: str) -> Any:
        self.calls.append(f"kill {host}")
        h = self.hosts_[host]
        h.dead = True
        h.fault_since = time.monotonic()
        h.running.set()
        return []

    def restart_host(self, host: str) -> bool:
        return False

    def pause_host(self, host: str) -> Any:
        self.calls.append(f"pause {host}")
        h = self.hosts_[host]
        h.running.clear()
        h.fault_since = time.monotonic()
        return []

    def resume_host(self, host: str) -> Any:
        self.calls.append(f"resume {host}")
        h = self.hosts_[host]
        h.running.set()
        if not h.dead:
            h.fault_since = None
        return []

    def kill_redis(self) -> None:
        self.calls.append("kill redis")
        self.redis.kill9()

    def start_redis(self) -> None:
        self.redis.start()

    def kill_etcd(self) -> None:
        self.calls.append("kill etcd")
        self.etcd.kill9()

    def start_etcd(self) -> None:
        self.etcd.start()

    def service_ready(self, service: str) -> bool:
        if self.scaled is not None:
            return (self.scaled.redis_ready() if service == "redis"
                    else self.scaled.etcd_ready())
        if service == "redis":
            return redis_ready(self.redis.url)
        return etcd_ready(self.etcd.endpoint)

    def owner(self, process: str) -> str | None:
        owner = self.router._owners.get(process)
        return None if owner is None else owner.host

    def warm_hosts(self) -> set[str]:
        """A mini host has no spares to wait for: every running one is warm."""
        return {name for name, host in self.hosts_.items() if not host.faulted()}

    def start_load(self, host: str, *, cpu: int, memory_mib: int) -> HostLoad:
        self.calls.append(f"load {host}")
        if host not in self.hosts_:
            raise InvalidInput(f"no host {host}")
        return start_load(host, cpu=cpu, memory_mib=memory_mib)

    def link(self, host: str, service: str) -> Any:
        self.calls.append(f"link {host}/{service}")
        proxy = self.hub.link(host, service)
        if service == "etcd":
            return _EtcdLink(proxy, self.hosts_[host])
        return proxy


class MiniCluster:
    """Implements :class:`svit_chaos.cluster.ChaosCluster` (ownership is not in etcd)."""

    host_restart = False
    cluster_name: str | None = None

    def __init__(self, spec: LaunchSpec) -> None:
        # ``--topology scaled``: a Redis Cluster of 3 masters x 1 replica and a
        # 3-member etcd, hosts connected straight to the cluster (no proxies)
        self.scaled = spec.topology == "scaled"
        self.redis_server: Any
        self.etcd_server: Any
        if self.scaled:
            self.redis_server = RedisClusterServer(spec.state_dir / "rc", masters=3, replicas=1,
                                                   die_with_parent=True)
            self.etcd_server = EtcdClusterServer(spec.state_dir / "ec", members=3,
                                                 die_with_parent=True)
        else:
            self.redis_server = RedisServer(spec.state_dir / "servers", die_with_parent=True)
            self.etcd_server = EtcdServer(spec.state_dir / "servers", die_with_parent=True)
        self.redis_cluster = self.scaled
        self._uvicorn: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self.hosts: dict[str, MiniHost] = {}
        # the owners' warnings go to a file under the state dir, as a real host's
        # actor stderr does (the ports workload scans them)
        (spec.state_dir / "logs").mkdir(parents=True, exist_ok=True)
        self._log = logging.FileHandler(spec.state_dir / "logs" / "owners.log")
        self._log.setLevel(logging.WARNING)
        logging.getLogger("svit_cluster").addHandler(self._log)
        try:
            self.redis_server.start()
            self.etcd_server.start()
            make = spec.hub.factory()
            for i in range(spec.hosts):
                name = f"h{i + 1}"
                if self.scaled:
                    url = self.redis_server.urls
                    client = connect(url, timeout_s=1.0, cluster=True)
                else:
                    _, url = make(name, self.etcd_server.endpoint, self.redis_server.url)
                    client = connect(url, timeout_s=1.0)
                self.hosts[name] = MiniHost(name, url, client)
            self.router = StoreRouter(self.hosts, spec.lease_ttl_s, negative=spec.negative_control,
                                      snapshot_every=spec.snapshot_every,
                                      ports=getattr(spec, "ports", None))
            stores = (ScaledStores(self.redis_server, self.etcd_server) if self.scaled
                      else None)
            self.target = MiniTarget(self.hosts, spec.hub, self.redis_server, self.etcd_server,
                                     spec.lease_ttl_s, self.router, stores)
            self._serve()
        except BaseException:
            self.close()
            raise
        self.admin_token = ADMIN
        self.redis_url = self.redis_server.urls if self.scaled else self.redis_server.url
        self.etcd_endpoint = (self.etcd_server.endpoints if self.scaled
                              else self.etcd_server.endpoint)

    def _serve(self) -> None:
        port = free_port()
        server = uvicorn.Server(uvicorn.Config(create_app(self.router, tokens()),
                                               host="127.0.0.1", port=port,
                                               log_level="warning", lifespan="off"))
        self._uvicorn = server
        self._thread = threading.Thread(target=server.run, daemon=True, name="mini-gateway")
        self._thread.start()
        deadline = time.monotonic() + 10
        while not server.started:
            if time.monotonic() > deadline:
                raise UnavailableError("mini gateway did not start")
            time.sleep(0.02)
        self.gateway_url = f"http://127.0.0.1:{port}"

    def host_names(self) -> list[str]:
        return sorted(self.hosts)

    def close(self) -> None:
        if self._uvicorn is not None:
            for h in self.hosts.values():
                h.running.set()  # let blocked requests finish
            self._uvicorn.should_exit = True
            if self._thread is not None:
                self._thread.join(10)
            self._uvicorn = None
        for h in self.hosts.values():
            h.client.close()
        self.redis_server.stop()
        self.etcd_server.stop()
        logging.getLogger("svit_cluster").removeHandler(self._log)
        self._log.close()


def mini_launcher(spec: LaunchSpec) -> MiniCluster:
    return MiniCluster(spec)
