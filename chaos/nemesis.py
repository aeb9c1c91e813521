"""Nemeses, schedules and the runner that injects and heals them.

A **schedule** is pure data: :class:`Window` s (start, duration, :class:`NemesisSpec`),
generated from a scenario name and a seed (:func:`build_schedule`), so the same
seed always gives the same faults at the same offsets. Overlapping windows are
combinations.

A **nemesis** turns a spec into actions on a :class:`FaultTarget` -- the small
protocol a cluster satisfies (the harness adapts ``LocalCluster`` to it in
:mod:`svit_chaos.cluster`):

============== ================================== ===========================================
kind           inject                             heal
============== ================================== ===========================================
kill-host      SIGKILL raylet + workers           restart the host if supported, else nothing
pause-host     SIGSTOP every process of the host  SIGCONT (the window outlasts the lease TTL);
                                                  restart the host if its node then died
cut-etcd       host's etcd proxy DROP / STALL     PASS
cut-redis      host's Redis proxy DROP / STALL    PASS
slow-link      host's proxy DELAY n ms            PASS
kill-redis     ``kill -9`` redis-server           start it again; it reloads its AOF
kill-etcd      ``kill -9`` etcd                   start it again on the same data directory
pause-owner    seal a change under a process's    wait (polling Redis, bounded) until a newer
               owner token, SIGSTOP that owner's  owner committed; SIGCONT; then commit the
               host                               sealed change with the old token
stale-owner    remember every process's token     commit once with the old token where a
                                                  newer owner has claimed (see ``stale``)
stop-raylet    SIGSTOP the host's raylet only     SIGCONT; restart the host if its node then
               (workers keep running)             died (Ray had declared it dead)
kill-agent     SIGKILL the host agent's worker    restart the host if supported
term-host      SIGTERM every process of the host  restart the host if supported
pause-gcs      SIGSTOP the GCS (head node)        SIGCONT
etcd-restart-  SIGKILL the host, wait 0.8 TTL,    restart the host if supported
dead-host      ``kill -9`` etcd and start it      (the inject event's ``detail.lead_s`` says
               again, wait until it answers       how long before it the host was killed)
kill-redis-    SIGKILL the Redis Cluster master   start the node again (it rejoins as a
master         of a workload process's slot (its  replica); healed when every node is in
               replica is promoted)               sync and 3 masters serve
kill-etcd-     SIGKILL the etcd leader (the two   start the member again on its data
leader         others elect a new one)
partition-     isolate one etcd member (leader    rejoin it (SIGCONT)
etcd-member    or follower) by SIGSTOP
load-host      start ``cpu`` busy loops and a     SIGKILL and reap every load by PID, whatever
               ``memory_mib`` MiB holder beside   became of the host meanwhile (see ``load``)
               the host, at the agent's niceness
============== ================================== ===========================================

The last three need ``--topology scaled`` (:data:`SCALED_KINDS`); the proxy and
single-server kinds (:data:`SINGLE_ONLY_KINDS`) need the single topology.

``stale-owner`` writes only if a failover happened to occur inside its window;
``pause-owner`` makes one happen, so the negative control (fencing off) always
has a stale commit to catch and the fenced leg always has one to refuse.

``load-host`` breaks nothing by itself: it is a noisy neighbour at normal
priority, and what it tests is whether every host keeps its etcd lease while
the CPUs are saturated (the ``leases`` invariant, :mod:`svit_chaos.leases`).

The :class:`NemesisRunner` records every inject and heal in the history, waits
for healed services to answer (a condition, not a sleep), and **always heals
what it broke**: :meth:`NemesisRunner.heal_all` runs on stop, on error and on
cancellation.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import queue
import random
import signal
import threading
import time
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar, Protocol, TypeVar

from svit_cluster.errors import ConfigurationError

from .clock import Clock, MonotonicClock, wait_until
from .errors import HarnessError
from .history import HistoryWriter
from .load import HostLoad
from .proxy import LinkMode
from .stale import InFlight, StaleWriter

T = TypeVar("T")

__all__ = [
    "HOST_KINDS",
    "KINDS",
    "LOAD_CPU",
    "LOAD_MEMORY_MIB",
    "OWNER_KINDS",
    "RESTART_KINDS",
    "SCALED_KINDS",
    "SCENARIOS",
    "SINGLE_ONLY_KINDS",
    "SMOKE_KINDS",
    "FaultTarget",
    "Link",
    "LoadHost",
    "Nemesis",
    "NemesisRunner",
    "NemesisSpec",
    "PauseOwner",
    "Schedule",
    "Window",
    "build_schedule",
    "host_state",
    "make_nemesis",
    "random_schedule",
    "restart_if_died",
]

#: Kinds of the scaled topology (a Redis Cluster with replicas, a 3-member etcd).
SCALED_KINDS = ("kill-redis-master", "kill-etcd-leader", "partition-etcd-member")
#: Every nemesis kind (``stale-owner`` last: it is no scenario of its own).
KINDS = ("kill-host", "pause-host", "cut-etcd", "cut-redis", "slow-link", "kill-redis",
         "kill-etcd", "pause-owner", "stop-raylet", "kill-agent", "term-host", "pause-gcs",
         "etcd-restart-dead-host", "load-host", *SCALED_KINDS, "stale-owner")
#: Kinds that need the single topology: per-host proxies, or the one redis-server / etcd.
SINGLE_ONLY_KINDS = frozenset({"cut-etcd", "cut-redis", "slow-link", "kill-redis",
                               "kill-etcd", "etcd-restart-dead-host"})
#: The kinds the ``scaled`` scenario cycles through (with stale-owner windows
#: around the host kill and the owner pause).
SCALED_SCENARIO_KINDS = ("kill-redis-master", "kill-etcd-leader", "partition-etcd-member",
                         "pause-owner", "kill-host")
#: The kinds the ``smoke`` scenario runs once each (CI budget: under 120 s of workload at
#: the default TTL of 3 s). ``load-host`` is last: the cool-down after it gives a lease
#: that starved near the window's end the time to lapse at etcd before the run ends.
SMOKE_KINDS = ("pause-owner", "kill-host", "pause-host", "cut-etcd", "cut-redis", "slow-link",
               "kill-redis", "kill-etcd", "load-host")
#: Kinds that fault one host.
HOST_KINDS = frozenset({"kill-host", "pause-host", "cut-etcd", "cut-redis", "slow-link",
                        "stop-raylet", "kill-agent", "term-host", "etcd-restart-dead-host",
                        "load-host"})
#: ``load-host`` busy-loop processes in the schedules: 2 saturate a 2-core machine.
LOAD_CPU = 2
#: ``load-host`` memory held in the schedules (MiB).
LOAD_MEMORY_MIB = 256
#: Kinds after which processes of the faulted host move to a new owner.
FAILOVER_KINDS = frozenset({"kill-host", "pause-host", "cut-etcd", "pause-owner",
                            "stop-raylet", "kill-agent", "term-host",
                            "etcd-restart-dead-host"})
#: Kinds that leave the host down until ``restart_host`` (dead for good without it;
#: a raylet stopped past Ray's node timeout exits when resumed).
RESTART_KINDS = frozenset({"kill-host", "kill-agent", "term-host", "etcd-restart-dead-host",
                           "stop-raylet"})
#: Kinds that fault a host chosen when injected (the owner of a process), not by the schedule.
OWNER_KINDS = frozenset({"pause-owner"})


class Link(Protocol):
    """One host's link to a service (a :class:`~svit_chaos.proxy.TcpProxy`)."""

    def set_mode(self, mode: LinkMode | str, *, delay_ms: int = 0) -> None: ...


