"""``svit-cluster status``: hosts, leases, owners and live actors of a local cluster."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import psutil

from svit_cluster.local._cluster import LocalCluster

__all__ = ["cluster_status"]


async def _etcd_view(endpoint: str, cluster: str) -> dict[str, Any]:
    from svit_cluster.ownership import cluster_prefix, open_client, parse_key, record_token

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


def cluster_status(cluster: LocalCluster) -> dict[str, Any]:
    """A JSON-ready view: gateway health, each host's processes and lease, owners.

    Raises:
        UnavailableError: etcd cannot be reached.
    """
    doc = cluster.doc
    gw = doc.get("gateway", {})
    try:
        healthy = httpx.get(gw["url"] + "/healthz", timeout=3).status_code == 200
    except (httpx.HTTPError, KeyError):
        healthy = False
    try:
        view = asyncio.run(_etcd_view(doc["etcd"]["endpoint"], doc["cluster"]))
    except Exception as exc:  # report, don't crash: status is a diagnostic
        view = {"hosts": {}, "owners": {}, "error": f"etcd: {type(exc).__name__}"}
    hosts = []
    for name in sorted(doc.get("hosts", {})):
        node = cluster.node(name)
        alive = node.pid is not None and psutil.pid_exists(node.pid)
        lease = view["hosts"].get(name, {}).get("lease")
        owned = sum(1 for o in view["owners"].values() if o.get("host") == name)
        hosts.append({"name": name, "alive": alive, "pids": node.pids(),
                      "lease": lease, "owners": owned})
    stores = {svc: [{"name": name, "pid": pid,
                     "alive": pid is not None and psutil.pid_exists(pid)}
                    for name, pid in procs]
              for svc, procs in cluster._store_pids().items()}
    return {"gateway": {**gw, "healthy": healthy}, "hosts": hosts,
            "owners": view["owners"], "etcd_error": view.get("error"),
            "redis": {"url": doc.get("redis", {}).get("url"),
                      "cluster": bool(doc.get("redis", {}).get("cluster", False)),
                      "nodes": stores.get("redis", [])},
            "etcd": {"endpoint": doc.get("etcd", {}).get("endpoint"),
                     "members": stores.get("etcd", [])}}
