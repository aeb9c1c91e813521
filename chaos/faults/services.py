"""Faults on what every host depends on: its links, the stores and Ray's GCS.

``cut-etcd``, ``cut-redis`` and ``slow-link`` switch one host's proxy to a
service (:class:`~svit_chaos.proxy.LinkMode`); ``kill-redis`` and ``kill-etcd``
kill the single topology's server and start it again on the same data;
``kill-redis-master``, ``kill-etcd-leader`` and ``partition-etcd-member`` act on
a member of the scaled topology; ``pause-gcs`` stops Ray's GCS. A server or
member fault is healed once its service answers again.
"""

from __future__ import annotations

import signal
from typing import Any

from ..errors import HarnessError
from ..proxy import LinkMode
from ..spec import NemesisSpec
from .base import Nemesis, NemesisContext

__all__ = ["CutLink", "KillEtcdLeader", "KillRedisMaster", "KillServer", "PartitionEtcdMember",
           "PauseGcs"]


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


class PauseGcs(Nemesis):
    """SIGSTOP Ray's GCS on the head node; SIGCONT at heal."""

    def inject(self, ctx: NemesisContext) -> dict[str, Any]:
        return {"stopped": ctx.target.signal_gcs(signal.SIGSTOP)}

    def heal(self, ctx: NemesisContext) -> dict[str, Any]:
        return {"resumed": ctx.target.signal_gcs(signal.SIGCONT)}


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


class KillEtcdMajority(Nemesis):
    """``kill-etcd-majority``: SIGKILL a majority of the etcd members, the leader
    first, so etcd has no quorum; start them again at heal.

    What happens meanwhile: no keepalive, claim or release succeeds, so every
    host finds its lease LOST at its local deadline and stops serving (its
    processes answer ``unavailable``); commits in flight are still fenced by
    Redis. After the heal etcd elects a leader, which renews every old lease
    for a full TTL; the hosts join under new leases, and processes whose old
    ownership records are still held come back when those leases lapse (the
    gateways restore them) or on their next request.
    """

    def inject(self, ctx: NemesisContext) -> dict[str, Any]:
        return {"members": ctx.target.kill_etcd_majority()}

    def heal(self, ctx: NemesisContext) -> dict[str, Any]:
        ctx.target.start_etcd()
        return {}

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