class FaultTarget(Protocol):
    """What a nemesis can do to a cluster. Every method blocks until done.

    ``restart_host`` returns False when the cluster cannot restart a killed
    host (the host then stays down; the schedule generator accounts for it).
    ``service_ready`` answers whether ``"redis"`` / ``"etcd"`` answers now.
    ``owner`` names the host that owns ``process`` now (None: no owner, or unknown).
    """

    @property
    def lease_ttl_s(self) -> float: ...

    def hosts(self) -> list[str]: ...

    def kill_host(self, host: str) -> Any: ...

    def restart_host(self, host: str) -> bool: ...

    def pause_host(self, host: str) -> Any: ...

    def resume_host(self, host: str) -> Any: ...

    def kill_redis(self) -> None: ...

    def start_redis(self) -> None: ...

    def kill_etcd(self) -> None: ...

    def start_etcd(self) -> None: ...

    def service_ready(self, service: str) -> bool: ...

    def link(self, host: str, service: str) -> Link: ...

    def owner(self, process: str) -> str | None: ...

    # used by stop-raylet, kill-agent, term-host and pause-gcs: each returns the PIDs it
    # signalled and raises HarnessError when there is no such process

    def signal_raylet(self, host: str, sig: int) -> list[int]: ...

    def kill_agent(self, host: str) -> list[int]: ...

    def term_host(self, host: str) -> list[int]: ...

    def signal_gcs(self, sig: int) -> list[int]: ...

    # the scaled topology (kill-redis-master, kill-etcd-leader, partition-etcd-member)

    def kill_redis_master(self, key: str) -> int: ...

    def start_redis_node(self, port: int) -> None: ...

    def etcd_member(self, role: str) -> str: ...

    def kill_etcd_member(self, name: str) -> None: ...

    def start_etcd_member(self, name: str) -> None: ...

    def isolate_etcd_member(self, name: str) -> None: ...

    def rejoin_etcd_member(self, name: str) -> None: ...

    # load-host: processes beside a host's node (:func:`svit_chaos.load.start_load`)

    def start_load(self, host: str, *, cpu: int, memory_mib: int) -> HostLoad: ...


@dataclass(frozen=True)
class NemesisSpec:
    """What to break. ``kind`` is one of :data:`KINDS`; the rest depends on it.

    Attributes:
        kind: the nemesis kind.
        host: target host (host kinds).
        service: ``"etcd"`` or ``"redis"`` (``slow-link``).
        mode: ``"drop"`` or ``"stall"`` (``cut-*``).
        delay_ms: one-way delay (``slow-link``).
        target: ``kill-redis-master``: the index of the workload process whose
            slot's master is killed; ``partition-etcd-member``: ``leader`` or
            ``follower``.
        cpu: busy-loop processes (``load-host``).
        memory_mib: MiB a ``load-host`` memory process holds (0: none).
    """

    kind: str
    host: str | None = None
    service: str | None = None
    mode: str | None = None
    delay_ms: int = 0
    target: str | None = None
    cpu: int = 0
    memory_mib: int = 0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ConfigurationError(f"unknown nemesis {self.kind!r}; kinds: {', '.join(KINDS)}")
        if self.kind in HOST_KINDS and not self.host:
            raise ConfigurationError(f"nemesis {self.kind} needs a host")
        if self.kind == "load-host" and (self.cpu < 0 or self.memory_mib < 0
                                         or self.cpu + self.memory_mib == 0):
            raise ConfigurationError("nemesis load-host needs cpu >= 1 or memory_mib >= 1")

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v not in (None, 0)}

    @property
    def label(self) -> str:
        parts = [self.kind]
        if self.host:
            parts.append(self.host)
        if self.mode:
            parts.append(self.mode)
        if self.service and self.kind == "slow-link":
            parts.append(f"{self.service}+{self.delay_ms}ms")
        if self.target and self.kind == "partition-etcd-member":
            parts.append(self.target)
        if self.kind == "load-host":
            parts.append(f"{self.cpu}cpu+{self.memory_mib}MiB")
        return " ".join(parts)


@dataclass(frozen=True)
class Window:
    """A nemesis active from ``start_s`` for ``duration_s`` seconds (run time)."""

    start_s: float
    duration_s: float
    spec: NemesisSpec

    @property
    def end_s(self) -> float:
        return self.start_s + self.duration_s

    def to_json(self) -> dict[str, Any]:
        return {"start_s": round(self.start_s, 3), "duration_s": round(self.duration_s, 3),
                "spec": self.spec.to_json()}


@dataclass(frozen=True)
class Schedule:
    """A named, seeded list of windows (sorted by start)."""

    name: str
    seed: int
    windows: tuple[Window, ...]
    duration_s: float

    def kinds(self) -> Counter[str]:
        return Counter(w.spec.kind for w in self.windows)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "seed": self.seed, "duration_s": self.duration_s,
                "windows": [w.to_json() for w in self.windows]}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Schedule:
        windows = tuple(Window(float(w["start_s"]), float(w["duration_s"]),
                               NemesisSpec(**w["spec"])) for w in doc["windows"])
        return cls(str(doc["name"]), int(doc["seed"]), windows, float(doc["duration_s"]))


# -- schedules --------------------------------------------------------------------------


