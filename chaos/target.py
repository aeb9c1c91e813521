"""What a nemesis can do to a cluster: the :class:`FaultTarget` protocol.

A cluster satisfies it (the harness adapts ``LocalCluster`` to it in
:mod:`svit_chaos.cluster`); the faults of :mod:`svit_chaos.faults` act on a
cluster only through it, so tests drive them against fakes. A target may add
the optional hooks ``host_alive(host)`` and ``host_restarting(host)``, which the
faults read with ``getattr`` (:mod:`svit_chaos.faults.liveness`).
"""

from __future__ import annotations

from typing import Any, Protocol

from .load import HostLoad
from .proxy import LinkMode

__all__ = ["FaultTarget", "Link"]


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

    def kill_etcd_majority(self) -> list[str]: ...

    def start_etcd(self) -> None: ...

    def service_ready(self, service: str) -> bool: ...

    def link(self, host: str, service: str) -> Link: ...

    def owner(self, process: str) -> str | None: ...

    def warm_hosts(self) -> set[str]: ...

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
