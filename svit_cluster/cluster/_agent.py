"""The control plane on each host: one :class:`HostAgent` Ray actor per Ray node.

The agent holds the host's etcd lease (keepalive in the background), registers
``/svit/<cluster>/hosts/<host>`` under it, and activates processes on demand:
it wins the ownership transaction and claims the Redis fence (token = fence
epoch and create revision; a token below the fence after an etcd restore is
recovered from in the same activation), then starts a
:class:`~svit_cluster.cluster.ProcessActor` pinned to this host with a name
that includes the token, so it can never collide with an earlier owner's actor
still registered on a dead node.

When the lease becomes SUSPENDED the agent fences its actors out (they stop
starting commits); when it is LOST it kills them and rejoins with a fresh lease.
Safety never depends on this: the Redis fence refuses any stale commit.

Keeping actors across a rejoin (issue 15 item 5) is deliberately not done: once
the lease is LOST its ownership keys are gone and another host may already have
claimed the process with a higher token; keeping an actor would mean
re-acquiring under the new lease, claiming a new fence and re-binding the live
actor to the new token (its in-memory state may be behind the log). Instead,
lease loss under load is made rare: keepalives run in their own thread with
their own etcd client (:class:`~svit_cluster.ownership.HostLease`
``keepalive_client``) and activations beyond :data:`DEFAULT_MAX_ACTIVATIONS`
are shed, so the agent's event loop being busy no longer costs the lease.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import time
import uuid
from typing import Any

from svit_cluster.cluster._actor import ProcessActor, error_dict
from svit_cluster.cluster._config import (
    AGENT_NICENESS,
    PROCESS_ACTOR_NICENESS,
    ClusterConfig,
    host_resource,
)
from svit_cluster.cluster._types import Activated, ServedActor, ServeStatus
from svit_cluster.errors import ConflictError, SvitError, UnavailableError
from svit_cluster.ownership import host_key, hosts_prefix

__all__ = ["HostAgent", "actor_name", "agent_name", "hosts_prefix"]

log = logging.getLogger(__name__)

#: Activations one agent runs at once before it sheds new ones with
#: ``unavailable`` (HTTP 503 + ``Retry-After``): each starts or binds a Ray
#: worker, and a burst of them must not starve the host (issue 15 item 5).
DEFAULT_MAX_ACTIVATIONS = 8

#: Seconds between two fallback sweeps of :meth:`HostAgent.reconcile` over the
#: served actors. A dead actor is normally noticed at once by its outstanding
#: ``ProcessActor.watch`` call; the sweep used to be the only check, every 2 s,
#: which made every idle actor answer a Ray call every 2 s (issue 18 item 2).
RECONCILE_SWEEP_S = 30.0

#: Seconds after an activation ends before the agent starts replacing the warm
#: spare it took. A starting Ray worker takes a whole core for about a second;
#: started at once (as before), it ran beside the activation's own Ray calls and
#: etcd/Redis round trips and beside the new owner's first request. Measured on
#: the 2-core development machine, cold activation with a warm spare (agent
#: ``activate`` alone): p50 87 ms -> 29 ms. A spare started at once was not
#: ready sooner than about a second anyway, so a second activation arriving
#: meanwhile loses nothing (issue 18).
SPARE_REFILL_DELAY_S = 0.5


def agent_name(host: str) -> str:
    """Ray name of host ``host``'s agent."""
    return f"agent:{host}"


def actor_name(host: str) -> str:
    """A fresh, never reused Ray name for a process actor on ``host``."""
    return f"svit:{host}:{uuid.uuid4().hex}"


def _own_actor_id() -> str | None:
    """Hex id of the Ray actor this code runs in (None outside an actor)."""
    try:
        import ray

        return ray.get_runtime_context().get_actor_id()
    except Exception:  # no Ray runtime: nothing to register
        log.debug("no Ray actor id", exc_info=True)
        return None