@dataclass
class _Planner:
    """Builds windows while keeping at least one host healthy at every moment."""

    hosts: list[str]
    ttl_s: float
    rng: random.Random
    host_restart: bool
    windows: list[Window] = field(default_factory=list)
    dead: dict[str, float] = field(default_factory=dict)  # host -> killed at

    def busy_hosts(self, start: float, end: float) -> set[str]:
        busy = {h for h, t in self.dead.items() if t < end}
        for w in self.windows:
            overlaps = w.start_s < end + self.ttl_s and start < w.end_s + self.ttl_s
            if w.spec.host and overlaps:
                busy.add(w.spec.host)
            elif w.spec.kind in OWNER_KINDS and overlaps:
                busy.add("?")  # a host the schedule cannot name is faulted then
        return busy

    def pick_host(self, start: float, end: float) -> str | None:
        """A host to fault in ``[start, end]`` such that another one stays healthy."""
        busy = self.busy_hosts(start, end)
        free = [h for h in self.hosts if h not in busy]
        if len(free) < 2 + ("?" in busy):
            return None
        return self.rng.choice(free)

    def owner_fault_fits(self, start: float, end: float) -> bool:
        """An owner fault may hit any live host: it needs no other host fault at the time,
        and two live hosts (the owner and one to claim)."""
        busy = self.busy_hosts(start, end)
        return not busy - set(self.dead) and len(set(self.hosts) - busy) >= 2

    def duration(self, kind: str) -> float:
        ttl = self.ttl_s
        return {
            "kill-host": ttl + 3.0,
            "pause-host": 2 * ttl + 1.0 + self.rng.uniform(0, ttl),
            "cut-etcd": 2 * ttl + 1.0 + self.rng.uniform(0, ttl),
            "cut-redis": 2.0 + self.rng.uniform(0, ttl),
            "slow-link": 2.0 + self.rng.uniform(0, ttl),
            "kill-redis": 1.0 + self.rng.uniform(0, 2.0),
            "kill-etcd": 1.0 + self.rng.uniform(0, min(2.0, ttl)),
            # nominal: the heal waits (bounded) for the new owner's commit
            "pause-owner": 2 * ttl + 1.0,
            "stale-owner": 0.0,
            "stop-raylet": 2 * ttl + 1.0 + self.rng.uniform(0, ttl),
            "kill-agent": ttl + 3.0,
            "term-host": ttl + 3.0,
            "pause-gcs": 2.0 + self.rng.uniform(0, ttl),
            # after the inject, which itself lasts 0.8 TTL (the host dead, etcd restarting)
            "etcd-restart-dead-host": ttl + 3.0,
            # a replica is promoted after cluster-node-timeout (1 s); the heal
            # restarts the node and waits until it is a replica in sync
            "kill-redis-master": 3.0 + self.rng.uniform(0, 2.0),
            # a new leader within 1-2 s (election timeout 1 s)
            "kill-etcd-leader": 2.0 + self.rng.uniform(0, 2.0),
            # longer than a TTL: a host stuck on that member must move to another
            "partition-etcd-member": ttl + 2.0 + self.rng.uniform(0, ttl),
            # a saturated CPU for many TTLs: keepalives must get through all along
            "load-host": load_duration_s(ttl),
        }[kind]

    def spec(self, kind: str, host: str | None) -> NemesisSpec:
        if kind in ("cut-etcd", "cut-redis"):
            return NemesisSpec(kind, host=host, mode=self.rng.choice(("drop", "stall")))
        if kind == "slow-link":
            return NemesisSpec(kind, host=host, service=self.rng.choice(("etcd", "redis")),
                               delay_ms=self.rng.choice((50, 200, 500)))
        if kind == "kill-redis-master":
            return NemesisSpec(kind, target=str(self.rng.randrange(1000)))
        if kind == "partition-etcd-member":
            return NemesisSpec(kind, target=self.rng.choice(("leader", "follower")))
        if kind == "load-host":
            return NemesisSpec(kind, host=host, cpu=LOAD_CPU, memory_mib=LOAD_MEMORY_MIB)
        return NemesisSpec(kind, host=host)

    def add(self, start: float, kind: str, *, stale: bool = False) -> float | None:
        """Add one window of ``kind`` at ``start``; returns its end, or None if impossible."""
        start = round(start, 3)
        length = round(self.duration(kind), 3)
        host = None
        if kind in HOST_KINDS:
            host = self.pick_host(start, start + length)
            if host is None:
                return None
        if kind in OWNER_KINDS and not self.owner_fault_fits(start, start + length):
            return None
        spec = self.spec(kind, host)
        if stale and kind in FAILOVER_KINDS:
            # the stale owner remembers tokens just before the fault and writes after it
            self.windows.append(Window(round(max(0.0, start - 0.5), 3), round(length + 1.5, 3),
                                       NemesisSpec("stale-owner")))
        self.windows.append(Window(start, length, spec))
        if kind in RESTART_KINDS and not self.host_restart and host is not None:
            self.dead[host] = start
        return start + length


def _check_fits(name: str, end: float, duration_s: float) -> None:
    if end > duration_s:
        raise ConfigurationError(
            f"scenario {name} needs a duration of at least {end:.0f} s "
            f"(got {duration_s:.0f} s); pass a longer --duration or a shorter lease TTL")


#: Named scenarios (``random`` takes its kinds from the seed; ``scaled`` needs
#: ``--topology scaled``).
SCENARIOS = ("smoke", "random", "negative", "none", "scaled", *KINDS[:-1])


def check_topology(schedule: Schedule, topology: str) -> None:
    """Refuse a schedule whose faults the topology cannot carry out.

    Raises:
        ConfigurationError: a scaled kind on the single topology, or a proxy or
            single-server kind on the scaled one.
    """
    kinds = set(schedule.kinds())
    wrong = (kinds & set(SCALED_KINDS) if topology == "single"
             else kinds & SINGLE_ONLY_KINDS)
    if wrong:
        need = "--topology scaled" if topology == "single" else "the single topology"
        raise ConfigurationError(f"nemeses {', '.join(sorted(wrong))} need {need}")


def build_schedule(
    name: str,
    *,
    hosts: Sequence[str],
    duration_s: float,
    lease_ttl_s: float,
    seed: int,
    host_restart: bool = False,
    warmup_s: float = 3.0,
    cooldown_s: float | None = None,
    topology: str = "single",
) -> Schedule:
    """The schedule of scenario ``name``.

    * ``smoke`` -- each of :data:`SMOKE_KINDS` once, one after another, with stale-owner
      windows around the owner pause, the kill, the pause and the etcd cut (CI;
      see :func:`smoke_duration_s` for its minimum length).
    * ``negative`` -- an owner pause (a stale commit on every run), a host pause
      and a kill with stale-owner windows: the negative-control run (fencing
      off must be caught).
    * ``random`` -- :func:`random_schedule` from ``seed``.
    * a kind name (``kill-host``, ``cut-redis``, ...) -- that fault, repeated.
    * ``none`` -- no faults (a baseline).
    * ``scaled`` -- (``--topology scaled``) :data:`SCALED_SCENARIO_KINDS` in turn:
      kill a Redis master, kill the etcd leader, isolate an etcd member, pause
      an owner, kill a host; repeated until the duration is used.

    Args:
        hosts: host names (at least 2 for host faults: one must stay healthy).
        duration_s: workload duration in seconds.
        lease_ttl_s: the hosts' lease TTL (pauses and cuts outlast it).
        seed: randomness for targets, modes and lengths.
        host_restart: the cluster restarts killed hosts (else they stay dead).
        warmup_s: fault-free seconds at the start (default 3).
        cooldown_s: fault-free seconds at the end (default TTL + 3).
        topology: ``"single"`` or ``"scaled"`` (see :func:`check_topology`);
            ``random`` draws only kinds the topology can carry out.

    Raises:
        ConfigurationError: unknown scenario, it does not fit ``duration_s``, or
            the topology cannot carry out its faults.
    """
    rng = random.Random(seed)
    plan = _Planner(list(hosts), lease_ttl_s, rng, host_restart)
    gap = lease_ttl_s + 2.0
    cool = lease_ttl_s + 3.0 if cooldown_s is None else cooldown_s
    if name == "random":
        kinds = [k for k in KINDS if (k not in SINGLE_ONLY_KINDS if topology == "scaled"
                                      else k not in SCALED_KINDS)]
        return random_schedule(seed, hosts=hosts, duration_s=duration_s,
                               lease_ttl_s=lease_ttl_s, host_restart=host_restart,
                               warmup_s=warmup_s, cooldown_s=cool, kinds=kinds)
    if name == "none":
        return Schedule(name, seed, (), duration_s)
    if name in ("smoke", "negative"):
        kinds = (list(SMOKE_KINDS) if name == "smoke"
                 else ["pause-owner", "pause-host", "kill-host"])
        t = warmup_s
        for kind in kinds:
            end = plan.add(t, kind, stale=True)
            if end is None:
                need = 2 if host_restart else (3 if name == "smoke" else 2)
                raise ConfigurationError(
                    f"scenario {name} needs at least {need} hosts (one must stay healthy "
                    "while another is faulted, and killed hosts are not restarted)")
            t = end + gap
        _check_fits(name, t - gap + cool, duration_s)
    elif name == "scaled":
        t = warmup_s
        i = 0
        while True:
            kind = SCALED_SCENARIO_KINDS[i % len(SCALED_SCENARIO_KINDS)]
            if t + plan.duration(kind) + cool > duration_s:
                break
            end = plan.add(t, kind, stale=kind in FAILOVER_KINDS)
            i += 1
            if end is None:
                t += 1.0
                continue
            t = end + gap
        if i < len(SCALED_KINDS):
            raise ConfigurationError(
                f"scenario scaled does not fit: each of {', '.join(SCALED_KINDS)} needs "
                f"a window; give a duration of at least {3 * (3 * lease_ttl_s + 8):.0f} s")
    elif name in KINDS and name != "stale-owner":
        t = warmup_s
        while True:
            probe = plan.duration(name)
            if t + probe + cool > duration_s:
                break
            end = plan.add(t, name, stale=name in FAILOVER_KINDS)
            if end is None:
                break
            t = end + gap
        if not plan.windows:
            raise ConfigurationError(
                f"scenario {name} does not fit: needs a duration of at least "
                f"{warmup_s + plan.duration(name) + cool:.0f} s and, for host faults, "
                "2 hosts")
    else:
        raise ConfigurationError(f"unknown scenario {name!r}; scenarios: "
                                 f"{', '.join(SCENARIOS)}")
    windows = tuple(sorted(plan.windows, key=lambda w: (w.start_s, w.spec.kind)))
    schedule = Schedule(name, seed, windows, duration_s)
    check_topology(schedule, topology)
    return schedule


