"""``svit-cluster status``: hosts, leases, owners and live actors of a local cluster."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx

from svit_cluster.local._cluster import LocalCluster
from svit_cluster.local._servers import pid_alive
from svit_cluster.ownership import cluster_prefix, open_client, parse_key, record_token

__all__ = ["cluster_status"]

#: What ``status`` shows of each host agent's ``status()`` (see ``HostAgent.status``).
_AGENT_FIELDS = ("answered", "lease_state", "lease_id", "incarnation", "actors", "max_active",
                 "budget_basis", "spares", "starting", "pss_mib", "max_actors_pss_mib",
                 "keepalive_lag_s", "max_keepalive_lag_s", "lru_idle_s", "evictions",
                 "host_full", "worker_starts", "worker_reuses", "lost_leases", "keeper_pid")


async def _etcd_view(endpoint: str, cluster: str) -> dict[str, Any]:
    client = open_client(endpoint)
    members = len(endpoint.split(","))
    try:
        for attempt in range(members):  # the failover client moves on after a failure
            try:
                got = await asyncio.wait_for(client.get_prefix(cluster_prefix(cluster)), 5)
                break
            except Exception:
                if attempt == members - 1:
                    raise
        hosts: dict[str, Any] = {}
        owners: dict[str, Any] = {}
        for kv in got:
            kind = parse_key(cluster, bytes(kv.key))
            if kind is None:
                continue  # the fence epoch
            value = json.loads(bytes(kv.value))
            if kind[0] == "host":
                hosts[kind[1]] = {**value, "lease": int(kv.lease)}
            else:
                token = record_token(bytes(kv.value), int(kv.create_revision))
                owners[kind[1]] = {**value, "token": token}
        return {"hosts": hosts, "owners": owners}
    finally:
        await client.close()


def _agents_view(url: str, token: str) -> tuple[dict[str, dict[str, Any]], str | None]:
    """Each host's lease and residency from the gateway's ``GET /v1/admin/hosts``
    (``{host: status}``), and why it could not be read (None when it was)."""
    try:
        resp = httpx.get(url + "/v1/admin/hosts", timeout=5,
                         headers={"Authorization": f"Bearer {token}"})
        resp.raise_for_status()
        return {str(h["host"]): h for h in resp.json()["hosts"]}, None
    except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
        return {}, f"{type(exc).__name__}: {exc}"[:200]


def cluster_status(cluster: LocalCluster) -> dict[str, Any]:
    """A JSON-ready view: gateway health, each host's processes, lease and
    residency (active actors and budget, warm spares, summed PSS, keepalive lag,
    idle age of its least recently used process; from the gateway's admin host
    view), owners.

    Raises:
        UnavailableError: etcd cannot be reached.
    """
    doc = cluster.doc
    gw = doc.get("gateway", {})
    try:
        healthy = httpx.get(gw["url"] + "/healthz", timeout=3).status_code == 200
    except (httpx.HTTPError, KeyError):
        healthy = False
    agents, agents_error = ({}, "no gateway recorded") if "url" not in gw else \
        _agents_view(gw["url"], doc.get("tokens", {}).get("admin", ""))
    try:
        view = asyncio.run(_etcd_view(doc["etcd"]["endpoint"], doc["cluster"]))
    except Exception as exc:  # report, don't crash: status is a diagnostic
        view = {"hosts": {}, "owners": {}, "error": f"etcd: {type(exc).__name__}"}
    hosts = []
    for name in sorted(doc.get("hosts", {})):
        node = cluster.node(name)
        alive = pid_alive(node.pid)
        lease = view["hosts"].get(name, {}).get("lease")
        owned = sum(1 for o in view["owners"].values() if o.get("host") == name)
        agent = agents.get(name, {})
        hosts.append({"name": name, "alive": alive, "pids": node.pids(),
                      "lease": lease, "owners": owned,
                      "agent": {k: agent.get(k) for k in _AGENT_FIELDS} if agent else None})
    stores = {svc: [{"name": name, "pid": pid,
                     "alive": pid_alive(pid)}
                    for name, pid in procs]
              for svc, procs in cluster._store_pids().items()}
    return {"gateway": {**gw, "healthy": healthy}, "hosts": hosts,
            "owners": view["owners"], "etcd_error": view.get("error"),
            "agents_error": agents_error,
            "redis": {"url": doc.get("redis", {}).get("url"),
                      "cluster": bool(doc.get("redis", {}).get("cluster", False)),
                      "nodes": stores.get("redis", [])},
            "etcd": {"endpoint": doc.get("etcd", {}).get("endpoint"),
                     "members": stores.get("etcd", [])}}
