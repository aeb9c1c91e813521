"""Benchmark commit -> observer delivery delay with many SSE observers.

Run: ``.venv/bin/python -m benchmarks.bench_events [--observers 100] [--commits 200]``.
Prints one JSON object. Starts its own redis-server (AOF, ``appendfsync
always``) and a gateway process (uvicorn; its router reads signals from that
Redis exactly like the cluster gateway's ``RayRouter``), opens N observers
with the SDK (``AsyncSvitClient.events``: SSE, one cursor and buffer each),
then commits through ``RedisBackend.commit`` (the same Lua script a process
actor runs) at a fixed interval.

The delay of one delivery is ``observer receive time - commit start time``
(one clock: the committer and the observers share this process). Reported:
``delay_ms`` over every (commit, observer) delivery, and ``fanout_ms``: per
commit, the time until the LAST observer had it. Ray is not on this path:
commits reach observers through Redis and the gateway only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

TOKEN = "bench-token-0123456789abcdef"
PID = "svit://bench/observed"


def _serve(port: int, redis_url: str) -> None:
    """The gateway process: InProcessRouter API surface, signals from Redis."""
    import uvicorn

    from svit_cluster.events import RedisSignalSource
    from svit_cluster.gateway import Principal, TokenStore, create_app
    from svit_cluster.inprocess import InProcessRouter

    class RedisSignalsRouter(InProcessRouter):
        def __init__(self) -> None:
            super().__init__()
            self._source = RedisSignalSource.from_url(redis_url)

        def signal_source(self) -> Any:
            return self._source

    tokens = TokenStore()
    tokens.add(TOKEN, Principal(tenant=None, admin=True))
    app = create_app(RedisSignalsRouter(), tokens)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _summary(values: list[float]) -> dict[str, float]:
    return {"p50": round(_pct(values, 0.50) * 1000, 3), "p99": round(_pct(values, 0.99) * 1000, 3),
            "max": round(max(values) * 1000, 3), "mean": round(statistics.fmean(values) * 1000, 3)}


async def _run(observers: int, commits: int, interval_s: float, url: str, redis_url: str
               ) -> dict[str, Any]:
    from svit_cluster.client import AsyncSvitClient
    from svit_cluster.events import Signal
    from svit_cluster.process import Process
    from svit_cluster.store import RedisBackend, StoreConfig, connect

    rclient = connect(redis_url)
    backend = RedisBackend(rclient, PID, 1, StoreConfig())
    backend.claim()
    proc = Process.create(PID, memory={"n": 0})
    backend.create(proc)
    started: dict[int, float] = {}
    received: list[dict[int, float]] = [dict() for _ in range(observers)]

    client = AsyncSvitClient(url, TOKEN, timeout_s=60)
    subs = [client.events(PID, buffer=commits + 16) for _ in range(observers)]
    await asyncio.gather(*(s.start() for s in subs))

    async def consume(i: int) -> None:
        async for item in subs[i]:
            if isinstance(item, Signal) and item.kind == "committed":
                received[i][int(item.data["version"])] = time.perf_counter()
                if len(received[i]) == commits:
                    return

    consumers = [asyncio.create_task(consume(i)) for i in range(observers)]

    def commit_all() -> None:
        for _ in range(commits):
            wc = proc.working_copy()
            wc.write("/memory/n", proc.version + 1)
            t = proc.seal(wc, "host.write")
            started[t.record.process_version_after] = time.perf_counter()
            backend.commit(t)
            proc.commit(t)
            time.sleep(interval_s)

    committer = threading.Thread(target=commit_all)
    t0 = time.perf_counter()
    committer.start()
    _done, pending = await asyncio.wait(consumers, timeout=60 + commits * interval_s * 4)
    committer.join()
    elapsed = time.perf_counter() - t0
    for task in pending:
        task.cancel()
    for s in subs:
        await s.aclose()
    await client.aclose()
    rclient.close()
    delays = [r[v] - started[v] for r in received for v in r]
    fanout = [max(r[v] for r in received if v in r) - started[v] for v in started
              if all(v in r for r in received)]
    return {
        "observers": observers, "commits": commits, "interval_ms": interval_s * 1000,
        "delivered": len(delays), "expected": observers * commits,
        "delay_ms": _summary(delays), "fanout_ms": _summary(fanout) if fanout else None,
        "deliveries_per_s": round(len(delays) / elapsed, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="CI smoke run: 2 observers, 10 commits")
    parser.add_argument("--observers", type=int, default=100)
    parser.add_argument("--commits", type=int, default=200)
    parser.add_argument("--interval-ms", type=float, default=20.0)
    parser.add_argument("--serve", nargs=2, metavar=("PORT", "REDIS_URL"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quick:
        args.observers, args.commits = 2, 10
    if args.serve:
        _serve(int(args.serve[0]), args.serve[1])
        return

    from svit_cluster.local import RedisServer, free_port, stop_pid

    with tempfile.TemporaryDirectory(prefix="bench-events-") as tmp:
        redis_server = RedisServer(Path(tmp) / "redis", die_with_parent=True)
        redis_server.start()
        port = free_port()
        gateway = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.bench_events", "--serve", str(port),
             redis_server.url], start_new_session=True)
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline or gateway.poll() is not None:
                    raise SystemExit("gateway did not start")
                time.sleep(0.1)
            result = asyncio.run(_run(args.observers, args.commits, args.interval_ms / 1000,
                                      url, redis_server.url))
        finally:
            stop_pid(gateway.pid)
            redis_server.stop()
    result.update(python=platform.python_version(), machine=platform.machine(),
                  path="RedisBackend.commit -> Redis signals stream -> gateway XREAD -> "
                       "SSE -> SDK observer")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
