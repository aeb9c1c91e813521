"""What ``WAIT`` costs: fenced commit latency on a local Redis Cluster with 0 and 1
replica acknowledgements.

Run: ``python -m benchmarks.bench_wait [--quick]``. Prints one JSON object.
Starts its own Redis Cluster (3 masters x 1 replica, ``appendfsync always``,
loopback) with :class:`svit_cluster.local.RedisClusterServer` and stops it.

For each ``wait_replicas`` in (0, 1): sequential ``RedisBackend.commit`` calls
(one host write each, receipt included, snapshots off) on a fresh process,
timed one by one on the client (``perf_counter``); the two settings are run in
alternating batches so drift hits both. Reports p50/p99/mean in µs and commits
per second. With 1, each commit is the script plus ``WAIT 1 <timeout>`` on the
same connection (one pipeline), so the extra cost is about one replication
round trip plus the replica's own fsync of its AOF.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from typing import Any

from svit_cluster.control import Receipt
from svit_cluster.local import RedisClusterServer
from svit_cluster.process import Process
from svit_cluster.store import RedisBackend, StoreConfig, connect


def _percentile(sorted_values: list[float], q: float) -> float:
    index = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[index]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="CI smoke run: 2 batches of 10 commits per setting")
    opts = parser.parse_args()
    # quick: two alternations of each setting, so drift still hits both
    per_batch = 10 if opts.quick else 200
    batches = 2 if opts.quick else 10
    with tempfile.TemporaryDirectory(prefix="svit-bench-wait-") as tmp:
        cluster = RedisClusterServer(tmp, masters=3, replicas=1, die_with_parent=True)
        cluster.start()
        try:
            client = connect(cluster.url, cluster=True)
            samples: dict[int, list[float]] = {0: [], 1: []}
            state: dict[int, tuple[RedisBackend, Process]] = {}
            for wait in (0, 1):
                config = StoreConfig(prefix=f"bw{wait}", snapshot_every=10**9,
                                     max_receipts=4096, wait_replicas=wait,
                                     wait_timeout_ms=1000)
                pid = f"svit://bench/wait-{wait}"
                backend = RedisBackend(client, pid, 1, config)
                backend.claim()
                proc = Process.create(pid, memory={"count": 0})
                backend.create(proc)
                state[wait] = (backend, proc)
            n = 0
            for _ in range(batches):
                for wait in (0, 1):
                    backend, proc = state[wait]
                    for _ in range(per_batch):
                        n += 1
                        wc = proc.working_copy()
                        wc.write("/memory/count", n)
                        t = proc.seal(wc, "host.write")
                        receipt = Receipt("tenant", "client", f"r{n}", "ab" * 32,
                                          b'{"outcome":"committed"}')
                        started = time.perf_counter()
                        backend.commit(t, receipt)
                        samples[wait].append(time.perf_counter() - started)
                        proc.commit(t)
            client.close()
        finally:
            cluster.stop()
    result: dict[str, Any] = {
        "benchmark": "bench_wait",
        "topology": "redis cluster 3 masters x 1 replica, loopback, appendfsync always",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "commits_per_setting": per_batch * batches,
    }
    for wait, values in samples.items():
        ordered = sorted(values)
        result[f"wait_replicas_{wait}"] = {
            "p50_us": round(_percentile(ordered, 0.50) * 1e6, 1),
            "p99_us": round(_percentile(ordered, 0.99) * 1e6, 1),
            "mean_us": round(statistics.fmean(ordered) * 1e6, 1),
            "commits_per_s": round(len(ordered) / sum(ordered), 1),
        }
    result["p50_ratio_wait1_over_wait0"] = round(
        result["wait_replicas_1"]["p50_us"] / result["wait_replicas_0"]["p50_us"], 2)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