def load_duration_s(lease_ttl_s: float) -> float:
    """Length of a scheduled ``load-host`` window: 20 s, and at least 5 TTLs + 5 s."""
    return max(20.0, 5 * lease_ttl_s + 5.0)


def smoke_duration_s(lease_ttl_s: float) -> float:
    """The shortest workload duration the ``smoke`` scenario fits in (seconds)."""
    ttl = lease_ttl_s
    # upper bounds of every window (in SMOKE_KINDS order), the gaps, warm-up and cool-down
    lengths = [2 * ttl + 1, ttl + 3, 3 * ttl + 1, 3 * ttl + 1, 2 + ttl, 2 + ttl, 3.0,
               1 + min(2.0, ttl), load_duration_s(ttl)]
    return 3.0 + sum(lengths) + (len(lengths) - 1) * (ttl + 2) + ttl + 3 + 1


def random_schedule(
    seed: int,
    *,
    hosts: Sequence[str],
    duration_s: float,
    lease_ttl_s: float,
    host_restart: bool = False,
    kinds: Sequence[str] = KINDS,
    warmup_s: float = 3.0,
    cooldown_s: float | None = None,
    combine_p: float = 0.3,
) -> Schedule:
    """Random faults from ``seed``: one window after another, sometimes two at once.

    Each step picks a kind; with probability ``combine_p`` a second window of
    another kind starts inside the first (a combination). Host faults never
    leave fewer than one healthy host; failover faults get stale-owner windows
    with probability 1/2. Deterministic for a given seed and arguments.
    """
    rng = random.Random(seed)
    plan = _Planner(list(hosts), lease_ttl_s, rng, host_restart)
    cool = lease_ttl_s + 3.0 if cooldown_s is None else cooldown_s
    choices = [k for k in kinds if k != "stale-owner"]
    t = warmup_s
    while choices:
        kind = rng.choice(choices)
        if t + plan.duration(kind) + cool > duration_s:
            break
        end = plan.add(t, kind, stale=rng.random() < 0.5)
        if end is None:
            t += 1.0
            continue
        if rng.random() < combine_p:
            other = rng.choice([k for k in choices if k != kind] or [kind])
            start = rng.uniform(t, end)
            if start + plan.duration(other) + cool <= duration_s:
                end2 = plan.add(start, other)
                end = max(end, end2 or end)
        t = end + lease_ttl_s + 2.0 + rng.uniform(0, 2.0)
    windows = tuple(sorted(plan.windows, key=lambda w: (w.start_s, w.spec.kind)))
    return Schedule("random", seed, windows, duration_s)


# -- nemeses ----------------------------------------------------------------------------


@dataclass
class NemesisContext:
    """What a nemesis acts on."""

    target: FaultTarget
    history: HistoryWriter
    processes: Sequence[str] = ()
    stale: StaleWriter | None = None


class Nemesis(ABC):
    """One fault: :meth:`inject`, then :meth:`heal`; :meth:`healed` tells when it is over.

    ``inject`` and ``heal`` block (the runner calls them in a worker thread)
    and return details for the history. ``heal`` must be safe to call twice.
    """

    #: Multiplies the runner's ``heal_timeout_s`` for this kind's heal.
    heal_timeout_factor: ClassVar[float] = 1.0

    def __init__(self, spec: NemesisSpec) -> None:
        self.spec = spec
        #: set by the runner when the run stopped before this window's end:
        #: heal only undoes the fault (nothing is waited for)
        self.interrupted = False

    @abstractmethod
    def inject(self, ctx: NemesisContext) -> dict[str, Any]:
        """Inject the fault; returns details for the history."""

    def heal(self, ctx: NemesisContext) -> dict[str, Any]:
        return {}

    def healed(self, ctx: NemesisContext) -> bool:
        return True


class KillHost(Nemesis):
    # restarting a Ray node and its host agent takes much longer than a server
    heal_timeout_factor = 4.0

    def inject(self, ctx: NemesisContext) -> dict[str, Any]:
        assert self.spec.host
        killed = ctx.target.kill_host(self.spec.host)
        return {"killed": list(killed) if isinstance(killed, list | tuple) else killed}

    def heal(self, ctx: NemesisContext) -> dict[str, Any]:
        assert self.spec.host
        return restart_host(ctx, self.spec.host)


def restart_if_died(ctx: NemesisContext, host: str, *, settle_s: float = 3.0,
                    poll_s: float = 0.1) -> dict[str, Any]:
    """After a stop/pause: restart ``host`` if its node died on being resumed.

    Ray declares a node whose raylet stopped answering dead, and that raylet
    exits when resumed (exit code 1); the host is then down for good unless it is
    restarted. Watches the optional ``target.host_alive(host)`` hook for up to
    ``settle_s`` seconds; without the hook nothing is checked (``{}``).

    Returns:
        ``{"node_died": False}``, or ``{"node_died": True, "restarted": bool}``.
    """
    alive = getattr(ctx.target, "host_alive", None)
    if alive is None:
        return {}
    deadline = time.monotonic() + settle_s
    while alive(host):
        if time.monotonic() >= deadline:
            return {"node_died": False}
        time.sleep(poll_s)
    return {"node_died": True, **restart_host(ctx, host)}


