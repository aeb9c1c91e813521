"""Benchmark the outbox dispatcher: delivered intents per second and commit -> delivery delay.

Run: ``.venv/bin/python -m benchmarks.bench_dispatch [--quick] [--workers N]``.
Prints one JSON object. Starts its own redis-server (AOF, ``appendfsync
always``, the launcher's default), a webhook stub (uvicorn, loopback, its own
process) and N dispatcher worker **OS processes** (``svit-cluster dispatcher
run``), and stops them all by PID. Everything shares this machine's cores with
the producer, which commits from this process.

Commits are real: each sender process commits activations through
``RedisBackend`` (the fenced commit script), each activation sending 4 intents.
Two sinks are measured: ``redis-stream`` (the dispatcher's own overhead: the
delivery is one Lua ``XADD``) and ``webhook`` (one HTTP POST per intent).

* **throughput**: a backlog is committed while no worker runs; then the
  workers start and ``delivered_per_s`` = backlog / time from the first to the
  last delivery.
* **latency**: workers running, commits at a fixed rate (``--rate``, default
  200 intents/s, below saturation); per intent, delay =
  delivery time - commit time (the outbox entry id, Redis clock; the
  redis-stream sink's entry id, same clock; the webhook stub's arrival, same
  machine clock). ``p50_ms``, ``p99_ms``, ``max_ms``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import redis
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Route

from benchmarks._workers import start_workers, stop_workers
from svit_cluster.control import ProcessController, decode_request
from svit_cluster.dispatch import DispatchKeys
from svit_cluster.local import RedisServer, free_port
from svit_cluster.process import Process, encode_value
from svit_cluster.store import RedisBackend, StoreConfig, connect

SEND4 = """(define (main input)
  (let ((to (value-get input "/to")) (i (value-get input "/i")))
    (do (send! to i) (send! to i) (send! to i) (send! to i) 1)))"""
PER_COMMIT = 4


def _stub_app(arrivals: dict[str, float]) -> Starlette:
    async def hook(request: Request) -> PlainTextResponse:
        arrivals.setdefault(request.headers.get("idempotency-key", ""), time.time())
        return PlainTextResponse("ok")

    async def dump(request: Request) -> JSONResponse:
        return JSONResponse(arrivals)

    async def clear(request: Request) -> PlainTextResponse:
        arrivals.clear()
        return PlainTextResponse("ok")

    return Starlette(routes=[Route("/hook", hook, methods=["POST"]),
                             Route("/arrivals", dump, methods=["GET"]),
                             Route("/clear", clear, methods=["POST"])])


class Stub:
    """Webhook receiver in its own OS process (no GIL shared with the producer);
    records the first arrival time per idempotency key (``GET /arrivals``)."""

    def __init__(self, logs: Path) -> None:
        self.port = free_port()
        self._logs = logs
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Stub:
        with open(self._logs / "stub.log", "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "benchmarks.bench_dispatch", "--stub", str(self.port)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                httpx.get(f"http://127.0.0.1:{self.port}/arrivals", timeout=1)
                return self
            except httpx.HTTPError:
                time.sleep(0.1)
        raise RuntimeError("webhook stub did not start")

    @property
    def arrivals(self) -> dict[str, float]:
        doc: dict[str, float] = httpx.get(f"http://127.0.0.1:{self.port}/arrivals",
                                          timeout=30).json()
        return doc

    def clear(self) -> None:
        httpx.post(f"http://127.0.0.1:{self.port}/clear", timeout=10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


class Senders:
    """``n`` processes committing through the fenced commit script."""

    def __init__(self, client: redis.Redis, prefix: str, n: int) -> None:
        self.ctrls = []
        for _ in range(n):
            pid = f"svit://bench/{uuid.uuid4().hex[:8]}"
            backend = RedisBackend(client, pid, 1, StoreConfig(prefix=prefix,
                                                               snapshot_every=10**6))
            backend.claim()
            proc = Process.create(pid, scripts={"send": SEND4})
            backend.create(proc)
            self.ctrls.append(ProcessController(proc, backend))
        self._n = 0

    def commit(self, k: int, to: str) -> None:
        ctrl = self.ctrls[k % len(self.ctrls)]
        self._n += 1
        body = {"protocol": "svit-control@1", "client_id": "b", "request_id": f"r{self._n}",
                "process_id": ctrl.process.id, "expected_version": ctrl.process.version,
                "command": {"operation": "activate", "script": "send",
                            "input": encode_value({"to": to, "i": self._n})}}
        resp = ctrl.execute(decode_request(json.dumps(body).encode()))
        assert resp.outcome.status == "committed"

    @property
    def pids(self) -> list[str]:
        return [c.process.id for c in self.ctrls]


def _start_workers(n: int, redis_url: str, prefix: str, stub_port: int, logs: Path
                   ) -> list[subprocess.Popen[bytes]]:
    options = {"prefix": prefix, "webhook_hosts": [f"127.0.0.1:{stub_port}"],
               "webhook_concurrency": 32, "scan_interval_s": 0.5, "heartbeat_interval_s": 0.5,
               "claim_ttl_s": 3.0, "worker_ttl_s": 2.0}
    return start_workers(n, redis_url, options, logs, "dispatch")


def _commit_times(client: redis.Redis, prefix: str, pids: list[str]) -> dict[str, float]:
    keys = DispatchKeys(prefix)
    out: dict[str, float] = {}
    for pid in pids:
        for eid, fields in client.xrange(keys.outbox(pid)):
            doc = json.loads(fields[b"intent"])
            out[doc.get("message_id", doc.get("id"))] = int(eid.split(b"-")[0]) / 1000
    return out


def _stream_arrivals(client: redis.Redis, name: str) -> dict[str, float]:
    return {f[b"id"].decode(): int(eid.split(b"-")[0]) / 1000
            for eid, f in client.xrange(name)}


def _percentiles(delays: list[float]) -> dict[str, float]:
    s = sorted(delays)
    if not s:
        return {}

    def pct(p: float) -> float:
        return round(1000 * s[min(len(s) - 1, int(p * len(s)))], 2)

    return {"n": len(s), "p50_ms": pct(0.50), "p99_ms": pct(0.99),
            "max_ms": round(1000 * s[-1], 2)}


def run_sink(sink: str, server: RedisServer, stub: Stub, *, workers: int, senders: int,
             backlog: int, rate: float, seconds: float, logs: Path) -> dict[str, Any]:
    client = connect(server.url)
    prefix = f"b{uuid.uuid4().hex[:6]}"
    target = (f"http://127.0.0.1:{stub.port}/hook" if sink == "webhook"
              else f"redis-stream://integrations:{prefix}")
    stream_name = f"integrations:{prefix}"

    def delivered() -> dict[str, float]:
        if sink == "webhook":
            return stub.arrivals
        return _stream_arrivals(client, stream_name)

    stub.clear()
    group = Senders(client, prefix, senders)
    commits = backlog // PER_COMMIT
    for k in range(commits):
        group.commit(k, target)
    expected = commits * PER_COMMIT
    procs = _start_workers(workers, server.url, prefix, stub.port, logs)
    try:
        deadline = time.monotonic() + 300
        while len(delivered()) < expected and time.monotonic() < deadline:
            time.sleep(0.2)
        got = delivered()
        first, last = min(got.values()), max(got.values())
        throughput = {"backlog": expected, "delivered": len(got),
                      "drain_s": round(last - first, 3),
                      "delivered_per_s": round(len(got) / max(last - first, 1e-6), 1)}
        # latency at a fixed commit rate, workers running
        before = set(got)
        interval = PER_COMMIT / rate
        start = time.monotonic()
        k = 0
        while time.monotonic() - start < seconds:
            group.commit(k, target)
            k += 1
            sleep = start + k * interval - time.monotonic()
            if sleep > 0:
                time.sleep(sleep)
        expected = len(before) + k * PER_COMMIT
        deadline = time.monotonic() + 120
        while len(delivered()) < expected and time.monotonic() < deadline:
            time.sleep(0.2)
        got = delivered()
        committed = _commit_times(client, prefix, group.pids)
        delays = [got[i] - committed[i] for i in got if i not in before and i in committed]
        latency = {"rate_intents_per_s": rate, "seconds": seconds, **_percentiles(delays)}
        return {"throughput": throughput, "latency": latency}
    finally:
        stop_workers(procs)
        client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="CI smoke run: a backlog of 200 intents, a 1 s latency phase")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--senders", type=int, default=8)
    parser.add_argument("--sinks", default="redis-stream,webhook")
    parser.add_argument("--rate", type=float, default=200.0,
                        help="intents per second committed in the latency phase")
    parser.add_argument("--stub", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.stub is not None:  # the webhook stub's own process
        uvicorn.run(_stub_app({}), host="127.0.0.1", port=args.stub, log_level="error",
                    lifespan="off")
        return
    backlog, rate, seconds = (200, args.rate, 1.0) if args.quick else (8000, args.rate, 10.0)
    with tempfile.TemporaryDirectory(prefix="bench-dispatch-") as tmp:
        server = RedisServer(Path(tmp), die_with_parent=True)
        stub = Stub(Path(tmp)).start()
        server.start()
        try:
            results: dict[str, Any] = {
                "benchmark": "dispatch", "workers": args.workers, "senders": args.senders,
                "intents_per_commit": PER_COMMIT, "redis_appendfsync": "always",
                "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
            }
            for sink in args.sinks.split(","):
                results[sink] = run_sink(sink, server, stub, workers=args.workers,
                                         senders=args.senders, backlog=backlog, rate=rate,
                                         seconds=seconds, logs=Path(tmp))
        finally:
            server.stop()
            stub.stop()
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
