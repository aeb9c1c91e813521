"""The planner: which fault when, from a scenario name and a seed.

:func:`build_schedule` turns a scenario of :data:`SCENARIOS` into a
:class:`~svit_chaos.spec.Schedule`, and :func:`random_schedule` draws one from a
seed; the same seed always gives the same faults at the same offsets.
Overlapping windows are combinations. The planner keeps at least one host
healthy at every moment (a host is faulted only while another stays free of
faults for the window plus a lease TTL), keeps killed hosts out of later
windows when the cluster does not restart them, and sizes each window from the
lease TTL (pauses and cuts outlast it). :func:`check_topology` refuses faults a
topology cannot carry out. Everything here is pure: nothing touches a cluster.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from svit_cluster.errors import ConfigurationError

from .kinds import (
    FAILOVER_KINDS,
    HOST_KINDS,
    KINDS,
    OWNER_KINDS,
    QUORUM_KINDS,
    RESTART_KINDS,
    SCALED_KINDS,
    SINGLE_ONLY_KINDS,
)
from .spec import NemesisSpec, Schedule, Window

__all__ = [
    "LOAD_CPU",
    "LOAD_MEMORY_MIB",
    "SCALED_SCENARIO_KINDS",
    "SCENARIOS",
    "SMOKE_KINDS",
    "build_schedule",
    "check_topology",
    "load_duration_s",
    "random_schedule",
    "smoke_duration_s",
]

#: The kinds the ``scaled`` scenario cycles through (with stale-owner windows
#: around the host kill and the owner pause).
SCALED_SCENARIO_KINDS = ("kill-redis-master", "kill-etcd-leader", "partition-etcd-member",
                         "pause-owner", "kill-host")
#: The kinds the ``smoke`` scenario runs once each (CI budget: under 120 s of workload at
#: the default TTL of 3 s). ``load-host`` is last: the cool-down after it gives a lease
#: that starved near the window's end the time to lapse at etcd before the run ends.
SMOKE_KINDS = ("pause-owner", "kill-host", "pause-host", "cut-etcd", "cut-redis", "slow-link",
               "kill-redis", "kill-etcd", "load-host")
#: ``load-host`` busy-loop processes in the schedules: 2 saturate a 2-core machine.
LOAD_CPU = 2
#: ``load-host`` memory held in the schedules (MiB).
LOAD_MEMORY_MIB = 256


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
            # past two TTLs: every host's lease runs out while there is no quorum
            "kill-etcd-majority": 2 * ttl + 2.0 + self.rng.uniform(0, ttl),
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
        kinds = [k for k in KINDS if k not in QUORUM_KINDS
                 and (k not in SINGLE_ONLY_KINDS if topology == "scaled"
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
