"""Benchmark durable timers on the dispatcher: lateness, CPU per fired timer, pending at rest.

Run: ``.venv/bin/python -m benchmarks.bench_timers [--quick] [--workers N]``.
Prints one JSON object. Starts its own redis-server (AOF, ``appendfsync
everysec``) and N dispatcher worker **OS processes** (``svit-cluster dispatcher
run``), and stops them all by PID. Outbox entries are written directly with
``XADD`` in the shape the commit script writes (``intent`` = canonical JSON with
``delay_ms``/``due_ms``, ``version``), so the figures are the dispatcher's alone.
The sink is ``redis-stream://``: its entry ids carry the Redis clock, the same
clock ``due_ms`` is compared with, so lateness needs no cross-clock guess.

* **burst**: ``--processes`` (100) processes arm ``--timers`` (10 000) delayed
  intents in total, all due within one second, ``--lead-s`` after arming.
  ``lateness`` = sink entry time - due_ms (p50/p99/max, ms; never negative if
  not-before-due holds: ``early`` counts violations); ``cpu_ms_per_timer`` =
  the workers' CPU (psutil: user + system) from the first due time until the
  last delivery, per fired timer, and ``park_cpu_ms_per_timer`` while parking.
* **held**: ``--held`` (100 000) timers due in a day, 1 000 per process (the
  guest's cap), parked; then for ``--held-s`` (60 s) every second: the workers'
  RSS and Redis commands per second (``INFO stats``). Flat means the last
  samples match the first ones: no per-tick scan of pending timers.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import psutil
import redis

from benchmarks._workers import start_workers, stop_workers
from svit_cluster.dispatch import DispatchKeys
from svit_cluster.local import RedisServer
from svit_cluster.process import canonical_json
from svit_cluster.store import ProcessKeys, connect


def _start_workers(n: int, redis_url: str, prefix: str, logs: Path
                   ) -> list[subprocess.Popen[bytes]]:
    options = {"prefix": prefix, "redis_stream_concurrency": 32, "scan_interval_s": 0.5,
               "heartbeat_interval_s": 0.5, "claim_ttl_s": 3.0, "worker_ttl_s": 2.0,
               "batch_size": 256}
    return start_workers(n, redis_url, options, logs, prefix)


def _cpu_s(procs: list[psutil.Process]) -> float:
    total = 0.0
    for p in procs:
        t = p.cpu_times()
        total += t.user + t.system
    return total


def _rss_mib(procs: list[psutil.Process]) -> float:
    return round(sum(p.memory_info().rss for p in procs) / 2**20, 1)


def _redis_ms(client: redis.Redis) -> int:
    sec, usec = client.time()
    return int(sec) * 1000 + int(usec) // 1000


def _arm(client: redis.Redis, prefix: str, pids: list[str], per: int, to: str,
         due: Any) -> dict[str, int]:
    """XADD ``per`` delayed intents to each process's outbox; ``due(k)`` gives
    the k-th timer's due_ms. Returns timer id -> due_ms."""
    keys = DispatchKeys(prefix)
    out: dict[str, int] = {}
    k = 0
    now = _redis_ms(client)
    for p in pids:
        pipe = client.pipeline(transaction=False)
        for v in range(1, per + 1):
            mid = f"{p}:{v}:0"
            d = due(k)
            out[mid] = d
            pipe.xadd(keys.outbox(p), {"intent": canonical_json(
                {"message_id": mid, "to": to, "body": {"k": k}, "delay_ms": d - now,
                 "due_ms": d}), "version": str(v)})
            k += 1
        pipe.execute()
    return out


def _pending(client: redis.Redis, prefix: str, pids: list[str]) -> int:
    pipe = client.pipeline(transaction=False)
    for p in pids:
        pipe.zcard(ProcessKeys(p, prefix).timers)
    return sum(int(n) for n in pipe.execute())


def _pct(values: list[float]) -> dict[str, float]:
    s = sorted(values)
    if not s:
        return {}

    def at(q: float) -> float:
        return round(s[min(len(s) - 1, int(q * len(s)))], 1)

    return {"n": len(s), "p50_ms": at(0.5), "p99_ms": at(0.99), "max_ms": round(s[-1], 1)}