class PauseHost(Nemesis):
    # the node may have died while paused: heal restarts it (see restart_if_died)
    heal_timeout_factor = 4.0

    def inject(self, ctx: NemesisContext) -> dict[str, Any]:
        assert self.spec.host
        paused = ctx.target.pause_host(self.spec.host)
        return {"paused": list(paused) if isinstance(paused, list | tuple) else paused}

    def heal(self, ctx: NemesisContext) -> dict[str, Any]:
        assert self.spec.host
        resumed = ctx.target.resume_host(self.spec.host)
        return {"resumed": list(resumed) if isinstance(resumed, list | tuple) else resumed,
                **restart_if_died(ctx, self.spec.host)}


class CutLink(Nemesis):
    """``cut-etcd`` / ``cut-redis`` (DROP or STALL) and ``slow-link`` (DELAY)."""

    @property
    def service(self) -> str:
        if self.spec.kind == "slow-link":
            return self.spec.service or "redis"
        return self.spec.kind.removeprefix("cut-")

    def inject(self, ctx: NemesisContext) -> dict[str, Any]:
        assert self.spec.host
        link = ctx.target.link(self.spec.host, self.service)
        if self.spec.kind == "slow-link":
            link.set_mode(LinkMode.DELAY, delay_ms=self.spec.delay_ms)
            return {"service": self.service, "mode": "delay", "delay_ms": self.spec.delay_ms}
        mode = LinkMode(self.spec.mode or "drop")
        link.set_mode(mode)
        return {"service": self.service, "mode": str(mode)}

    def heal(self, ctx: NemesisContext) -> dict[str, Any]:
        assert self.spec.host
        ctx.target.link(self.spec.host, self.service).set_mode(LinkMode.PASS)
        return {"service": self.service, "mode": "pass"}


class KillServer(Nemesis):
    """``kill-redis`` / ``kill-etcd``: SIGKILL, then start on the same data and port."""

    @property
    def service(self) -> str:
        return self.spec.kind.removeprefix("kill-")

    def inject(self, ctx: NemesisContext) -> dict[str, Any]:
        if self.service == "redis":
            ctx.target.kill_redis()
        else:
            ctx.target.kill_etcd()
        return {"service": self.service}

    def heal(self, ctx: NemesisContext) -> dict[str, Any]:
        if not ctx.target.service_ready(self.service):
            if self.service == "redis":
                ctx.target.start_redis()
            else:
                ctx.target.start_etcd()
        return {"service": self.service}

    def healed(self, ctx: NemesisContext) -> bool:
        return ctx.target.service_ready(self.service)


class StaleOwner(Nemesis):
    """Remember every process's token; at heal, write with it where a newer owner claimed."""

    def __init__(self, spec: NemesisSpec) -> None:
        super().__init__(spec)
        self.tokens: dict[str, int] = {}

    def inject(self, ctx: NemesisContext) -> dict[str, Any]:
        if ctx.stale is None:
            return {"skipped": "no stale writer configured"}
        for process in ctx.processes:
            with contextlib.suppress(Exception):
                fence = ctx.stale.fence(process)
                if fence > 0:
                    self.tokens[process] = fence
        return {"tokens": dict(self.tokens)}

    def heal(self, ctx: NemesisContext) -> dict[str, Any]:
        if ctx.stale is None:
            return {}
        results = []
        tokens, self.tokens = self.tokens, {}
        for process, token in sorted(tokens.items()):
            try:
                fence = ctx.stale.fence(process)
            except Exception as exc:  # Redis may be down: nothing to do
                results.append({"process": process, "outcome": f"fence unreadable: {exc}"})
                continue
            if fence <= token:
                results.append({"process": process, "outcome": "no newer owner"})
                continue
            results.append(ctx.stale.write(process, token))
        return {"writes": results}


class PauseOwner(Nemesis):
    """A stale owner on every run, not by luck of timing (the negative control's fault).

    ``inject`` picks the first process with an owner, seals one change under the
    owner's token (the commit it has in flight, :meth:`StaleWriter.prepare`) and
    SIGSTOPs the owner's host. ``heal`` waits -- polling Redis, bounded by
    ``claim_timeout_s`` (default ``10 * lease TTL + 10`` s) -- until a newer owner
    has *committed* (the head's token is above the old token: it claimed, and
    its entry precedes the stale one in the chain), SIGCONTs the old owner, and
    only then commits the sealed change with the old token (a ``conflict`` is
    retried on fresh state, as a zombie that keeps serving would). With fencing
    on the store must refuse it; with fencing off it lands and the checker must
    report it.

    The whole host is paused, so Ray may declare its node dead meanwhile; its
    raylet then exits when resumed, and heal restarts the host (as
    ``pause-host`` does, :func:`restart_if_died`). Without that, the host
    stayed down for the rest of a run and later faults aimed at it found no
    raylet or agent ("no raylet of h2 process found": a ten-minute random run
    came out inconclusive).

    Heal raises :class:`HarnessError` (the run is inconclusive, with the reason)
    when no process has an owner, the owner changed while it was being paused,
    or no other host committed within the deadline; the host is resumed (and
    restarted if it died) first.
    """

    # the node may have died while paused: heal restarts it
    heal_timeout_factor = 4.0
    poll_s: ClassVar[float] = 0.02

    def __init__(self, spec: NemesisSpec, *, claim_timeout_s: float | None = None) -> None:
        super().__init__(spec)
        self.claim_timeout_s = claim_timeout_s
        self.host: str | None = None
        self.inflight: InFlight | None = None

    def _stale(self, ctx: NemesisContext) -> StaleWriter:
        if ctx.stale is None:
            raise HarnessError("pause-owner needs a stale writer", stage="inject")
        return ctx.stale

    def inject(self, ctx: NemesisContext) -> dict[str, Any]:
        stale = self._stale(ctx)
        for process in ctx.processes:
            host = ctx.target.owner(process)
            token = stale.fence(process) if host is not None else 0
            if host is None or token <= 0:
                continue
            inflight = stale.prepare(process, token)
            # the change was sealed on the state of the owner about to be stopped
            fence = stale.fence(process)
            if fence != token or ctx.target.owner(process) != host:
                raise HarnessError(f"pause-owner: {process} moved (token {token} -> {fence}) "
                                   f"while its change was being sealed", stage="inject")
            ctx.target.pause_host(host)
            self.host, self.inflight = host, inflight
            return {"host": host, "process": process, "token": token,
                    "expected": inflight.proc.version, "rid": inflight.rid}
        raise HarnessError("pause-owner: no process has an owner yet", stage="inject")

    def heal(self, ctx: NemesisContext) -> dict[str, Any]:
        host, inflight = self.host, self.inflight
        if host is None or inflight is None:
            return {}
        if self.interrupted:  # the run is stopping: no workload will fail over, just resume
            self.host = self.inflight = None
            ctx.target.resume_host(host)
            return {"host": host, "resumed": True, "write": "skipped: run stopped"}
        stale = self._stale(ctx)
        ttl = ctx.target.lease_ttl_s
        timeout = self.claim_timeout_s if self.claim_timeout_s is not None else 10 * ttl + 10
        deadline = time.monotonic() + timeout
        claimed = 0
        started = time.monotonic()
        try:
            while True:
                with contextlib.suppress(Exception):  # Redis may be briefly unreachable
                    claimed = stale.head_token(inflight.process)
                if claimed > inflight.token or time.monotonic() >= deadline:
                    break
                time.sleep(self.poll_s)
        finally:
            self.host = None
            ctx.target.resume_host(host)
        waited = round(time.monotonic() - started, 3)
        if claimed <= inflight.token:
            self.inflight = None
            restart_if_died(ctx, host)
            raise HarnessError(f"pause-owner: no other host committed to {inflight.process} "
                               f"within {timeout:.0f} s of pausing {host}; no stale writer",
                               stage="heal")
        self.inflight = None
        write = stale.write(inflight.process, inflight.token, prepared=inflight)
        return {"host": host, "resumed": True, "new_token": claimed, "waited_s": waited,
                "write": write, **restart_if_died(ctx, host)}


