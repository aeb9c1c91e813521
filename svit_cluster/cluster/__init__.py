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
* :class:`Budget`, :func:`derive_budget`, :func:`node_memory_bytes` -- a host's
  residency budget (how many process actors it runs) and how it is derived.

Only :class:`ClusterConfig`, :func:`host_resource` and the budget helpers load
with the package; every
other name loads on first use (PEP 562). Each active process is its own Ray worker,
which imports this package to unpickle :class:`ProcessActor`: it must not pay for
the agent's etcd client (aetcd, grpc, prometheus_client, tenacity) nor the
router's gateway (FastAPI, starlette) (tests/cluster/test_worker_imports.py).
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

from svit_cluster.cluster._config import WORKER_NICENESS_ENV, ClusterConfig, host_resource
from svit_cluster.cluster._residency import Budget, derive_budget, node_memory_bytes

if TYPE_CHECKING:
    from svit_cluster.cluster._actor import ProcessActor
    from svit_cluster.cluster._agent import HostAgent, hosts_prefix
    from svit_cluster.cluster._heartbeat import check_heartbeat
    from svit_cluster.cluster._host_lease import LEASE_LOST_LOG
    from svit_cluster.cluster._names import actor_name, agent_name
    from svit_cluster.cluster._router import RayRouter
    from svit_cluster.cluster._routes import Route, RouteCache
    from svit_cluster.cluster._types import Activated, ServedActor, ServeStatus
    from svit_cluster.cluster.bootstrap import start_agents

#: Lazily loaded public names -> the submodule that defines them.
_LAZY = {
    "ProcessActor": "_actor",
    "HostAgent": "_agent",
    "actor_name": "_names",
    "agent_name": "_names",
    "hosts_prefix": "_agent",
    "check_heartbeat": "_heartbeat",
    "LEASE_LOST_LOG": "_host_lease",
    "RayRouter": "_router",
    "Route": "_routes",
    "RouteCache": "_routes",
    "Activated": "_types",
    "ServedActor": "_types",
    "ServeStatus": "_types",
    "start_agents": "bootstrap",
}

__all__ = [
    "LEASE_LOST_LOG",
    "WORKER_NICENESS_ENV",
    "Activated",
    "Budget",
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
    "derive_budget",
    "host_resource",
    "hosts_prefix",
    "node_memory_bytes",
    "start_agents",
]


def __getattr__(name: str) -> Any:
    """Import a public name's submodule on first use (PEP 562).

    Raises:
        AttributeError: ``name`` is not a public name of this package.
    """
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