def burst(server: RedisServer, *, workers: int, processes: int, timers: int, lead_s: float,
          logs: Path) -> dict[str, Any]:
    client = connect(server.url)
    prefix = f"b{uuid.uuid4().hex[:6]}"
    sink = f"integrations:{prefix}"
    pids = [f"svit://bench/{uuid.uuid4().hex[:8]}" for _ in range(processes)]
    per = timers // processes
    procs = _start_workers(workers, server.url, prefix, logs)
    ps = [psutil.Process(p.pid) for p in procs]
    try:
        time.sleep(1.5)  # workers up and heartbeating
        base = _redis_ms(client) + int(lead_s * 1000)
        total = per * processes
        due = _arm(client, prefix, pids, per, f"redis-stream://{sink}",
                   lambda k: base + (k * 997) % 1000)
        cpu0 = _cpu_s(ps)
        deadline = time.monotonic() + lead_s + 60
        while _pending(client, prefix, pids) < total and time.monotonic() < deadline:
            if _redis_ms(client) >= base:
                break
            time.sleep(0.05)
        parked_all = _pending(client, prefix, pids) == total
        cpu_parked = _cpu_s(ps)
        while _redis_ms(client) < base:
            time.sleep(0.01)
        cpu1 = _cpu_s(ps)
        while int(client.xlen(sink)) < total and time.monotonic() < deadline:
            time.sleep(0.05)
        cpu2 = _cpu_s(ps)
        arrived = {f[b"id"].decode(): int(eid.split(b"-")[0])
                   for eid, f in client.xrange(sink)}
        late = [arrived[i] - due[i] for i in arrived if i in due]
        return {
            "processes": processes, "timers": total, "delivered": len(arrived),
            "all_parked_before_due": parked_all, "lead_s": lead_s,
            "lateness": _pct([float(x) for x in late]),
            "early": sum(1 for x in late if x < 0),
            "park_cpu_ms_per_timer": round(1000 * (cpu_parked - cpu0) / max(total, 1), 3),
            "cpu_ms_per_timer": round(1000 * (cpu2 - cpu1) / max(len(arrived), 1), 3),
        }
    finally:
        stop_workers(procs)
        client.close()


def held(server: RedisServer, *, workers: int, count: int, seconds: float, logs: Path
         ) -> dict[str, Any]:
    client = connect(server.url)
    prefix = f"h{uuid.uuid4().hex[:6]}"
    per = min(1000, count)
    pids = [f"svit://held/{uuid.uuid4().hex[:8]}" for _ in range(max(1, count // per))]
    base = _redis_ms(client) + 86_400_000
    _arm(client, prefix, pids, per, "redis-stream://integrations:never", lambda k: base + k)
    total = per * len(pids)
    procs = _start_workers(workers, server.url, prefix, logs)
    ps = [psutil.Process(p.pid) for p in procs]
    try:
        start = time.monotonic()
        while _pending(client, prefix, pids) < total and time.monotonic() - start < 300:
            time.sleep(0.2)
        park_s = round(time.monotonic() - start, 2)
        time.sleep(2.0)
        samples: list[dict[str, float]] = []
        last = int(client.info("stats")["total_commands_processed"])
        t_last = time.monotonic()
        for _ in range(int(seconds)):
            time.sleep(1.0)
            now_cmds = int(client.info("stats")["total_commands_processed"])
            now_t = time.monotonic()
            # minus this sampler's own INFO
            samples.append({"commands_per_s": round((now_cmds - last - 1) / (now_t - t_last), 1),
                            "rss_mib": _rss_mib(ps)})
            last, t_last = now_cmds, now_t
        third = max(1, len(samples) // 3)

        def mean(rows: list[dict[str, float]], key: str) -> float:
            return round(sum(r[key] for r in rows) / len(rows), 1)

        return {
            "pending": _pending(client, prefix, pids), "processes": len(pids),
            "park_s": park_s, "seconds": len(samples),
            "first_third": {"commands_per_s": mean(samples[:third], "commands_per_s"),
                            "rss_mib": mean(samples[:third], "rss_mib")},
            "last_third": {"commands_per_s": mean(samples[-third:], "commands_per_s"),
                           "rss_mib": mean(samples[-third:], "rss_mib")},
            "commands_per_s_per_stream": round(
                mean(samples, "commands_per_s") / len(pids), 2),
            "samples": samples,
        }
    finally:
        stop_workers(procs)
        client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="CI smoke run: 200 timers from 4 processes due 2 s after "
                             "arming; 2 000 held for 3 s")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--processes", type=int, default=None)
    parser.add_argument("--timers", type=int, default=None)
    parser.add_argument("--lead-s", type=float, default=None)
    parser.add_argument("--held", type=int, default=None)
    parser.add_argument("--held-s", type=float, default=None)
    args = parser.parse_args()
    q = args.quick
    # quick: held_s of 3 gives the first and last thirds one sample each
    processes = args.processes or (4 if q else 100)
    timers = args.timers or (200 if q else 10_000)
    lead_s = args.lead_s or (2.0 if q else 10.0)
    held_n = args.held or (2000 if q else 100_000)
    held_s = args.held_s or (3.0 if q else 60.0)
    with tempfile.TemporaryDirectory(prefix="bench-timers-") as tmp:
        server = RedisServer(Path(tmp), appendfsync="everysec", die_with_parent=True)
        server.start()
        try:
            results: dict[str, Any] = {
                "benchmark": "timers", "quick": q, "workers": args.workers,
                "sink": "redis-stream", "redis_appendfsync": "everysec",
                "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
            }
            results["burst"] = burst(server, workers=args.workers, processes=processes,
                                     timers=timers, lead_s=lead_s, logs=Path(tmp))
            results["held"] = held(server, workers=args.workers, count=held_n,
                                   seconds=held_s, logs=Path(tmp))
        finally:
            server.stop()
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