def host_already_down(ctx: NemesisContext, host: str) -> dict[str, Any] | None:
    """The inject detail of a host fault that finds its host already down, or None.

    A fault that acts on a live host's processes (``stop-raylet``, ``kill-agent``)
    has nothing to act on when, by the time its inject runs, another fault has
    taken the host down (no raylet: killed or terminated, not restarted yet).
    Such a window is recorded with ``{"skipped": ...}`` and its heal does nothing;
    the host comes back with the other fault's heal. Raising instead would make
    the whole run inconclusive, although random schedules overlap host faults
    by design (e.g. ``kill-agent h1`` while ``etcd-restart-dead-host h1``'s
    restart of h1 is still under way). A host that a heal is restarting
    (``host_restarting``) counts as down too: it may have a raylet but no agent
    yet.
    """
    state = host_state(ctx, host)
    if state == "restarting":
        # its raylet may be up while its agent is not yet: nothing to act on
        return {"skipped": f"host {host} is being restarted (another fault's heal)"}
    if state == "down":
        return {"skipped": f"host {host} is already down (another fault)"}
    return None


def host_state(ctx: NemesisContext, host: str) -> str:
    """``"restarting"`` while a heal restarts ``host``, ``"down"`` when it has no
    raylet, ``"up"``, or ``"unknown"`` when the target lacks the optional
    ``host_restarting`` / ``host_alive`` hooks (as :func:`restart_if_died`)."""
    restarting = getattr(ctx.target, "host_restarting", None)
    if restarting is not None and restarting(host):
        return "restarting"
    alive = getattr(ctx.target, "host_alive", None)
    if alive is None:
        return "unknown"
    return "up" if alive(host) else "down"


class _OnLiveHost(Nemesis):
    """A fault on a live host's processes: when :func:`host_already_down` finds
    its host down or restarting, the window is recorded as skipped and its heal
    does nothing. Subclasses define :meth:`act` and :meth:`undo`."""

    skipped = False

    @abstractmethod
    def act(self, ctx: NemesisContext, host: str) -> dict[str, Any]:
        """Inject the fault on live ``host``."""

    @abstractmethod
    def undo(self, ctx: NemesisContext, host: str) -> dict[str, Any]:
        """Heal what :meth:`act` did."""

    def inject(self, ctx: NemesisContext) -> dict[str, Any]:
        assert self.spec.host
        if (down := host_already_down(ctx, self.spec.host)) is not None:
            self.skipped = True
            return down
        return self.act(ctx, self.spec.host)

    def heal(self, ctx: NemesisContext) -> dict[str, Any]:
        assert self.spec.host
        if self.skipped:
            return {"skipped": True}
        return self.undo(ctx, self.spec.host)


class StopRaylet(_OnLiveHost):
    """SIGSTOP the host's raylet alone: its workers (the host agent among them) keep
    running, so the host may keep its lease while Ray already reports the node dead.
    Heal SIGCONTs it and restarts the host if the raylet then exits (Ray had
    declared the node dead; see :func:`restart_if_died`)."""

    heal_timeout_factor = 4.0

    def act(self, ctx: NemesisContext, host: str) -> dict[str, Any]:
        return {"stopped": ctx.target.signal_raylet(host, signal.SIGSTOP)}

    def undo(self, ctx: NemesisContext, host: str) -> dict[str, Any]:
        resumed = ctx.target.signal_raylet(host, signal.SIGCONT)
        return {"resumed": resumed, **restart_if_died(ctx, host)}


def restart_host(ctx: NemesisContext, host: str) -> dict[str, Any]:
    """Restart ``host`` (if the cluster can), as after ``kill-host``."""
    return {"restarted": bool(ctx.target.restart_host(host))}


class _RestartHost(Nemesis):
    """Heal by :func:`restart_host`."""

    heal_timeout_factor = 4.0

    def heal(self, ctx: NemesisContext) -> dict[str, Any]:
        assert self.spec.host
        return restart_host(ctx, self.spec.host)


class KillAgent(_OnLiveHost):
    """SIGKILL the host agent's worker process only (raylet and process actors stay);
    heal restarts the host (:func:`restart_host`)."""

    heal_timeout_factor = _RestartHost.heal_timeout_factor

    def act(self, ctx: NemesisContext, host: str) -> dict[str, Any]:
        return {"killed": ctx.target.kill_agent(host)}

    def undo(self, ctx: NemesisContext, host: str) -> dict[str, Any]:
        return restart_host(ctx, host)


class TermHost(_RestartHost):
    """SIGTERM every process of the host (a clean shutdown request, as at reboot)."""

    def inject(self, ctx: NemesisContext) -> dict[str, Any]:
        assert self.spec.host
        return {"terminated": ctx.target.term_host(self.spec.host)}


class LoadHost(Nemesis):
    """``load-host``: a noisy neighbour beside one host for the window, stopped by PID.

    ``inject`` starts ``spec.cpu`` busy loops and a ``spec.memory_mib`` MiB
    holder at the host agent's niceness (``target.start_load``, see
    :mod:`svit_chaos.load` for where they run and why they are bounded);
    ``heal`` SIGKILLs and reaps each of them by PID.

    Unlike ``stop-raylet`` and ``kill-agent`` it is not skipped when its host is
    down or restarting (:func:`host_already_down`): the loads act on the
    machine, not on the host's processes, and run in a session of their own,
    so another fault's kill or pause of the host leaves them running and the
    heal stops them the same way whatever became of the host. The host's
    state at inject and at heal is recorded (:func:`host_state`).
    """

    def __init__(self, spec: NemesisSpec) -> None:
        super().__init__(spec)
        self.load: HostLoad | None = None

    def inject(self, ctx: NemesisContext) -> dict[str, Any]:
        assert self.spec.host
        state = host_state(ctx, self.spec.host)
        self.load = ctx.target.start_load(self.spec.host, cpu=self.spec.cpu,
                                          memory_mib=self.spec.memory_mib)
        return {**self.load.describe(), "host_state": state}

    def heal(self, ctx: NemesisContext) -> dict[str, Any]:
        assert self.spec.host
        load = self.load
        if load is None:  # healed already, or the inject started nothing
            return {"stopped": []}
        detail = {**load.stop(), "pids": load.pids,
                  "host_state": host_state(ctx, self.spec.host)}
        if not load.running():
            self.load = None
        return detail

    def healed(self, ctx: NemesisContext) -> bool:
        return self.load is None or not self.load.running()


