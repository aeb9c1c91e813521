"""Start (or check) the detached host agents of a cluster, as a short-lived Ray driver.

Usage::

    python -m svit_cluster.cluster.bootstrap STATE_DIR/cluster.json agents \\
        [host=NAME ...] [backend-factory=MODULE:CALLABLE]

Creates one detached ``HostAgent`` per host listed in ``cluster.json``, pinned
to that host's Ray node, and waits until each holds its etcd lease. Prints one
JSON line per host. Exits non-zero if any host fails.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

from svit_cluster.cluster._agent import HostAgent
from svit_cluster.cluster._config import ClusterConfig, host_resource
from svit_cluster.cluster._names import agent_name

__all__ = ["start_agents"]


def start_agents(config: ClusterConfig, hosts: list[str], *, timeout_s: float = 120.0
                 ) -> list[dict[str, object]]:
    """Create (or find) each host's agent and start it; returns their statuses.

    Must run inside a connected Ray driver (``ray.init(address=...)``).

    Raises:
        ray.exceptions.GetTimeoutError: an agent did not start in ``timeout_s``.
    """
    import ray

    remote_agent: Any = ray.remote(HostAgent)
    handles = []
    for host in hosts:
        _drop_stale_agent(config, host)
        handle = remote_agent.options(
            name=agent_name(host),
            namespace=config.namespace,
            lifetime="detached",
            get_if_exists=True,
            resources={host_resource(host): 1},
            num_cpus=0,
            max_restarts=0,
            max_concurrency=256,
        ).remote(config, host)
        handles.append(handle)
    refs = [h.start.remote() for h in handles]
    statuses: list[dict[str, object]] = ray.get(refs, timeout=timeout_s)
    return statuses


def _drop_stale_agent(config: ClusterConfig, host: str, *, ping_s: float = 5.0) -> None:
    """Kill a registered agent of ``host`` that does not answer (its node died).

    After a host is killed, its detached agent can stay registered until Ray
    notices the dead node; ``get_if_exists`` would then hand back that dead
    actor and a restarted host would never get an agent.
    """
    import ray

    try:
        old = ray.get_actor(agent_name(host), namespace=config.namespace)
    except ValueError:
        return
    try:
        ray.get(old.ping.remote(), timeout=ping_s)
    except Exception:
        ray.kill(old, no_restart=True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                ray.get_actor(agent_name(host), namespace=config.namespace)
            except ValueError:
                return
            time.sleep(0.2)


#: ``backend-factory=module:callable``: the commit-backend factory of the agents'
#: process actors (``ClusterConfig.backend_factory``); only ``LocalCluster.up(
#: unsafe_disable_fencing=True)`` passes it, naming the unfenced test factory.
_FACTORY = "backend-factory="


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 2 or args[1] != "agents":
        print(__doc__, file=sys.stderr)
        return 2
    extra = args[2:]
    factories = [a[len(_FACTORY):] for a in extra if a.startswith(_FACTORY)]
    only = [a[len("host="):] for a in extra if a.startswith("host=")]
    if len(factories) > 1 or any(
            not a.startswith(("host=", _FACTORY)) for a in extra):
        print(__doc__, file=sys.stderr)
        return 2
    import ray

    path = Path(args[0])
    doc = json.loads(path.read_text())
    config = ClusterConfig.from_cluster_json(path)
    if factories:  # only LocalCluster.up(unsafe_disable_fencing=True) passes this
        config = dataclasses.replace(config, backend_factory=factories[0])
    ray.init(address=config.ray_address, namespace=config.namespace,
             logging_level=logging.ERROR, log_to_driver=False)
    try:
        # Only the named hosts (a restarted host), so that a paused or cut-off
        # host elsewhere cannot hold this up.
        # A restarted host gets a short deadline: the caller retries with a
        # fresh agent rather than waiting on one that landed on a dying node.
        for status in start_agents(config, only or sorted(doc["hosts"]),
                                   timeout_s=30.0 if only else 120.0):
            print(json.dumps(status))
    finally:
        ray.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
