"""A host's memory guard: the process actors' summed PSS against the budget.

:class:`MemoryGuard` is a plain object the :class:`~svit_cluster.cluster.HostAgent`
owns (not a Ray actor). Every :data:`MEMORY_SAMPLE_S` seconds it stops the
surplus spares that lingered, forgets unused per-process locks, reads the
summed proportional set size (PSS) of the host's actors and, over
``budget.max_actors_pss_mib``, stops spares and then passivates least recently
used idle processes (their workers stopped) until the host is under it.
"""

from __future__ import annotations

import asyncio
import logging
import time

from svit_cluster.cluster._residency import lru_order, read_pss_kib
from svit_cluster.cluster._spare_pool import WorkerPool
from svit_cluster.cluster._supervisor import Supervisor

__all__ = ["MEMORY_SAMPLE_S", "MemoryGuard"]

log = logging.getLogger(__name__)

#: Seconds between two rounds of the memory guard (the actors' PSS) and of the
#: surplus-spare trim.
MEMORY_SAMPLE_S = 5.0


class MemoryGuard:
    """Keeps one host's process actors under the PSS part of its budget.

    State: none of its own; the reading (``pss_mib``, MiB, and ``pss_at``,
    monotonic seconds) is kept on the pool, whose room it bounds.

    Args:
        pool: the host's idle workers and budget counts.
        supervisor: the host's served actors (passivated when over the budget).
    """

    def __init__(self, pool: WorkerPool, supervisor: Supervisor) -> None:
        self.pool = pool
        self.supervisor = supervisor

    async def loop(self, period_s: float = MEMORY_SAMPLE_S) -> None:
        """Never dies: stop surplus spares that lingered (:meth:`WorkerPool.trim`);
        forget unused locks; act on the memory budget (:meth:`check`)."""
        while True:
            try:
                await asyncio.sleep(period_s)
                self.pool.trim()
                self.supervisor.prune_locks()
                await self.check()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("memory round on %s failed", self.pool.host)

    async def check(self) -> float:
        """Read the summed PSS (MiB) of this host's actors now; over the memory
        budget, stop spares, then passivate least-recently-used idle processes
        (their workers stopped) until under it. Returns the reading."""
        pool, supervisor = self.pool, self.supervisor
        names = [s.ownership.address for s in supervisor.actors.values()] + \
            [n for n, _h in pool.spares]
        pids = {n: pool.pids[n] for n in names if n in pool.pids}

        def read() -> dict[str, float]:
            out = {}
            for name, pid in pids.items():
                kib = read_pss_kib(pid)
                if kib is not None:
                    out[name] = kib / 1024
            return out

        by_name = await asyncio.to_thread(read)
        pool.pss_mib = round(sum(by_name.values()), 1)
        pool.pss_at = time.monotonic()
        while pool.memory_full() and (spare := pool.drop_spare()) is not None:
            name, handle = spare
            pool.pss_mib -= by_name.get(name, 0.0)
            pool.kill_worker(name, handle)
        if pool.memory_full():
            usage = await supervisor.fresh_usage()
            for pid in lru_order(usage, asyncio.get_running_loop().time()):
                if not pool.memory_full():
                    break
                worker = await supervisor.passivate(pid, "over the memory budget")
                if worker is not None:
                    supervisor.evictions += 1
                    pool.pss_mib -= by_name.get(worker[0], 0.0)
                    pool.kill_worker(*worker)
        return pool.pss_mib
