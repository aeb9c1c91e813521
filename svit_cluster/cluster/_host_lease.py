"""A host agent's etcd lease: joining, the HELD checks, revoking a lost lease.

:class:`AgentLease` is a plain object the :class:`~svit_cluster.cluster.HostAgent`
owns (not a Ray actor). It grants the host's lease through a lease keeper (a
small OS process of its own, :class:`~svit_cluster.ownership.KeptLease`, so
that no load inside the agent can starve the keepalives), registers
``/svit/<cluster>/hosts/<host>`` under it, answers whether a lease is still
this host's HELD lease after an await, and gets a LOST lease revoked at etcd
at once, by this host or in its name by a peer agent.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
from collections.abc import Callable
from typing import Any

from svit_cluster.cluster._config import KEEPER_NICENESS, ClusterConfig
from svit_cluster.cluster._health import HostHealth
from svit_cluster.cluster._names import agent_name
from svit_cluster.errors import UnavailableError
from svit_cluster.ownership import (
    KeptLease,
    LeaseState,
    etcd_call,
    host_key,
    hosts_prefix,
    open_client,
    revoke_lease_id,
)

__all__ = ["AgentLease"]

log = logging.getLogger(__name__)

#: Reasons of earlier lost leases kept for ``status`` (the newest).
LOST_LEASES_KEPT = 10
#: The agent's log line when its lease is lost (``%`` args: host, the reason
#: recorded by :meth:`AgentLease.note_lost`, actors parked). The chaos
#: harness reads the lease id and reason back from it (``svit_chaos.leases``).
LEASE_LOST_LOG = "host %s lost its lease (%s); parking %d actors and rejoining"
#: Seconds a lost lease's etcd client stays open after its keeper stopped: long
#: enough for the revokes started at the loss (2 s each) to end.
RETIRED_CLIENT_CLOSE_S = 10.0


async def _close_client(client: Any) -> None:
    """Close an etcd client, within 2 s, never raising (its channel may be broken)."""
    try:
        await asyncio.wait_for(client.close(), 2.0)
    except Exception:  # a broken or cut-off channel: nothing left to release
        log.debug("closing an etcd client failed", exc_info=True)


def _own_actor_id() -> str | None:
    """Hex id of the Ray actor this code runs in (None outside an actor).

    Outside a connected Ray worker it returns None without touching Ray:
    ``ray.get_runtime_context()`` is one of Ray's auto-init APIs, and would
    start a whole local Ray instance in the calling process (an agent run
    in-process by a test), which then stays that process's Ray connection.
    """
    try:
        import ray

        if not ray.is_initialized():
            return None
        return ray.get_runtime_context().get_actor_id()
    except Exception:  # no Ray runtime: nothing to register
        log.debug("no Ray actor id", exc_info=True)
        return None


class AgentLease:
    """The etcd lease one host agent holds, and what it takes to hold it.

    State: ``lease`` (the current :class:`~svit_cluster.ownership.KeptLease`,
    None before the first join, after a loss until the next join, and after
    shutdown); ``incarnation`` (joins so far); ``lost_leases`` (why each
    earlier lease was lost, the last 10, oldest first); ``health`` (the
    :class:`HostHealth` poller, made on the first join); background revokes of
    lost leases, kept referenced until done.

    Args:
        cfg: the cluster configuration.
        host: this host's name.
        on_state: called with each new :class:`~svit_cluster.ownership.LeaseState`
            of every lease this object grants.
    """

    def __init__(self, cfg: ClusterConfig, host: str,
                 on_state: Callable[[Any], None]) -> None:
        self.cfg = cfg
        self.host = host
        self.lease: Any = None
        self.incarnation = 0
        self.lost_leases: list[str] = []
        self.health: Any = None
        self._on_state = on_state
        self._background: set[asyncio.Task[Any]] = set()
        #: the host record written under the current lease, and its lease
        self._record: dict[str, Any] = {}
        self._record_lease: Any = None

    def spawn(self, coro: Any) -> None:
        """Run ``coro`` as a background task kept referenced until it is done."""
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def note_lost(self) -> Any:
        """Record why the current lease was lost and drop it; returns it (to close)."""
        old, self.lease = self.lease, None
        reason = f"lease {old.lease_id}: {old.lost_reason}"
        self.lost_leases = [*self.lost_leases[-(LOST_LEASES_KEPT - 1):], reason]
        return old

    async def retire(self, old: Any) -> None:
        """Stop the keeper of ``old``, a lease :meth:`note_lost` dropped, and close
        its etcd client once the revokes under way on it (:meth:`revoke_lost`,
        at most about ``RETIRED_CLIENT_CLOSE_S``) are over: each lease has a
        client of its own, and a host that loses its lease now and then for
        months must not keep one connection per loss."""
        try:
            await old.close()
        finally:
            async def later() -> None:
                await asyncio.sleep(RETIRED_CLIENT_CLOSE_S)
                await _close_client(old.client)
            self.spawn(later())

    async def join(self, *, warm: bool = True) -> None:
        """Grant a lease through a new lease keeper and register the host under it.

        ``warm`` goes into the host record: False while the agent's warm spares
        are still starting (a host that just started, or whose spares went);
        the gateways then place new activations on warm hosts first
        (:meth:`publish_warm` sets it once the spares are up).

        The keeper (:class:`~svit_cluster.ownership.KeptLease`) is a process of
        its own at :data:`KEEPER_NICENESS` with its own etcd connection, so
        nothing this agent does can starve the keepalives. It watches this
        agent and the raylet: one gone or stopped revokes the lease at once,
        so a half-dead host's processes move at once instead of after the TTL;
        so does Ray declaring this node dead (:class:`HostHealth` polls the node
        table and reports it to the keeper).

        Raises:
            UnavailableError: the host is unhealthy (no lease is granted), etcd
                could not grant a lease, or the host record could not be
                written under it (that lease is closed).
        """
        if self.health is None:
            self.health = HostHealth.of_this_worker()
            self.health.on_problem = self.report_unhealthy
            self.health.start()
        reason = await asyncio.to_thread(self.health.problem)
        if reason is not None:
            raise UnavailableError(f"host {self.host} cannot serve: {reason}")
        endpoint = self.cfg.etcd_for(self.host)
        client = open_client(endpoint)
        watch = {"agent": os.getpid()}
        if self.health.raylet_pid is not None:
            watch["raylet"] = self.health.raylet_pid
        lease = KeptLease(client, endpoint, ttl_s=self.cfg.lease_ttl_s,
                          safety_margin_s=min(1.0, self.cfg.lease_ttl_s / 4),
                          watch=watch, niceness=KEEPER_NICENESS)
        try:
            await lease.grant()
        except BaseException:
            await _close_client(client)
            raise
        lease.add_listener(self._on_state)
        lease.add_listener(functools.partial(self._on_own_lease, lease))
        # node_id lets a gateway revoke this lease at once when Ray declares
        # exactly this node dead, actor_id when Ray lists exactly this agent
        # actor DEAD (svit_cluster.cluster._placement); nothing else may.
        record = {"host": self.host, "agent": agent_name(self.host),
                  "incarnation": self.incarnation + 1,
                  "node_id": self.health.node_id,
                  "actor_id": _own_actor_id(), "warm": warm}
        try:
            await etcd_call("register host", client.put(host_key(self.cfg.cluster, self.host),
                                                          json.dumps(record).encode(),
                                                          lease=lease.lease_id),
                            timeout_s=5, host=self.host)
        except BaseException:
            await lease.close()
            await _close_client(client)
            raise
        self.lease = lease
        self._record, self._record_lease = record, lease
        self.incarnation += 1
        log.info("host %s joined with lease %s (keeper pid %s)", self.host, lease.lease_id,
                 lease.keeper_pid)

    async def publish_warm(self) -> bool:
        """Mark the host record of the current lease warm (its spares are up),
        once per lease; a failure is logged and the next refill tries again.

        Returns:
            True when the record says warm now.
        """
        return await self.publish(warm=True)

    async def publish(self, **fields: Any) -> bool:
        """Set ``fields`` in the host record of the current lease (``warm``;
        ``active`` and ``spares``, :mod:`svit_cluster.cluster._headroom`); no
        write when the record holds them already. A failure is logged.

        Returns:
            True when the record holds ``fields`` now.
        """
        lease = self.lease
        if lease is None or lease is not self._record_lease:
            return False
        if all(self._record.get(k) == v for k, v in fields.items()):
            return True
        record = {**self._record, **fields}
        try:
            await etcd_call("update host record",
                            lease.client.put(host_key(self.cfg.cluster, self.host),
                                             json.dumps(record).encode(), lease=lease.lease_id),
                            timeout_s=5, host=self.host)
        except UnavailableError as exc:
            log.info("host %s: updating its record (%s) failed: %s", self.host,
                     ", ".join(fields), exc)
            return False
        if self.lease is lease:
            self._record = record
        return True

    async def host_records(self) -> dict[str, dict[str, Any]]:
        """Every live host's record (``/svit/<cluster>/hosts/``), by host name,
        read with the current lease's client; a record that does not parse is
        left out.

        Raises:
            UnavailableError: no lease yet, or etcd could not be read.
        """
        lease = self.lease
        if lease is None:
            raise UnavailableError(f"host {self.host} has no lease yet")
        prefix = hosts_prefix(self.cfg.cluster)
        got = await etcd_call("read host records", lease.client.get_prefix(prefix),
                              timeout_s=5, host=self.host)
        records: dict[str, dict[str, Any]] = {}
        for kv in got:
            try:
                doc = json.loads(bytes(kv.value))
            except ValueError:
                continue
            if isinstance(doc, dict):
                records[bytes(kv.key)[len(prefix):].decode()] = doc
        return records

    def report_unhealthy(self, reason: str) -> None:
        """HostHealth's callback (its poll thread): the keeper revokes the lease."""
        lease = self.lease
        if lease is not None:
            lease.report_unhealthy(reason)

    def problem(self) -> str | None:
        """Why this host cannot serve now (None: healthy, or not checked yet)."""
        return None if self.health is None else self.health.problem()

    def stop_health(self) -> None:
        if self.health is not None:
            self.health.stop()

    # -- HELD checks ---------------------------------------------------------------------

    def held(self) -> Any:
        """This agent's lease, if it is HELD now. Raises UnavailableError otherwise."""
        lease = self.lease
        if lease is None:
            raise UnavailableError(f"host {self.host} has no lease yet")
        lease.ensure_held()
        return lease

    def same(self, lease: Any) -> None:
        """Check, after an await, that ``lease`` is still this agent's lease and HELD.

        Raises:
            UnavailableError: the rejoin loop dropped or replaced it, or it is
                SUSPENDED or LOST.
        """
        if self.lease is not lease:
            raise UnavailableError(f"host {self.host} lost its lease during the activation; "
                                   "retry", lease_state="replaced")
        lease.ensure_held()

    async def while_held(self, lease: Any, awaitable: Any, *, timeout_s: float,
                         check_s: float = 0.2, cancel: bool = True) -> Any:
        """Await ``awaitable`` while ``lease`` stays this agent's HELD lease.

        A half-dead host (raylet stopped, agent running) would otherwise wait up
        to ``timeout_s`` for an actor that can never start there; the lease
        leaves HELD within one keepalive interval of the health check failing,
        and the activation then gives up at once so the gateway places the
        process elsewhere.

        Raises:
            UnavailableError: the lease was lost, replaced or is not HELD (the
                awaitable is cancelled unless ``cancel`` is False).
            TimeoutError: not done within ``timeout_s`` seconds (likewise).
        """
        task = asyncio.ensure_future(awaitable)
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout_s
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=min(check_s, end - loop.time()))
                if done:
                    return task.result()
                self.same(lease)
                if loop.time() >= end:
                    raise TimeoutError(f"no answer within {timeout_s} s")
        finally:
            if cancel and not task.done():
                task.cancel()

    # -- revoking a lost lease -----------------------------------------------------------

    def _on_own_lease(self, lease: Any, state: Any) -> None:
        """When ``lease`` goes LOST without having been revoked, get it revoked at etcd
        now (:meth:`revoke_lost`) instead of letting it run out its TTL there."""
        if state is LeaseState.LOST and not lease.revoked and lease.unhealthy is None:
            # (an unhealthy host's lease revokes itself: HostLease._revoke_unhealthy)
            self.spawn(self.revoke_lost(lease))

    async def revoke_lost(self, lease: Any, *, timeout_s: float = 2.0) -> bool:
        """Get ``lease`` (LOST by this host's clock) revoked at etcd, once.

        A host cut off from etcd finds its lease LOST at its local deadline
        (last keepalive sent + TTL - safety margin) and stops serving (its
        actors are fenced out, then killed by the rejoin loop), but its
        ownership records stay in etcd until etcd expires the lease: up to
        the margin plus one keepalive interval later, plus etcd's own expiry
        scan. So the host revokes it itself and, at the same time, asks every
        peer agent to revoke it in its name (:meth:`revoke_lease_of`); a peer
        that reaches etcd ends it at once and the processes move. Best
        effort: on failure the lease lapses at etcd by TTL.

        Returns:
            True when someone confirmed the lease gone.
        """
        lease_id = lease.lease_id
        if lease_id is None:
            return False

        async def own() -> bool:
            return await revoke_lease_id(lease.client, lease_id, timeout_s=timeout_s)

        async def via(peer: Any) -> bool:
            return bool(await asyncio.wait_for(
                peer.revoke_lease_of.remote(self.host, lease_id), timeout_s + 1))

        try:
            peers = await asyncio.wait_for(asyncio.to_thread(self.peer_agents), timeout_s)
        except Exception as exc:  # Ray's GCS is slow: our own attempt still runs
            log.info("host %s: no peer list (%s)", self.host, exc)
            peers = []
        attempts = [asyncio.ensure_future(own())] + [
            asyncio.ensure_future(via(p)) for p in peers]
        gone = False
        for next_done in asyncio.as_completed(attempts):
            try:
                if await next_done:
                    gone = True
                    break
            except Exception as exc:
                log.info("host %s: a revoke of lost lease %s failed: %s", self.host,
                         lease_id, exc)
        for attempt in attempts:
            attempt.cancel()
        log.warning("host %s: lost lease %s %s", self.host, lease_id,
                    "revoked (by this host or a peer)" if gone
                    else "could not be revoked; it lapses at etcd by TTL")
        return gone

    def peer_agents(self) -> list[Any]:
        """Handles of the other hosts' agents (Ray's GCS; blocking: run in a thread).

        Empty outside a connected Ray worker (``list_named_actors`` would start
        a local Ray instance in this process, see :func:`_own_actor_id`).
        """
        import ray

        if not ray.is_initialized():
            return []
        prefix, mine = agent_name(""), agent_name(self.host)
        peers = []
        for entry in ray.util.list_named_actors(all_namespaces=True):
            name, namespace = str(entry.get("name", "")), entry.get("namespace")
            if namespace != self.cfg.namespace or not name.startswith(prefix) or name == mine:
                continue
            try:
                peers.append(ray.get_actor(name, namespace=namespace))
            except ValueError:
                continue  # gone meanwhile
        return peers

    async def revoke_lease_of(self, host: str, lease_id: int) -> bool:
        """Revoke ``lease_id`` in the name of host ``host``'s agent (see
        :meth:`HostAgent.revoke_lease_of <svit_cluster.cluster.HostAgent.revoke_lease_of>`).

        Raises:
            UnavailableError: etcd could not be reached from here either.
        """
        lease = self.lease
        if lease is None or host == self.host or lease.lease_id == lease_id:
            return False
        gone = await revoke_lease_id(lease.client, lease_id, timeout_s=2.0)
        if gone:
            log.warning("host %s: revoked lost lease %s of host %s in its name",
                        self.host, lease_id, host)
        return gone
