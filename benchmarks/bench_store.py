"""Benchmark the fenced commit log against bare Redis, and restore cost vs history.

Run: ``.venv/bin/python -m benchmarks.bench_store [--quick]``. Prints one JSON
object. Starts its own redis-server with the launcher (AOF on) and stops it.

* **commit**: sequential round trips per second of the fenced commit script
  (fence check, version check, XADD, receipt, committed signal, head;
  ``EVALSHA`` with the exact arguments ``RedisBackend.commit`` sends, built by
  the same ``RedisBackend._commit_args``) vs a bare ``XADD`` carrying the same
  payload bytes (record + receipt), on the same client connection,
  interleaved in batches so drift hits both. ``ratio`` = fenced / bare cost
  per round trip (target <= 1.3); ``end_to_end_ratio`` also counts the
  client-side work of ``RedisBackend.commit`` (encoding the record: ~10 us).
  Measured with ``appendfsync always`` (the durable default; the fsync
  dominates) and ``appendfsync no`` (isolates the script's own cost).
* **restore**: best-of-N time of ``RedisBackend.restore`` after 1 000 and after
  100 000 committed transactions with snapshots on (target ratio <= 2). The
  histories are built with ``appendfsync no`` to save time; restore reads do
  not depend on the fsync policy.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from typing import Any

import redis

from svit_cluster.control import Receipt
from svit_cluster.local import RedisServer
from svit_cluster.process import Process, Transition
from svit_cluster.store import RedisBackend, StoreConfig, connect

_FINGERPRINT = "ab" * 32


def _chain(pid: str, n: int) -> list[Transition]:
    """``n`` sealed transitions forming one chain (applied locally, not stored)."""
    proc = Process.create(pid, memory={"count": 0})
    out = []
    for i in range(1, n + 1):
        wc = proc.working_copy()
        wc.write("/memory/count", i)
        t = proc.seal(wc, "host.write")
        proc.commit(t)
        out.append(t)
    return out


def _receipt(i: int) -> Receipt:
    body = b'{"outcome":{"status":"committed","previous_version":%d},"replayed":false}' % i
    return Receipt("tenant", "client", f"req-{i}", _FINGERPRINT, body)


def _new_log(client: redis.Redis, pid: str) -> RedisBackend:
    config = StoreConfig(prefix="bench", snapshot_every=10**9, max_receipts=4096)
    backend = RedisBackend(client, pid, 1, config)
    backend.claim()
    backend.create(Process.create(pid, memory={"count": 0}))
    return backend


def _commit_round_trips(client: redis.Redis, n: int, batch: int) -> dict[str, Any]:
    stamp = time.monotonic_ns()
    backend = _new_log(client, f"svit://bench/commit-{stamp}")
    raw = _new_log(client, f"svit://bench/raw-{stamp}")
    chain = _chain(backend.process_id, n)
    raw_chain = _chain(raw.process_id, n)
    receipts = [_receipt(i) for i in range(n)]
    # the exact ARGV RedisBackend.commit sends (one builder: this cannot drift)
    raw_args = [raw._commit_args(t, r, (), None)
                for t, r in zip(raw_chain, receipts, strict=True)]
    raw_keys = raw._commit_keys  # the same keys the backend passes
    script = raw._scripts.commit
    # the same payload bytes for the bare XADD: record + stored receipt value
    payloads = [t.record.encode() + b"\n" + r.response + _FINGERPRINT.encode()
                for t, r in zip(chain, receipts, strict=True)]
    bare_key = f"bench:{{{backend.process_id}}}:bare"
    full_s = script_s = bare_s = 0.0
    for start in range(0, n, batch):
        stop = min(n, start + batch)
        t0 = time.perf_counter()
        for i in range(start, stop):
            backend.commit(chain[i], receipts[i])
        t1 = time.perf_counter()
        for i in range(start, stop):
            script(keys=raw_keys, args=raw_args[i])
        t2 = time.perf_counter()
        for i in range(start, stop):
            client.xadd(bare_key, {"record": payloads[i], "token": b"1",
                                   "version": str(i + 1).encode()})
        t3 = time.perf_counter()
        full_s += t1 - t0
        script_s += t2 - t1
        bare_s += t3 - t2
    assert raw.restore() is not None and backend.restore() is not None  # both chains verify
    client.delete(bare_key, *backend.keys.all(), *raw.keys.all())
    return {
        "n": n,
        "payload_bytes_mean": round(statistics.fmean(len(p) for p in payloads)),
        "fenced_round_trips_per_s": round(n / script_s),
        "bare_xadd_round_trips_per_s": round(n / bare_s),
        "backend_commits_per_s": round(n / full_s),
        "fenced_round_trip_us": round(script_s / n * 1e6, 1),
        "bare_xadd_us": round(bare_s / n * 1e6, 1),
        "backend_commit_us": round(full_s / n * 1e6, 1),
        "ratio": round(script_s / bare_s, 3),
        "end_to_end_ratio": round(full_s / bare_s, 3),
    }


def _restore_time(client: redis.Redis, n: int, repeats: int) -> dict[str, Any]:
    pid = f"svit://bench/restore-{n}-{time.monotonic_ns()}"
    config = StoreConfig(prefix="bench")  # snapshots every 64 commits, margin 16
    backend = RedisBackend(client, pid, 1, config)
    backend.claim()
    proc = Process.create(pid, memory={"count": 0})
    backend.create(proc)
    built = time.perf_counter()
    for i in range(1, n + 1):
        wc = proc.working_copy()
        wc.write("/memory/count", i)
        t = proc.seal(wc, "host.write")
        backend.commit(t)
        proc.commit(t)
    built = time.perf_counter() - built
    reader = RedisBackend(client, pid, 2, config)
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        restored = reader.restore()
        times.append(time.perf_counter() - started)
        assert restored is not None and restored.root_hash == proc.root_hash
    stats = reader.last_restore
    assert stats is not None
    result = {
        "committed": n,
        "restore_ms_best": round(min(times) * 1e3, 3),
        "restore_ms_median": round(statistics.median(times) * 1e3, 3),
        "snapshot_version": stats.snapshot_version,
        "tail_entries": stats.tail_entries,
        "stream_len": client.xlen(backend.keys.stream),
        "build_s": round(built, 1),
    }
    client.delete(*backend.keys.all())
    return result


def run(*, quick: bool) -> dict[str, Any]:
    """Start redis-server, measure, stop it; return the JSON-ready result."""
    n_commit = 2000 if quick else 10000
    big = 10_000 if quick else 100_000
    with tempfile.TemporaryDirectory(prefix="svit-bench-") as state:
        server = RedisServer(state, die_with_parent=True)
        server.start()
        try:
            client = connect(server.url)
            commit: dict[str, Any] = {}
            for mode in ("always", "no"):
                client.config_set("appendfsync", mode)
                _commit_round_trips(client, 300, 100)  # warm-up (scripts, allocator)
                commit[f"appendfsync_{mode}"] = _commit_round_trips(client, n_commit, 200)
            client.config_set("appendfsync", "no")
            small = _restore_time(client, 1000, 20)
            large = _restore_time(client, big, 20)
            client.config_set("appendfsync", "always")
            client.close()
        finally:
            server.stop()
    return {
        "benchmark": "bench_store",
        "python": platform.python_version(),
        "redis_server": "launcher (appendonly yes)",
        "commit": commit,
        "commit_ratio_durable": commit["appendfsync_always"]["ratio"],
        "commit_ratio_no_fsync": commit["appendfsync_no"]["ratio"],
        "commit_ratio_target": 1.3,
        "restore": {"small": small, "large": large},
        "restore_ratio": round(large["restore_ms_best"] / small["restore_ms_best"], 3),
        "restore_ratio_target": 2.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes (CI smoke run)")
    args = parser.parse_args()
    print(json.dumps(run(quick=args.quick), indent=2))


if __name__ == "__main__":
    main()
