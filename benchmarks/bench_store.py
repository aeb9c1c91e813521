"""Benchmark the fenced commit log against bare Redis, and restore cost vs history.

Run: ``.venv/bin/python -m benchmarks.bench_store [--quick]``. Prints one JSON
object. Starts its own redis-server with the launcher (AOF on) and stops it.

* **commit**: sequential round trips per second of the fenced commit script
  (fence check, version check, XADD, receipt, committed signal, head;
  ``EVALSHA`` with the exact arguments ``RedisBackend.commit`` sends, built by
  the same ``RedisBackend._commit_args``, a ``CommitArgs``) vs a bare ``XADD`` carrying the same
  payload bytes (record + receipt), on the same client connection,
  interleaved in batches so drift hits both. ``ratio`` = fenced / bare cost
  per round trip (target <= 1.3); ``end_to_end_ratio`` also counts the
  client-side work of ``RedisBackend.commit`` (encoding the record: ~10 us).
  Measured with ``appendfsync always`` (the durable default; the fsync
  dominates) and ``appendfsync no`` (isolates the script's own cost).
  A fourth interleaved phase runs a minimal script that only does the same
  ``XADD`` through ``EVALSHA``; ``breakdown_us`` splits the fenced round trip
  into the bare ``XADD``, the ``EVALSHA`` call overhead (minimal script minus
  bare ``XADD``) and the script body (fenced minus minimal script), and
  ``commit_breakdown`` adds the fsync share (``always`` minus ``no``).
* **commit_16_clients**: the same comparison with 16 threads, each on its
  own process log and connection (one connection pool), the fenced phase and
  the bare ``XADD`` phase alternated in batches; ``ratio`` = fenced / bare
  wall time for the same number of round trips.
* **controller**: activations per second of a ``ProcessController`` over a
  ``RedisBackend`` (counter script, fresh request ids, ``appendfsync
  always``), sequentially and with 16 threads over 16 processes, and the
  Redis round trips one activation makes (``redis_round_trips_per_activation``,
  counted on the client; the target is 1).
* **restore**: best-of-N time of ``RedisBackend.restore`` after 1 000 and after
  100 000 committed transactions with snapshots on (target ratio <= 2). The
  histories are built with ``appendfsync no`` to save time; restore reads do
  not depend on the fsync policy.

``--quick`` (CI): the same phases with 200 commits per fsync mode, 10 per
client, 0.3 s controller windows, restore after 200 and 1 000 commits (best of 3).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import threading
import time
from typing import Any

import redis
import redis.connection

from svit_cluster.control import ProcessController, Receipt, decode_request
from svit_cluster.local import RedisServer
from svit_cluster.process import Process, Transition
from svit_cluster.store import RedisBackend, StoreConfig, connect
from svit_cluster.store._redis import RedisClient

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


def _new_log(client: RedisClient, pid: str) -> RedisBackend:
    config = StoreConfig(prefix="bench", snapshot_every=10**9, max_receipts=4096)
    backend = RedisBackend(client, pid, 1, config)
    backend.claim()
    backend.create(Process.create(pid, memory={"count": 0}))
    return backend


def _commit_round_trips(client: RedisClient, n: int, batch: int) -> dict[str, Any]:
    stamp = time.monotonic_ns()
    backend = _new_log(client, f"svit://bench/commit-{stamp}")
    raw = _new_log(client, f"svit://bench/raw-{stamp}")
    chain = _chain(backend.process_id, n)
    raw_chain = _chain(raw.process_id, n)
    receipts = [_receipt(i) for i in range(n)]
    # the exact ARGV RedisBackend.commit sends (one builder: this cannot drift)
    raw_args = [raw._commit_args(t, r, (), None).as_args()
                for t, r in zip(raw_chain, receipts, strict=True)]
    raw_keys = raw._commit_keys  # the same keys the backend passes
    script = raw._scripts.commit
    # the same payload bytes for the bare XADD: record + stored receipt value
    payloads = [t.record.encode() + b"\n" + r.response + _FINGERPRINT.encode()
                for t, r in zip(chain, receipts, strict=True)]
    bare_key = f"bench:{{{backend.process_id}}}:bare"
    minimal = client.register_script(_MINIMAL_XADD)
    minimal_key = f"bench:{{{backend.process_id}}}:minimal"
    full_s = script_s = bare_s = minimal_s = 0.0
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
        for i in range(start, stop):
            minimal(keys=[minimal_key], args=[payloads[i], b"1", str(i + 1).encode()])
        t4 = time.perf_counter()
        full_s += t1 - t0
        script_s += t2 - t1
        bare_s += t3 - t2
        minimal_s += t4 - t3
    assert raw.restore() is not None and backend.restore() is not None  # both chains verify
    if client.xlen(minimal_key) != n or client.xlen(bare_key) != n:
        raise RuntimeError("the minimal script or the bare XADD did not append every entry")
    client.delete(bare_key, minimal_key, *backend.keys.all(), *raw.keys.all())
    fenced_us, bare_us, minimal_us, full_us = (
        x / n * 1e6 for x in (script_s, bare_s, minimal_s, full_s))
    return {
        "n": n,
        "payload_bytes_mean": round(statistics.fmean(len(p) for p in payloads)),
        "fenced_round_trips_per_s": round(n / script_s),
        "bare_xadd_round_trips_per_s": round(n / bare_s),
        "backend_commits_per_s": round(n / full_s),
        "fenced_round_trip_us": round(fenced_us, 1),
        "bare_xadd_us": round(bare_us, 1),
        "backend_commit_us": round(full_us, 1),
        "minimal_script_us": round(minimal_us, 1),
        "ratio": round(script_s / bare_s, 3),
        "end_to_end_ratio": round(full_s / bare_s, 3),
        "breakdown_us": {"bare_xadd": round(bare_us, 1),
                         "evalsha_overhead": round(minimal_us - bare_us, 1),
                         "script_body": round(fenced_us - minimal_us, 1)},
    }


def _fsync_breakdown(commit: dict[str, Any]) -> dict[str, Any]:
    """What fsync adds per round trip: ``appendfsync always`` minus ``no`` (us)."""
    durable, lazy = commit["appendfsync_always"], commit["appendfsync_no"]
    return {
        "fenced_round_trip_us": durable["fenced_round_trip_us"],
        "fsync_us_fenced": round(durable["fenced_round_trip_us"]
                                 - lazy["fenced_round_trip_us"], 1),
        "fsync_us_bare": round(durable["bare_xadd_us"] - lazy["bare_xadd_us"], 1),
        "no_fsync": lazy["breakdown_us"],
    }


def _commit_concurrent(client: RedisClient, clients: int, n: int, batch: int
                       ) -> dict[str, Any]:
    """Fenced script vs bare ``XADD`` with ``clients`` threads (``n`` round trips each)."""
    stamp = time.monotonic_ns()
    work = []
    for c in range(clients):
        log = _new_log(client, f"svit://bench/c{c}-{stamp}")
        chain = _chain(log.process_id, n)
        receipts = [_receipt(i) for i in range(n)]
        args = [log._commit_args(t, r, (), None).as_args()
                for t, r in zip(chain, receipts, strict=True)]
        payloads = [t.record.encode() + b"\n" + r.response + _FINGERPRINT.encode()
                    for t, r in zip(chain, receipts, strict=True)]
        work.append((log, args, payloads, f"bench:{{{log.process_id}}}:bare"))

    def phase(fenced: bool, start: int, stop: int) -> float:
        def one(log: RedisBackend, args: list[Any], payloads: list[bytes], key: str) -> None:
            for i in range(start, stop):
                if fenced:
                    log._scripts.commit(keys=log._commit_keys, args=args[i])
                else:
                    client.xadd(key, {"record": payloads[i], "token": b"1",
                                      "version": str(i + 1).encode()})
        threads = [threading.Thread(target=one, args=w) for w in work]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return time.perf_counter() - t0

    fenced_s = bare_s = 0.0
    for start in range(0, n, batch):
        stop = min(n, start + batch)
        fenced_s += phase(True, start, stop)
        bare_s += phase(False, start, stop)
    for log, _, _, key in work:
        client.delete(key, *log.keys.all())
    total = clients * n
    return {"clients": clients, "n": total,
            "fenced_round_trips_per_s": round(total / fenced_s),
            "bare_xadd_round_trips_per_s": round(total / bare_s),
            "ratio": round(fenced_s / bare_s, 3)}


#: Only the XADD of the fenced script, through EVALSHA: its cost minus a bare
#: XADD's is the scripting call overhead, not the fence logic.
_MINIMAL_XADD = """return redis.call('XADD', KEYS[1], '*', 'record', ARGV[1],
  'token', ARGV[2], 'version', ARGV[3])"""


_COUNTER = """(define (main input)
  (let ((count (+ (read "/memory/count") (value-get input "/by"))))
    (do
      (write "/memory/count" count)
      (value-map "count" count))))
