"""Gateway benchmark: closed-loop clients over counter processes on 3 local hosts.

Run::

    python -m benchmarks.bench_gateway [--clients 16] [--processes 100]
                                       [--warmup-s 10] [--window-s 20] [--hosts 3] [--quick]

Starts its own local cluster of ``--hosts`` hosts, creates P counter processes, runs N
closed-loop clients through the HTTP API (each keeps the last version it saw and
re-observes only after a conflict, from the conflict's ``actual_version``). The
clients first activate every process once (``prime_s``: P cold activations, each
one a new Ray actor), then warm up for ``--warmup-s``, then one window is measured:
so the window measures commits to active processes, not actor start-up. Prints
one JSON document: commits/s, conflicts/s, p50/p99 latency, and the CPU seconds
per commit of each component (gateway, process actors, host agents, Ray daemons,
Redis, etcd) from psutil over the PIDs recorded in ``cluster.json`` and all their
children, sampled at the window's start and end; and, outside the total, this
process's own CPU (``clients_cpu_ms_per_commit``: the N SDK clients).

``--profile DIR``: after the measured window, the load goes on for
``--profile-s`` more seconds while py-spy samples the gateway, the 16
busiest process actors and this process (the SDK clients); the JSON gains a
``profile`` section with each one's top frames (``benchmarks/_profile.py``)
and DIR keeps the raw stacks. The measured window is never sampled.

``--quick`` (CI): 1 host (the request path is the same on any number), 2 clients,
2 processes, 0.5 s warm-up, 1.5 s window.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

from benchmarks._cluster import load_parser, local_cluster
from benchmarks._profile import record, summarize
from svit_cluster.client import AsyncSvitClient, SvitClient
from svit_cluster.local import ClusterSpec

COUNTER = """(define (main input)
  (let ((count (+ (read "/memory/count") (value-get input "/by"))))
    (do (write "/memory/count" count) (value-map "count" count))))"""


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def _pids(doc: Any) -> list[int]:
    """Every ``"pid"`` recorded anywhere in ``cluster.json``."""
    found: list[int] = []
    if isinstance(doc, dict):
        for key, value in doc.items():
            if key == "pid" and isinstance(value, int):
                found.append(value)
            else:
                found.extend(_pids(value))
    elif isinstance(doc, list):
        for value in doc:
            found.extend(_pids(value))
    return found


def _component(proc: psutil.Process, gateway_tree: set[int]) -> str:
    cmd = " ".join(proc.cmdline())
    if proc.pid in gateway_tree:
        return "gateway"
    if "ProcessActor" in cmd:
        return "actors"
    if "HostAgent" in cmd:
        return "agents"
    if "redis-server" in cmd:
        return "redis"
    if "etcd" in proc.name():
        return "etcd"
    return "ray_daemons"


def cpu_by_component(doc: dict[str, Any]) -> dict[int, tuple[str, float]]:
    """``{pid: (component, user+system CPU seconds)}`` over recorded PIDs and children."""
    gw = doc["gateway"]["pid"]
    gateway_tree = {gw}
    out: dict[int, tuple[str, float]] = {}
    for pid in set(_pids(doc)):
        try:
            root = psutil.Process(pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            continue
        if pid == gw:
            gateway_tree.update(p.pid for p in procs)
        for p in procs:
            try:
                t = p.cpu_times()
                out[p.pid] = (_component(p, gateway_tree), t.user + t.system)
            except psutil.Error:
                continue
    return out


def _own_cpu_s() -> float:
    """User + system CPU seconds of this process (the clients), all threads."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _profiled_pids(doc: dict[str, Any], actors: int = 16) -> dict[str, int]:
    """``{label: pid}`` to sample: the gateway, the ``actors`` process actors
    that used the most CPU so far, and this process (the SDK clients)."""
    cpu = cpu_by_component(doc)
    busiest = sorted((t for t in cpu.items() if t[1][0] == "actors"),
                     key=lambda t: -t[1][1])[:actors]
    return {"gateway": doc["gateway"]["pid"],
            **{f"actor-{i}": pid for i, (pid, _) in enumerate(busiest)},
            "sdk": os.getpid()}


async def profile_load(doc: dict[str, Any], out_dir: Path, seconds: float) -> dict[str, Any]:
    """Sample the components for ``seconds`` (the load still running) and
    summarize them: ``{"gateway": ..., "actors": ..., "sdk": ...}``."""
    started = record(_profiled_pids(doc), out_dir, seconds)
    for _, _, proc in started:
        await asyncio.to_thread(proc.wait)
    files: dict[str, list[Path]] = {}
    for label, raw, _ in started:
        files.setdefault(label.split("-")[0] + ("s" if label.startswith("actor") else ""),
                         []).append(raw)
    return {label: summarize(raws) for label, raws in files.items()}


