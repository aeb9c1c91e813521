"""Failover headroom: how many warm spares a host keeps for its peers' processes.

When a host fails, the gateways place its processes on the live hosts at
once, over the warm spares they keep (a spare binds and restores in
milliseconds; past them each activation first starts a Ray worker, about a
second of a core each, one at a time per host). So each host keeps enough
spares for its share of the busiest peer's processes::

    spares = ceil(max active of any peer / (live hosts - 1))

bounded below by ``warm_spares`` and above by ``max(warm_spares,
max_warm_spares)`` (a spare is an idle Ray worker, about 50-65 MiB PSS:
headroom for a failure is paid for all the time), and always inside the
residency budget (:meth:`WorkerPool.wanted`). A host that holds every process
of a 3-host cluster of 6 thus makes each survivor keep 3: all 6 bind at once.

The inputs are the host records in etcd (``/svit/<cluster>/hosts/<host>``),
which each agent updates with its ``active`` count (processes served), its
``spares`` target and the spares ``ready`` now, at most once per
:data:`HEADROOM_EVERY_S` and only when one changed. The gateways read
``ready`` (else ``spares``) to know how many activations a host takes warm
(``RayRouter._place_once``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

__all__ = ["HEADROOM_EVERY_S", "failover_spares"]

#: Seconds between an agent's headroom rounds (read the host records, publish
#: its own count when it changed).
HEADROOM_EVERY_S = 1.0


def failover_spares(host: str, records: Mapping[str, Mapping[str, Any]], *,
                    warm_spares: int, max_warm_spares: int) -> int:
    """The warm spares ``host`` keeps (see the module docstring).

    Args:
        host: this host's name.
        records: the live hosts' records by host name (``active``: processes
            it serves; a record without it counts as 0). ``host`` itself may
            be absent (its lease is being renewed): it counts as live.
        warm_spares: the floor (``ClusterConfig.warm_spares``), >= 0.
        max_warm_spares: the ceiling (``ClusterConfig.max_warm_spares``); a
            ceiling below the floor keeps the floor.

    Returns:
        The spare target, in ``[warm_spares, max(warm_spares, max_warm_spares)]``.
    """
    live = set(records) | {host}
    if len(live) < 2:
        return warm_spares
    busiest = 0
    for name, record in records.items():
        if name == host:
            continue
        try:
            busiest = max(busiest, int(record.get("active", 0)))
        except (TypeError, ValueError):
            continue
    share = math.ceil(busiest / (len(live) - 1))
    return max(warm_spares, min(max(warm_spares, max_warm_spares), share))
