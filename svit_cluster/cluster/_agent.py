"""The control plane on each host: one :class:`HostAgent` Ray actor per Ray node.

The agent holds the host's etcd lease -- through a lease keeper, a small OS
process of its own (:class:`~svit_cluster.ownership.KeptLease`), so that no
load inside the agent can starve the keepalives -- registers
``/svit/<cluster>/hosts/<host>`` under it, and activates processes on demand:
it wins the ownership transaction and claims the Redis fence (token = fence
epoch and create revision; a token below the fence after an etcd restore is
recovered from in the same activation), then binds a
:class:`~svit_cluster.cluster.ProcessActor` pinned to this host to the process
under that token. The ownership record names the actor, so routes need no
second lookup.

**Residency.** The host runs at most its budget of process actors
(:mod:`svit_cluster.cluster._residency`): a new activation on a full host
passivates the least recently used idle process and binds its worker to the
new process (reuse instead of a new Ray worker); if every actor is busy it
answers ``unavailable`` with ``host_full`` and the gateway tries another host.
Workers are started at most ``max_starting`` at a time, warm spares are kept
only while the host is under its budget, and a memory guard counts the actors'
summed PSS.

When the lease becomes SUSPENDED the agent pauses its actors (they refuse new
work); when it is LOST it ends every binding (the workers stay, as spares),
joins again with a fresh lease, and activates the processes it served again
under new tokens. That is safe because nothing is kept but the worker: each
process is restored from its log (snapshot + tail, hash chain verified) under
a token that claims the Redis fence above every earlier one, and a process
that another host claimed meanwhile stays there (its ownership record exists,
so the claim here fails). Safety never depends on any of this: the Redis
fence refuses any stale commit.

**Parts.** :class:`HostAgent` is the Ray-facing front: its remote methods keep
their names and delegate to plain objects it owns, one concern each:
:class:`~svit_cluster.cluster._host_lease.AgentLease` (the host lease),
:class:`~svit_cluster.cluster._spare_pool.WorkerPool` (warm spares, worker
starts, the budget's counts),
:class:`~svit_cluster.cluster._supervisor.Supervisor` (the served actors:
watching, releasing, passivating, parking) and
:class:`~svit_cluster.cluster._memory_guard.MemoryGuard` (the actors' summed
PSS). The front itself runs the
activations, the rejoin loop and the status and metrics answers.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import Any

from prometheus_client import CollectorRegistry, Counter, generate_latest

from svit_cluster.cluster._agent_metrics import ResidencyCollector
from svit_cluster.cluster._config import AGENT_NICENESS, ClusterConfig
from svit_cluster.cluster._headroom import HEADROOM_EVERY_S, failover_spares
from svit_cluster.cluster._host_lease import LEASE_LOST_LOG, AgentLease
from svit_cluster.cluster._memory_guard import MEMORY_SAMPLE_S, MemoryGuard
from svit_cluster.cluster._residency import Budget, derive_budget, node_memory_bytes
from svit_cluster.cluster._results import (
    AgentStatus,
    CreateSpec,
    HostResidency,
    Outcome,
    ShutDown,
    Started,
)
from svit_cluster.cluster._spare_pool import MAX_BINDINGS_PER_WORKER, SPARE_LINGER_S, WorkerPool
from svit_cluster.cluster._supervisor import (
    RECONCILE_SWEEP_S,
    UNPARK_RETRY_S,
    USAGE_MAX_AGE_S,
    Supervisor,
)
from svit_cluster.cluster._types import Activated, ServedActor, ServeStatus
from svit_cluster.errors import ConflictError, SvitError, UnavailableError
from svit_cluster.ownership import KeptLeaseCollector, LeaseState, Owners, hosts_prefix
from svit_cluster.store import RedisFences, connect, verify_eviction_policy

__all__ = [
    "DEFAULT_MAX_ACTIVATIONS", "MAX_BINDINGS_PER_WORKER", "MEMORY_SAMPLE_S",
    "RECONCILE_SWEEP_S", "SPARE_LINGER_S", "SPARE_REFILL_DELAY_S", "TAKE_TIMEOUT_S",
    "UNPARK_RETRY_S", "USAGE_MAX_AGE_S", "HostAgent", "hosts_prefix",
]

log = logging.getLogger(__name__)

#: Activations one agent runs at once before it sheds new ones with
#: ``unavailable`` (HTTP 503 + ``Retry-After``): each starts or binds a Ray
#: worker, and a burst of them must not queue without bound.
DEFAULT_MAX_ACTIVATIONS = 8
#: Seconds an activation waits for a worker (a spare, a start, a passivation)
#: before it answers ``unavailable`` (``overloaded``).
TAKE_TIMEOUT_S = 30.0
#: Seconds after an activation ends before the agent starts replacing the warm
#: spare it took. A starting Ray worker takes a whole core for about a second;
#: started at once, it would compete with the activation's own Ray calls and
#: etcd/Redis round trips and with the new owner's first request (docs/capacity.md
#: has the figures). A spare is not ready sooner than about a second anyway, so a
#: second activation arriving meanwhile loses nothing by the delay.
SPARE_REFILL_DELAY_S = 0.5
#: Seconds after which parking and closing a lost lease are logged with their
#: times: each step is bounded (2 s per actor, about 5 s per close), so a
#: slower round is worth a line in the agent's log.
SLOW_REJOIN_STEP_S = 5.0


class _OnPart:
    """An attribute of :class:`HostAgent` whose value lives on one of its parts:
    reading or setting it on the agent reads or sets ``agent.<part>.<name>``."""

    def __init__(self, part: str, name: str) -> None:
        self.part, self.name = part, name

    def __get__(self, agent: Any, owner: Any = None) -> Any:
        if agent is None:
            return self
        return getattr(getattr(agent, self.part), self.name)

    def __set__(self, agent: Any, value: Any) -> None:
        setattr(getattr(agent, self.part), self.name, value)


class HostAgent:
    """One host's agent (wrapped with ``ray.remote`` by :func:`start_agents`).

    The state lives on its parts: ``leases`` (:class:`AgentLease`), ``pool``
    (:class:`WorkerPool`), ``supervisor`` (:class:`Supervisor`) and ``memory``
    (:class:`MemoryGuard`). The agent's attributes ``lease``, ``actors``,
    ``budget``, ``spare_target`` and the residency counters read and set the
    part's attribute of the same name.

    Args:
        config: the cluster's configuration (pickled by Ray as the frozen
            dataclass it is).
        host: this host's name (its Ray node carries the ``svit_host:<host>`` resource).
    """

    lease = _OnPart("leases", "lease")
    incarnation = _OnPart("leases", "incarnation")
    lost_leases = _OnPart("leases", "lost_leases")
    actors = _OnPart("supervisor", "actors")
    evictions = _OnPart("supervisor", "evictions")
    host_full = _OnPart("supervisor", "host_full")
    dropped_at_lease_loss = _OnPart("supervisor", "dropped_at_lease_loss")
    budget = _OnPart("pool", "budget")
    spare_target = _OnPart("pool", "spare_target")
    starting = _OnPart("pool", "starting")
    pss_mib = _OnPart("pool", "pss_mib")
    worker_starts = _OnPart("pool", "worker_starts")
    worker_reuses = _OnPart("pool", "worker_reuses")

    def __init__(self, config: ClusterConfig, host: str) -> None:
        self.cfg = config
        self.host = host
        self.activations = 0
        self.started_at = time.time()
        budget = derive_budget(
            2, node_memory_bytes(), max_active=self.cfg.max_active_per_host,
            max_actors_pss_mib=self.cfg.max_actors_pss_mib,
            max_starting=self.cfg.max_starting_per_host)
        self.pool = WorkerPool(self.cfg, host, budget,
                               serving=lambda: self.supervisor.holding())
        self.supervisor = Supervisor(self.cfg, host, self.pool, lease=lambda: self.lease)
        self.leases = AgentLease(self.cfg, host, on_state=self.supervisor.on_lease)
        self.pool.on_warm = self._publish_warm
        self.memory = MemoryGuard(self.pool, self.supervisor)
        self._rejoin: asyncio.Task[None] | None = None
        self._reconcile_task: asyncio.Task[None] | None = None
        self._memory_task: asyncio.Task[None] | None = None
        self._headroom_task: asyncio.Task[None] | None = None
        self._fence_store: Any = None
        #: Bound on activations under way at once; more are shed, so a burst of
        #: activations cannot starve the host's lease keepalives.
        self.max_activations = DEFAULT_MAX_ACTIVATIONS
        self.inflight_activations = 0
        self.shed_activations = 0
        self._metrics_registry: Any = None
        self._shed_metric: Any = None  # svit_agent_shed_activations_total

    # -- start ---------------------------------------------------------------------------

    async def start(self) -> AgentStatus:
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
            self.budget = await asyncio.to_thread(self._node_budget)
            log.info("host %s: residency budget %d process actors, %.0f MiB PSS, %d starts "
                     "at once (%s)", self.host, self.budget.max_active,
                     self.budget.max_actors_pss_mib, self.budget.max_starting,
                     self.budget.basis)
            await self._join()
            loop = asyncio.get_running_loop()
            self._rejoin = loop.create_task(self._rejoin_loop())
            self._reconcile_task = loop.create_task(self.supervisor.reconcile_loop())
            self._memory_task = loop.create_task(self.memory.loop())
            self._headroom_task = loop.create_task(self._headroom_loop())
            self.pool.closed = False
            self.pool.refill()
        return await self.status()

    def _node_budget(self) -> Budget:
        """The residency budget from this host's Ray node resources (``CPU``,
        ``memory``), the configured values kept (blocking: Ray's GCS)."""
        cpus, memory = float(os.cpu_count() or 1), node_memory_bytes()
        try:
            import ray

            if not ray.is_initialized():  # no Ray (tests): the machine's figures
                raise LookupError("Ray is not initialized")
            node_id = ray.get_runtime_context().get_node_id()
            for node in ray.nodes():  # type: ignore[no-untyped-call]
                if node.get("NodeID") == node_id:
                    res = node.get("Resources") or {}
                    cpus = float(res.get("CPU", cpus)) or cpus
                    memory = int(res.get("memory", memory)) or memory
                    break
        except Exception:  # no Ray (tests): the machine's figures
            log.debug("no Ray node resources; budget from the machine", exc_info=True)
        return derive_budget(cpus, memory, max_active=self.cfg.max_active_per_host,
                             max_actors_pss_mib=self.cfg.max_actors_pss_mib,
                             max_starting=self.cfg.max_starting_per_host)

    def _check_redis(self) -> None:
        url = self.cfg.redis_for(self.host)
        try:
            verify_eviction_policy(
                url, allow_unverified=self.cfg.redis_allow_unverified_eviction_policy,
                cluster=self.cfg.redis_cluster)
        except UnavailableError as exc:
            log.warning("could not check the eviction policy of the commit log's Redis: %s",
                        exc)

    async def _join(self) -> None:
        """Grant a lease and register the host under it (:meth:`AgentLease.join`).

        Raises:
            UnavailableError: the host is unhealthy or etcd could not grant a lease.
        """
        await self.leases.join(warm=self.pool.warm())

    def _publish_warm(self) -> None:
        """The pool's refill ended with its spares up: say so in the host record."""
        self.leases.spawn(self.leases.publish_warm())

    # -- failover headroom ---------------------------------------------------------------

    async def _headroom_loop(self) -> None:
        """Never dies: every :data:`HEADROOM_EVERY_S`, one :meth:`headroom_round`."""
        while True:
            await asyncio.sleep(HEADROOM_EVERY_S)
            try:
                await self.headroom_round()
            except asyncio.CancelledError:
                raise
            except UnavailableError as exc:  # no lease or etcd unreachable: next round
                log.debug("host %s: headroom round skipped: %s", self.host, exc)
            except Exception:
                log.exception("host %s: headroom round failed", self.host)

    async def headroom_round(self) -> int:
        """Size the warm spares to the busiest peer's processes
        (:func:`failover_spares`, with ``spare_target`` as the floor), start
        the missing ones, and publish this host's ``active`` count, its
        ``spares`` target and the spares ``ready`` now in its record.

        Returns:
            The spare target now.

        Raises:
            UnavailableError: no lease, or etcd could not be read.
        """
        records = await self.leases.host_records()
        pool = self.pool
        target = failover_spares(self.host, records, warm_spares=pool.spare_target,
                                 max_warm_spares=self.cfg.max_warm_spares)
        if target != pool.target():
            log.info("host %s: warm spares %d -> %d (its share of the busiest peer's "
                     "processes)", self.host, pool.target(), target)
        pool.failover_target = target
        if pool.wanted() > 0:
            pool.refill()
        await self.leases.publish(active=len(self.actors), spares=pool.target(),
                                  ready=len(pool.spares))
        return pool.target()

    # -- lease loss ----------------------------------------------------------------------

    async def revoke_lease_of(self, host: str, lease_id: int) -> bool:
        """Revoke ``lease_id`` in the name of host ``host``'s agent, which found it
        LOST but may not reach etcd itself (see :meth:`AgentLease.revoke_lost`).

        Only the holder asks, and only for a lease that is LOST for it (terminal:
        it has stopped serving and will join again with a new lease), so no live
        host's lease is touched; this agent never revokes its own lease here.

        Returns:
            True when the lease is gone now; False when this agent has no
            lease (its etcd client may be cut off too) or was asked for its own.

        Raises:
            UnavailableError: etcd could not be reached from here either.
        """
        return await self.leases.revoke_lease_of(host, lease_id)

    async def _rejoin_loop(self) -> None:
        """Never dies: after LOST, end every binding (keeping the workers), join
        again with a new lease, and activate the parked processes again."""
        while True:
            try:
                await asyncio.sleep(0.25)
                if self.lease is not None and self.lease.state is LeaseState.LOST:
                    n = len(self.actors)
                    old = self.leases.note_lost()
                    log.warning(LEASE_LOST_LOG, self.host, self.lost_leases[-1], n)
                    started = time.monotonic()
                    await self.supervisor.park_all("lease lost")
                    parked = time.monotonic()
                    try:
                        await self.leases.retire(old)
                    except Exception:
                        log.exception("closing the old lease failed")
                    if (done := time.monotonic()) - started > SLOW_REJOIN_STEP_S:
                        log.warning("host %s: parking took %.1f s and closing lost lease "
                                    "%s %.1f s", self.host, parked - started,
                                    old.lease_id, done - parked)
                if self.lease is None:
                    await self._join()
                    if not self.pool.warm():
                        self.pool.refill()  # its end marks the record warm
                    if self.supervisor.parked:
                        self.leases.spawn(self._unpark())
            except asyncio.CancelledError:
                raise
            except UnavailableError as exc:  # unhealthy host or etcd down: expected
                log.warning("host %s cannot rejoin yet: %s", self.host, exc)
                await asyncio.sleep(0.5)
            except Exception:
                log.exception("host %s rejoin round failed; retrying", self.host)
                await asyncio.sleep(0.5)

    async def _unpark(self) -> None:
        """Activate the processes parked at the last lease loss again through
        :meth:`activate` (:meth:`Supervisor.unpark`: transient failures retried
        for up to :data:`UNPARK_RETRY_S`)."""
        await self.supervisor.unpark(self.activate)

    # -- activation ----------------------------------------------------------------------

    async def activate(self, process_id: str, create: CreateSpec | None = None
                       ) -> Outcome[Activated]:
        """Own ``process_id`` and start its actor here (single-flight per process).

        At most :attr:`max_activations` activations of processes not served
        here yet run at once; beyond that the call is shed at once with an
        ``unavailable`` error (``fields["overloaded"]`` true).

        Args:
            process_id: the process to serve.
            create: what to create (:class:`CreateSpec`); None to restore the
                process from the store (or answer the actor serving it here).

        Returns:
            :class:`Activated`: ``serving`` (``actor``, ``host``, ``token``, and
            ``started``, the actor's :class:`Started`, for a new activation) or
            ``owned`` when another host owns it; or the error (``not_found``,
            ``conflict``, ``unavailable``, ...).
        """
        new = create is not None or process_id not in self.actors
        if new:
            if self.inflight_activations >= self.max_activations:
                # Shed before the host risks its lease: the gateway tries another
                # host, or answers 503 with Retry-After.
                self.shed_activations += 1
                self._registry()
                self._shed_metric.inc()
                return Outcome.fail(UnavailableError(
                    f"host {self.host} is overloaded ({self.inflight_activations} "
                    "activations under way); retry", overloaded=True,
                    inflight=self.inflight_activations))
            self.inflight_activations += 1
        try:
            async with self.supervisor.lock(process_id):
                current = self.actors.get(process_id)
                if current is not None and create is None:
                    return Outcome.ok(Activated(ServeStatus.SERVING, self.host, current.token,
                                                current.ownership.address))
                try:
                    return await self._activate(process_id, create)
                except SvitError as exc:
                    return Outcome.fail(exc)
        finally:
            if new:
                self.inflight_activations -= 1
            # The spare this activation took is replaced only now, and later
            # still: see SPARE_REFILL_DELAY_S.
            self.pool.refill_later(SPARE_REFILL_DELAY_S)

    async def _take_actor(self, exclude: str = "") -> tuple[str, Any]:
        """A worker for a new binding (:meth:`Supervisor.take_worker`).

        Raises:
            UnavailableError: ``host_full`` (every actor busy), or a worker
                failed to start.
        """
        return await self.supervisor.take_worker(exclude)

    async def _activate(self, process_id: str, create: CreateSpec | None
                        ) -> Outcome[Activated]:
        """One activation under ONE lease object.

        The rejoin loop may drop or replace ``self.lease`` at any await, so no
        state read before an await is trusted after it: the lease is read once,
        checked again after every await (:meth:`AgentLease.same`), and an actor
        is registered only while that same lease is still this agent's lease (a
        lease read before an await may be gone after it: using it then would
        raise ``AttributeError``).

        Raises:
            UnavailableError: no lease, or the lease was lost or replaced meanwhile.
            ConflictError, InvalidInput: from the ownership transaction.
        """
        lease = self.leases.held()
        taking = asyncio.ensure_future(self._take_actor(process_id))
        try:
            name, handle = await self.leases.while_held(
                lease, taking, timeout_s=TAKE_TIMEOUT_S, cancel=False)
        except BaseException as exc:
            # Abandoned (lease no longer HELD, e.g. the raylet stopped and actor
            # creation hangs, or no worker in time): kill the actor if it is
            # ever created.
            taking.add_done_callback(self._kill_if_created)
            if isinstance(exc, TimeoutError):
                raise UnavailableError(
                    f"host {self.host} had no process actor ready within {TAKE_TIMEOUT_S:g} s "
                    f"({self.starting} starting); retry", overloaded=True) from exc
            raise
        try:
            # every path below leaves the worker served, spare or stopped
            return await self._bind(lease, process_id, create, name, handle)
        finally:
            self.pool.taken -= 1

    async def _bind(self, lease: Any, process_id: str, create: CreateSpec | None,
                    name: str, handle: Any) -> Outcome[Activated]:
        """Own ``process_id`` under ``lease`` and bind the taken worker to it."""
        pool, same = self.pool, self.leases.same
        try:
            same(lease)
        except BaseException:
            pool.add_spare(name, handle)  # unused: keep it warm
            raise
        # The ownership record names the actor, so routes never need a second lookup.
        owners = Owners(lease, cluster=self.cfg.cluster, host=self.host, address=name)
        try:
            # Acquire and claim the Redis fence; a token below the fence (etcd
            # restored from a backup) is recovered from within this call.
            ownership = await owners.claim(process_id, self._fences())
        except ConflictError as exc:
            pool.add_spare(name, handle)  # unused: keep it warm
            return Outcome.ok(Activated(ServeStatus.OWNED, exc.fields.get("owner_host"),
                                        exc.fields.get("token"), exc.fields.get("owner_address")))
        except BaseException:
            pool.add_spare(name, handle)
            raise
        try:
            same(lease)
            # bind + start (fence claim, restore) + serve in one Ray call; the
            # answer carries the actor's direct endpoint (Started.direct) for the gateway
            result: Outcome[Started] = await self.leases.while_held(
                lease, handle.bind_start_serve.remote(process_id, ownership.token, create),
                timeout_s=60)
            if result.value is not None:
                same(lease)  # nothing after this line awaits
        except SvitError as exc:
            result = Outcome.fail(exc)
        except Exception as exc:
            result = Outcome.fail(UnavailableError(f"actor start failed: {type(exc).__name__}"))
        started = result.value
        if started is None:
            pool.kill_worker(name, handle)
            try:
                await owners.release(ownership)
            except SvitError:
                log.exception("release after failed start of %s", process_id)
            return result.failure()
        pool.bound(name, started.pid)
        self.supervisor.serve(process_id, ServedActor(ownership.token, handle, owners, ownership))
        self.activations += 1
        pool.capacity_changed()  # a served process can be passivated for another
        return Outcome.ok(Activated(ServeStatus.SERVING, self.host, ownership.token, name,
                                    started))

    def _kill_if_created(self, fut: asyncio.Future[Any]) -> None:
        if fut.cancelled() or fut.exception() is not None:
            return
        name, handle = fut.result()
        self.pool.taken -= 1
        self.pool.kill_worker(name, handle)

    def _fences(self) -> Any:
        if self._fence_store is None:
            self._fence_store = RedisFences(connect(self.cfg.redis_for(self.host),
                                                      cluster=self.cfg.redis_cluster))
        return self._fence_store

    # -- the served actors -----------------------------------------------------------------

    async def reconcile(self, process_id: str) -> bool:
        """Check ``process_id``'s actor; if it is dead, release its ownership. If
        no actor here serves it but its record is under this host's lease (an
        etcd restore brought it back), release that record.

        Returns:
            True when the actor is alive (or the process is not served here).
        """
        return await self.supervisor.reconcile(process_id)

    async def release(self, process_id: str, token: int, reason: str = "") -> bool:
        """Release ``process_id`` if still served here under ``token``, then end
        its binding: the worker becomes a warm spare when one is wanted (and it
        is idle and not past its reuse bound), else it is stopped.

        Returns:
            True when the ownership record was deleted here.
        """
        return await self.supervisor.release(process_id, token, reason)

    async def trim_spares(self, linger_s: float = SPARE_LINGER_S) -> int:
        """Stop the surplus spares (beyond ``warm_spares``) unused for ``linger_s``
        seconds; returns how many. The memory loop does this every
        :data:`MEMORY_SAMPLE_S` with :data:`SPARE_LINGER_S`; ``0`` gives every
        surplus worker back at once."""
        return self.pool.trim(linger_s)

    async def check_memory(self) -> float:
        """Read the summed PSS (MiB) of this host's actors now, and act on the
        memory budget (:meth:`MemoryGuard.check`). Returns the reading."""
        return await self.memory.check()

    # -- answers -------------------------------------------------------------------------

    async def status(self) -> AgentStatus:
        """This host's lease and residency (:class:`AgentStatus`; no actor is asked)."""
        lease = self.lease
        state = None if lease is None else str(lease.state)
        return {
            "keepalive_lag_s": None if lease is None else lease.last_keepalive_lag_s,
            "max_keepalive_lag_s": None if lease is None else lease.max_keepalive_lag_s,
            "max_keepalive_rtt_s": None if lease is None else lease.max_keepalive_rtt_s,
            "lost_leases": list(self.lost_leases),
            "unhealthy": self.leases.problem(),
            "inflight_activations": self.inflight_activations,
            "shed_activations": self.shed_activations,
            "host": self.host,
            "lease_state": state,
            "lease_id": None if self.lease is None else self.lease.lease_id,
            "incarnation": self.incarnation,
            "actors": len(self.actors),
            "processes": sorted(self.actors),
            "activations": self.activations,
            "spares": len(self.pool.spares),
            "spare_target": self.pool.target(),
            "niceness": os.nice(0),
            **self.residency(),
        }

    def residency(self) -> HostResidency:
        """This host's residency figures (:class:`HostResidency`; no actor is asked)."""
        now = time.monotonic()
        usage = self.supervisor.usage
        idle = [u.idle_at(now) for p, u in usage.items() if p in self.actors]
        lease, pool = self.lease, self.pool
        return {
            "max_active": self.budget.max_active,
            "max_actors_pss_mib": self.budget.max_actors_pss_mib,
            "max_starting": self.budget.max_starting,
            "budget_basis": self.budget.basis,
            "starting": pool.starting,
            "pss_mib": pool.pss_mib,
            "pss_age_s": round(now - pool.pss_at, 1) if pool.pss_at else None,
            "lru_idle_s": round(max(idle), 1) if idle else None,
            "evictions": self.evictions,
            "worker_starts": pool.worker_starts,
            "worker_reuses": pool.worker_reuses,
            "host_full": self.host_full,
            "dropped_at_lease_loss": self.dropped_at_lease_loss,
            "keeper_pid": getattr(lease, "keeper_pid", None),
        }

    async def ping(self) -> bool:
        return True

    def _registry(self) -> Any:
        """This agent's Prometheus registry (made on first use)."""
        if self._metrics_registry is None:
            registry = CollectorRegistry()
            registry.register(KeptLeaseCollector(lambda: self.lease))
            registry.register(ResidencyCollector(self))
            self._shed_metric = Counter(
                "svit_agent_shed_activations",
                "Activations this host agent refused (503 + Retry-After) because "
                "max_activations were under way.", registry=registry)
            self._metrics_registry = registry
        return self._metrics_registry

    async def metrics(self) -> str:
        """This agent's metrics in the Prometheus text format: its lease's
        (``svit_lease_keepalive_lag_seconds`` ...; see
        :class:`~svit_cluster.ownership.KeptLeaseCollector`), its residency
        (``svit_agent_active_actors``, ``svit_agent_max_active_actors``, ...;
        see :class:`~svit_cluster.cluster._agent_metrics.ResidencyCollector`)
        and ``svit_agent_shed_activations_total`` (activations shed as
        overloaded)."""
        return generate_latest(self._registry()).decode()

    async def shutdown(self, reason: str = "host stopping") -> ShutDown:
        """Give up this host before it stops (SIGTERM): release, then revoke the lease.

        Stops the rejoin, reconcile and spare loops, releases every process this
        host owns (and kills its actor), kills the warm spares, then revokes the
        host lease, which deletes ``/svit/<cluster>/hosts/<host>`` and any key
        still attached to the lease. Another host can then claim the processes
        at once instead of after the lease TTL. Safe to call twice.

        Returns:
            :class:`ShutDown`: how many processes were released, and whether
            the lease was revoked (False when etcd could not be reached: the
            lease then expires after its TTL).
        """
        self.pool.close()
        for task in (self._rejoin, self._reconcile_task, self._memory_task, self._headroom_task,
                     *self.supervisor.watches.values()):
            if task is not None and not task.done():
                task.cancel()
        self.leases.stop_health()
        released = 0
        for pid, served in list(self.actors.items()):
            if await self.release(pid, served.token, reason):
                released += 1
        self.pool.drain()
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
        return ShutDown(released, revoked)
