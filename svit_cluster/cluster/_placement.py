"""Which hosts may be picked, and revoking a dead host's lease.

Placement never picks a host that Ray reports dead or whose agent did not
answer. Two sources, both kept by :class:`HostWatch` in the gateway:

* Ray's node table (``ray.nodes()``, polled every ``poll_s``): a host is dead
  when its registered node id is listed dead, or when nodes carry its
  ``svit_host:<host>`` resource and none of them is alive (Ray empties a dead
  node's resources, so the registered node id is the main evidence);
* failed calls to a host's agent: the host is *suspect* for ``suspect_s``
  seconds (a paused agent, an unreachable node) and placement tries the next.

When Ray declares a node dead, the host's lease need not run out its TTL:
:func:`revoke_dead_leases` revokes it at once. The guard that keeps it from
revoking a live host's lease: the host's registration must name that exact
Ray node id (agents register ``node_id`` next to their host name), Ray must
list that node id as not alive, and no alive node may have that id; and the
lease revoked is the one the registration key is attached to *now*, read from
etcd, not from a cache. A host that restarted has a new node id and a new
registration, so its lease is never touched.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from svit_cluster.cluster._names import agent_name
from svit_cluster.ownership import etcd_call, hosts_prefix

__all__ = ["HostWatch", "NodeTable", "pick_host", "revoke_agentless_leases",
           "revoke_dead_leases"]

log = logging.getLogger(__name__)

_RESOURCE = "svit_host:"


@dataclass(frozen=True)
class NodeTable:
    """Ray's node table, reduced to what placement needs.

    Attributes:
        alive_hosts: hosts with at least one alive node.
        alive_node_ids: hex ids of alive nodes.
        dead_node_ids: hex ids of nodes Ray lists as not alive.
        known_hosts: every host with a node in the table, alive or dead.
    """

    alive_hosts: frozenset[str] = field(default_factory=frozenset)
    alive_node_ids: frozenset[str] = field(default_factory=frozenset)
    dead_node_ids: frozenset[str] = field(default_factory=frozenset)
    known_hosts: frozenset[str] = field(default_factory=frozenset)

    @classmethod
    def parse(cls, nodes: Iterable[Mapping[str, Any]]) -> NodeTable:
        """From ``ray.nodes()`` output (``NodeID``, ``Alive``, ``Resources``)."""
        alive_hosts: set[str] = set()
        known: set[str] = set()
        alive_ids: set[str] = set()
        dead_ids: set[str] = set()
        for node in nodes:
            node_id = str(node.get("NodeID", ""))
            if not isinstance(node.get("Alive"), bool):
                continue  # no verdict in this entry: neither alive nor dead
            alive = bool(node["Alive"])
            hosts = {r[len(_RESOURCE):] for r in (node.get("Resources") or {})
                     if str(r).startswith(_RESOURCE)}
            known |= hosts
            if alive:
                alive_ids.add(node_id)
                alive_hosts |= hosts
            else:
                dead_ids.add(node_id)
        return cls(frozenset(alive_hosts), frozenset(alive_ids),
                   frozenset(dead_ids - alive_ids), frozenset(known))

    def dead_hosts(self) -> frozenset[str]:
        """Hosts Ray knows of with no alive node."""
        return self.known_hosts - self.alive_hosts


def pick_host(load: Mapping[str, int], excluded: Iterable[str] = (), *,
              turn: int = 0) -> str | None:
    """The least-loaded host not in ``excluded``; None if none is left.

    Ties go round: the ``turn``-th (modulo) of the tied hosts in name order,
    so that equally loaded hosts -- all at their residency budget, say -- take
    new processes (and passivate their least recently used ones) in turn,
    rather than one host doing all of it.
    """
    skip = set(excluded)
    candidates = sorted(h for h in load if h not in skip)
    if not candidates:
        return None
    least = min(load[h] for h in candidates)
    tied = [h for h in candidates if load[h] == least]
    return tied[turn % len(tied)]


class HostWatch:
    """Hosts placement must skip: dead per Ray, or suspect after an unanswered call.

    Args:
        suspect_s: how long a host whose agent did not answer is skipped (s).
        clock: monotonic clock in seconds (injectable for tests).
    """

    def __init__(self, *, suspect_s: float = 5.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.suspect_s = suspect_s
        self._clock = clock
        self.table = NodeTable()
        self._dead: frozenset[str] = frozenset()
        self._suspect: dict[str, float] = {}

    def mark_unanswering(self, host: str) -> None:
        """Skip ``host`` for ``suspect_s`` seconds (its agent did not answer)."""
        self._suspect[host] = self._clock() + self.suspect_s

    def clear(self, host: str) -> None:
        """``host``'s agent answered: stop skipping it (Ray's verdict still applies)."""
        self._suspect.pop(host, None)

    def is_dead(self, host: str) -> bool:
        """Whether Ray's node table declared ``host`` dead (last update)."""
        return host in self._dead

    def excluded(self) -> set[str]:
        """Hosts not to place on now."""
        now = self._clock()
        for host, until in list(self._suspect.items()):
            if until <= now:
                del self._suspect[host]
        return set(self._suspect) | set(self._dead)

    def update(self, nodes: Iterable[Mapping[str, Any]],
               registrations: Mapping[str, Mapping[str, Any]] | None = None) -> NodeTable:
        """Take a fresh ``ray.nodes()`` answer.

        ``registrations`` (host -> its registration, with ``node_id``) matter
        because Ray drops a dead node's resources from its table: a host is
        then known dead by its registered node id, not by ``svit_host:<host>``.
        """
        self.table = NodeTable.parse(nodes)
        dead = set(self.table.dead_hosts())
        for host, doc in (registrations or {}).items():
            if str(doc.get("node_id")) in self.table.dead_node_ids:
                dead.add(host)
        self._dead = frozenset(dead)
        return self.table