class PauseGcs(Nemesis):
    """SIGSTOP Ray's GCS on the head node; SIGCONT at heal."""

    def inject(self, ctx: NemesisContext) -> dict[str, Any]:
        return {"stopped": ctx.target.signal_gcs(signal.SIGSTOP)}

    def heal(self, ctx: NemesisContext) -> dict[str, Any]:
        return {"resumed": ctx.target.signal_gcs(signal.SIGCONT)}


class EtcdRestartDeadHost(_RestartHost):
    """SIGKILL the host, then -- while its lease still runs -- restart etcd.

    ``inject`` kills the host, waits ``restart_after`` x lease TTL (default 0.8),
    SIGKILLs etcd, starts it again on the same data and waits (bounded by
    ``etcd_timeout_s``) until it answers: the issue's "host dead since t = 0,
    etcd restarted at t = 0.8 TTL". The history records the inject when all of
    that is done, so ``detail.lead_s`` gives how many seconds before the inject
    event the host was killed (the fault's true start).

    Raises (inject):
        HarnessError: etcd did not answer within ``etcd_timeout_s``.
    """

    restart_after: ClassVar[float] = 0.8
    etcd_timeout_s: ClassVar[float] = 30.0
    poll_s: ClassVar[float] = 0.05

    def inject(self, ctx: NemesisContext) -> dict[str, Any]:
        assert self.spec.host
        started = time.monotonic()
        killed = ctx.target.kill_host(self.spec.host)
        time.sleep(max(0.0, started + self.restart_after * ctx.target.lease_ttl_s
                       - time.monotonic()))
        restart_at = time.monotonic() - started
        ctx.target.kill_etcd()
        ctx.target.start_etcd()
        deadline = time.monotonic() + self.etcd_timeout_s
        while not ctx.target.service_ready("etcd"):
            if time.monotonic() >= deadline:
                raise HarnessError(f"etcd did not answer within {self.etcd_timeout_s:.0f} s "
                                   "of its restart", stage="inject")
            time.sleep(self.poll_s)
        return {"killed": list(killed) if isinstance(killed, list | tuple) else killed,
                "etcd_restarted_at_s": round(restart_at, 3),
                "lead_s": round(time.monotonic() - started, 3)}

    def heal(self, ctx: NemesisContext) -> dict[str, Any]:
        if not ctx.target.service_ready("etcd"):  # an inject cut short: etcd may be down
            ctx.target.start_etcd()
        return super().heal(ctx)

    def healed(self, ctx: NemesisContext) -> bool:
        return ctx.target.service_ready("etcd")


class KillRedisMaster(Nemesis):
    """``kill-redis-master``: SIGKILL the master of a workload process's slot.

    Its replica is promoted after ``cluster-node-timeout``; with asynchronous
    replication (``WAIT`` off) the promoted replica may lack the newest
    acknowledged entries or fence raises, which the checker then reports.
    """

    def __init__(self, spec: NemesisSpec) -> None:
        super().__init__(spec)
        self._port: int | None = None

    def inject(self, ctx: NemesisContext) -> dict[str, Any]:
        if not ctx.processes:
            raise HarnessError("kill-redis-master needs a workload process", stage="inject")
        process = ctx.processes[int(self.spec.target or 0) % len(ctx.processes)]
        # the slot depends on the hash tag only: ``{<process>}`` of every key
        self._port = ctx.target.kill_redis_master(f"{{{process}}}")
        return {"process": process, "port": self._port}

    def heal(self, ctx: NemesisContext) -> dict[str, Any]:
        if self._port is not None:
            ctx.target.start_redis_node(self._port)
        return {"port": self._port}

    def healed(self, ctx: NemesisContext) -> bool:
        return ctx.target.service_ready("redis")


class KillEtcdLeader(Nemesis):
    """``kill-etcd-leader``: SIGKILL the member the others follow; start it again at heal."""

    def __init__(self, spec: NemesisSpec) -> None:
        super().__init__(spec)
        self._member: str | None = None

    def inject(self, ctx: NemesisContext) -> dict[str, Any]:
        self._member = ctx.target.etcd_member("leader")
        ctx.target.kill_etcd_member(self._member)
        return {"member": self._member}

    def heal(self, ctx: NemesisContext) -> dict[str, Any]:
        if self._member is not None:
            ctx.target.start_etcd_member(self._member)
        return {"member": self._member}

    def healed(self, ctx: NemesisContext) -> bool:
        return ctx.target.service_ready("etcd")


class PartitionEtcdMember(Nemesis):
    """``partition-etcd-member``: isolate the leader or a follower; rejoin it at heal."""

    def __init__(self, spec: NemesisSpec) -> None:
        super().__init__(spec)
        self._member: str | None = None

    def inject(self, ctx: NemesisContext) -> dict[str, Any]:
        role = self.spec.target or "follower"
        self._member = ctx.target.etcd_member(role)
        ctx.target.isolate_etcd_member(self._member)
        return {"member": self._member, "role": role}

    def heal(self, ctx: NemesisContext) -> dict[str, Any]:
        if self._member is not None:
            ctx.target.rejoin_etcd_member(self._member)
        return {"member": self._member}

    def healed(self, ctx: NemesisContext) -> bool:
        return ctx.target.service_ready("etcd")


_CLASSES: dict[str, type[Nemesis]] = {
    "kill-host": KillHost,
    "pause-host": PauseHost,
    "cut-etcd": CutLink,
    "cut-redis": CutLink,
    "slow-link": CutLink,
    "kill-redis": KillServer,
    "kill-etcd": KillServer,
    "pause-owner": PauseOwner,
    "stale-owner": StaleOwner,
    "stop-raylet": StopRaylet,
    "kill-agent": KillAgent,
    "term-host": TermHost,
    "pause-gcs": PauseGcs,
    "etcd-restart-dead-host": EtcdRestartDeadHost,
    "kill-redis-master": KillRedisMaster,
    "kill-etcd-leader": KillEtcdLeader,
    "partition-etcd-member": PartitionEtcdMember,
    "load-host": LoadHost,
}


def make_nemesis(spec: NemesisSpec) -> Nemesis:
    """The nemesis that carries out ``spec``."""
    return _CLASSES[spec.kind](spec)


# -- runner -----------------------------------------------------------------------------

#: Runs one blocking call off the event loop and returns its result.
Blocking = Callable[[Callable[[], Any]], Awaitable[Any]]


