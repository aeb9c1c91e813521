"""Stale owners: commits under a token a newer owner has superseded (the fencing controls).

``stale-owner`` remembers every process's token at inject and, at heal, writes
with it where a newer owner has claimed -- so it writes only if a failover
happened to occur inside its window. ``pause-owner`` makes one happen: it seals
a change under an owner's token, pauses that owner's host until another host
has committed, then commits the sealed change. So the negative control
(fencing off) always has a stale commit to catch, and the fenced leg always
one to refuse. Both write through the context's
:class:`~svit_chaos.stale.StaleWriter`.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, ClassVar

import redis

from svit_cluster.errors import ErrorCode, SvitError

from ..errors import HarnessError
from ..spec import NemesisSpec
from ..stale import InFlight, StaleWriter
from .base import Nemesis, NemesisContext
from .liveness import restart_if_died

__all__ = ["PauseOwner", "StaleOwner"]


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
    ``pause-host`` does, :func:`restart_if_died`), so later faults aimed at it
    find its raylet and agent again.

    Inject reads the owners in etcd and the fence and state in Redis, which
    another window may have down (``kill-redis``, ``cut-redis``, an etcd
    majority) or in the middle of a failover (no owner recorded): it retries
    for ``wait_s`` (default ``10 * lease TTL + 10`` s), before it pauses
    anything.

    Inject or heal raise :class:`HarnessError` (the run is inconclusive, with the
    reason) when no process had an owner or Redis stayed unreachable for
    ``wait_s``, the owner changed while it was being paused, or no other host
    committed within the deadline; the host is resumed (and restarted if it
    died) first.
    """

    # the node may have died while paused: heal restarts it
    heal_timeout_factor = 4.0
    poll_s: ClassVar[float] = 0.02

    def __init__(self, spec: NemesisSpec, *, claim_timeout_s: float | None = None,
                 wait_s: float | None = None) -> None:
        super().__init__(spec)
        self.claim_timeout_s = claim_timeout_s
        self.wait_s = wait_s
        self.host: str | None = None
        self.inflight: InFlight | None = None

    def _stale(self, ctx: NemesisContext) -> StaleWriter:
        if ctx.stale is None:
            raise HarnessError("pause-owner needs a stale writer", stage="inject")
        return ctx.stale

    def inject(self, ctx: NemesisContext) -> dict[str, Any]:
        stale = self._stale(ctx)
        wait = self.wait_s if self.wait_s is not None else 10 * ctx.target.lease_ttl_s + 10
        deadline = time.monotonic() + wait
        while True:
            try:
                injected = self._inject_once(ctx, stale)
            except (SvitError, redis.RedisError, OSError) as exc:
                # Only reads ran: nothing is paused yet, a retry is safe.
                if isinstance(exc, SvitError) and exc.code != ErrorCode.UNAVAILABLE:
                    raise
                if time.monotonic() >= deadline:
                    raise HarnessError(f"pause-owner: Redis unreachable for {wait:g} s "
                                       f"before the pause ({exc})", stage="inject") from exc
            else:
                if injected is not None:
                    return injected
                if time.monotonic() >= deadline:
                    raise HarnessError(f"pause-owner: no process had an owner for {wait:g} s "
                                       "(etcd down, or every process between owners)",
                                       stage="inject")
            time.sleep(0.2)

    def _inject_once(self, ctx: NemesisContext, stale: StaleWriter) -> dict[str, Any] | None:
        """Seal and pause on the first owned process; None when none has an owner."""
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
        return None

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
