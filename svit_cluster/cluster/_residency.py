"""Bounded residency: how many process actors a host runs, and which one leaves.

Every active process is its own Ray worker, whose floor is a bare Ray worker
(about 50 MiB PSS and 6-8 ms of CPU per second while idle, measured). A
host therefore carries a bounded number of them, its **residency budget**:

* ``max_active`` process actors (bound or warm spare) at once. Activating one
  more first passivates the host's least recently used idle one
  (:func:`lru_order`; never one with a request in flight or a reasoning turn
  running) and reuses its worker; when every one is busy the host answers
  ``unavailable`` with ``host_full`` and placement tries another host.
* ``max_actors_pss_mib``: the sum of the actors' proportional set size (PSS,
  read from ``/proc/<pid>/smaps_rollup``) counts as full too, so a host whose
  processes grew large holds fewer of them.
* ``max_starting``: Ray workers started at once; further starts wait. A
  starting worker takes a core for about a second, and Ray itself does not
  pace actor starts: a burst started dozens at once and the host's lease
  keeper and etcd starved.

The default budget is derived from the Ray node's CPUs and memory
(:func:`derive_budget`, documented in ``docs/capacity.md``).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = ["ACTORS_PER_CPU", "ACTOR_MIB", "MEMORY_SHARE", "MIN_ACTIVE", "Budget", "Usage",
           "derive_budget", "lru_order", "node_memory_bytes", "read_pss_kib"]

#: Process actors per CPU of the node in the default budget: idle, each costs
#: about 8 ms of CPU per second (Ray's own signal check every 10 ms), so 16 of
#: them take about 13 % of a core before any request.
ACTORS_PER_CPU = 16
#: MiB of the node's memory counted per process actor in the default budget
#: (PSS measured 50-65 MiB per idle actor, plus room for its process state).
ACTOR_MIB = 96
#: Share of the node's memory process actors may take in the default budget
#: (the rest: Ray's own daemons, the object store, the agent, the OS).
MEMORY_SHARE = 0.5
#: Smallest derived budget (a tiny node still serves a few processes).
MIN_ACTIVE = 4


@dataclass(frozen=True, slots=True)
class Budget:
    """A host's residency budget.

    Attributes:
        max_active: process actors at once (bound or spare), >= 1.
        max_actors_pss_mib: the actors' summed PSS (MiB) at which the host is full.
        max_starting: Ray workers started at once, >= 1.
        basis: how it was set (``"configured"`` or the node figures it was derived from).
    """

    max_active: int
    max_actors_pss_mib: float
    max_starting: int
    basis: str


def derive_budget(cpus: float, memory_bytes: int, *, max_active: int = 0,
                  max_actors_pss_mib: float = 0.0, max_starting: int = 0) -> Budget:
    """The budget of a node with ``cpus`` CPUs and ``memory_bytes`` of memory.

    A value given as > 0 is kept (configured); 0 derives it:

    * ``max_active = max(MIN_ACTIVE, min(ACTORS_PER_CPU * cpus,
      MEMORY_SHARE * memory / ACTOR_MIB))`` (rounded down);
    * ``max_actors_pss_mib = MEMORY_SHARE * memory`` (MiB);
    * ``max_starting = max(1, cpus // 2)``.

    Example: 2 CPUs and 24 GiB give 32 actors, 12 GiB of PSS and 1 start at
    a time; 8 CPUs and 8 GiB give 42 actors (memory bound).
    """
    mib = memory_bytes / (1 << 20)
    cpus = max(cpus, 0.5)
    derived_active = max(MIN_ACTIVE, min(math.floor(ACTORS_PER_CPU * cpus),
                                         math.floor(MEMORY_SHARE * mib / ACTOR_MIB)))
    basis = "configured" if max_active > 0 else \
        f"derived from {cpus:g} CPUs and {mib / 1024:.1f} GiB"
    return Budget(
        max_active=max_active if max_active > 0 else derived_active,
        max_actors_pss_mib=(max_actors_pss_mib if max_actors_pss_mib > 0
                            else round(MEMORY_SHARE * mib, 1)),
        max_starting=max_starting if max_starting > 0 else max(1, int(cpus) // 2),
        basis=basis)


def node_memory_bytes() -> int:
    """This node's memory: the cgroup limit when one is set (a container), else
    the machine's total (``/proc/meminfo``)."""
    limit = 0
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            raw = open(path).read().strip()
        except OSError:
            continue
        if raw.isdigit():
            limit = int(raw)
            break
    total = 0
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    total = int(line.split()[1]) * 1024
                    break
    except OSError:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return min(limit, total) if limit and total else (limit or total)


def read_pss_kib(pid: int) -> int | None:
    """Proportional set size of process ``pid`` in KiB (``/proc/<pid>/smaps_rollup``),
    or None when it cannot be read (gone, not Linux)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


@dataclass(frozen=True, slots=True)
class Usage:
    """One served process's last known use, as its actor reported it.

    Attributes:
        process_id: the process.
        idle_s: seconds it had been idle at ``sampled_at`` (0 while busy).
        sampled_at: monotonic time (s) of that report.
        busy: a request was in flight or a reasoning turn ran then.
    """

    process_id: str
    idle_s: float
    sampled_at: float
    busy: bool

    def idle_at(self, now: float) -> float:
        """Idle seconds at ``now`` if nothing used it since the report."""
        return 0.0 if self.busy else self.idle_s + max(0.0, now - self.sampled_at)


def lru_order(usage: Mapping[str, Usage], now: float, *,
              exclude: Iterable[str] = ()) -> list[str]:
    """Processes to passivate first: idle ones, least recently used first
    (ties by process id); busy and ``exclude`` d ones are left out."""
    skip = set(exclude)
    idle = [u for pid, u in usage.items() if pid not in skip and not u.busy]
    idle.sort(key=lambda u: (-u.idle_at(now), u.process_id))
    return [u.process_id for u in idle]