async def closed_loop(url: str, token: str, pids: list[str], clients: int,
                      warmup_s: float, window_s: float, doc: dict[str, Any],
                      profile_dir: Path | None = None, profile_s: float = 10.0
                      ) -> dict[str, Any]:
    versions = dict.fromkeys(pids, 0)
    measuring = False
    stop = False
    latencies: list[float] = []
    commits = conflicts = 0
    unprimed = clients
    primed = asyncio.Event()

    async def client(n: int) -> None:
        nonlocal commits, conflicts, unprimed
        async with AsyncSvitClient(url, token, client_id=f"bench-{n}") as c:
            mine = pids[n::clients] or pids
            for pid in mine:  # prime: every process active before the warm-up
                resp = await c.activate(pid, "counter", {"by": 1},
                                        expected_version=versions[pid])
                out = resp.outcome
                versions[pid] = (out.activation.version if out.status == "committed"
                                 else out.actual_version)
            unprimed -= 1
            if unprimed == 0:
                primed.set()
            i = 0
            while not stop:
                pid = mine[i % len(mine)]
                t0 = time.perf_counter()
                resp = await c.activate(pid, "counter", {"by": 1},
                                        expected_version=versions[pid])
                dt = time.perf_counter() - t0
                out = resp.outcome
                if out.status == "committed":
                    versions[pid] = out.activation.version
                    i += 1
                    if measuring:
                        commits += 1
                        latencies.append(dt)
                else:
                    if out.status != "conflict":
                        raise RuntimeError(f"unexpected outcome {out}")
                    versions[pid] = out.actual_version  # re-observe only after a conflict
                    if measuring:
                        conflicts += 1

    t_prime = time.perf_counter()
    tasks = [asyncio.create_task(client(n)) for n in range(clients)]
    waiter = asyncio.create_task(primed.wait())
    await asyncio.wait([waiter, *tasks], return_when=asyncio.FIRST_COMPLETED)
    for task in tasks:  # a client that failed while priming fails the run now
        if task.done():
            task.result()
    prime_s = time.perf_counter() - t_prime
    await asyncio.sleep(warmup_s)
    cpu0, own0 = cpu_by_component(doc), _own_cpu_s()
    measuring, started = True, time.perf_counter()
    await asyncio.sleep(window_s)
    measuring = False
    elapsed = time.perf_counter() - started
    cpu1, own1 = cpu_by_component(doc), _own_cpu_s()
    profile = None if profile_dir is None else await profile_load(doc, profile_dir, profile_s)
    stop = True
    await asyncio.gather(*tasks)
    cpu: dict[str, float] = {}
    for pid, (comp, end) in cpu1.items():
        cpu[comp] = cpu.get(comp, 0.0) + end - cpu0.get(pid, (comp, 0.0))[1]
    per_commit = {f"{k}_cpu_ms_per_commit": 1000 * v / max(commits, 1)
                  for k, v in sorted(cpu.items())}
    return {
        "clients": clients, "processes": len(pids), "prime_s": prime_s, "warmup_s": warmup_s,
        "window_s": elapsed, "commits": commits, "conflicts": conflicts,
        "commits_per_s": commits / elapsed, "conflicts_per_s": conflicts / elapsed,
        "latency_p50_ms": pct(latencies, 0.50) * 1000,
        "latency_p99_ms": pct(latencies, 0.99) * 1000,
        **per_commit,
        "total_cpu_ms_per_commit": 1000 * sum(cpu.values()) / max(commits, 1),
        # the benchmark's own process: the N SDK clients (not in the total)
        "clients_cpu_ms_per_commit": 1000 * (own1 - own0) / max(commits, 1),
        "load_average": os.getloadavg(),
        **({} if profile is None else {"profile": profile}),
    }


def main() -> int:
    ap = load_parser(__doc__, "CI smoke run: 1 host, 2 clients, 2 processes, 0.5 s warm-up, "
                              "1.5 s window")
    ap.add_argument("--warmup-s", type=float, default=10.0)
    ap.add_argument("--window-s", type=float, default=20.0)
    ap.add_argument("--profile", type=Path, metavar="DIR",
                    help="after the window, sample the gateway, 16 actors and the SDK "
                         "with py-spy; raw stacks go to DIR, top frames into the JSON")
    ap.add_argument("--profile-s", type=float, default=10.0,
                    help="seconds of load sampled with --profile (default 10)")
    args = ap.parse_args()
    if args.quick:
        args.clients, args.processes, args.warmup_s, args.window_s = 2, 2, 0.5, 1.5
        args.hosts = 1
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    with tempfile.TemporaryDirectory(prefix="svit-bench-gw-") as tmp:
        with local_cluster(ClusterSpec(state_dir=Path(tmp), hosts=args.hosts)) as cluster:
            url, token = cluster.doc["gateway"]["url"], cluster.doc["tokens"]["admin"]
            pids = [f"svit://local/gw-{i}" for i in range(args.processes)]
            with SvitClient(url, token) as c:
                for pid in pids:
                    c.create_process(pid, memory={"count": 0}, scripts={"counter": COUNTER})
            result = asyncio.run(closed_loop(url, token, pids, args.clients,
                                             args.warmup_s, args.window_s, cluster.doc,
                                             args.profile, args.profile_s))
    print(json.dumps({**result, "hosts": args.hosts}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
