"""Faults on one host's processes, and the load beside a host.

``kill-host``, ``pause-host``, ``stop-raylet``, ``kill-agent``, ``term-host``,
``etcd-restart-dead-host`` and ``load-host``: each names its host in the spec.
The heals resume or restart the host (restarting it too when its node died
while stopped, :mod:`svit_chaos.faults.liveness`) and so get four times the
runner's heal timeout; ``load-host`` only stops its loads. ``stop-raylet`` and
``kill-agent`` act on live processes and are recorded as skipped when another
fault has the host down or restarting; ``load-host`` loads the machine, not
the host's processes, and runs whatever the host's state.
"""

from __future__ import annotations

import signal
import time
from abc import abstractmethod
from typing import Any, ClassVar

from ..errors import HarnessError
from ..load import HostLoad
from ..spec import NemesisSpec
from .base import Nemesis, NemesisContext
from .liveness import host_already_down, host_state, restart_host, restart_if_died

__all__ = ["EtcdRestartDeadHost", "KillAgent", "KillHost", "LoadHost", "PauseHost",
           "StopRaylet", "TermHost"]


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
        killed = ctx.target.kill_agent(host)
        if killed:
            return {"killed": killed}
        # a live host without an agent worker: nothing to kill, and the heal's
        # restart brings the agent back; say what the host ran instead
        describe = getattr(ctx.target, "host_processes", None)
        return {"killed": [], "no_agent_worker": True,
                "found": describe(host) if describe is not None else None}

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


class EtcdRestartDeadHost(_RestartHost):
    """SIGKILL the host, then -- while its lease still runs -- restart etcd.

    ``inject`` kills the host, waits ``restart_after`` x lease TTL (default 0.8),
    SIGKILLs etcd, starts it again on the same data and waits (bounded by
    ``etcd_timeout_s``) until it answers: the host dead since t = 0, etcd
    restarted at t = 0.8 TTL. The history records the inject when all of
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
