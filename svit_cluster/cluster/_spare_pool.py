"""A host's process-actor workers that serve nobody: warm spares, starts, takes.

:class:`WorkerPool` is a plain object the :class:`~svit_cluster.cluster.HostAgent`
owns (not a Ray actor). It starts Ray workers for process actors, paced by the
residency budget, keeps the warm spares, hands one to an activation, and stops
workers for good. It also keeps the budget's counts: every worker this host
runs, starts, has handed out or is releasing counts against
``budget.max_active``, and the summed PSS of the last reading against
``budget.max_actors_pss_mib``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

from svit_cluster.cluster._actor import ProcessActor
from svit_cluster.cluster._config import PROCESS_ACTOR_NICENESS, ClusterConfig, host_resource
from svit_cluster.cluster._names import actor_name, agent_name
from svit_cluster.cluster._residency import Budget
from svit_cluster.errors import UnavailableError

__all__ = ["MAX_BINDINGS_PER_WORKER", "SPARE_LINGER_S", "WorkerPool"]

log = logging.getLogger(__name__)

#: Bindings one Ray worker serves before it is stopped instead of reused, so
#: that whatever a long-lived interpreter accumulates stays bounded.
MAX_BINDINGS_PER_WORKER = 500
#: Seconds a worker left over by a passivation stays warm as a surplus spare
#: (beyond ``warm_spares``, always inside the budget) before it is stopped: a
#: process activated again within that time binds in milliseconds instead of
#: waiting for a Ray worker to start, and an idle host still gives its workers
#: back.
SPARE_LINGER_S = 60.0
#: Seconds a new worker has to answer its first ``warm`` call.
WARM_TIMEOUT_S = 60.0


class WorkerPool:
    """The workers of one host that serve no process, and the budget's counts.

    State: ``spares`` (warm, unbound ``(actor name, handle)`` pairs, the last
    one handed out first) and when each became a spare (monotonic seconds);
    ``starting`` (Ray workers being started now) and ``taken`` (workers handed
    to activations not yet registered as served), both counted against the
    budget; each worker's OS process id and bindings served, by actor name;
    ``pss_mib`` (summed PSS of the host's actors at the last reading, MiB) and
    ``pss_at`` (its monotonic time, 0 before the first); ``spare_target``
    (spares kept while the budget has room) and ``failover_target`` (spares the
    failover headroom asks for; :meth:`target` is the larger); ``closed`` (the host is shutting
    down: no spare is started or kept). Counters: ``worker_starts``,
    ``worker_reuses``.

    Args:
        cfg: the cluster configuration.
        host: this host's name.
        budget: the residency budget (replaced by the agent at its start).
        serving: how many workers serve a process or are being released now
            (counted against the budget besides this pool's own).
    """

    def __init__(self, cfg: ClusterConfig, host: str, budget: Budget,
                 serving: Callable[[], int]) -> None:
        self.cfg = cfg
        self.host = host
        self.budget = budget
        self._serving = serving
        self.spares: list[tuple[str, Any]] = []
        self.spare_since: dict[str, float] = {}
        self.spare_target = cfg.warm_spares
        #: Spares the failover headroom asks for (``HostAgent.headroom_round``);
        #: the pool keeps :meth:`target`, the larger of the two.
        self.failover_target = 0
        self.starting = 0
        self.taken = 0
        self.pids: dict[str, int] = {}
        self.uses: dict[str, int] = {}
        self.pss_mib = 0.0
        self.pss_at = 0.0
        self.closed = False
        self.worker_starts = 0
        self.worker_reuses = 0
        self.refilling: asyncio.Task[None] | None = None
        self.refill_timer: asyncio.TimerHandle | None = None
        self._start_gate: asyncio.Semaphore | None = None
        #: Set (and replaced) whenever a worker may have become available.
        self._capacity_event = asyncio.Event()
        #: Called when a refill ends with nothing more wanted (the spares are
        #: up, or the budget has no room for more): the agent then tells the
        #: gateways this host is warm (``AgentLease.publish_warm``).
        self.on_warm: Callable[[], None] | None = None

    # -- the budget ----------------------------------------------------------------------

    def workers(self) -> int:
        """Process actors this host runs, is starting or is binding (what the
        budget bounds)."""
        return self._serving() + len(self.spares) + self.starting + self.taken

    def memory_full(self) -> bool:
        return self.pss_mib >= self.budget.max_actors_pss_mib

    def has_room(self) -> bool:
        """One more Ray worker fits the budget (count and memory)."""
        return self.workers() < self.budget.max_active and not self.memory_full()

    def reusable(self, name: str) -> bool:
        """The worker ``name`` may serve one more binding."""
        return self.uses.get(name, 0) < MAX_BINDINGS_PER_WORKER

    def bound(self, name: str, pid: Any) -> None:
        """Note one more binding served by worker ``name`` (``pid``: its OS process
        id when the binding reported one)."""
        self.uses[name] = self.uses.get(name, 0) + 1
        if self.uses[name] > 1:
            self.worker_reuses += 1
        if isinstance(pid, int):
            self.pids[name] = pid

    # -- capacity notices ----------------------------------------------------------------

    def capacity_changed(self) -> None:
        """Wake activations waiting for a worker (a spare came, a worker stopped,
        a process became passivable)."""
        self._capacity_event.set()
        self._capacity_event = asyncio.Event()

    async def wait_capacity(self, timeout_s: float) -> None:
        """Wait until :meth:`capacity_changed` is called, at most ``timeout_s`` seconds."""
        freed = self._capacity_event
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(freed.wait(), timeout_s)

    # -- workers -------------------------------------------------------------------------

    def new_actor(self) -> tuple[str, Any]:
        """Create one detached, unbound process actor pinned to this host
        (blocking: Ray's GCS). Returns ``(actor name, handle)``."""
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
        ).remote(self.cfg, self.host, "", 0, agent_name(self.host),
                 PROCESS_ACTOR_NICENESS)
        return name, handle

    def kill(self, handle: Any) -> None:
        """Kill one Ray actor (a failure is logged)."""
        import ray

        try:
            ray.kill(handle, no_restart=True)
        except Exception:
            log.exception("killing an actor failed")

    def kill_worker(self, name: str, handle: Any) -> None:
        """Stop a worker for good and forget its bookkeeping."""
        self.pids.pop(name, None)
        self.uses.pop(name, None)
        self.kill(handle)
        self.capacity_changed()

    async def start_worker(self, *, take: bool = False) -> tuple[str, Any]:
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
                name, handle = await asyncio.to_thread(self.new_actor)
                try:
                    pid = await asyncio.wait_for(handle.warm.remote(), timeout=WARM_TIMEOUT_S)
                except Exception as exc:
                    self.kill(handle)
                    raise UnavailableError(f"a new process actor on host {self.host} did not "
                                           f"start: {type(exc).__name__}") from exc
                self.worker_starts += 1
                if isinstance(pid, int):
                    self.pids[name] = pid
                started = True
                return name, handle
        finally:
            if started and take:
                self.taken += 1  # in the same step: never uncounted
            self.starting -= 1

    # -- spares --------------------------------------------------------------------------

    def add_spare(self, name: str, handle: Any) -> None:
        """Keep the unbound worker ``name`` warm as a spare."""
        self.spares.append((name, handle))
        self.spare_since[name] = time.monotonic()
        self.capacity_changed()

    def take_spare(self) -> tuple[str, Any] | None:
        """Hand the newest spare to an activation (counted as taken), or None."""
        if not self.spares:
            return None
        self.taken += 1
        name, handle = self.spares.pop()
        self.spare_since.pop(name, None)
        return name, handle

    def drop_spare(self) -> tuple[str, Any] | None:
        """Remove the newest spare from the pool (not counted as taken), or None."""
        if not self.spares:
            return None
        name, handle = self.spares.pop()
        self.spare_since.pop(name, None)
        return name, handle

    def target(self) -> int:
        """Spares to keep: ``spare_target`` or ``failover_target``, the larger."""
        return max(self.spare_target, self.failover_target)

    def trim(self, linger_s: float = SPARE_LINGER_S) -> int:
        """Stop surplus spares (beyond :meth:`target`) unused for ``linger_s``
        seconds, oldest first; returns how many were stopped."""
        now = time.monotonic()
        surplus = len(self.spares) - self.target()
        stopped = 0
        for name, handle in sorted(self.spares, key=lambda w: self.spare_since.get(w[0], now)):
            if stopped >= surplus or now - self.spare_since.get(name, now) < linger_s:
                break
            self.spares.remove((name, handle))
            self.spare_since.pop(name, None)
            self.kill_worker(name, handle)
            stopped += 1
        return stopped

    def drain(self) -> int:
        """Stop every spare (the host is shutting down); returns how many."""
        spares, self.spares = self.spares, []
        self.spare_since.clear()
        for name, handle in spares:
            self.kill_worker(name, handle)
        return len(spares)

    def warm(self) -> bool:
        """True when no spare is wanted now (see :meth:`wanted`)."""
        return self.wanted() == 0

    def wanted(self) -> int:
        """Spares to start now: up to :meth:`target`, and only into free room
        of the budget (a host at its budget keeps none: reuse replaces them)."""
        room = self.budget.max_active - self.workers()
        if self.memory_full() or self.closed:
            room = 0
        return max(0, min(self.target() - len(self.spares), room))

    def refill(self) -> None:
        """Start the refill loop unless it runs already or the host is closing."""
        self.refill_timer = None
        if self.closed:
            return
        if self.refilling is None or self.refilling.done():
            self.refilling = asyncio.get_running_loop().create_task(self.refill_loop())

    def refill_later(self, delay_s: float) -> None:
        """Run :meth:`refill` in ``delay_s`` seconds when spares are wanted and no
        refill is scheduled already."""
        if self.refill_timer is None and self.wanted() > 0:
            self.refill_timer = asyncio.get_running_loop().call_later(delay_s, self.refill)

    async def refill_loop(self) -> None:
        """Keep :meth:`target` warm actors while there is room; a failure only
        costs a cold activation. One start at a time: each is counted (in
        :attr:`starting`) in the same step as the room was checked, so a
        concurrent activation never sees room that a refill already took."""
        while self.wanted() > 0:
            try:
                name, handle = await self.start_worker()
            except UnavailableError:
                log.warning("warming a spare actor on %s failed", self.host)
                return
            if self.closed:
                self.kill_worker(name, handle)
            else:
                self.add_spare(name, handle)
        if not self.closed and self.on_warm is not None:
            self.on_warm()

    def close(self) -> None:
        """Start no more spares: cancel a scheduled or running refill."""
        self.closed = True
        if self.refill_timer is not None:
            self.refill_timer.cancel()
            self.refill_timer = None
        if self.refilling is not None and not self.refilling.done():
            self.refilling.cancel()