class _DaemonPool:
    """Long-lived daemon worker threads for blocking fault actions.

    Long-lived, because a server started from a thread with
    ``PR_SET_PDEATHSIG`` dies when *that thread* exits; daemon, because a call
    that never returns (a host that does not come back) must not block
    interpreter exit. Workers are started on demand, up to ``size``.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self._queue: queue.SimpleQueue[tuple[Callable[[], Any], concurrent.futures.Future[Any]]]
        self._queue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._workers = 0
        self._idle = 0

    def submit(self, fn: Callable[[], T]) -> concurrent.futures.Future[T]:
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        with self._lock:
            self._queue.put((fn, future))
            if self._queue.qsize() > self._idle and self._workers < self.size:
                self._workers += 1
                threading.Thread(target=self._work, name="svit-chaos-worker",
                                 daemon=True).start()
        return future

    def _work(self) -> None:
        while True:
            with self._lock:
                self._idle += 1
            fn, future = self._queue.get()
            with self._lock:
                self._idle -= 1
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn())
                except BaseException as exc:
                    future.set_exception(exc)


_POOL = _DaemonPool(8)


async def in_daemon_thread(fn: Callable[[], T]) -> T:
    """Run blocking ``fn`` on a long-lived daemon worker and await its result.

    Unlike :func:`asyncio.to_thread`, a call that never returns neither blocks
    interpreter exit nor the default executor; callers bound the wait with a
    timeout (the worker stays busy until the call ends).
    """
    return await asyncio.wrap_future(_POOL.submit(fn))


class NemesisRunner:
    """Runs a schedule against a target, recording ``nemesis`` events.

    Args:
        schedule: the windows to run (offsets from :meth:`run`'s start).
        ctx: target, history, processes and the optional stale writer.
        clock: for window timing (default monotonic).
        heal_timeout_s: bound on each inject and heal call, and on how long a
            healed service may take to answer (default 60 s); past it the fault
            counts as not healed (a harness error: the run is inconclusive).
        blocking: runs a blocking inject/heal call without blocking the loop
            (default :func:`in_daemon_thread`; tests run them inline).

    Attributes:
        injected: count of injected faults by kind.
        errors: harness errors (a fault that could not be injected or healed);
            any error makes the run inconclusive.
    """

    def __init__(
        self,
        schedule: Schedule,
        ctx: NemesisContext,
        *,
        clock: Clock | None = None,
        heal_timeout_s: float = 60.0,
        blocking: Blocking | None = None,
    ) -> None:
        self.schedule = schedule
        self._blocking: Blocking = blocking or in_daemon_thread
        self.ctx = ctx
        self.clock: Clock = clock or MonotonicClock()
        self.heal_timeout_s = heal_timeout_s
        self.injected: Counter[str] = Counter()
        self.errors: list[str] = []
        self.active: dict[int, Nemesis] = {}
        self._lock = asyncio.Lock()

    @property
    def active_labels(self) -> list[str]:
        return [n.spec.label for n in self.active.values()]

    async def _sleep_or_stop(self, seconds: float, stop: asyncio.Event) -> bool:
        """Sleep ``seconds`` on the clock; True if ``stop`` was set first."""
        if stop.is_set():
            return True
        sleeper = asyncio.ensure_future(self.clock.sleep(seconds))
        stopper = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait({sleeper, stopper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            sleeper.cancel()
            stopper.cancel()
        return stop.is_set()

    async def run(self, stop: asyncio.Event) -> None:
        """Run every window (concurrently, each at its offset) until done or ``stop``.

        Everything injected is healed before this returns, also on cancellation.
        """
        start = self.clock.now()
        tasks = [asyncio.ensure_future(self._window(i, w, start, stop))
                 for i, w in enumerate(self.schedule.windows)]
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await asyncio.shield(self.heal_all())

    async def _window(self, index: int, window: Window, start: float,
                      stop: asyncio.Event) -> None:
        delay = start + window.start_s - self.clock.now()
        if await self._sleep_or_stop(delay, stop):
            return
        nemesis = make_nemesis(window.spec)
        spec = window.spec.to_json()
        try:
            detail = await asyncio.wait_for(
                self._blocking(functools.partial(nemesis.inject, self.ctx)),
                self.heal_timeout_s)
        except Exception as exc:  # recorded; the run becomes inconclusive
            message = f"inject {window.spec.label} failed: {type(exc).__name__}: {exc}"
            self.errors.append(message)
            self.ctx.history.record("nemesis", phase="error", nemesis=window.spec.kind,
                                    window=index, spec=spec, detail={"error": message})
            self.active[index] = nemesis  # heal what may be half-broken
            await self._heal(index)
            return
        self.active[index] = nemesis
        self.injected[window.spec.kind] += 1
        self.ctx.history.record("nemesis", phase="inject", nemesis=window.spec.kind,
                                window=index, spec=spec, detail=detail)
        try:
            nemesis.interrupted = await self._sleep_or_stop(window.duration_s, stop)
        except BaseException:
            nemesis.interrupted = True
            raise
        finally:
            await asyncio.shield(self._heal(index))

    async def _heal(self, index: int) -> None:
        async with self._lock:
            nemesis = self.active.pop(index, None)
        if nemesis is None:
            return
        spec = nemesis.spec
        try:
            timeout = self.heal_timeout_s * nemesis.heal_timeout_factor
            detail = await asyncio.wait_for(
                self._blocking(functools.partial(nemesis.heal, self.ctx)), timeout)
            ok = await wait_until(lambda: self._blocking(functools.partial(nemesis.healed,
                                                                            self.ctx)),
                                  timeout_s=self.heal_timeout_s, clock=self.clock,
                                  interval_s=0.1)
        except TimeoutError:
            detail = {"error": f"no answer within "
                               f"{self.heal_timeout_s * nemesis.heal_timeout_factor} s"}
            ok = False
        except Exception as exc:
            detail, ok = {"error": f"{type(exc).__name__}: {exc}"}, False
        if not ok:
            message = f"heal {spec.label} failed: {detail.get('error', 'not healthy in time')}"
            self.errors.append(message)
            self.ctx.history.record("nemesis", phase="error", nemesis=spec.kind, window=index,
                                    spec=spec.to_json(), detail={"error": message})
            return
        self.ctx.history.record("nemesis", phase="heal", nemesis=spec.kind, window=index,
                                spec=spec.to_json(), detail=detail)

    async def heal_all(self) -> None:
        """Heal every active nemesis (idempotent; errors are recorded, never raised)."""
        for index in sorted(self.active):
            await self._heal(index)

    def heal_all_sync(self) -> None:
        """Blocking :meth:`heal_all` for paths without a running loop (best effort)."""
        for index, nemesis in sorted(self.active.items()):
            nemesis.interrupted = True
            with contextlib.suppress(Exception):
                nemesis.heal(self.ctx)
            self.active.pop(index, None)

    def raise_if_failed(self) -> None:
        """Raise :class:`HarnessError` if any fault could not be injected or healed."""
        if self.errors:
            raise HarnessError("; ".join(self.errors[:5]), stage="nemesis")