async def revoke_dead_leases(client: Any, cluster: str, table: NodeTable, *,
                             timeout_s: float = 2.0) -> list[str]:
    """Revoke the lease of every host registered from a node Ray declared dead.

    Reads ``/svit/<cluster>/hosts/`` from etcd (not a cache); a registration is
    acted on only if its ``node_id`` is in ``table.dead_node_ids`` and not in
    ``table.alive_node_ids``; the lease revoked is the one its key is attached to.

    Returns:
        The hosts whose lease was revoked.

    Raises:
        UnavailableError: etcd could not be read (a failed revoke is logged and
            skipped: that lease runs out its TTL).
    """
    if not table.dead_node_ids:
        return []
    got = await etcd_call("get_prefix", client.get_prefix(hosts_prefix(cluster)),
                          timeout_s=timeout_s)
    revoked: list[str] = []
    for kv in got:
        try:
            doc = json.loads(bytes(kv.value))
            node_id = str(doc["node_id"])
        except (ValueError, KeyError, TypeError):
            continue  # no node id registered: no evidence, never revoke
        lease_id = int(getattr(kv, "lease", 0) or 0)
        if (not node_id or lease_id == 0 or node_id not in table.dead_node_ids
                or node_id in table.alive_node_ids):
            continue
        host = bytes(kv.key)[len(hosts_prefix(cluster)):].decode()
        if await _revoke_lease(client, host, lease_id, "dead", f"Ray declared node {node_id} dead",
                               timeout_s=timeout_s):
            revoked.append(host)
    return revoked


async def _revoke_lease(client: Any, host: str, lease_id: int, kind: str, why: str, *,
                        timeout_s: float) -> bool:
    """Revoke ``host``'s etcd lease ``lease_id`` and log the outcome at WARNING.

    ``kind`` names the host in the failure line ("revoking the lease of <kind> host
    <host> failed"), ``why`` the evidence in the success line ("host <host>: <why>;
    revoked its lease <id>"); the cluster tests look for both in the gateway log.

    Returns:
        True when etcd revoked it; False when the revoke failed (logged, never
        raised: that lease then runs out its TTL).
    """
    try:
        await etcd_call("lease_revoke", client.revoke_lease(lease_id),
                        timeout_s=timeout_s, outcome="unknown")
    except Exception as exc:
        log.warning("revoking the lease of %s host %s failed: %s", kind, host, exc)
        return False
    log.warning("host %s: %s; revoked its lease %s", host, why, lease_id)
    return True


#: One thread for the watch's GCS lookups: a lookup the GCS never answers (Ray's
#: actor-table read has no deadline) then holds one thread, not one per round.
_GCS_LOOKUPS = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="svit-gcs-watch")


async def _gcs(fn: Callable[..., Any], *args: Any, timeout_s: float) -> Any:
    """Run the blocking GCS lookup ``fn(*args)`` on the watch's thread, within ``timeout_s``."""
    loop = asyncio.get_running_loop()
    return await asyncio.wait_for(loop.run_in_executor(_GCS_LOOKUPS, fn, *args),
                                  timeout=timeout_s)


