"""What a fault finds of a host, and how a heal brings a host back.

:func:`host_state` reads the target's optional ``host_restarting`` and
``host_alive`` hooks (``"unknown"`` without them); :func:`host_already_down`
turns a host that is down or being restarted into the detail of a skipped
inject; :func:`restart_host` restarts a host when the cluster can, and
:func:`restart_if_died` does so after a stop or pause only if the host's node
died on being resumed. Each blocks and returns details for the history.
"""

from __future__ import annotations

import time
from typing import Any

from .base import NemesisContext

__all__ = ["host_already_down", "host_state", "restart_host", "restart_if_died"]


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


def restart_host(ctx: NemesisContext, host: str) -> dict[str, Any]:
    """Restart ``host`` (if the cluster can), as after ``kill-host``."""
    return {"restarted": bool(ctx.target.restart_host(host))}
