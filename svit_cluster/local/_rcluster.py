"""A local Redis Cluster (M masters x R replicas) for tests, benchmarks and ``up``.

Each node is a :class:`~svit_cluster.local.RedisServer` started with
``--cluster-enabled yes`` in its own data directory (``<state_dir>/node-<i>``),
on a free loopback port, with the same durability as a single server
(``appendonly yes``, ``appendfsync always`` by default) and
``maxmemory-policy noeviction`` (svit refuses any other policy). Then
``redis-cli --cluster create ... --cluster-replicas R --cluster-yes`` assigns
the 16384 hash slots to the masters and a replica to each. Every node is
stopped by its own PID; nothing here signals a process it did not start.

A master that is SIGKILLed (:meth:`RedisClusterServer.kill_master_of`) is
replaced by its replica after ``cluster-node-timeout`` (default 1000 ms here)
plus an election; :meth:`RedisClusterServer.wait_for_failover` waits for that.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from svit_cluster.local._servers import (
    _LOOPBACK,
    EtcdServer,
    RedisServer,
    ServerError,
    _Started,
    free_port,
)

__all__ = ["EtcdClusterServer", "EtcdMember", "RedisClusterNode", "RedisClusterServer"]


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((_LOOPBACK, port))
        except OSError:
            return False
    return True


class RedisClusterNode(RedisServer):
    """One ``redis-server --cluster-enabled yes`` node (a :class:`RedisServer`).

    Args:
        state_dir: as for :class:`RedisServer` (``nodes.conf`` lives in its data dir).
        node_timeout_ms: ``cluster-node-timeout``: how long a master may be
            unreachable before its replica is promoted (default 1000 ms).
        appendfsync, startup_timeout_s, die_with_parent: as for :class:`RedisServer`.
    """

    def __init__(self, state_dir: str | os.PathLike[str], *, node_timeout_ms: int = 1000,
                 appendfsync: str = "always", startup_timeout_s: float = 10.0,
                 die_with_parent: bool = False) -> None:
        if node_timeout_ms < 100:
            raise ValueError("node_timeout_ms must be >= 100")
        super().__init__(state_dir, appendfsync=appendfsync,
                         startup_timeout_s=startup_timeout_s, die_with_parent=die_with_parent)
        self.node_timeout_ms = node_timeout_ms

    @property
    def address(self) -> str:
        """``127.0.0.1:<port>``."""
        return f"{_LOOPBACK}:{self.port}"

    def _allocate_ports(self) -> None:
        """A free client port <= 55535 whose cluster bus port (+10000) is free too.

        Redis refuses a cluster node above 55535 ("Cluster communication port
        is 10,000 port numbers higher"), and the kernel's ephemeral range here
        reaches 60999, so :func:`free_port` alone fails about one start in five.
        """
        rng = random.Random()
        for _ in range(200):
            port = rng.randrange(20000, 55536)
            if _bindable(port) and _bindable(port + 10000):
                self.port = port
                return
        raise ServerError("no free port pair (p, p+10000) below 55536 for a Redis Cluster node")

    def _command(self, binary: str) -> list[str]:
        return [
            *super()._command(binary),
            "--cluster-enabled", "yes",
            "--cluster-config-file", "nodes.conf",
            "--cluster-node-timeout", str(self.node_timeout_ms),
            "--maxmemory-policy", "noeviction",
        ]


def _cli(*args: str, timeout_s: float = 30.0) -> str:
    binary = shutil.which("redis-cli")
    if binary is None:
        raise ServerError("redis-cli not found on PATH; install it with "
                          "`apt-get install redis-tools`", binary="redis-cli")
    done = subprocess.run([binary, *args], capture_output=True, text=True, timeout=timeout_s,
                          stdin=subprocess.DEVNULL, check=False)
    if done.returncode != 0:
        raise ServerError(f"redis-cli {' '.join(args[:3])} failed: "
                          f"{(done.stdout + done.stderr)[-600:]}", binary="redis-cli",
                          reason="exited")
    return done.stdout


def _info(node: RedisClusterNode, *command: str) -> str:
    return _cli("-h", _LOOPBACK, "-p", str(node.port), *command, timeout_s=5.0)


class RedisClusterServer(_Started):
    """A local Redis Cluster: ``masters`` masters, each with ``replicas`` replicas.

    Args:
        state_dir: parent directory; node ``i`` lives in ``<state_dir>/node-<i>``.
        masters: number of masters (>= 3, as Redis Cluster requires; default 3).
        replicas: replicas per master (>= 0; default 1).
        appendfsync: every node's AOF fsync policy (default ``"always"``).
        node_timeout_ms: ``cluster-node-timeout`` (default 1000 ms).
        startup_timeout_s: how long :meth:`start` waits for the whole cluster to
            be ``cluster_state:ok`` with every replica in sync (default 60 s).
        die_with_parent: as for :class:`RedisServer`.

    Attributes:
        nodes: every node, masters first (before any failover).
        url: ``redis://127.0.0.1:<port of node 0>/0``: a startup node
            (``redis.cluster.RedisCluster`` discovers the others from it).
    """

    def __init__(self, state_dir: str | os.PathLike[str], *, masters: int = 3,
                 replicas: int = 1, appendfsync: str = "always",
                 node_timeout_ms: int = 1000, startup_timeout_s: float = 60.0,
                 die_with_parent: bool = False) -> None:
        if masters < 3:
            raise ValueError("a Redis Cluster needs at least 3 masters")
        if replicas < 0:
            raise ValueError("replicas must be >= 0")
        self.state_dir = Path(state_dir)
        self.masters = masters
        self.replicas = replicas
        self.startup_timeout_s = startup_timeout_s
        self.nodes = [
            RedisClusterNode(self.state_dir / f"node-{i}", node_timeout_ms=node_timeout_ms,
                             appendfsync=appendfsync, die_with_parent=die_with_parent)
            for i in range(masters * (1 + replicas))
        ]
        self._created = False

    @property
    def url(self) -> str:
        return self.nodes[0].url if self.nodes[0].running else self.live_nodes()[0].url

    @property
    def urls(self) -> str:
        """Every node as startup nodes: ``redis://h:p0,h:p1,.../0`` (``connect``
        still finds the cluster when some of them are down)."""
        return "redis://" + ",".join(n.address for n in self.nodes) + "/0"

    def live_nodes(self) -> list[RedisClusterNode]:
        """The nodes whose server process is running."""
        return [n for n in self.nodes if n.running]

    def start(self) -> None:
        """Start every node, create the cluster once, wait until it is healthy.

        Raises:
            ServerError: a node could not start, ``redis-cli --cluster create``
                failed, or the cluster was not ``ok`` with all replicas in sync
                within ``startup_timeout_s``. Started nodes are stopped first.
        """
        try:
            for node in self.nodes:
                node.start()
            if not self._created:
                _cli("--cluster", "create", *[n.address for n in self.nodes],
                     "--cluster-replicas", str(self.replicas), "--cluster-yes",
                     timeout_s=self.startup_timeout_s)
                self._created = True
            self.wait_healthy(self.startup_timeout_s)
        except BaseException:
            self.stop()
            raise

    def _state(self, node: RedisClusterNode) -> tuple[bool, str, bool]:
        """(cluster_state ok, role, in sync) as ``node`` sees it."""
        info = _info(node, "cluster", "info")
        repl = _info(node, "info", "replication")
        role = "master" if "role:master" in repl else "slave"
        synced = role == "master" or "master_link_status:up" in repl
        return "cluster_state:ok" in info, role, synced

    def wait_healthy(self, timeout_s: float = 30.0) -> None:
        """Wait until every live node sees ``cluster_state:ok`` and every live
        replica's link to its master is up, with ``masters`` masters in total.

        Raises:
            ServerError: (``reason`` ``timeout``) not healthy within ``timeout_s``.
        """
        deadline = time.monotonic() + timeout_s
        last = ""
        while time.monotonic() < deadline:
            try:
                states = [self._state(n) for n in self.live_nodes()]
            except ServerError as exc:
                last = str(exc)
            else:
                masters = sum(1 for _, role, _ in states if role == "master")
                if all(ok and synced for ok, _, synced in states) and masters == self.masters:
                    return
                last = f"states {states}"
            time.sleep(0.1)
        raise ServerError(f"redis cluster not healthy within {timeout_s} s: {last[-400:]}",
                          binary="redis-server", reason="timeout")

    def master_of(self, key: str) -> RedisClusterNode:
        """The live node that is currently master of ``key``'s hash slot.

        Raises:
            ServerError: no live node claims the slot.
        """
        slot = int(_info(self.live_nodes()[0], "cluster", "keyslot", key).strip())
        for node in self.live_nodes():
            if "role:master" not in _info(node, "info", "replication"):
                continue
            for line in _info(node, "cluster", "nodes").splitlines():
                parts = line.split()
                if "myself" not in parts[2]:
                    continue
                for span in parts[8:]:
                    lo, _, hi = span.partition("-")
                    if lo.isdigit() and int(lo) <= slot <= int(hi or lo):
                        return node
        raise ServerError(f"no live master serves slot {slot} of {key!r}",
                          binary="redis-server", reason="no_master")

    def replicas_of(self, master: RedisClusterNode) -> list[RedisClusterNode]:
        """The live nodes that replicate ``master`` (from its ``CLUSTER NODES``)."""
        lines = [line.split() for line in _info(master, "cluster", "nodes").splitlines()]
        me = next(parts[0] for parts in lines if "myself" in parts[2])
        ports = {int(parts[1].split("@")[0].rsplit(":", 1)[1])
                 for parts in lines if parts[3] == me}
        return [n for n in self.live_nodes() if n.port in ports]

    def kill_master_of(self, key: str) -> RedisClusterNode:
        """SIGKILL (by PID) the master of ``key``'s slot; its replica takes over.

        Returns:
            The killed node (``restart()`` brings it back as a replica).
        """
        node = self.master_of(key)
        node.kill9()
        return node

    def wait_for_failover(self, key: str, old: RedisClusterNode,
                          timeout_s: float = 30.0) -> RedisClusterNode:
        """Wait until a live node other than ``old`` is master of ``key``'s slot.

        Raises:
            ServerError: (``reason`` ``timeout``) no promotion within ``timeout_s``.
        """
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                node = self.master_of(key)
                if node is not old and "cluster_state:ok" in _info(node, "cluster", "info"):
                    return node
            except ServerError:
                pass
            time.sleep(0.1)
        raise ServerError(f"no replica promoted for {key!r} within {timeout_s} s",
                          binary="redis-server", reason="timeout")

    def stop(self) -> None:
        """Stop every node by its PID (SIGTERM, then SIGKILL). Safe to repeat."""
        for node in self.nodes:
            node.stop(grace_s=5.0)


class EtcdMember(EtcdServer):
    """One member of an :class:`EtcdClusterServer` (an :class:`EtcdServer` named
    ``name`` that joins ``initial_cluster``).

    Ready once its client port accepts connections: a member alone cannot
    answer ``/health`` before a quorum has elected a leader.
    """

    def __init__(self, state_dir: str | os.PathLike[str], *, name: str,
                 startup_timeout_s: float = 15.0, die_with_parent: bool = False) -> None:
        super().__init__(state_dir, startup_timeout_s=startup_timeout_s,
                         die_with_parent=die_with_parent)
        self.name = name
        self.initial_cluster = ""
        self.port = free_port()
        self.peer_port = free_port()

    @property
    def peer_url(self) -> str:
        return f"http://{_LOOPBACK}:{self.peer_port}"

    def _command(self, binary: str) -> list[str]:
        cmd = super()._command(binary)
        cmd[cmd.index("--name") + 1] = self.name
        cmd[cmd.index("--initial-cluster") + 1] = self.initial_cluster
        return [*cmd, "--election-timeout", "1000", "--heartbeat-interval", "100"]

    def _ready(self) -> bool:
        try:
            with socket.create_connection((_LOOPBACK, self.port), timeout=0.5):
                return True
        except OSError:
            return False

    def status(self) -> dict[str, object]:
        """``/v3/maintenance/status`` of this member (``header.member_id``, ``leader``).

        Raises:
            OSError: the member does not answer.
        """
        req = urllib.request.Request(f"{self.url}/v3/maintenance/status", data=b"{}",
                                     method="POST")
        with urllib.request.urlopen(req, timeout=1.0) as resp:
            doc: dict[str, object] = json.loads(resp.read())
        return doc


class EtcdClusterServer(_Started):
    """A local etcd cluster of ``members`` members on free loopback ports
    (election timeout 1 s, heartbeat 100 ms); each stopped by its own PID.

    Args:
        state_dir: member ``i`` lives in ``<state_dir>/member-<i>``.
        members: 3 (default) or 5; any odd number >= 3.
        startup_timeout_s: how long :meth:`start` waits for a leader (default 30 s).
        die_with_parent: as for :class:`RedisServer`.

    Attributes:
        members: the :class:`EtcdMember` handles.
        endpoints: ``"127.0.0.1:p0,127.0.0.1:p1,..."`` (``SVIT_ETCD_ENDPOINTS``).
    """

    def __init__(self, state_dir: str | os.PathLike[str], *, members: int = 3,
                 startup_timeout_s: float = 30.0, die_with_parent: bool = False) -> None:
        if members < 3 or members % 2 == 0:
            raise ValueError("an etcd cluster needs an odd number >= 3 of members")
        self.state_dir = Path(state_dir)
        self.startup_timeout_s = startup_timeout_s
        self.members = [EtcdMember(self.state_dir / f"member-{i}", name=f"m{i}",
                                   die_with_parent=die_with_parent) for i in range(members)]
        initial = ",".join(f"{m.name}={m.peer_url}" for m in self.members)
        for m in self.members:
            m.initial_cluster = initial

    @property
    def endpoints(self) -> str:
        return ",".join(m.endpoint for m in self.members)

    def start(self) -> None:
        """Start every member and wait until one is leader and all agree on it.

        Raises:
            ServerError: a member did not start, or no leader within
                ``startup_timeout_s``. Started members are stopped first.
        """
        try:
            for m in self.members:
                m.start()
            self.wait_for_leader(self.startup_timeout_s)
        except BaseException:
            self.stop()
            raise

    def leader(self) -> EtcdMember | None:
        """The running member that is leader now (as the running members agree), or None."""
        ids: dict[str, EtcdMember] = {}
        leaders: set[str] = set()
        for m in self.members:
            if not m.running:
                continue
            try:
                doc = m.status()
            except (OSError, urllib.error.URLError, ValueError):
                return None
            header = doc.get("header")
            member_id = str(header.get("member_id")) if isinstance(header, dict) else ""
            ids[member_id] = m
            leaders.add(str(doc.get("leader")))
        if len(leaders) != 1:
            return None
        return ids.get(leaders.pop())

    def wait_for_leader(self, timeout_s: float = 30.0, *,
                        not_: EtcdMember | None = None) -> EtcdMember:
        """Wait until the running members agree on a leader (other than ``not_``).

        Raises:
            ServerError: (``reason`` ``timeout``) no such leader within ``timeout_s``.
        """
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            found = self.leader()
            if found is not None and found is not not_:
                return found
            time.sleep(0.1)
        raise ServerError(f"etcd cluster elected no leader within {timeout_s} s",
                          binary="etcd", reason="timeout")

    def stop(self) -> None:
        """Stop every member by its PID. Safe to repeat."""
        for m in self.members:
            m.stop(grace_s=5.0)
