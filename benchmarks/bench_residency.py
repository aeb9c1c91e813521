"""Bounded residency under a skewed workload: many registered processes, few active.

Run::

    python -m benchmarks.bench_residency [--quick] [--processes 2000] [--clients 32]
                                         [--duration-s 300] [--max-active 20] [--zipf-s 1.1]
                                         [--hosts 3]

Starts a local cluster of ``--hosts`` hosts with a budget of ``--max-active`` each, registers
``--processes`` counter processes (created 16 at a time through the HTTP API),
then runs ``--clients`` closed-loop clients for ``--duration-s`` seconds; each
picks a process by a Zipf distribution (exponent ``--zipf-s``; ranks shuffled
over the processes with a fixed seed) and commits one increment
(``activate_until_committed``; an operation that still conflicts after its
attempts -- the hottest processes are contended by several clients -- is
counted in ``gave_up_on_conflicts``). Prints one JSON document:

* ``budget``: every host's most owned processes over all samples (etcd, every
  second) against its budget, and how many samples were over it (must be 0);
* ``share_503``: answers the SDK retried as 503 (``cluster_full``,
  ``host_full`` or ``overloaded``...) over all requests sent;
* ``found_active`` / ``activated``: latency (p50/p99, ms) of operations whose
  answering owner token was the one last seen for that process (it stayed
  active) versus a new one (it was activated, by this operation or a
  concurrent one: all traffic is the benchmark's own);
* ``host_memory_mib``: each host's memory (PSS of its Ray node's processes:
  raylet, agent, lease keeper, workers) per sample during the load (every
  minute; the first at its start), and the least-squares slope in MiB per
  minute (flat means within noise);
* ``agents``: passivations at the budget, worker starts and reuses per host.

``--quick`` (CI): 2 hosts (placement still chooses between hosts), 16
processes, 4 clients, 4 s, budget 2, memory samples every 2 s.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import json
import os
import random
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks._cluster import local_cluster
from svit_cluster.client import AsyncSvitClient
from svit_cluster.errors import ConflictError
from svit_cluster.local import ClusterSpec, LocalCluster

COUNTER = """(define (main input)
  (let ((count (+ (read "/memory/count") (value-get input "/by"))))
    (do (write "/memory/count" count) (value-map "count" count))))"""


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summary_ms(values: list[float]) -> dict[str, Any]:
    p50, p99 = pct(values, 0.5), pct(values, 0.99)
    return {"count": len(values), "p50_ms": None if p50 is None else round(p50 * 1000, 1),
            "p99_ms": None if p99 is None else round(p99 * 1000, 1)}


def slope(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of ``(minute, value)`` points; None below 2 points."""
    if len(points) < 2:
        return None
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    var = sum((x - mx) ** 2 for x, _ in points)
    return 0.0 if var == 0 else sum((x - mx) * (y - my) for x, y in points) / var


class Zipf:
    """Ranks 1..n drawn with probability proportional to ``rank ** -s``."""

    def __init__(self, n: int, s: float, rng: random.Random) -> None:
        total, self.cum = 0.0, []
        for k in range(1, n + 1):
            total += k ** -s
            self.cum.append(total)
        self.total = total
        self.rng = rng

    def draw(self) -> int:
        """A 0-based rank."""
        return bisect.bisect_left(self.cum, self.rng.random() * self.total)


def host_pss_mib(cluster: LocalCluster, host: str) -> float:
    """PSS (MiB) of every process of ``host``'s Ray node."""
    from svit_cluster.cluster._residency import read_pss_kib

    return round(sum(read_pss_kib(pid) or 0 for pid in cluster.node(host).pids()) / 1024, 1)


