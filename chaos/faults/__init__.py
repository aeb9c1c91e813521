"""The faults: one class per nemesis kind, and :func:`make_nemesis`, which picks it.

A nemesis turns a :class:`~svit_chaos.spec.NemesisSpec` into actions on a
:class:`~svit_chaos.target.FaultTarget` (:mod:`svit_chaos.faults.base` holds the contract):

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
kill-etcd      ``kill -9`` etcd (with several     start it again on the same data directory
               members: the leader only)
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
kill-etcd-     SIGKILL a majority of the etcd     start them again (every host has lost its
majority       members: no quorum                 lease meanwhile; see ``KillEtcdMajority``)
load-host      start ``cpu`` busy loops and a     SIGKILL and reap every load by PID, whatever
               ``memory_mib`` MiB holder beside   became of the host meanwhile (see ``load``)
               the host, at the agent's niceness
============== ================================== ===========================================

Modules: :mod:`svit_chaos.faults.hosts` (a host's processes and the load beside
it), :mod:`svit_chaos.faults.services` (links, stores, the GCS),
:mod:`svit_chaos.faults.owners` (the stale-owner controls) and
:mod:`svit_chaos.faults.liveness` (a host's state, and restarting it).

``load-host`` breaks nothing by itself: it is a noisy neighbour at normal
priority, and what it tests is whether every host keeps its etcd lease while
the CPUs are saturated (the ``leases`` invariant, :mod:`svit_chaos.leases`).
"""

from __future__ import annotations

from ..spec import NemesisSpec
from .base import Nemesis, NemesisContext
from .hosts import (
    EtcdRestartDeadHost,
    KillAgent,
    KillHost,
    LoadHost,
    PauseHost,
    StopRaylet,
    TermHost,
)
from .liveness import host_already_down, host_state, restart_host, restart_if_died
from .owners import PauseOwner, StaleOwner
from .services import (
    CutLink,
    KillEtcdLeader,
    KillEtcdMajority,
    KillRedisMaster,
    KillServer,
    PartitionEtcdMember,
    PauseGcs,
)

__all__ = [
    "CutLink",
    "EtcdRestartDeadHost",
    "KillAgent",
    "KillEtcdLeader",
    "KillEtcdMajority",
    "KillHost",
    "KillRedisMaster",
    "KillServer",
    "LoadHost",
    "Nemesis",
    "NemesisContext",
    "PartitionEtcdMember",
    "PauseGcs",
    "PauseHost",
    "PauseOwner",
    "StaleOwner",
    "StopRaylet",
    "TermHost",
    "host_already_down",
    "host_state",
    "make_nemesis",
    "restart_host",
    "restart_if_died",
]

#: Each kind's class (the link kinds share one, as do the two server kinds).
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
    "kill-etcd-majority": KillEtcdMajority,
    "partition-etcd-member": PartitionEtcdMember,
    "load-host": LoadHost,
}


def make_nemesis(spec: NemesisSpec) -> Nemesis:
    """The nemesis that carries out ``spec``."""
    return _CLASSES[spec.kind](spec)
