"""Cluster hosting on Ray: host agents (control plane), process actors (data path),
the route cache and the gateway's Ray router.

Public names, by importance:

* :class:`RayRouter` -- the gateway's router: cached routes, placement by load.
* :class:`RouteCache`, :class:`Route` -- owners and hosts from one etcd watch.
* :class:`HostAgent` -- per-host lease, activation, passivation, self-fencing.
* :class:`ProcessActor` -- serves one process under one fencing token.
* :class:`ClusterConfig` -- what every component needs to join a cluster.
* :func:`start_agents` -- create the detached agents (used by ``svit-cluster up``).
* :class:`Activated`, :class:`ServeStatus`, :class:`ServedActor` -- typed shapes
  of the agent's activation answer and of a served process.
"""

from typing import TYPE_CHECKING, Any

from svit_cluster.cluster._actor import ProcessActor
from svit_cluster.cluster._agent import HostAgent, actor_name, agent_name, hosts_prefix
from svit_cluster.cluster._config import ClusterConfig, host_resource
from svit_cluster.cluster._heartbeat import check_heartbeat
from svit_cluster.cluster._routes import Route, RouteCache
from svit_cluster.cluster._types import Activated, ServedActor, ServeStatus
from svit_cluster.cluster.bootstrap import start_agents

if TYPE_CHECKING:
    from svit_cluster.cluster._router import RayRouter

__all__ = [
    "Activated",
    "ClusterConfig",
    "HostAgent",
    "ProcessActor",
    "RayRouter",
    "Route",
    "RouteCache",
    "ServeStatus",
    "ServedActor",
    "actor_name",
    "agent_name",
    "check_heartbeat",
    "host_resource",
    "hosts_prefix",
    "start_agents",
]


def __getattr__(name: str) -> Any:
    """Import :class:`RayRouter` on first use (PEP 562).

    The router imports the gateway (FastAPI, starlette, prometheus_client); process
    actors and host agents import this package but never route, so they must not
    pay for it (issue 18 item 3, tests/cluster/test_worker_imports.py).

    Raises:
        AttributeError: ``name`` is not a public name of this package.
    """
    if name == "RayRouter":
        from svit_cluster.cluster._router import RayRouter

        return RayRouter
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
