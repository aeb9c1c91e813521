"""The process actors a host serves: watching, releasing, passivating, parking.

:class:`Supervisor` is a plain object the :class:`~svit_cluster.cluster.HostAgent`
owns (not a Ray actor). It keeps the registry of processes served on this
host, notices an actor that died (its outstanding ``watch`` call, a slow sweep
as fallback) and releases its ownership, passivates the least recently used
idle process when the host is at its residency budget or over its memory
guard (:mod:`svit_cluster.cluster._memory_guard`), hands a worker to an
activation, pauses or fences out the actors as the host lease changes state,
parks every binding when the lease is lost and activates the parked processes
again after the rejoin.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from tenacity import AsyncRetrying, retry_if_result, stop_after_delay, wait_exponential

from svit_cluster.cluster._config import ClusterConfig
from svit_cluster.cluster._residency import Usage, lru_order
from svit_cluster.cluster._results import ActorUsage, Outcome, Unbound
from svit_cluster.cluster._spare_pool import WorkerPool
from svit_cluster.cluster._types import ServedActor
from svit_cluster.errors import SvitError, UnavailableError
from svit_cluster.ownership import LeaseState, Owners

__all__ = ["RECONCILE_SWEEP_S", "UNPARK_RETRY_S", "USAGE_MAX_AGE_S", "Supervisor"]

log = logging.getLogger(__name__)

#: Seconds a least-recently-used view of the served processes stays fresh: a
#: passivation at the budget asks every actor for its idle time at most this
#: often (one ``residency`` call each), never per activation.
USAGE_MAX_AGE_S = 1.0
#: Seconds between two fallback sweeps of :meth:`Supervisor.reconcile` over the
#: served actors. A dead actor is noticed at once by its outstanding
#: ``ProcessActor.watch`` call, so the sweep is only a fallback and can be rare:
#: every sweep makes every idle actor answer a Ray call.
RECONCILE_SWEEP_S = 30.0
#: Seconds a process parked at a lease loss is retried after the rejoin while
#: its activation answers ``unavailable``: nobody else asks for it, so without
#: retries one transient failure would leave it unowned until its next request.
UNPARK_RETRY_S = 60.0


class Supervisor:
    """The live process actors of one host and their life cycle.

    State: ``actors`` (:class:`ServedActor` by process id); one lock per
    process (an activation, release or passivation of it runs alone); one
    watch task per served actor; the least-recently-used view (``usage``,
    :class:`Usage` by process id, and ``usage_at``, its loop time; 0 makes the
    next look ask again); processes being passivated; ``releasing`` (served
    processes whose ownership record is being released, counted against the
    budget); ``parked`` (processes served when the last lease was lost, to be
    activated again); ``lease_seq`` (orders suspend/resume notices: an actor
    drops an older one). Counters: ``evictions``, ``host_full`` (activations
    answered full), ``dropped_at_lease_loss`` (workers stopped, not kept, when
    a lease was LOST).

    Args:
        cfg: the cluster configuration.
        host: this host's name.
        pool: the host's idle workers (spares, starts) and budget counts.
        lease: returns the host's current lease (None when it has none).
    """

    def __init__(self, cfg: ClusterConfig, host: str, pool: WorkerPool,
                 lease: Callable[[], Any]) -> None:
        self.cfg = cfg
        self.host = host
        self.pool = pool
        self._lease = lease
        self.actors: dict[str, ServedActor] = {}
        self.locks: dict[str, asyncio.Lock] = {}
        self.watches: dict[str, asyncio.Task[None]] = {}
        self.usage: dict[str, Usage] = {}
        self.usage_at = 0.0
        self._usage_refresh: asyncio.Future[None] | None = None
        self._evicting: set[str] = set()
        self.releasing = 0
        self.parked: list[str] = []
        self.lease_seq = 0
        self.evictions = 0
        self.host_full = 0
        self.dropped_at_lease_loss = 0

    def lock(self, process_id: str) -> asyncio.Lock:
        """The lock of ``process_id`` (made on first use)."""
        return self.locks.setdefault(process_id, asyncio.Lock())

    def holding(self) -> int:
        """Workers serving a process here or being released (budget count)."""
        return len(self.actors) + self.releasing

    def serve(self, process_id: str, served: ServedActor) -> None:
        """Register ``served`` as ``process_id``'s actor here and watch it."""
        self.actors[process_id] = served
        self.usage[process_id] = Usage(process_id, 0.0, time.monotonic(), False)
        self.start_watch(process_id, served.token, served.handle)

    def forget(self, process_id: str) -> None:
        """Drop ``process_id``'s usage entry and stop its watch (not the caller's own)."""
        self.usage.pop(process_id, None)
        task = self.watches.pop(process_id, None)
        if task is not None and task is not asyncio.current_task():
            task.cancel()

    def prune_locks(self) -> int:
        """Forget the per-process locks of processes not served here and not
        locked (nobody waits on a free lock), so they stay as many as the host's
        active processes, not as many as it ever saw; returns how many went."""
        idle = [p for p, lock in self.locks.items()
                if p not in self.actors and not lock.locked()]
        for pid in idle:
            del self.locks[pid]
        return len(idle)

    # -- lease states --------------------------------------------------------------------

    def on_lease(self, state: Any) -> None:
        """HELD serves, SUSPENDED holds and then pauses, LOST ends every actor of the host.

        SUSPENDED (no keepalive answered for two intervals: an etcd leader
        election, a member cut off) is temporary, and until the lease's
        ``certain_until`` (its last answered keepalive + TTL - margin; see
        ``HostLease``) etcd cannot have expired it: the actors go on serving,
        only their idle passivation waits (``hold``: a release could not reach
        etcd). Past that time, in the election grace, they pause (``suspend``:
        no commit) until HELD resumes them. Pausing at once made every etcd
        leader election (1-2 s) a stall of every process of every host; closing
        them would make it an outage. With no lease to ask, SUSPENDED pauses
        at once. Each notice carries a new ``lease_seq``; a pause scheduled
        for an earlier notice is void.
        """
        self.lease_seq += 1
        seq = self.lease_seq
        if state is LeaseState.SUSPENDED:
            lease = self._lease()
            delay = 0.0 if lease is None else lease.certain_until - time.monotonic()
            if delay > 0 and self._later(delay, self._pause_if_still, seq):
                for served in list(self.actors.values()):
                    served.handle.hold.remote(seq, served.token)
                return
        self._tell(state, seq)

    def _tell(self, state: Any, seq: int) -> None:
        for served in list(self.actors.values()):
            if state is LeaseState.LOST:
                served.handle.fence_out.remote(f"host lease {state}", served.token)
            elif state is LeaseState.SUSPENDED:
                served.handle.suspend.remote(f"host lease {state}", seq, served.token)
            else:
                served.handle.resume.remote(seq, served.token)

    @staticmethod
    def _later(delay_s: float, call: Callable[..., None], *args: Any) -> bool:
        """Run ``call(*args)`` after ``delay_s`` on the running loop; False without one."""
        try:
            asyncio.get_running_loop().call_later(delay_s, call, *args)
        except RuntimeError:
            return False
        return True

    def _pause_if_still(self, seq: int) -> None:
        """The lease stayed SUSPENDED past ``certain_until``: pause the actors,
        unless a later lease notice (HELD, LOST) came meanwhile."""
        if seq == self.lease_seq:
            self.lease_seq += 1
            self._tell(LeaseState.SUSPENDED, self.lease_seq)

    async def park_all(self, reason: str) -> None:
        """End the binding of every served process after the lease was LOST.

        Each worker whose binding ends is kept as a spare (within the budget;
        else stopped) and the processes are remembered in ``parked``.
        Their ownership records went with the lease, so nothing is released.
        A worker that is busy (a request still in flight) or does not answer
        within 2 s is stopped instead (its commits are fenced by any newer
        owner either way).
        """
        import ray

        served, self.actors = dict(self.actors), {}
        keep = 4 * self.pool.budget.max_active
        self.parked = list(dict.fromkeys([*self.parked, *served]))[-keep:]
        for pid in served:
            self.forget(pid)

        stopped: list[str] = []

        async def park(pid: str, s: ServedActor) -> None:
            name = s.ownership.address
            answer: Unbound | str
            try:
                answer = await asyncio.wait_for(s.handle.unbind.remote(s.token, True), 2.0)
            except (TimeoutError, ray.exceptions.RayError) as exc:
                answer = type(exc).__name__
            if isinstance(answer, Unbound) and answer.unbound and self.pool.reusable(name):
                self.pool.add_spare(name, s.handle)
            else:
                stopped.append(f"{pid} ({answer})")
                self.pool.kill_worker(name, s.handle)

        await asyncio.gather(*(park(p, s) for p, s in served.items()))
        self.dropped_at_lease_loss += len(stopped)
        log.warning("host %s parked %d processes (%s); %d spares; workers stopped: %s",
                    self.host, len(served), reason, len(self.pool.spares), stopped or "none")

    async def unpark(self, activate: Callable[[str], Awaitable[Outcome[Any]]]) -> None:
        """Activate the processes parked at the last lease loss again (through
        ``activate``, the agent's), a few at a time, under the new lease; one
        that another host took meanwhile stays there (its record exists: the
        answer is ``owned``).

        Nobody else asks for a parked process, so a transient failure
        (``unavailable``: the new lease briefly SUSPENDED, no worker in time, the
        host shedding, no lease at all) is retried, with waits doubling from
        0.25 s to 2 s, for up to :data:`UNPARK_RETRY_S`, under whichever lease the
        agent holds then. Any other answer (``not_found``: deleted meanwhile,
        ``conflict``, ...) is final.
        """
        parked, self.parked = self.parked, []
        gate = asyncio.Semaphore(max(1, self.pool.budget.max_starting))

        async def attempt(pid: str) -> str:
            if pid in self.actors:
                return "serving"
            async with gate:
                result = await activate(pid)
            return result.code or "ok"

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

    # -- a worker for an activation ------------------------------------------------------

    async def take_worker(self, exclude: str = "") -> tuple[str, Any]:
        """A worker for a new binding: a warm spare; else a new worker while the
        budget has room; else the worker of the least recently used idle
        process (passivated for it, never ``exclude``).

        Raises:
            UnavailableError: ``host_full`` (every actor busy), or a worker
                failed to start.
        """
        pool = self.pool
        while True:
            spare = pool.take_spare()
            if spare is not None:
                return spare
            if pool.has_room():
                return await pool.start_worker(take=True)
            try:
                return await self._evict_for(exclude)
            except UnavailableError:
                # Nothing idle now. Workers still starting, bound by other
                # activations or being released free up or become passivable
                # soon: wait for that (bounded by the activation's wait); else full.
                if not (pool.starting or pool.taken or self.releasing):
                    self.host_full += 1
                    raise
            await pool.wait_capacity(0.5)

    async def fresh_usage(self) -> dict[str, Usage]:
        """The served processes' last use, asked of their actors at most every
        :data:`USAGE_MAX_AGE_S` (one concurrent ``residency`` call each; an
        actor that does not answer within 1 s counts as busy)."""
        loop = asyncio.get_running_loop()
        if loop.time() - self.usage_at < USAGE_MAX_AGE_S:
            return self.usage
        if self._usage_refresh is not None:
            await asyncio.shield(self._usage_refresh)
            return self.usage
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
                if isinstance(got, ActorUsage) and got.token == s.token:
                    usage[pid] = Usage(pid, got.idle_s, now, got.busy or got.inflight > 0)
                else:  # slow, dead or rebinding: not a candidate this round
                    usage[pid] = Usage(pid, 0.0, now, True)
            self.usage, self.usage_at = usage, now
        finally:
            self._usage_refresh = None
            fut.set_result(None)
        return self.usage

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
            usage = await self.fresh_usage()
            locked = {p for p, lk in self.locks.items() if lk.locked()}
            skip = {exclude} | self._evicting | locked
            for pid in lru_order(usage, loop.time(), exclude=skip):
                worker = await self.passivate(pid, "least recently used at the budget",
                                              take=True)
                if worker is None:
                    continue
                self.evictions += 1
                name, handle = worker
                if self.pool.reusable(name):
                    return worker
                self.pool.kill_worker(name, handle)
                self.pool.taken -= 1
                return await self.pool.start_worker(take=True)
            self.usage_at = 0.0  # the view may be stale: look once more
        n = len(self.actors)
        max_active = self.pool.budget.max_active
        raise UnavailableError(
            f"host {self.host} is full: {n} of {max_active} process actors, "
            "all in use; retry", host_full=True, active=n, max_active=max_active)

    async def passivate(self, process_id: str, reason: str, *, take: bool = False
                        ) -> tuple[str, Any] | None:
        """End ``process_id``'s binding here if it is idle now, release its
        ownership record, and return its worker (None: busy, gone, or its
        record could not be released, in which case the worker is stopped).
        With ``take`` the worker counts as taken by an activation from the
        moment it stops being served."""
        import ray

        served = self.actors.get(process_id)
        lock = self.lock(process_id)
        if served is None or process_id in self._evicting or lock.locked():
            return None  # gone, or an activation or release of it is under way
        self._evicting.add(process_id)
        await lock.acquire()  # free (checked above, no await since): at once
        try:
            try:
                answer = await asyncio.wait_for(
                    served.handle.unbind.remote(served.token, True), timeout=5)
            except TimeoutError:
                self.usage[process_id] = Usage(process_id, 0.0, time.monotonic(), True)
                return None
            except ray.exceptions.RayActorError:
                await self.release_locked(process_id, served.token, "actor died")
                return None
            if not answer.unbound:
                self.usage[process_id] = Usage(process_id, 0.0, time.monotonic(), True)
                return None
            if self.actors.get(process_id) is not served:
                # parked meanwhile (lease lost): the parking stops this worker
                return None
            del self.actors[process_id]
            if take:
                self.pool.taken += 1
            self.forget(process_id)
            name = served.ownership.address
            try:
                await served.owners.release(served.ownership)
            except SvitError:
                # The record names this worker; it must not serve another
                # process while that record stands (the lease expiry cleans up).
                log.exception("release of passivated %s failed; stopping its worker",
                              process_id)
                if take:
                    self.pool.taken -= 1
                self.pool.kill_worker(name, served.handle)
                return None
            log.info("host %s passivated %s (%s)", self.host, process_id, reason)
            return name, served.handle
        finally:
            lock.release()
            self._evicting.discard(process_id)

    # -- dead actors ---------------------------------------------------------------------

    def start_watch(self, process_id: str, token: int, handle: Any) -> None:
        """Watch ``process_id``'s actor (under ``token``) until it dies or is replaced."""
        old = self.watches.pop(process_id, None)
        if old is not None:
            old.cancel()
        task = asyncio.get_running_loop().create_task(self._watch(process_id, token, handle))
        self.watches[process_id] = task

        def forget(done: asyncio.Task[None]) -> None:
            if self.watches.get(process_id) is done:
                del self.watches[process_id]

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

    async def reconcile_loop(self, period_s: float = RECONCILE_SWEEP_S) -> None:
        """Never dies: release the ownership of actors that died on their own.

        An actor can die while its host lives (a crash, Ray's memory monitor).
        Its ownership record would then stay under the live host lease and the
        process could never move. Each actor's watch notices that at once;
        this slow sweep is the fallback (e.g. a watch call that was lost).
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
        if self._lease() is None:
            return
        async with self.lock(process_id):  # not while an activation of it is under way
            lease = self._lease()
            if process_id in self.actors or lease is None:
                return
            owners = Owners(lease, cluster=self.cfg.cluster, host=self.host)
            try:
                await owners.release_unserved(process_id)
            except SvitError:
                log.exception("releasing the unserved record of %s failed", process_id)

    # -- release -------------------------------------------------------------------------

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
        async with self.lock(process_id):
            return await self.release_locked(process_id, token, reason)

    async def release_locked(self, process_id: str, token: int, reason: str) -> bool:
        """:meth:`release`, the caller holding ``process_id``'s lock."""
        current = self.actors.get(process_id)
        if current is None or current.token != token:
            return False
        handle, owners, ownership = current.handle, current.owners, current.ownership
        del self.actors[process_id]
        self.forget(process_id)
        # Its worker counts against the budget until its record is gone: a new
        # activation meanwhile would make one record more than the budget.
        self.releasing += 1
        try:
            return await self._end_released(process_id, reason, token, handle, owners,
                                            ownership)
        finally:
            self.releasing -= 1

    async def _end_released(self, process_id: str, reason: str, token: int, handle: Any,
                            owners: Any, ownership: Any) -> bool:
        released = False
        try:
            released = await owners.release(ownership)
        except SvitError:
            log.exception("release of %s failed (%s); the lease expiry cleans up",
                          process_id, reason)
        name = ownership.address
        pool = self.pool
        # The worker stays warm as a spare (its slot of the budget was this
        # process's): a surplus one is stopped after SPARE_LINGER_S unused.
        if released and reason != "actor died" and pool.reusable(name) \
                and not pool.memory_full() and not pool.closed:
            try:
                answer: Unbound = await asyncio.wait_for(handle.unbind.remote(token, True), 5.0)
            except Exception:  # dead or stuck: stopped below
                answer = Unbound(False)
            if answer.unbound:
                pool.add_spare(name, handle)
                return released
        pool.kill_worker(name, handle)
        return released
