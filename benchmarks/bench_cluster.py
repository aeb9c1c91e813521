"""Cluster benchmark: gateway throughput/latency, bare Ray actor calls, failover times.

Run::

    python -m benchmarks.bench_cluster [--clients 16] [--processes 100] [--ops 2000]
                                       [--kills 5] [--lease-ttl 3] [--hosts 3]
                                       [--actor-calls 1000]

Starts its own local cluster of ``--hosts`` hosts, prints one JSON document, stops it.
All figures come from this one run, side by side.

``--quick`` (CI): 2 hosts (a killed host's process fails over to the other),
2 clients, 2 processes, 20 ops, 100 bare actor calls, 1 kill.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from benchmarks._cluster import load_parser, local_cluster
from svit_cluster.client import AsyncSvitClient, SvitClient, new_request_id
from svit_cluster.local import ClusterSpec, LocalCluster, cluster_status

COUNTER = """(define (main input)
  (let ((count (+ (read "/memory/count") (value-get input "/by"))))
    (do (write "/memory/count" count) (value-map "count" count))))"""


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def gateway_load(url: str, token: str, pids: list[str], clients: int, ops: int
                       ) -> dict[str, Any]:
    versions = dict.fromkeys(pids, 0)
    latencies: list[float] = []
    conflicts = 0
    per_client = ops // clients

    async def client(n: int) -> None:
        nonlocal conflicts
        async with AsyncSvitClient(url, token, client_id=f"bench-{n}") as c:
            mine = pids[n::clients] or pids  # disjoint shares: no self-inflicted conflicts
            for i in range(per_client):
                pid = mine[i % len(mine)]
                while True:
                    t0 = time.perf_counter()
                    resp = await c.activate(pid, "counter", {"by": 1},
                                            expected_version=versions[pid])
                    latencies.append(time.perf_counter() - t0)
                    out = resp.outcome
                    if out.status == "committed":
                        versions[pid] = out.activation.version
                        break
                    assert out.status == "conflict", out
                    conflicts += 1
                    versions[pid] = out.actual_version

    # warm up: activate every process once (placement), not measured
    async with AsyncSvitClient(url, token, client_id="warm") as c:
        for pid in pids:
            await c.state(pid, "/memory/count")
    started = time.perf_counter()
    await asyncio.gather(*(client(n) for n in range(clients)))
    elapsed = time.perf_counter() - started
    committed = per_client * clients
    return {
        "clients": clients,
        "processes": len(pids),
        "committed": committed,
        "conflicts": conflicts,
        "activations_per_s": committed / elapsed,
        "latency_p50_ms": pct(latencies, 0.50) * 1000,
        "latency_p99_ms": pct(latencies, 0.99) * 1000,
    }


def bare_actor_calls(address: str, host: str, n: int = 1000) -> dict[str, Any]:
    import ray

    from svit_cluster.cluster import host_resource

    ray.init(address=address, namespace="svit-bench", logging_level="ERROR",
             log_to_driver=False)
    try:
        @ray.remote(num_cpus=0)
        class Echo:
            def ping(self, x: int) -> int:
                return x

        echo = Echo.options(resources={host_resource(host): 1}).remote()  # type: ignore[attr-defined]
        ray.get(echo.ping.remote(0))
        samples = []
        for i in range(n):
            t0 = time.perf_counter()
            ray.get(echo.ping.remote(i))
            samples.append(time.perf_counter() - t0)
        ray.kill(echo)
        return {"calls": n, "p50_ms": pct(samples, 0.5) * 1000,
                "p99_ms": pct(samples, 0.99) * 1000,
                "mean_ms": statistics.fmean(samples) * 1000}
    finally:
        ray.shutdown()


def failovers(cluster: LocalCluster, url: str, token: str, kills: int) -> dict[str, Any]:
    times = []
    with SvitClient(url, token, client_id="failover", attempts=200, max_wait_s=0.2) as c:
        for k in range(kills):
            pid = f"svit://local/fo-{k}-{uuid.uuid4().hex[:6]}"
            c.create_process(pid, memory={"count": 0}, scripts={"counter": COUNTER})
            c.activate(pid, "counter", {"by": 1}, expected_version=0)
            victim = cluster_status(cluster)["owners"][pid]["host"]
            t0 = time.monotonic()
            cluster.kill_host(victim)
            resp = c.activate(pid, "counter", {"by": 1}, expected_version=1,
                              request_id=new_request_id())
            times.append(time.monotonic() - t0)
            assert resp.outcome.status == "committed", resp
            print(f"kill {k + 1}/{kills}: {victim} -> failover {times[-1]:.2f} s",
                  file=sys.stderr)
            cluster.restart_host(victim)
    return {"kills": kills, "hosts": cluster.spec.hosts, "lease_ttl_s": cluster.spec.lease_ttl_s,
            "median_s": statistics.median(times), "max_s": max(times),
            "all_s": [round(t, 3) for t in times],
            "target_s": cluster.spec.lease_ttl_s + 1.5}


def main() -> int:
    ap = load_parser(__doc__, "CI smoke run: 2 hosts, 2 clients, 2 processes, 20 ops, "
                              "100 actor calls, 1 kill")
    ap.add_argument("--ops", type=int, default=2000)
    ap.add_argument("--kills", type=int, default=5)
    ap.add_argument("--lease-ttl", type=int, default=3)
    ap.add_argument("--actor-calls", type=int, default=1000,
                    help="sequential calls to one bare Ray actor")
    args = ap.parse_args()
    if args.quick:
        args.clients, args.processes, args.ops, args.kills = 2, 2, 20, 1
        args.hosts, args.actor_calls = 2, 100
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    with tempfile.TemporaryDirectory(prefix="svit-bench-") as tmp:
        with local_cluster(ClusterSpec(state_dir=Path(tmp), hosts=args.hosts,
                                       lease_ttl_s=args.lease_ttl)) as cluster:
            url, token = cluster.doc["gateway"]["url"], cluster.doc["tokens"]["admin"]
            pids = [f"svit://local/bench-{i}" for i in range(args.processes)]
            with SvitClient(url, token) as c:
                for pid in pids:
                    c.create_process(pid, memory={"count": 0}, scripts={"counter": COUNTER})
            load = asyncio.run(gateway_load(url, token, pids, args.clients, args.ops))
            actor = bare_actor_calls(cluster.doc["ray"]["address"], "h1", args.actor_calls)
            fo = failovers(cluster, url, token, args.kills)
    print(json.dumps({"gateway": load, "bare_ray_actor_call": actor, "failover": fo,
                      "ratio_gateway_p50_to_actor_p50": load["latency_p50_ms"] / actor["p50_ms"]},
                     indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