class Sampler(threading.Thread):
    """Owners per host every second (etcd); each host's memory every ``memory_every_s``."""

    def __init__(self, cluster: LocalCluster, memory_every_s: float) -> None:
        super().__init__(daemon=True)
        self.cluster = cluster
        self.memory_every_s = memory_every_s
        self.stop = threading.Event()
        self.max_owners: dict[str, int] = {}
        self.samples = 0
        self.over: list[dict[str, Any]] = []
        self.memory: dict[str, list[tuple[float, float]]] = {}
        self.budget: int = cluster.spec.max_active_per_host
        self.started = time.monotonic()
        #: set when the load starts: memory is sampled from then on (the
        #: registration phase starts every worker, which is not growth)
        self.loading = threading.Event()

    def run(self) -> None:
        from svit_cluster.local._status import _etcd_view

        next_memory = 0.0
        while not self.stop.is_set():
            try:
                view = asyncio.run(_etcd_view(self.cluster.doc["etcd"]["endpoint"],
                                              self.cluster.doc["cluster"]))
                counts: dict[str, int] = {}
                for owner in view["owners"].values():
                    counts[owner["host"]] = counts.get(owner["host"], 0) + 1
                self.samples += 1
                for host, n in counts.items():
                    self.max_owners[host] = max(self.max_owners.get(host, 0), n)
                    if n > self.budget:
                        self.over.append({"t_s": round(time.monotonic() - self.started, 1),
                                          "host": host, "owners": n})
            except Exception as exc:  # etcd slow: one sample missed
                print(f"sample failed: {exc!r}", file=sys.stderr)
            now = time.monotonic()
            if self.loading.is_set() and now >= next_memory:
                if next_memory == 0.0:
                    self.started = now
                next_memory = now + self.memory_every_s
                minute = (now - self.started) / 60
                for host in sorted(self.cluster.doc["hosts"]):
                    self.memory.setdefault(host, []).append((round(minute, 2),
                                                             host_pss_mib(self.cluster, host)))
            self.stop.wait(1.0)


async def register(url: str, token: str, pids: list[str], at_once: int) -> dict[str, int]:
    """Create every process (``at_once`` concurrent creators); their owner tokens."""
    tokens: dict[str, int] = {}
    queue = list(pids)

    async def creator(n: int) -> None:
        async with AsyncSvitClient(url, token, client_id=f"reg-{n}", attempts=60,
                                   max_wait_s=2.0, timeout_s=120) as c:
            while queue:
                pid = queue.pop()
                try:
                    info = await c.create_process(pid, memory={"count": 0},
                                                  scripts={"counter": COUNTER})
                    tokens[pid] = int(info.get("token") or 0)
                except ConflictError:
                    tokens[pid] = 0  # created by an earlier attempt of this run

    await asyncio.gather(*(creator(n) for n in range(at_once)))
    return tokens


