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
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
import time
from typing import Any

from prometheus_client import CollectorRegistry, Counter, generate_latest
from tenacity import AsyncRetrying, retry_if_result, stop_after_delay, wait_exponential

from svit_cluster.cluster._actor import ProcessActor
from svit_cluster.cluster._agent_metrics import ResidencyCollector
from svit_cluster.cluster._config import (
    AGENT_NICENESS,
    KEEPER_NICENESS,
    PROCESS_ACTOR_NICENESS,
    ClusterConfig,
    host_resource,
)
from svit_cluster.cluster._error_dict import error_code, error_dict
from svit_cluster.cluster._health import HostHealth
from svit_cluster.cluster._names import actor_name, agent_name
from svit_cluster.cluster._residency import (
    Budget,
    Usage,
    derive_budget,
    lru_order,
    node_memory_bytes,
    read_pss_kib,
)
from svit_cluster.cluster._types import Activated, ServedActor, ServeStatus
from svit_cluster.errors import ConflictError, SvitError, UnavailableError
from svit_cluster.ownership import (
    KeptLease,
    KeptLeaseCollector,
    LeaseState,
    Owners,
    host_key,
    hosts_prefix,
    open_client,
    revoke_lease_id,
)
from svit_cluster.store import RedisFences, connect, verify_eviction_policy

__all__ = ["HostAgent", "hosts_prefix"]

log = logging.getLogger(__name__)

#: Activations one agent runs at once before it sheds new ones with
#: ``unavailable`` (HTTP 503 + ``Retry-After``): each starts or binds a Ray
#: worker, and a burst of them must not queue without bound.
DEFAULT_MAX_ACTIVATIONS = 8

#: Seconds a least-recently-used view of the served processes stays fresh: a
#: passivation at the budget asks every actor for its idle time at most this
#: often (one ``residency`` call each), never per activation.
USAGE_MAX_AGE_S = 1.0
#: Bindings one Ray worker serves before it is stopped instead of reused, so
#: that whatever a long-lived interpreter accumulates stays bounded.
MAX_BINDINGS_PER_WORKER = 500
#: Seconds between two rounds of the memory guard (the actors' PSS) and of the
#: surplus-spare trim.
MEMORY_SAMPLE_S = 5.0
#: Seconds an activation waits for a worker (a spare, a start, a passivation)
#: before it answers ``unavailable`` (``overloaded``).
TAKE_TIMEOUT_S = 30.0
#: Seconds a worker left over by a passivation stays warm as a surplus spare
#: (beyond ``warm_spares``, always inside the budget) before it is stopped: a
#: process activated again within that time binds in milliseconds instead of
#: waiting for a Ray worker to start, and an idle host still gives its workers
#: back.
SPARE_LINGER_S = 60.0
#: Seconds a process parked at a lease loss is retried after the rejoin while
#: its activation answers ``unavailable``: nobody else asks for it, so without
#: retries one transient failure would leave it unowned until its next request.
UNPARK_RETRY_S = 60.0

#: Seconds between two fallback sweeps of :meth:`HostAgent.reconcile` over the
#: served actors. A dead actor is noticed at once by its outstanding
#: ``ProcessActor.watch`` call, so the sweep is only a fallback and can be rare:
#: every sweep makes every idle actor answer a Ray call.
RECONCILE_SWEEP_S = 30.0

