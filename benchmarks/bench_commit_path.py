"""The process actor's per-commit code, in one thread, on a real Redis: no Ray, no
transport, no other process competing for the CPU.

Run::

    python -m benchmarks.bench_commit_path [--commits 3000] [--quick]

Each commit runs what a process actor runs for one direct-transport request:
decode the svit-control@1 body, ``ProcessController.execute`` (receipt lookup,
validation, the counter activation, the fenced commit through the backend's
own Redis connection, the receipt), encode the answer and its frame; under a
W3C trace context, as the gateway sends one. Prints one JSON document: CPU
microseconds per commit (``time.thread_time``, the request bodies built outside
the measured time), with and without a trace context, and with the backend's
dedicated connection and with a pooled connection per script
(``StoreConfig.dedicated_connection``), the configurations interleaved in
rounds. Set beside ``bench_gateway``'s actor CPU per commit, it separates what
the code costs from what a crowded machine adds (``docs/performance.md``).

``--quick`` (CI): 200 commits per configuration, 2 rounds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from svit_cluster import tracing
from svit_cluster.cluster._direct import frame_bytes
from svit_cluster.cluster._results import Outcome, control_frame
from svit_cluster.control import ControlAnswer, ProcessController, decode_request
from svit_cluster.local import RedisServer
from svit_cluster.process import Process
from svit_cluster.store import RedisBackend, StoreConfig, connect
from svit_cluster.values import encode_value

COUNTER = """(define (main input)
  (let ((count (+ (read "/memory/count") (value-get input "/by"))))
    (do (write "/memory/count" count) (value-map "count" count))))"""
TRACE = "00-" + "1" * 32 + "-" + "2" * 16 + "-01"
INPUT = encode_value({"by": 1})


class CounterPath:
    """One counter process served the way a process actor serves it."""

    def __init__(self, client: Any, name: str, *, dedicated: bool) -> None:
        self.pid = f"svit://bench/commit-path/{name}"
        backend = RedisBackend(client, self.pid, 1,
                               StoreConfig(prefix=f"bench-{uuid.uuid4().hex[:8]}",
                                           dedicated_connection=dedicated))
        proc = Process.create(self.pid, memory={"count": 0}, scripts={"counter": COUNTER})
        backend.create(proc)
        backend.claim()
        self.backend = backend
        self.ctrl = ProcessController(proc, backend)
        self.version = proc.version

    def body(self) -> bytes:
        return json.dumps({
            "protocol": "svit-control@1", "process_id": self.pid, "client_id": "bench",
            "request_id": uuid.uuid4().hex, "expected_version": self.version,
            "command": {"operation": "activate", "script": "counter", "input": INPUT},
        }).encode()

    def commit(self, body: bytes, trace: str | None) -> None:
        with tracing.use_traceparent(trace):
            response = self.ctrl.execute(decode_request(body), tenant="bench")
            answer = ControlAnswer.of(response, token=1, host="h1")
            frame_bytes(*control_frame(Outcome.ok(answer)))
        if response.outcome.status != "committed":
            raise SystemExit(f"commit failed: {response.outcome}")
        self.version = response.outcome.activation.version  # type: ignore[union-attr]


def measure(path: CounterPath, commits: int, trace: str | None) -> float:
    """CPU microseconds per commit of ``commits`` commits on ``path``."""
    spent = 0.0
    for _ in range(commits):
        body = path.body()
        start = time.thread_time()
        path.commit(body, trace)
        spent += time.thread_time() - start
    return spent / commits * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--commits", type=int, default=3000, help="commits per configuration "
                    "and round (default 3000)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    ap.add_argument("--quick", action="store_true", help="CI: 200 commits, 2 rounds")
    args = ap.parse_args()
    commits, rounds = (200, 2) if args.quick else (args.commits, args.rounds)
    with tempfile.TemporaryDirectory(prefix="bench-commit-path-") as state:
        server = RedisServer(Path(state), die_with_parent=True)
        server.start()
        try:
            client = connect(server.url)
            configs = {
                "dedicated_traced": (CounterPath(client, "a", dedicated=True), TRACE),
                "dedicated_untraced": (CounterPath(client, "b", dedicated=True), None),
                "pooled_traced": (CounterPath(client, "c", dedicated=False), TRACE),
            }
            for path, trace in configs.values():  # warm: compile cache, connections
                measure(path, 50, trace)
            runs: dict[str, list[float]] = {name: [] for name in configs}
            for _ in range(rounds):
                for name, (path, trace) in configs.items():
                    runs[name].append(round(measure(path, commits, trace), 1))
            for path, _ in configs.values():
                path.backend.close()
            client.close()
        finally:
            server.stop()
    result: dict[str, Any] = {
        "commits_per_round": commits, "rounds": rounds,
        "cpu_us_per_commit": {name: statistics.median(v) for name, v in runs.items()},
        "cpu_us_per_commit_rounds": runs,
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