def _agent_missing(host: str, namespace: str) -> bool:
    """True when looking up the actor named ``agent:<host>`` failed.

    Only a hint, never evidence: Ray turns EVERY failed name lookup that is not
    a timeout (the GCS answering an error under load, a dropped connection)
    into the same ``ValueError`` as "no such actor" (core worker
    ``GetNamedActorHandle``). The revoke needs :func:`_agent_state` to say DEAD.
    """
    import ray

    try:
        ray.get_actor(agent_name(host), namespace=namespace)
    except ValueError:
        return True
    return False


def _agent_state(actor_id: str) -> str | None:
    """Ray's recorded state of actor ``actor_id`` (hex): ``"ALIVE"``, ``"DEAD"``,
    ``"RESTARTING"``...; None when the GCS did not answer or does not know it."""
    from ray._private import state

    info = state.actors(actor_id=actor_id)
    return str(info.get("State")) if info else None


async def revoke_agentless_leases(client: Any, cluster: str, namespace: str,
                                  hosts: Iterable[str], *, timeout_s: float = 2.0
                                  ) -> list[str]:
    """Revoke the lease of every registered host whose agent actor is dead.

    The agent holds the lease and is the only one that can activate processes
    on its host; when it dies (killed, crashed) its host's lease would run out
    its TTL while the processes wait.

    The guard against revoking a live agent's lease (under a burst of
    activations, lookups fail or time out on hosts that are alive): a failed or
    empty lookup is never evidence. A lease is revoked only when
    Ray's actor table, read after the registration was read from etcd, lists
    the very actor that registered it (the registration's ``actor_id``) as
    DEAD -- a terminal state (agents run with ``max_restarts=0``). A slow,
    busy or unreachable agent is ALIVE there; a registration without an
    ``actor_id`` is never acted on; a restarted agent registers its new lease
    under its new actor id, so a new lease is never touched. The name lookup
    (:func:`_agent_missing`) only decides whether to look closer. A GCS that
    does not answer is no evidence (nothing is revoked).

    Returns:
        The hosts whose lease was revoked.

    Raises:
        UnavailableError: etcd could not be read.
    """
    names = list(hosts)
    missing = []
    for host in names:  # cheap pre-check: usually every agent is there
        if await _gcs(_agent_missing, host, namespace, timeout_s=timeout_s):
            missing.append(host)
    if not missing:
        return []
    prefix = hosts_prefix(cluster)
    got = await etcd_call("get_prefix", client.get_prefix(prefix), timeout_s=timeout_s)
    revoked: list[str] = []
    for kv in got:
        host = bytes(kv.key)[len(prefix):].decode()
        lease_id = int(getattr(kv, "lease", 0) or 0)
        if host not in missing or lease_id == 0:
            continue
        try:
            actor_id = str(json.loads(bytes(kv.value))["actor_id"] or "")
        except (ValueError, KeyError, TypeError):
            actor_id = ""
        if not actor_id:
            continue  # no actor id registered: no evidence, never revoke
        state = await _gcs(_agent_state, actor_id, timeout_s=timeout_s)
        if state != "DEAD":
            log.warning("host %s: agent name lookup failed but its actor %s is %s; "
                        "its lease stays", host, actor_id, state)
            continue
        if await _revoke_lease(client, host, lease_id, "agentless",
                               f"its agent {actor_id} is dead", timeout_s=timeout_s):
            revoked.append(host)
    return revoked


async def watch_nodes(watch: HostWatch, client: Any, cluster: str, *,
                      poll_s: float = 0.5,
                      hosts: Mapping[str, Mapping[str, Any]] | None = None,
                      namespace: str | None = None) -> None:
    """Never dies: poll Ray's node table, update ``watch``, revoke dead hosts' leases.

    ``hosts`` (the route cache's registrations) is only a hint to skip the etcd
    read when no registered node is dead; the revoke itself reads etcd. With
    ``namespace`` (the agents' Ray namespace) and ``hosts``, a registered host
    whose agent actor is gone also has its lease revoked
    (:func:`revoke_agentless_leases`).
    """
    import ray

    while True:
        try:
            await asyncio.sleep(poll_s)
            if namespace is not None and hosts:
                try:
                    await revoke_agentless_leases(client, cluster, namespace, list(hosts))
                except Exception as exc:  # GCS or etcd slow: the next round looks again
                    log.info("agent watch round failed: %s", exc)
            nodes = await _gcs(ray.nodes, timeout_s=5)
            table = watch.update(nodes, hosts)
            if hosts is not None and not any(
                    str(doc.get("node_id")) in table.dead_node_ids for doc in hosts.values()):
                continue
            await revoke_dead_leases(client, cluster, table)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # GCS or etcd unreachable: keep the last verdict
            log.info("node watch round failed: %s", exc)