#: Seconds after an activation ends before the agent starts replacing the warm
#: spare it took. A starting Ray worker takes a whole core for about a second;
#: started at once, it would compete with the activation's own Ray calls and
#: etcd/Redis round trips and with the new owner's first request (docs/capacity.md
#: has the figures). A spare is not ready sooner than about a second anyway, so a
#: second activation arriving meanwhile loses nothing by the delay.
SPARE_REFILL_DELAY_S = 0.5


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
        self._spare_since: dict[str, float] = {}  # actor name -> when it became a spare
        self._refilling: asyncio.Task[None] | None = None
        self._refill_timer: asyncio.TimerHandle | None = None
        self._shut_down = False
        self.spare_target = self.cfg.warm_spares
        self._reconcile_task: asyncio.Task[None] | None = None
        #: One task per served actor awaiting its ``watch`` call (see :meth:`_watch`).
        self._watches: dict[str, asyncio.Task[None]] = {}
        self._fence_store: Any = None
        self._health: Any = None  # HostHealth, made on the first join
        #: Bound on activations under way at once; more are shed, so a burst of
        #: activations cannot starve the host's lease keepalives.
        self.max_activations = DEFAULT_MAX_ACTIVATIONS
        self.inflight_activations = 0
        self.shed_activations = 0
        self._lease_metrics: Any = None
        self._shed_metric: Any = None  # svit_agent_shed_activations_total
        #: Why each earlier lease of this agent was lost (the last 10), oldest first.
        self.lost_leases: list[str] = []
        #: Background tasks (revokes of lost leases) kept referenced until done.
        self._background: set[asyncio.Task[Any]] = set()
        # -- residency (see svit_cluster.cluster._residency)
        self.budget: Budget = derive_budget(
            2, node_memory_bytes(), max_active=self.cfg.max_active_per_host,
            max_actors_pss_mib=self.cfg.max_actors_pss_mib,
            max_starting=self.cfg.max_starting_per_host)
        self._start_gate: asyncio.Semaphore | None = None
        #: Set (and replaced) whenever a worker may have become available.
        self._capacity_event = asyncio.Event()
        #: Ray workers being started now, and workers taken by activations not yet
        #: registered as served (both counted against the budget, like releases).
        self.starting = 0
        self._taken = 0
        #: Served processes whose ownership record is being released.
        self._releasing = 0
        #: Worker process id and bindings served, by actor name.
        self._pids: dict[str, int] = {}
        self._uses: dict[str, int] = {}
        #: Last known use of each served process (the least-recently-used view).
        self._usage: dict[str, Usage] = {}
        self._usage_at = 0.0
        self._usage_refresh: asyncio.Future[None] | None = None
        self._evicting: set[str] = set()
        #: Summed PSS (MiB) of this host's actors at the last reading, and its time.
        self.pss_mib = 0.0
        self._pss_at = 0.0
        self._memory_task: asyncio.Task[None] | None = None
        #: Processes served when the last lease was lost (activated again after the rejoin).
        self._parked: list[str] = []
        self.evictions = 0
        #: Workers stopped (not kept) when a lease was LOST: busy or not answering.
        self.dropped_at_lease_loss = 0
        self.worker_starts = 0
        self.worker_reuses = 0
        self.host_full = 0
        self._residency_metrics: Any = None

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
            self.budget = await asyncio.to_thread(self._node_budget)
            log.info("host %s: residency budget %d process actors, %.0f MiB PSS, %d starts "
                     "at once (%s)", self.host, self.budget.max_active,
                     self.budget.max_actors_pss_mib, self.budget.max_starting,
                     self.budget.basis)
            await self._join()
            loop = asyncio.get_running_loop()
            self._rejoin = loop.create_task(self._rejoin_loop())
            self._reconcile_task = loop.create_task(self._reconcile_loop())
            self._memory_task = loop.create_task(self._memory_loop())
            self._shut_down = False
            self._refill()
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

    # -- workers: warm spares, paced starts, reuse ---------------------------------------

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

    def _workers(self) -> int:
        """Process actors this host runs, is starting or is binding (what the
        budget bounds)."""
        return (len(self.actors) + len(self._spares) + self.starting + self._taken
                + self._releasing)

    def _memory_full(self) -> bool:
        return self.pss_mib >= self.budget.max_actors_pss_mib

    def _has_room(self) -> bool:
        """One more Ray worker fits the budget (count and memory)."""
        return self._workers() < self.budget.max_active and not self._memory_full()

    async def _start_worker(self, *, take: bool = False) -> tuple[str, Any]:
        """Start one process-actor worker and wait until it is warm, at most
        ``budget.max_starting`` at a time (the rest wait here, in order). With
        ``take`` the new worker counts as taken by an activation.

        Raises:
            UnavailableError: the worker did not come up within 60 s (it is killed).
        """
        if self._start_gate is None:
            self._start_gate = asyncio.Semaphore(self.budget.max_starting)
        self.starting += 1
        started = False
        try:
            async with self._start_gate:
                name, handle = await asyncio.to_thread(self._new_actor)
                try:
                    pid = await asyncio.wait_for(handle.warm.remote(), timeout=60)
                except Exception as exc:
                    self._kill(handle)
                    raise UnavailableError(f"a new process actor on host {self.host} did not "
                                           f"start: {type(exc).__name__}") from exc
                self.worker_starts += 1
                if isinstance(pid, int):
                    self._pids[name] = pid
                started = True
                return name, handle
        finally:
            if started and take:
                self._taken += 1  # in the same step: never uncounted
            self.starting -= 1

    def _refill(self) -> None:
        self._refill_timer = None
        if self._shut_down:
            return
        if self._refilling is None or self._refilling.done():
            self._refilling = asyncio.get_running_loop().create_task(self._refill_loop())

    def _spares_wanted(self) -> int:
        """Spares to start now: up to ``spare_target``, and only into free room
        of the budget (a host at its budget keeps none: reuse replaces them)."""
        room = self.budget.max_active - self._workers()
        if self._memory_full() or self._shut_down:
            room = 0
        return max(0, min(self.spare_target - len(self._spares), room))

    async def _refill_loop(self) -> None:
        """Keep ``spare_target`` warm actors while there is room; a failure only
        costs a cold activation. One start at a time: each is counted (in
        :attr:`starting`) in the same step as the room was checked, so a
        concurrent activation never sees room that a refill already took."""
        while self._spares_wanted() > 0:
            try:
                name, handle = await self._start_worker()
            except UnavailableError:
                log.warning("warming a spare actor on %s failed", self.host)
                return
            if self._shut_down:
                self._kill_worker(name, handle)
            else:
                self._add_spare(name, handle)

    async def _take_actor(self, exclude: str = "") -> tuple[str, Any]:
        """A worker for a new binding: a warm spare; else a new worker while the
        budget has room; else the worker of the least recently used idle
        process (passivated for it, never ``exclude``).

        Raises:
            UnavailableError: ``host_full`` (every actor busy), or a worker
                failed to start.
        """
        # The spare is replaced SPARE_REFILL_DELAY_S after the activation that
        # took it has ended (:meth:`activate`), not at once: see that constant.
        while True:
            if self._spares:
                self._taken += 1
                name, handle = self._spares.pop()
                self._spare_since.pop(name, None)
                return name, handle
            if self._has_room():
                return await self._start_worker(take=True)
            try:
                return await self._evict_for(exclude)
            except UnavailableError:
                # Nothing idle now. Workers still starting, bound by other
                # activations or being released free up or become passivable
                # soon: wait for that (bounded by TAKE_TIMEOUT_S); else full.
                if not (self.starting or self._taken or self._releasing):
                    self.host_full += 1
                    raise
            freed = self._capacity_event
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(freed.wait(), 0.5)

    def _capacity_changed(self) -> None:
        """Wake activations waiting for a worker (a spare came, a worker stopped,
        a process became passivable)."""
        self._capacity_event.set()
        self._capacity_event = asyncio.Event()

    def _add_spare(self, name: str, handle: Any) -> None:
        self._spares.append((name, handle))
        self._spare_since[name] = time.monotonic()
        self._capacity_changed()

    def _trim_spares(self, linger_s: float = SPARE_LINGER_S) -> int:
        """Stop surplus spares (beyond ``spare_target``) unused for ``linger_s``
        seconds, oldest first; returns how many were stopped."""
        now = time.monotonic()
        surplus = len(self._spares) - self.spare_target
        stopped = 0
        for name, handle in sorted(self._spares, key=lambda w: self._spare_since.get(w[0], now)):
            if stopped >= surplus or now - self._spare_since.get(name, now) < linger_s:
                break
            self._spares.remove((name, handle))
            self._spare_since.pop(name, None)
            self._kill_worker(name, handle)
            stopped += 1
        return stopped

    async def trim_spares(self, linger_s: float = SPARE_LINGER_S) -> int:
        """Stop the surplus spares (beyond ``warm_spares``) unused for ``linger_s``
        seconds; returns how many. The memory loop does this every
        :data:`MEMORY_SAMPLE_S` with :data:`SPARE_LINGER_S`; ``0`` gives every
        surplus worker back at once."""
        return self._trim_spares(linger_s)

    def _reusable(self, name: str) -> bool:
        return self._uses.get(name, 0) < MAX_BINDINGS_PER_WORKER

    def _kill(self, handle: Any) -> None:
        import ray

        try:
            ray.kill(handle, no_restart=True)
        except Exception:
            log.exception("killing an actor failed")

    def _kill_worker(self, name: str, handle: Any) -> None:
        """Stop a worker for good and forget its bookkeeping."""
        self._pids.pop(name, None)
        self._uses.pop(name, None)
        self._kill(handle)
        self._capacity_changed()

    # -- least-recently-used passivation --------------------------------------------------

    async def _fresh_usage(self) -> dict[str, Usage]:
        """The served processes' last use, asked of their actors at most every
        :data:`USAGE_MAX_AGE_S` (one concurrent ``residency`` call each; an
        actor that does not answer within 1 s counts as busy)."""
        loop = asyncio.get_running_loop()
        if loop.time() - self._usage_at < USAGE_MAX_AGE_S:
            return self._usage
        if self._usage_refresh is not None:
            await asyncio.shield(self._usage_refresh)
            return self._usage
        fut: asyncio.Future[None] = loop.create_future()
        self._usage_refresh = fut
        try:
            served = list(self.actors.items())
            answers = await asyncio.gather(
                *(asyncio.wait_for(s.handle.residency.remote(), 1.0) for _p, s in served),
                return_exceptions=True)
            now = loop.time()
            usage: dict[str, Usage] = {}
            for (pid, s), got in zip(served, answers, strict=True):
                if isinstance(got, dict) and got.get("token") == s.token:
                    busy = bool(got.get("busy")) or int(got.get("inflight") or 0) > 0
                    usage[pid] = Usage(pid, float(got.get("idle_s") or 0.0), now, busy)
                else:  # slow, dead or rebinding: not a candidate this round
                    usage[pid] = Usage(pid, 0.0, now, True)
            self._usage, self._usage_at = usage, now
        finally:
            self._usage_refresh = None
            fut.set_result(None)
        return self._usage

    async def _evict_for(self, exclude: str) -> tuple[str, Any]:
        """Passivate the least recently used idle process and hand back its worker
        (or, past its reuse bound, a new one in its place).

        Raises:
            UnavailableError: ``host_full``: no served process is idle (each has
                a request in flight or a reasoning turn running); placement
                tries another host.
        """
        loop = asyncio.get_running_loop()
        for _round in range(2):
            usage = await self._fresh_usage()
            locked = {p for p, lk in self._locks.items() if lk.locked()}
            skip = {exclude} | self._evicting | locked
            for pid in lru_order(usage, loop.time(), exclude=skip):
                worker = await self._passivate(pid, "least recently used at the budget",
                                               take=True)
                if worker is None:
                    continue
                self.evictions += 1
                name, handle = worker
                if self._reusable(name):
                    return worker
                self._kill_worker(name, handle)
                self._taken -= 1
                return await self._start_worker(take=True)
            self._usage_at = 0.0  # the view may be stale: look once more
        n = len(self.actors)
        raise UnavailableError(
            f"host {self.host} is full: {n} of {self.budget.max_active} process actors, "
            "all in use; retry", host_full=True, active=n, max_active=self.budget.max_active)

    async def _passivate(self, process_id: str, reason: str, *, take: bool = False
                         ) -> tuple[str, Any] | None:
        """End ``process_id``'s binding here if it is idle now, release its
        ownership record, and return its worker (None: busy, gone, or its
        record could not be released, in which case the worker is stopped).
        With ``take`` the worker counts as taken by an activation from the
        moment it stops being served."""
        import ray

        served = self.actors.get(process_id)
        lock = self._locks.setdefault(process_id, asyncio.Lock())
        if served is None or process_id in self._evicting or lock.locked():
            return None  # gone, or an activation or release of it is under way
        self._evicting.add(process_id)
        await lock.acquire()  # free (checked above, no await since): at once
        try:
            try:
                answer = await asyncio.wait_for(
                    served.handle.unbind.remote(served.token, True), timeout=5)
            except TimeoutError:
                self._usage[process_id] = Usage(process_id, 0.0, time.monotonic(), True)
                return None
            except ray.exceptions.RayActorError:
                await self._release_locked(process_id, served.token, "actor died")
                return None
            if not answer.get("unbound"):
                self._usage[process_id] = Usage(process_id, 0.0, time.monotonic(), True)
                return None
            if self.actors.get(process_id) is not served:
                # parked meanwhile (lease lost): the parking stops this worker
                return None
            del self.actors[process_id]
            if take:
                self._taken += 1
            self._forget_served(process_id)
            name = served.ownership.address
            try:
                await served.owners.release(served.ownership)
            except SvitError:
                # The record names this worker; it must not serve another
                # process while that record stands (the lease expiry cleans up).
                log.exception("release of passivated %s failed; stopping its worker",
                              process_id)
                if take:
                    self._taken -= 1
                self._kill_worker(name, served.handle)
                return None
            log.info("host %s passivated %s (%s)", self.host, process_id, reason)
            return name, served.handle
        finally:
            lock.release()
            self._evicting.discard(process_id)

    def _prune_locks(self) -> int:
        """Forget the per-process locks of processes not served here and not
        locked (nobody waits on a free lock), so they stay as many as the host's
        active processes, not as many as it ever saw; returns how many went."""
        idle = [p for p, lock in self._locks.items()
                if p not in self.actors and not lock.locked()]
        for pid in idle:
            del self._locks[pid]
        return len(idle)

    def _forget_served(self, process_id: str) -> None:
        self._usage.pop(process_id, None)
        task = self._watches.pop(process_id, None)
        if task is not None and task is not asyncio.current_task():
            task.cancel()

    async def _memory_loop(self, period_s: float = MEMORY_SAMPLE_S) -> None:
        """Never dies: stop surplus spares that lingered (:meth:`_trim_spares`);
        read the actors' summed PSS; over the memory budget, stop spares, then
        passivate least-recently-used idle processes (their workers stopped)
        until under it."""
        while True:
            try:
                await asyncio.sleep(period_s)
                self._trim_spares()
                self._prune_locks()
                await self.check_memory()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("memory round on %s failed", self.host)

    async def check_memory(self) -> float:
        """Read the summed PSS (MiB) of this host's actors now, and act on the
        memory budget (see :meth:`_memory_loop`). Returns the reading."""
        names = [s.ownership.address for s in self.actors.values()] + \
            [n for n, _h in self._spares]
        pids = {n: self._pids[n] for n in names if n in self._pids}

        def read() -> dict[str, float]:
            out = {}
            for name, pid in pids.items():
                kib = read_pss_kib(pid)
                if kib is not None:
                    out[name] = kib / 1024
            return out

        by_name = await asyncio.to_thread(read)
        self.pss_mib = round(sum(by_name.values()), 1)
        self._pss_at = time.monotonic()
        while self._memory_full() and self._spares:
            name, handle = self._spares.pop()
            self._spare_since.pop(name, None)
            self.pss_mib -= by_name.get(name, 0.0)
            self._kill_worker(name, handle)
        if self._memory_full():
            usage = await self._fresh_usage()
            for pid in lru_order(usage, asyncio.get_running_loop().time()):
                if not self._memory_full():
                    break
                worker = await self._passivate(pid, "over the memory budget")
                if worker is not None:
                    self.evictions += 1
                    self.pss_mib -= by_name.get(worker[0], 0.0)
                    self._kill_worker(*worker)
        return self.pss_mib

    async def _join(self) -> None:
        """Grant a lease through a new lease keeper and register the host under it.

        The keeper (:class:`~svit_cluster.ownership.KeptLease`) is a process of
        its own at :data:`KEEPER_NICENESS` with its own etcd connection, so
        nothing this agent does can starve the keepalives. It watches this
        agent and the raylet: one gone or stopped revokes the lease at once,
        so a half-dead host's processes move at once instead of after the TTL;
        so does Ray declaring this node dead (:class:`HostHealth` polls the node
        table and reports it to the keeper).

        Raises:
            UnavailableError: the host is unhealthy (no lease is granted) or
                etcd could not grant a lease.
        """
        if self._health is None:
            self._health = HostHealth.of_this_worker()
            self._health.on_problem = self._report_unhealthy
            self._health.start()
        reason = await asyncio.to_thread(self._health.problem)
        if reason is not None:
            raise UnavailableError(f"host {self.host} cannot serve: {reason}")
        endpoint = self.cfg.etcd_for(self.host)
        client = open_client(endpoint)
        watch = {"agent": os.getpid()}
        if self._health.raylet_pid is not None:
            watch["raylet"] = self._health.raylet_pid
        lease = KeptLease(client, endpoint, ttl_s=self.cfg.lease_ttl_s,
                          safety_margin_s=min(1.0, self.cfg.lease_ttl_s / 4),
                          watch=watch, niceness=KEEPER_NICENESS)
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
        try:
            await asyncio.wait_for(
                client.put(host_key(self.cfg.cluster, self.host), value,
                           lease=lease.lease_id),
                timeout=5,
            )
        except BaseException:
            await lease.close()
            raise
        self.lease = lease
        self.incarnation += 1
        log.info("host %s joined with lease %s (keeper pid %s)", self.host, lease.lease_id,
                 lease.keeper_pid)

    def _report_unhealthy(self, reason: str) -> None:
        """HostHealth's callback (its poll thread): the keeper revokes the lease."""
        lease = self.lease
        if lease is not None:
            lease.report_unhealthy(reason)

    def _on_lease(self, state: Any) -> None:
        """SUSPENDED pauses every actor of the host, HELD resumes them, LOST ends them.

        SUSPENDED is temporary (a keepalive failed, e.g. on an etcd member that
        just died, but the lease cannot have expired yet): closing the actors
        then would make the loss of one etcd member an outage of the host.
        """
        self._lease_seq += 1
        seq = self._lease_seq
        for served in list(self.actors.values()):
            if state is LeaseState.LOST:
                served.handle.fence_out.remote(f"host lease {state}", served.token)
            elif state is LeaseState.SUSPENDED:
                served.handle.suspend.remote(f"host lease {state}", seq, served.token)
            else:
                served.handle.resume.remote(seq, served.token)

    def _on_own_lease(self, lease: Any, state: Any) -> None:
        """When ``lease`` goes LOST without having been revoked, get it revoked at etcd
        now (:meth:`_revoke_lost`) instead of letting it run out its TTL there."""
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
        lease = self.lease
        if lease is None or host == self.host or lease.lease_id == lease_id:
            return False
        gone = await revoke_lease_id(lease.client, lease_id, timeout_s=2.0)
        if gone:
            log.warning("host %s: revoked lost lease %s of host %s in its name",
                        self.host, lease_id, host)
        return gone

    async def _rejoin_loop(self) -> None:
        """Never dies: after LOST, end every binding (keeping the workers), join
        again with a new lease, and activate the parked processes again."""
        while True:
            try:
                await asyncio.sleep(0.25)
                if self.lease is not None and self.lease.state is LeaseState.LOST:
                    reason = f"lease {self.lease.lease_id}: {self.lease.lost_reason}"
                    self.lost_leases = [*self.lost_leases[-9:], reason]
                    log.warning("host %s lost its lease (%s); parking %d actors and "
                                "rejoining", self.host, reason, len(self.actors))
                    old, self.lease = self.lease, None
                    await self._park_all("lease lost")
                    try:
                        await old.close()
                    except Exception:
                        log.exception("closing the old lease failed")
                if self.lease is None:
                    await self._join()
                    if self._parked:
                        task = asyncio.get_running_loop().create_task(self._unpark())
                        self._background.add(task)
                        task.add_done_callback(self._background.discard)
            except asyncio.CancelledError:
                raise
            except UnavailableError as exc:  # unhealthy host or etcd down: expected
                log.warning("host %s cannot rejoin yet: %s", self.host, exc)
                await asyncio.sleep(0.5)
            except Exception:
                log.exception("host %s rejoin round failed; retrying", self.host)
                await asyncio.sleep(0.5)

    async def _park_all(self, reason: str) -> None:
        """End the binding of every served process after the lease was LOST.

        Each worker whose binding ends is kept as a spare (within the budget;
        else stopped) and the processes are remembered for :meth:`_unpark`.
        Their ownership records went with the lease, so nothing is released.
        A worker that is busy (a request still in flight) or does not answer
        within 2 s is stopped instead (its commits are fenced by any newer
        owner either way).
        """
        import ray

        served, self.actors = dict(self.actors), {}
        self._parked = list(dict.fromkeys([*self._parked, *served]))[-4 * self.budget.max_active:]
        for pid in served:
            self._forget_served(pid)

        stopped: list[str] = []

        async def park(pid: str, s: ServedActor) -> None:
            name = s.ownership.address
            try:
                answer = await asyncio.wait_for(s.handle.unbind.remote(s.token, True), 2.0)
            except (TimeoutError, ray.exceptions.RayError) as exc:
                answer = {"error": type(exc).__name__}
            if answer.get("unbound") and self._reusable(name):
                self._add_spare(name, s.handle)
            else:
                stopped.append(f"{pid} ({answer})")
                self._kill_worker(name, s.handle)

        await asyncio.gather(*(park(p, s) for p, s in served.items()))
        self.dropped_at_lease_loss += len(stopped)
        log.warning("host %s parked %d processes (%s); %d spares; workers stopped: %s",
                    self.host, len(served), reason, len(self._spares), stopped or "none")

    async def _unpark(self) -> None:
        """Activate the processes parked at the last lease loss again, a few at a
        time, under the new lease; one that another host took meanwhile stays
        there (its record exists: the answer is ``owned``).

        Nobody else asks for a parked process, so a transient failure
        (``unavailable``: the new lease briefly SUSPENDED, no worker in time, the
        host shedding, no lease at all) is retried, with waits doubling from
        0.25 s to 2 s, for up to :data:`UNPARK_RETRY_S`, under whichever lease the
        agent holds then. Any other answer (``not_found``: deleted meanwhile,
        ``conflict``, ...) is final.
        """
        parked, self._parked = self._parked, []
        gate = asyncio.Semaphore(max(1, self.budget.max_starting))

        async def attempt(pid: str) -> str:
            if pid in self.actors:
                return "serving"
            async with gate:
                result = await self.activate(pid)
            return error_code(result) or "ok"

        async def one(pid: str) -> None:
            retrying = AsyncRetrying(
                stop=stop_after_delay(UNPARK_RETRY_S),
                wait=wait_exponential(multiplier=0.25, max=2.0),
                retry=retry_if_result(lambda code: code == "unavailable"),
                retry_error_callback=lambda state: "unavailable (gave up)")
            code: str = await retrying(attempt, pid)
            if code not in ("ok", "serving"):
                log.info("host %s: %s not activated again after the rejoin: %s",
                         self.host, pid, code)

        await asyncio.gather(*(one(p) for p in parked if p not in self.actors))

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
                self._registry()
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
            if self._refill_timer is None and self._spares_wanted() > 0:
                self._refill_timer = asyncio.get_running_loop().call_later(
                    SPARE_REFILL_DELAY_S, self._refill)

    async def _activate(self, process_id: str, create: dict[str, Any] | None
                        ) -> dict[str, Any]:
        """One activation under ONE lease object.

        The rejoin loop may drop or replace ``self.lease`` at any await, so no
        state read before an await is trusted after it: the lease is read once,
        checked again after every await (:meth:`_same_lease`), and an actor is
        registered only while that same lease is still this agent's lease (a
        lease read before an await may be gone after it: using it then would
        raise ``AttributeError``).

        Raises:
            UnavailableError: no lease, or the lease was lost or replaced meanwhile.
            ConflictError, InvalidInput: from the ownership transaction.
        """

        lease = self._held_lease()
        taking = asyncio.ensure_future(self._take_actor(process_id))
        try:
            name, handle = await self._while_held(lease, taking, timeout_s=TAKE_TIMEOUT_S,
                                                  cancel=False)
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
            self._taken -= 1

    async def _bind(self, lease: Any, process_id: str, create: dict[str, Any] | None,
                    name: str, handle: Any) -> dict[str, Any]:
        """Own ``process_id`` under ``lease`` and bind the taken worker to it."""
        try:
            self._same_lease(lease)
        except BaseException:
            self._add_spare(name, handle)  # unused: keep it warm
            raise
        # The ownership record names the actor, so routes never need a second lookup.
        owners = Owners(lease, cluster=self.cfg.cluster, host=self.host, address=name)
        try:
            # Acquire and claim the Redis fence; a token below the fence (etcd
            # restored from a backup) is recovered from within this call.
            ownership = await owners.claim(process_id, self._fences())
        except ConflictError as exc:
            self._add_spare(name, handle)  # unused: keep it warm
            return Activated(ServeStatus.OWNED, exc.fields.get("owner_host"),
                             exc.fields.get("token"), exc.fields.get("owner_address")).to_answer()
        except BaseException:
            self._add_spare(name, handle)
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
            self._kill_worker(name, handle)
            try:
                await owners.release(ownership)
            except SvitError:
                log.exception("release after failed start of %s", process_id)
            return result
        self.actors[process_id] = ServedActor(ownership.token, handle, owners, ownership)
        self._uses[name] = self._uses.get(name, 0) + 1
        if self._uses[name] > 1:
            self.worker_reuses += 1
        if isinstance(result.get("pid"), int):
            self._pids[name] = result.pop("pid")
        self._usage[process_id] = Usage(process_id, 0.0, time.monotonic(), False)
        self._start_watch(process_id, ownership.token, handle)
        self.activations += 1
        self._capacity_changed()  # a served process can be passivated for another
        return Activated(ServeStatus.SERVING, self.host, ownership.token, name,
                         result).to_answer()

    async def _while_held(self, lease: Any, awaitable: Any, *, timeout_s: float,
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
                self._same_lease(lease)
                if loop.time() >= end:
                    raise TimeoutError(f"no answer within {timeout_s} s")
        finally:
            if cancel and not task.done():
                task.cancel()

    def _kill_if_created(self, fut: asyncio.Future[Any]) -> None:
        if fut.cancelled() or fut.exception() is not None:
            return
        name, handle = fut.result()
        self._taken -= 1
        self._kill_worker(name, handle)

    def _fences(self) -> Any:
        if self._fence_store is None:
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
        the worker is gone (Ray fails it with ``RayActorError``) or the binding
        ends: no polling, so an idle actor is never woken for this. When the
        call ends for any reason while this actor still serves the process
        here, the answer comes from :meth:`reconcile` (an ``info`` probe with a
        timeout): a live actor is watched again, a dead one is released.
        """
        while True:
            try:
                await handle.watch.remote(token)
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
        """Release ``process_id`` if still served here under ``token``, then end
        its binding: the worker becomes a warm spare when one is wanted (and it
        is idle and not past its reuse bound), else it is stopped.

        Returns:
            True when the ownership record was deleted here.
        """
        # One at a time per process: a passivation at the budget of the same
        # binding must not hand its worker to another process while this
        # release stops it (or the reverse).
        async with self._locks.setdefault(process_id, asyncio.Lock()):
            return await self._release_locked(process_id, token, reason)

    async def _release_locked(self, process_id: str, token: int, reason: str) -> bool:
        current = self.actors.get(process_id)
        if current is None or current.token != token:
            return False
        handle, owners, ownership = current.handle, current.owners, current.ownership
        del self.actors[process_id]
        self._forget_served(process_id)
        # Its worker counts against the budget until its record is gone: a new
        # activation meanwhile would make one record more than the budget.
        self._releasing += 1
        try:
            return await self._end_released(process_id, token, reason, handle, owners,
                                            ownership)
        finally:
            self._releasing -= 1

    async def _end_released(self, process_id: str, token: int, reason: str, handle: Any,
                            owners: Any, ownership: Any) -> bool:
        released = False
        try:
            released = await owners.release(ownership)
        except SvitError:
            log.exception("release of %s failed (%s); the lease expiry cleans up",
                          process_id, reason)
        name = ownership.address
        # The worker stays warm as a spare (its slot of the budget was this
        # process's): a surplus one is stopped after SPARE_LINGER_S unused.
        if released and reason != "actor died" and self._reusable(name) \
                and not self._memory_full() and not self._shut_down:
            try:
                answer = await asyncio.wait_for(handle.unbind.remote(token, True), 5.0)
            except Exception:  # dead or stuck: stopped below
                answer = {}
            if answer.get("unbound"):
                self._add_spare(name, handle)
                return released
        self._kill_worker(name, handle)
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
            **self.residency(),
        }

    def residency(self) -> dict[str, Any]:
        """This host's residency figures (no actor is asked): ``max_active``,
        ``max_actors_pss_mib``, ``max_starting``, ``budget_basis``,
        ``starting``, ``pss_mib`` (summed PSS at the last reading, MiB;
        ``pss_age_s`` its age), ``lru_idle_s`` (idle seconds of the least
        recently used served process, from the last view; None when none),
        ``evictions``, ``worker_starts``, ``worker_reuses``, ``host_full``
        (activations answered full), ``dropped_at_lease_loss`` (workers stopped
        instead of kept when a lease was lost), ``keeper_pid``."""
        now = time.monotonic()
        idle = [u.idle_at(now) for p, u in self._usage.items() if p in self.actors]
        lease = self.lease
        return {
            "max_active": self.budget.max_active,
            "max_actors_pss_mib": self.budget.max_actors_pss_mib,
            "max_starting": self.budget.max_starting,
            "budget_basis": self.budget.basis,
            "starting": self.starting,
            "pss_mib": self.pss_mib,
            "pss_age_s": round(now - self._pss_at, 1) if self._pss_at else None,
            "lru_idle_s": round(max(idle), 1) if idle else None,
            "evictions": self.evictions,
            "worker_starts": self.worker_starts,
            "worker_reuses": self.worker_reuses,
            "host_full": self.host_full,
            "dropped_at_lease_loss": self.dropped_at_lease_loss,
            "keeper_pid": getattr(lease, "keeper_pid", None),
        }

    async def ping(self) -> bool:
        return True

    def _registry(self) -> Any:
        """This agent's Prometheus registry (made on first use)."""
        if self._lease_metrics is None:
            registry = CollectorRegistry()
            registry.register(KeptLeaseCollector(lambda: self.lease))
            registry.register(ResidencyCollector(self))
            self._shed_metric = Counter(
                "svit_agent_shed_activations",
                "Activations this host agent refused (503 + Retry-After) because "
                "max_activations were under way.", registry=registry)
            self._lease_metrics = registry
        return self._lease_metrics

    async def metrics(self) -> str:
        """This agent's metrics in the Prometheus text format: its lease's
        (``svit_lease_keepalive_lag_seconds`` ...; see
        :class:`~svit_cluster.ownership.KeptLeaseCollector`), its residency
        (``svit_agent_active_actors``, ``svit_agent_max_active_actors``, ...;
        see :class:`~svit_cluster.cluster._agent_metrics.ResidencyCollector`)
        and ``svit_agent_shed_activations_total`` (activations shed as
        overloaded)."""
        return generate_latest(self._registry()).decode()

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
        for task in (self._rejoin, self._reconcile_task, self._refilling, self._memory_task,
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
        self._spare_since.clear()
        for name, handle in spares:
            self._kill_worker(name, handle)
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