async def load(url: str, token: str, pids: list[str], clients: int, duration_s: float,
               zipf_s: float, seen: dict[str, int]) -> dict[str, Any]:
    rng = random.Random(29)
    order = list(pids)
    rng.shuffle(order)
    zipf = Zipf(len(order), zipf_s, rng)
    warm: list[float] = []
    activated: list[float] = []
    retried: dict[str, int] = {}
    ops = [0]
    gave_up = [0]
    sent_retries = [0]

    def on_retry(_attempt: int, error: BaseException, _wait_s: float) -> None:
        fields = getattr(error, "fields", {}) or {}
        key = f"{getattr(error, 'code', type(error).__name__)} {fields.get('status')}"
        for why in ("cluster_full", "host_full", "overloaded", "route_moved", "lease_state"):
            if why in fields:
                key += f" {why}"
        retried[key] = retried.get(key, 0) + 1
        sent_retries[0] += 1

    end = time.monotonic() + duration_s

    async def client(n: int) -> None:
        async with AsyncSvitClient(url, token, client_id=f"zipf-{n}", attempts=60,
                                   max_wait_s=2.0, timeout_s=120, on_retry=on_retry) as c:
            while time.monotonic() < end:
                pid = order[zipf.draw()]
                t0 = time.perf_counter()
                try:
                    await c.activate_until_committed(pid, "counter", {"by": 1})
                except ConflictError:  # a hot process: other clients kept winning
                    gave_up[0] += 1
                    continue
                took = time.perf_counter() - t0
                ops[0] += 1
                owner = c.last_owner_token
                (warm if owner is not None and seen.get(pid) == owner else activated).append(took)
                if owner is not None:
                    seen[pid] = owner

    started = time.monotonic()
    await asyncio.gather(*(client(n) for n in range(clients)))
    elapsed = time.monotonic() - started
    answers_503 = sum(v for k, v in retried.items() if " 503" in k)
    requests = ops[0] + sent_retries[0]
    return {"ops": ops[0], "ops_per_s": round(ops[0] / elapsed, 1), "seconds": round(elapsed, 1),
            "gave_up_on_conflicts": gave_up[0],
            "answers_503": answers_503,
            "share_503": round(answers_503 / requests, 4) if requests else None,
            "retried": retried, "found_active": summary_ms(warm),
            "activated": summary_ms(activated)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true",
                    help="CI smoke run: 2 hosts, 16 processes, 4 clients, 4 s, budget 2")
    ap.add_argument("--processes", type=int, default=2000)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--duration-s", type=float, default=300.0)
    ap.add_argument("--max-active", type=int, default=20, help="residency budget per host")
    ap.add_argument("--zipf-s", type=float, default=1.1)
    ap.add_argument("--lease-ttl", type=int, default=5)
    ap.add_argument("--hosts", type=int, default=3)
    args = ap.parse_args()
    memory_every_s = 60.0
    if args.quick:
        args.processes, args.clients, args.duration_s, args.max_active = 16, 4, 4.0, 2
        args.hosts, memory_every_s = 2, 2.0
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    with tempfile.TemporaryDirectory(prefix="svit-res-") as tmp:
        with local_cluster(ClusterSpec(
                state_dir=Path(tmp), hosts=args.hosts, lease_ttl_s=args.lease_ttl,
                dispatchers=0, max_active_per_host=args.max_active)) as cluster:
            sampler = Sampler(cluster, memory_every_s)
            try:
                url, token = cluster.doc["gateway"]["url"], cluster.doc["tokens"]["admin"]
                pids = [f"svit://local/z-{i}" for i in range(args.processes)]
                sampler.start()
                t0 = time.monotonic()
                seen = asyncio.run(register(url, token, pids, 16))
                registered_s = round(time.monotonic() - t0, 1)
                print(f"registered {len(pids)} processes in {registered_s} s", file=sys.stderr)
                sampler.loading.set()
                result = asyncio.run(load(url, token, pids, args.clients, args.duration_s,
                                          args.zipf_s, seen))
                agents = _agents(url, token)
            finally:
                sampler.stop.set()
                sampler.join(10)
    memory = {h: {"samples": [v for _, v in pts],
                  "slope_mib_per_min": (None if (s := slope(pts)) is None else round(s, 2))}
              for h, pts in sampler.memory.items()}
    print(json.dumps({
        "config": {"processes": args.processes, "clients": args.clients,
                   "duration_s": args.duration_s, "max_active_per_host": args.max_active,
                   "zipf_s": args.zipf_s, "lease_ttl_s": args.lease_ttl, "hosts": args.hosts},
        "registered_s": registered_s,
        **result,
        "budget": {"max_active_per_host": args.max_active,
                   "max_owners_seen": sampler.max_owners, "samples": sampler.samples,
                   "samples_over_budget": len(sampler.over), "over": sampler.over[:10]},
        "host_memory_mib": memory,
        "agents": agents,
    }, indent=2))
    return 0


def _agents(url: str, token: str) -> dict[str, Any]:
    import httpx

    hosts = httpx.get(url + "/v1/admin/hosts", headers={"Authorization": f"Bearer {token}"},
                      timeout=10).json()["hosts"]
    keys = ("actors", "max_active", "spares", "evictions", "worker_starts", "worker_reuses",
            "host_full", "pss_mib", "max_keepalive_lag_s", "lost_leases")
    return {h["host"]: {k: h.get(k) for k in keys} for h in hosts}


if __name__ == "__main__":
    raise SystemExit(main())