"""


def _controller(client: RedisClient, pid: str) -> ProcessController:
    config = StoreConfig(prefix="bench", snapshot_every=64)
    backend = RedisBackend(client, pid, 1, config)
    backend.claim()
    proc = Process.create(pid, memory={"count": 0}, scripts={"counter": _COUNTER})
    backend.create(proc)
    return ProcessController(proc, backend, token=1)


def _activate(ctrl: ProcessController, pid: str, rid: str) -> None:
    version = ctrl.process.version
    req = decode_request(json.dumps({
        "protocol": "svit-control@1", "client_id": "bench", "request_id": rid,
        "process_id": pid, "expected_version": version,
        "command": {"operation": "activate", "script": "counter",
                    "input": {"type": "map", "value": {"by": {"type": "integer", "value": 1}}}},
    }).encode())
    out = ctrl.execute(req, tenant="t")
    assert out.outcome.status == "committed", out.outcome


def _controller_rate(client: RedisClient, clients: int, seconds: float) -> dict[str, Any]:
    """Controller activations/s over ``RedisBackend`` with ``clients`` threads."""
    stamp = time.monotonic_ns()
    pids = [f"svit://bench/ctrl{c}-{stamp}" for c in range(clients)]
    ctrls = [_controller(client, pid) for pid in pids]
    for ctrl, pid in zip(ctrls, pids, strict=True):
        _activate(ctrl, pid, "warm")  # loads the scripts
    counts = [0] * clients
    deadline = time.perf_counter() + seconds

    def loop(c: int) -> None:
        while time.perf_counter() < deadline:
            _activate(ctrls[c], pids[c], f"r{counts[c]}")
            counts[c] += 1
    threads = [threading.Thread(target=loop, args=(c,)) for c in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    for ctrl in ctrls:
        backend = ctrl.backend
        assert isinstance(backend, RedisBackend)
        client.delete(*backend.keys.all())
    return {"clients": clients, "activations": sum(counts),
            "activations_per_s": round(sum(counts) / elapsed)}


def _round_trips_per_activation(client: RedisClient, n: int) -> float:
    """Client-side count of packed sends (one per round trip) per activation."""
    pid = f"svit://bench/rt-{time.monotonic_ns()}"
    ctrl = _controller(client, pid)
    _activate(ctrl, pid, "warm")
    sends = [0]
    original: Any = redis.connection.AbstractConnection.send_packed_command

    def counted(self: Any, command: Any, check_health: bool = True) -> None:
        sends[0] += 1
        original(self, command, check_health)
    redis.connection.AbstractConnection.send_packed_command = counted  # type: ignore[method-assign]
    try:
        for i in range(n):
            _activate(ctrl, pid, f"rt{i}")
    finally:
        redis.connection.AbstractConnection.send_packed_command = original  # type: ignore[method-assign]
    backend = ctrl.backend
    assert isinstance(backend, RedisBackend)
    client.delete(*backend.keys.all())
    return sends[0] / n


def _restore_time(client: RedisClient, n: int, repeats: int) -> dict[str, Any]:
    pid = f"svit://bench/restore-{n}-{time.monotonic_ns()}"
    config = StoreConfig(prefix="bench")  # snapshots every 100 commits, margin 16
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


def run(*, quick: bool, restore: bool = True) -> dict[str, Any]:
    """Start redis-server, measure, stop it; return the JSON-ready result."""
    # quick: every phase with fewer round trips; both restore histories are
    # longer than one snapshot interval, so both restores read a snapshot
    n_commit, batch, warm = (200, 100, 50) if quick else (10000, 200, 300)
    per_client, client_batch = (10, 5) if quick else (500, 50)
    small_n, big, repeats = (200, 1000, 3) if quick else (1000, 100_000, 20)
    with tempfile.TemporaryDirectory(prefix="svit-bench-") as state:
        server = RedisServer(state, die_with_parent=True)
        server.start()
        try:
            client = connect(server.url)
            commit: dict[str, Any] = {}
            for mode in ("always", "no"):
                client.config_set("appendfsync", mode)
                _commit_round_trips(client, warm, 100)  # warm-up (scripts, allocator)
                commit[f"appendfsync_{mode}"] = _commit_round_trips(client, n_commit, batch)
            client.config_set("appendfsync", "always")
            _commit_concurrent(client, 16, 5 if quick else 20, 10)  # warm-up
            concurrent = _commit_concurrent(client, 16, per_client, client_batch)
            seconds = 0.3 if quick else 4.0
            _controller_rate(client, 1, 0.1 if quick else 0.3)  # warm-up
            controller = {
                "redis_round_trips_per_activation": _round_trips_per_activation(
                    client, 10 if quick else 50),
                "sequential": _controller_rate(client, 1, seconds),
                "clients_16": _controller_rate(client, 16, seconds),
            }
            client.config_set("appendfsync", "no")
            if restore:
                small = _restore_time(client, small_n, repeats)
                large = _restore_time(client, big, repeats)
            client.config_set("appendfsync", "always")
            client.close()
        finally:
            server.stop()
    result: dict[str, Any] = {
        "benchmark": "bench_store",
        "python": platform.python_version(),
        "redis_server": "launcher (appendonly yes)",
        "commit": commit,
        "commit_ratio_durable": commit["appendfsync_always"]["ratio"],
        "commit_ratio_no_fsync": commit["appendfsync_no"]["ratio"],
        "commit_ratio_target": 1.3,
        "commit_breakdown": _fsync_breakdown(commit),
        "commit_16_clients": concurrent,
        "commit_ratio_16_clients": concurrent["ratio"],
        "controller": controller,
    }
    if restore:
        result.update({
            "restore": {"small": small, "large": large},
            "restore_ratio": round(large["restore_ms_best"] / small["restore_ms_best"], 3),
            "restore_ratio_target": 2.0,
        })
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes (CI smoke run)")
    parser.add_argument("--no-restore", action="store_true",
                        help="skip the restore measurement (commit and controller only)")
    args = parser.parse_args()
    print(json.dumps(run(quick=args.quick, restore=not args.no_restore), indent=2))


if __name__ == "__main__":
    main()