class HostAgent:
    """One host's agent (wrapped with ``ray.remote`` by :func:`start_agents`).

    Args:
        config: :meth:`ClusterConfig.to_dict` output.
        host: this host's name (its Ray node carries the ``svit_host:<host>`` resource).
    """

    def __init__(self, config: dict[str, Any], host: str) -> None:
        self.cfg = ClusterConfig.from_dict(config)
        self.host = host
        self.lease: Any = None
        self.incarnation = 0
        self.actors: dict[str, ServedActor] = {}
        #: Orders suspend/resume notices to actors (an actor drops an older one).
        self._lease_seq = 0
        self._locks: dict[str, asyncio.Lock] = {}
        self._rejoin: asyncio.Task[None] | None = None
        self.activations = 0
        self.started_at = time.time()
        self._spares: list[tuple[str, Any]] = []  # warm, unbound process actors
        self._refilling: asyncio.Task[None] | None = None
        self._refill_timer: asyncio.TimerHandle | None = None
        self._shut_down = False
        self.spare_target = self.cfg.warm_spares
        self._reconcile_task: asyncio.Task[None] | None = None
        #: One task per served actor awaiting its ``watch`` call (see :meth:`_watch`).
        self._watches: dict[str, asyncio.Task[None]] = {}
        self._fence_store: Any = None
        self._health: Any = None  # HostHealth, made on the first join
        #: Bound on activations under way at once; more are shed (issue 15 item 5).
        self.max_activations = DEFAULT_MAX_ACTIVATIONS
        self.inflight_activations = 0
        self.shed_activations = 0
        self._lease_metrics: Any = None
        self._shed_metric: Any = None  # svit_agent_shed_activations_total
        #: Why each earlier lease of this agent was lost (the last 10), oldest first.
        self.lost_leases: list[str] = []
        #: Background tasks (revokes of lost leases) kept referenced until done.
        self._background: set[asyncio.Task[Any]] = set()

    # -- lease ---------------------------------------------------------------------------

    async def start(self) -> dict[str, Any]:
        """Grant the lease, register the host, start the rejoin loop. Idempotent.

        Raises:
            ConfigurationError: the commit log's Redis may evict keys (its
                ``maxmemory-policy`` is not ``noeviction``), or its policy cannot
                be read and ``redis_allow_unverified_eviction_policy`` is off.
                The host does not join. (Redis being unreachable only logs a
                warning: every new connection checks the policy again.)
        """
        if os.nice(0) > AGENT_NICENESS:
            log.warning("host %s's agent runs at niceness %d, not %d: start the Ray node "
                        "with RAY_worker_niceness=%d (deploy/svit-node.sh does), or "
                        "starting workers can starve the lease's keepalives",
                        self.host, os.nice(0), AGENT_NICENESS, AGENT_NICENESS)
        if self.lease is None:
            await asyncio.to_thread(self._check_redis)
            await self._join()
            loop = asyncio.get_running_loop()
            self._rejoin = loop.create_task(self._rejoin_loop())
            self._reconcile_task = loop.create_task(self._reconcile_loop())
            self._shut_down = False
            self._refill()
        return await self.status()

    def _check_redis(self) -> None:
        from svit_cluster.store import verify_eviction_policy

        url = self.cfg.redis_for(self.host)
        try:
            verify_eviction_policy(
                url, allow_unverified=self.cfg.redis_allow_unverified_eviction_policy,
                cluster=self.cfg.redis_cluster)
        except UnavailableError as exc:
            log.warning("could not check the eviction policy of the commit log's Redis: %s",
                        exc)

    # -- warm spares ---------------------------------------------------------------------

    def _new_actor(self) -> tuple[str, Any]:
        import ray

        name = actor_name(self.host)
        remote_cls: Any = ray.remote(ProcessActor)
        handle: Any = remote_cls.options(
            name=name,
            namespace=self.cfg.namespace,
            resources={host_resource(self.host): 1},
            num_cpus=0,
            max_restarts=0,
            max_concurrency=64,
            lifetime="detached",
        ).remote(self.cfg.to_dict(), self.host, "", 0, agent_name(self.host),
                 PROCESS_ACTOR_NICENESS)
        return name, handle

    def _refill(self) -> None:
        self._refill_timer = None
        if self._shut_down:
            return
        if self._refilling is None or self._refilling.done():
            self._refilling = asyncio.get_running_loop().create_task(self._refill_loop())

    async def _refill_loop(self) -> None:
        """Keep ``spare_target`` warm actors; a failure only costs a cold activation.

        The missing spares are started together (one failover can take
        several at once), each in its own thread: creating a named actor waits
        for the GCS, never on the event loop, which must keep serving.
        """
        while (missing := self.spare_target - len(self._spares)) > 0:
            made = await asyncio.gather(*(asyncio.to_thread(self._new_actor)
                                          for _ in range(missing)))
            warmed = await asyncio.gather(
                *(asyncio.wait_for(handle.warm.remote(), timeout=60) for _n, handle in made),
                return_exceptions=True)
            failed = False
            for (name, handle), ok in zip(made, warmed, strict=True):
                if isinstance(ok, BaseException):
                    failed = True
                    self._kill(handle)
                else:
                    self._spares.append((name, handle))
            if failed:
                log.warning("warming a spare actor on %s failed", self.host)
                return

    async def _take_actor(self) -> tuple[str, Any]:
        # The spare is replaced SPARE_REFILL_DELAY_S after the activation that
        # took it has ended (:meth:`activate`), not at once: see that constant.
        if self._spares:
            return self._spares.pop()
        return await asyncio.to_thread(self._new_actor)

    @staticmethod
    def _kill(handle: Any) -> None:
        import ray

        try:
            ray.kill(handle, no_restart=True)
        except Exception:
            log.exception("killing an actor failed")

    async def _join(self) -> None:
        """Grant a lease and register the host under it.

        The lease's keepalives run in their own thread with their own etcd
        client (a busy or blocked agent event loop cannot starve them), and are
        sent only while :class:`HostHealth` finds the raylet running and Ray's
        node table lists this node alive (issue 15 items 1 and 5); the moment
        it does not (checked every 0.2 s), the lease is revoked, so a
        half-dead host's processes move at once instead of after the TTL
        (issue 15 item 2).

        Raises:
            UnavailableError: the host is unhealthy (no lease is granted) or
                etcd could not grant a lease.
        """
        from svit_cluster.cluster._health import HostHealth
        from svit_cluster.ownership import HostLease, LeaseMetrics, open_client

        if self._health is None:
            self._health = HostHealth.of_this_worker()
            self._health.start()
            self._lease_metrics = LeaseMetrics()
            from prometheus_client import Counter

            self._shed_metric = Counter(
                "svit_agent_shed_activations",
                "Activations this host agent refused (503 + Retry-After) because "
                "max_activations were under way.", registry=self._lease_metrics.registry)
        reason = await asyncio.to_thread(self._health.problem)
        if reason is not None:
            raise UnavailableError(f"host {self.host} cannot serve: {reason}")
        endpoint = self.cfg.etcd_for(self.host)
        client = open_client(endpoint)
        lease = HostLease(client, ttl_s=self.cfg.lease_ttl_s,
                          safety_margin_s=min(1.0, self.cfg.lease_ttl_s / 4),
                          keepalive_client=lambda: open_client(endpoint),
                          health_check=self._health.problem,
                          revoke_when_unhealthy=True,
                          metrics=self._lease_metrics)
        await lease.grant()
        lease.add_listener(self._on_lease)
        lease.add_listener(functools.partial(self._on_own_lease, lease))
        # node_id lets a gateway revoke this lease at once when Ray declares
        # exactly this node dead, actor_id when Ray lists exactly this agent
        # actor DEAD (svit_cluster.cluster._placement); nothing else may.
        value = json.dumps({"host": self.host, "agent": agent_name(self.host),
                            "incarnation": self.incarnation + 1,
                            "node_id": self._health.node_id,
                            "actor_id": _own_actor_id()}).encode()
        await asyncio.wait_for(
            client.put(host_key(self.cfg.cluster, self.host), value,
                       lease=lease.lease_id),
            timeout=5,
        )
        self.lease = lease
        self.incarnation += 1
        log.info("host %s joined with lease %s", self.host, lease.lease_id)

    def _on_lease(self, state: Any) -> None:
        """SUSPENDED pauses every actor of the host, HELD resumes them, LOST ends them.

        SUSPENDED is temporary (a keepalive failed, e.g. on an etcd member that
        just died, but the lease cannot have expired yet): closing the actors
        then made the loss of one etcd member an outage of the host (issue 20).
        """
        from svit_cluster.ownership import LeaseState

        self._lease_seq += 1
        seq = self._lease_seq
        for served in list(self.actors.values()):
            if state is LeaseState.LOST:
                served.handle.fence_out.remote(f"host lease {state}")
            elif state is LeaseState.SUSPENDED:
                served.handle.suspend.remote(f"host lease {state}", seq)
            else:
                served.handle.resume.remote(seq)

    def _on_own_lease(self, lease: Any, state: Any) -> None:
        """When ``lease`` goes LOST without having been revoked, get it revoked at etcd
        now (:meth:`_revoke_lost`) instead of letting it run out its TTL there."""
        from svit_cluster.ownership import LeaseState

        if state is LeaseState.LOST and not lease.revoked and lease.unhealthy is None:
            # (an unhealthy host's lease revokes itself: HostLease._revoke_unhealthy)
            task = asyncio.get_running_loop().create_task(self._revoke_lost(lease))
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    async def _revoke_lost(self, lease: Any, *, timeout_s: float = 2.0) -> bool:
        """Get ``lease`` (LOST by this host's clock) revoked at etcd, once.

        A host cut off from etcd finds its lease LOST at its local deadline
        (last keepalive sent + TTL - safety margin) and stops serving (its
        actors are fenced out, then killed by the rejoin loop), but its
        ownership records stay in etcd until etcd expires the lease: up to
        the margin plus one keepalive interval later, plus etcd's own expiry
        scan. So the host revokes it itself and, at the same time, asks every
        peer agent to revoke it in its name (:meth:`revoke_lease_of`); a peer
        that reaches etcd ends it at once and the processes move (issue 15
        item 3). Best effort: on failure the lease lapses at etcd by TTL.

        Returns:
            True when someone confirmed the lease gone.
        """
        from svit_cluster.ownership import revoke_lease_id

        lease_id = lease.lease_id
        if lease_id is None:
            return False

        async def own() -> bool:
            return await revoke_lease_id(lease.client, lease_id, timeout_s=timeout_s)

        async def via(peer: Any) -> bool:
            return bool(await asyncio.wait_for(
                peer.revoke_lease_of.remote(self.host, lease_id), timeout_s + 1))

        try:
            peers = await asyncio.wait_for(asyncio.to_thread(self._peer_agents), timeout_s)
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

    def _peer_agents(self) -> list[Any]:
        """Handles of the other hosts' agents (Ray's GCS; blocking: run in a thread)."""
        import ray

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
        """Revoke ``lease_id`` in the name of host ``host``'s agent, which found it
        LOST but may not reach etcd itself (see :meth:`_revoke_lost`).

        Only the holder asks, and only for a lease that is LOST for it (terminal:
        it has stopped serving and will join again with a new lease), so no live
        host's lease is touched; this agent never revokes its own lease here.

        Returns:
            True when the lease is gone now; False when this agent has no
            lease (its etcd client may be cut off too) or was asked for its own.

        Raises:
            UnavailableError: etcd could not be reached from here either.
        """
        from svit_cluster.ownership import revoke_lease_id

        lease = self.lease
        if lease is None or host == self.host or lease.lease_id == lease_id:
            return False
        gone = await revoke_lease_id(lease.client, lease_id, timeout_s=2.0)
        if gone:
            log.warning("host %s: revoked lost lease %s of host %s in its name",
                        self.host, lease_id, host)
        return gone

    async def _rejoin_loop(self) -> None:
        """Never dies: after LOST, kill every actor and join again with a new lease."""
        from svit_cluster.ownership import LeaseState

        while True:
            try:
                await asyncio.sleep(0.25)
                if self.lease is not None and self.lease.state is LeaseState.LOST:
                    reason = f"lease {self.lease.lease_id}: {self.lease.lost_reason}"
                    self.lost_leases = [*self.lost_leases[-9:], reason]
                    log.warning("host %s lost its lease (%s); dropping %d actors and "
                                "rejoining", self.host, reason, len(self.actors))
                    self._kill_all("lease lost")
                    old, self.lease = self.lease, None
                    try:
                        await old.close()
                    except Exception:
                        log.exception("closing the old lease failed")
                if self.lease is None:
                    await self._join()
            except asyncio.CancelledError:
                raise
            except UnavailableError as exc:  # unhealthy host or etcd down: expected
                log.warning("host %s cannot rejoin yet: %s", self.host, exc)
                await asyncio.sleep(0.5)
            except Exception:
                log.exception("host %s rejoin round failed; retrying", self.host)
                await asyncio.sleep(0.5)

    def _kill_all(self, reason: str) -> None:
        import ray

        for served in list(self.actors.values()):
            try:
                ray.kill(served.handle, no_restart=True)
            except Exception:
                log.exception("killing an actor failed (%s)", reason)
        self.actors.clear()

    # -- activation ----------------------------------------------------------------------

    async def activate(self, process_id: str, create: dict[str, Any] | None = None
                       ) -> dict[str, Any]:
        """Own ``process_id`` and start its actor here (single-flight per process).

        At most :attr:`max_activations` activations of processes not served
        here yet run at once; beyond that the call is shed at once with an
        ``unavailable`` error dict (``fields["overloaded"]`` true).

        Returns:
            ``{"status": "serving", "actor", "host", "token", ...}``;
            ``{"status": "owned", "host", "token"}`` when another host owns it;
            or an error dict (``not_found``, ``conflict``, ``unavailable``, ...).
        """
        new = create is not None or process_id not in self.actors
        if new:
            if self.inflight_activations >= self.max_activations:
                # Shed before the host risks its lease: the gateway tries another
                # host, or answers 503 with Retry-After.
                self.shed_activations += 1
                if self._shed_metric is not None:
                    self._shed_metric.inc()
                return error_dict(UnavailableError(
                    f"host {self.host} is overloaded ({self.inflight_activations} "
                    "activations under way); retry", overloaded=True,
                    inflight=self.inflight_activations))
            self.inflight_activations += 1
        try:
            lock = self._locks.setdefault(process_id, asyncio.Lock())
            async with lock:
                current = self.actors.get(process_id)
                if current is not None and create is None:
                    return Activated(ServeStatus.SERVING, self.host, current.token,
                                     current.ownership.address).to_answer()
                try:
                    return await self._activate(process_id, create)
                except SvitError as exc:
                    return error_dict(exc)
        finally:
            if new:
                self.inflight_activations -= 1
            if len(self._spares) < self.spare_target and self._refill_timer is None:
                self._refill_timer = asyncio.get_running_loop().call_later(
                    SPARE_REFILL_DELAY_S, self._refill)

    async def _activate(self, process_id: str, create: dict[str, Any] | None
                        ) -> dict[str, Any]:
        """One activation under ONE lease object.

        The rejoin loop may drop or replace ``self.lease`` at any await, so no
        state read before an await is trusted after it: the lease is read once,
        checked again after every await (:meth:`_same_lease`), and an actor is
        registered only while that same lease is still this agent's lease.
        (Source: issue 15 item 5 -- a lease read before an await and used after
        the rejoin loop had reset it raised ``AttributeError``.)

        Raises:
            UnavailableError: no lease, or the lease was lost or replaced meanwhile.
            ConflictError, InvalidInput: from the ownership transaction.
        """
        from svit_cluster.ownership import Owners

        lease = self._held_lease()
        taking = asyncio.ensure_future(self._take_actor())
        try:
            name, handle = await self._while_held(lease, taking, timeout_s=60, cancel=False)
        except BaseException:
            # Abandoned (lease no longer HELD, e.g. the raylet stopped and actor
            # creation hangs): kill the actor if it is ever created.
            taking.add_done_callback(self._kill_if_created)
            raise
        try:
            self._same_lease(lease)
        except BaseException:
            self._spares.append((name, handle))  # unused: keep it warm
            raise
        # The ownership record names the actor, so routes never need a second lookup.
        owners = Owners(lease, cluster=self.cfg.cluster, host=self.host, address=name)
        try:
            # Acquire and claim the Redis fence; a token below the fence (etcd
            # restored from a backup) is recovered from within this call.
            ownership = await owners.claim(process_id, self._fences())
        except ConflictError as exc:
            self._spares.append((name, handle))  # unused: keep it warm
            return Activated(ServeStatus.OWNED, exc.fields.get("owner_host"),
                             exc.fields.get("token"), exc.fields.get("owner_address")).to_answer()
        except BaseException:
            self._spares.append((name, handle))
            raise
        try:
            self._same_lease(lease)
            # bind + start (fence claim, restore) + serve in one Ray call; the
            # answer carries the actor's direct endpoint ("direct") for the gateway
            result: dict[str, Any] = await self._while_held(
                lease, handle.bind_start_serve.remote(process_id, ownership.token, create),
                timeout_s=60)
            if "error" not in result:
                self._same_lease(lease)  # nothing after this line awaits
        except SvitError as exc:
            result = error_dict(exc)
        except Exception as exc:
            result = error_dict(UnavailableError(f"actor start failed: {type(exc).__name__}"))
        if "error" in result:
            self._kill(handle)
            try:
                await owners.release(ownership)
            except SvitError:
                log.exception("release after failed start of %s", process_id)
            return result
        self.actors[process_id] = ServedActor(ownership.token, handle, owners, ownership)
        self._start_watch(process_id, ownership.token, handle)
        self.activations += 1
        return Activated(ServeStatus.SERVING, self.host, ownership.token, name,
                         result).to_answer()

    async def _while_held(self, lease: Any, awaitable: Any, *, timeout_s: float,
                          check_s: float = 0.2, cancel: bool = True) -> Any:
        """Await ``awaitable`` while ``lease`` stays this agent's HELD lease.

        A half-dead host (raylet stopped, agent running) would otherwise wait up
        to ``timeout_s`` for an actor that can never start there; the lease
        leaves HELD within one keepalive interval of the health check failing,
        and the activation then gives up at once so the gateway places the
        process elsewhere (issue 15 item 1).

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
                self._same_lease(lease)
                if loop.time() >= end:
                    raise TimeoutError(f"no answer within {timeout_s} s")
        finally:
            if cancel and not task.done():
                task.cancel()

    def _kill_if_created(self, fut: asyncio.Future[Any]) -> None:
        if fut.cancelled() or fut.exception() is not None:
            return
        _name, handle = fut.result()
        self._kill(handle)

    def _fences(self) -> Any:
        if self._fence_store is None:
            from svit_cluster.store import RedisFences, connect

            self._fence_store = RedisFences(connect(self.cfg.redis_for(self.host),
                                                      cluster=self.cfg.redis_cluster))
        return self._fence_store

    def _held_lease(self) -> Any:
        """This agent's lease, if it is HELD now. Raises UnavailableError otherwise."""
        lease = self.lease
        if lease is None:
            raise UnavailableError(f"host {self.host} has no lease yet")
        lease.ensure_held()
        return lease

    def _same_lease(self, lease: Any) -> None:
        """Check, after an await, that ``lease`` is still this agent's lease and HELD.

        Raises:
            UnavailableError: the rejoin loop dropped or replaced it, or it is
                SUSPENDED or LOST.
        """
        if self.lease is not lease:
            raise UnavailableError(f"host {self.host} lost its lease during the activation; "
                                   "retry", lease_state="replaced")
        lease.ensure_held()

    # -- reconciliation --------------------------------------------------------------------

    def _start_watch(self, process_id: str, token: int, handle: Any) -> None:
        old = self._watches.pop(process_id, None)
        if old is not None:
            old.cancel()
        task = asyncio.get_running_loop().create_task(self._watch(process_id, token, handle))
        self._watches[process_id] = task

        def forget(done: asyncio.Task[None]) -> None:
            if self._watches.get(process_id) is done:
                del self._watches[process_id]

        task.add_done_callback(forget)

    async def _watch(self, process_id: str, token: int, handle: Any) -> None:
        """Release ``process_id`` as soon as its actor (under ``token``) dies.

        Keeps one ``ProcessActor.watch`` call outstanding, which only ends when
        the worker is gone (Ray fails it with ``RayActorError``): no polling, so
        an idle actor is never woken for this (issue 18 item 2). When the call
        ends for any reason while this actor still serves the process here, the
        answer comes from :meth:`reconcile` (an ``info`` probe with a timeout):
        a live actor is watched again, a dead one is released.
        """
        while True:
            try:
                await handle.watch.remote()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.debug("watch of %s (token %d) ended: %s", process_id, token,
                          type(exc).__name__)
            current = self.actors.get(process_id)
            if current is None or current.token != token or current.handle is not handle:
                return  # released or replaced meanwhile: nothing to do
            if not await self.reconcile(process_id):
                return
            await asyncio.sleep(1.0)  # alive (e.g. a transient error): watch again

    async def _reconcile_loop(self, period_s: float = RECONCILE_SWEEP_S) -> None:
        """Never dies: release the ownership of actors that died on their own.

        An actor can die while its host lives (a crash, Ray's memory monitor).
        Its ownership record would then stay under the live host lease and the
        process could never move. Each actor's :meth:`_watch` notices that at
        once; this slow sweep is the fallback (e.g. a watch call that was lost).
        """
        while True:
            try:
                await asyncio.sleep(period_s)
                for pid in list(self.actors):
                    await self.reconcile(pid)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("reconcile round on %s failed", self.host)

    async def reconcile(self, process_id: str) -> bool:
        """Check ``process_id``'s actor; if it is dead, release its ownership. If
        no actor here serves it but its record is under this host's lease (an
        etcd restore brought it back), release that record.

        Returns:
            True when the actor is alive (or the process is not served here).
        """
        import ray

        current = self.actors.get(process_id)
        if current is None:
            await self._release_unserved(process_id)
            return True
        token = current.token
        try:
            await asyncio.wait_for(current.handle.info.remote(), timeout=10)
            return True
        except TimeoutError:
            return True  # busy, not dead: the next round looks again
        except ray.exceptions.RayActorError:
            log.warning("actor of %s (token %d) died; releasing it", process_id, token)
            await self.release(process_id, token, "actor died")
            return False

    async def _release_unserved(self, process_id: str) -> None:
        """Release a record under this host's lease that no actor here serves (an
        etcd restore can bring one back while this host keeps renewing the lease)."""
        from svit_cluster.ownership import Owners

        if self.lease is None:
            return
        lock = self._locks.setdefault(process_id, asyncio.Lock())
        async with lock:  # not while an activation of it is under way
            if process_id in self.actors or self.lease is None:
                return
            owners = Owners(self.lease, cluster=self.cfg.cluster, host=self.host)
            try:
                await owners.release_unserved(process_id)
            except SvitError:
                log.exception("releasing the unserved record of %s failed", process_id)

    async def release(self, process_id: str, token: int, reason: str = "") -> bool:
        """Release ``process_id`` if still owned under ``token``, then kill its actor."""
        import ray

        current = self.actors.get(process_id)
        if current is None or current.token != token:
            return False
        handle, owners, ownership = current.handle, current.owners, current.ownership
        del self.actors[process_id]
        released = False
        try:
            released = await owners.release(ownership)
        except SvitError:
            log.exception("release of %s failed (%s); the lease expiry cleans up",
                          process_id, reason)
        try:
            ray.kill(handle, no_restart=True)
        except Exception:
            log.exception("killing the actor of %s failed", process_id)
        return released

    async def status(self) -> dict[str, Any]:
        """``{"host", "lease_state", "lease_id", "incarnation", "actors", "activations",
        "keepalive_lag_s", "max_keepalive_lag_s", "max_keepalive_rtt_s", "unhealthy",
        "lost_leases", "niceness", ...}`` (lags and round trips in seconds;
        ``lost_leases``: why each earlier lease was lost, the last 10;
        ``niceness``: this worker's scheduling niceness, see
        :data:`svit_cluster.cluster._config.AGENT_NICENESS`; above it when the
        node was not started with ``WORKER_NICENESS_ENV``)."""
        lease = self.lease
        state = None if lease is None else str(lease.state)
        return {
            "keepalive_lag_s": None if lease is None else lease.last_keepalive_lag_s,
            "max_keepalive_lag_s": None if lease is None else lease.max_keepalive_lag_s,
            "max_keepalive_rtt_s": None if lease is None else lease.max_keepalive_rtt_s,
            "lost_leases": list(self.lost_leases),
            "unhealthy": None if self._health is None else self._health.problem(),
            "inflight_activations": self.inflight_activations,
            "shed_activations": self.shed_activations,
            "host": self.host,
            "lease_state": state,
            "lease_id": None if self.lease is None else self.lease.lease_id,
            "incarnation": self.incarnation,
            "actors": len(self.actors),
            "processes": sorted(self.actors),
            "activations": self.activations,
            "spares": len(self._spares),
            "niceness": os.nice(0),
        }

    async def ping(self) -> bool:
        return True

    async def metrics(self) -> str:
        """This agent's metrics in the Prometheus text format: its lease's
        (``svit_lease_keepalive_lag_seconds`` ...; see :class:`LeaseMetrics`) and
        ``svit_agent_shed_activations_total`` (activations shed as overloaded)."""
        from prometheus_client import generate_latest

        if self._lease_metrics is None:
            return ""
        return generate_latest(self._lease_metrics.registry).decode()

    async def shutdown(self, reason: str = "host stopping") -> dict[str, Any]:
        """Give up this host before it stops (SIGTERM): release, then revoke the lease.

        Stops the rejoin, reconcile and spare loops, releases every process this
        host owns (and kills its actor), kills the warm spares, then revokes the
        host lease, which deletes ``/svit/<cluster>/hosts/<host>`` and any key
        still attached to the lease. Another host can then claim the processes
        at once instead of after the lease TTL. Safe to call twice.

        Returns:
            ``{"released": int, "revoked": bool}``; ``revoked`` is False when
            etcd could not be reached (the lease then expires after its TTL).
        """
        self._shut_down = True
        if self._refill_timer is not None:
            self._refill_timer.cancel()
            self._refill_timer = None
        for task in (self._rejoin, self._reconcile_task, self._refilling,
                     *self._watches.values()):
            if task is not None and not task.done():
                task.cancel()
        if self._health is not None:
            self._health.stop()
        released = 0
        for pid, served in list(self.actors.items()):
            if await self.release(pid, served.token, reason):
                released += 1
        spares, self._spares = self._spares, []
        for _name, handle in spares:
            self._kill(handle)
        revoked = False
        lease, self.lease = self.lease, None
        if lease is not None:
            try:
                await lease.revoke()
                revoked = True
            except SvitError:
                log.warning("host %s could not revoke its lease (%s); it expires by TTL",
                            self.host, reason)
        log.info("host %s shut down (%s): %d released, lease revoked=%s",
                 self.host, reason, released, revoked)
        return {"released": released, "revoked": revoked}
