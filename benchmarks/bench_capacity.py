"""Per-unit costs for the capacity model (docs/capacity.md).

Run: ``python -m benchmarks.bench_capacity [--quick]``. Prints one JSON
document. Starts its own etcd and redis-server (``appendfsync always``, the
launcher's default) in a temporary directory and stops them; no Ray.

* **etcd** -- Raft proposals (each one a WAL append + fsync on every member)
  and WAL fsyncs per operation, from etcd's own ``/metrics`` counters
  (``etcd_server_proposals_committed_total``,
  ``etcd_disk_wal_fsync_duration_seconds_count``) before/after: a host lease
  grant, an ownership acquire (``create_revision == 0`` transaction) and a
  release, and ``--leases`` host leases kept alive for ``--keepalive-s``
  seconds (keepalive requests are counted by the lease loop's own cadence,
  ``ttl_s / 3``).
* **redis_commit** -- ``INFO commandstats`` deltas (commands called inside
  scripts are counted too) and AOF bytes (``aof_current_size``) per commit of
  an activation that sends one outbox intent, through the real
  ``ProcessController`` + ``RedisBackend`` path; then the same for the
  dispatcher draining those intents (a ``redis-stream://`` sink, trimming on).
* **redis_memory** -- ``MEMORY USAGE`` of each of one process's keys after N1
  and N2 commits: a counter process (no intents; default ``StoreConfig``:
  receipts 256, snapshot every 100, signals 10 000) and a sending process (one
  intent per commit, dispatcher delivering and trimming).
* **ray** (only with ``--ray``; not in ``--quick``, so CI never starts Ray
  here) -- a one-host local cluster: PSS of the process-actor worker
  processes per active process (``psutil`` ``memory_full_info().pss``, which
  splits shared pages fairly) after activating ``--actors`` processes, their
  idle CPU, and the gateway's CPU per request (user+system seconds of the
  gateway process tree over ``--requests`` sequential activations).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from benchmarks._cluster import local_cluster
from svit_cluster.control import DEFAULT_RECEIPTS, ProcessController, decode_request
from svit_cluster.defaults import DEFAULT_SNAPSHOT_EVERY
from svit_cluster.dispatch import DispatchConfig, DispatchWorker, outbox_summary
from svit_cluster.local import EtcdServer, RedisServer
from svit_cluster.ownership import HostLease, Owners, open_client
from svit_cluster.process import Process, encode_value
from svit_cluster.store import ProcessKeys, RedisBackend, StoreConfig, connect
from svit_cluster.store._redis import RedisClient

COUNTER = """(define (main input)
  (do (write "/memory/n" (+ 1 (read "/memory/n"))) 1))"""
SEND = """(define (main input)
  (do (send! (value-get input "/to") (value-get input "/body"))
      (write "/memory/n" (+ 1 (read "/memory/n")))
      1))"""
SINK = "redis-stream://integrations:capacity"
#: Commands the commit script runs inside its one EVALSHA (not round trips of their own).
_IN_SCRIPT = frozenset({"xadd", "hset", "get", "hmget", "hget", "rpush", "xrevrange", "type",
                        "xtrim", "lpop", "hdel", "set", "llen", "ltrim", "xlen"})


# -- etcd ---------------------------------------------------------------------------

def _etcd_counters(url: str) -> dict[str, float]:
    wanted = {"etcd_server_proposals_committed_total": "proposals",
              "etcd_disk_wal_fsync_duration_seconds_count": "wal_fsyncs",
              "etcd_mvcc_put_total": "puts", "etcd_mvcc_txn_total": "txns",
              "etcd_mvcc_delete_total": "deletes"}
    with urllib.request.urlopen(f"{url}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    out = dict.fromkeys(wanted.values(), 0.0)
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in wanted:
            out[wanted[name]] = float(value)
    return out


def _delta(before: dict[str, float], after: dict[str, float], per: float) -> dict[str, float]:
    return {k: round((after[k] - before[k]) / per, 3) for k in before}


async def _etcd(server: EtcdServer, n: int, leases: int, keepalive_s: float) -> dict[str, Any]:
    url = server.url
    client = open_client(server.endpoint, request_timeout_s=2.0)
    try:
        c0 = _etcd_counters(url)
        lease = await HostLease(client, ttl_s=5, safety_margin_s=1.0).grant()
        c1 = _etcd_counters(url)
        owners = Owners(lease, cluster="cap", host="h1", address="h1:1")
        pids = [f"svit://cap/p{i}" for i in range(n)]
        t = time.perf_counter()
        owned = [await owners.acquire(p) for p in pids]
        acquire_s = time.perf_counter() - t
        c2 = _etcd_counters(url)
        for o in owned:
            await owners.release(o)
        c3 = _etcd_counters(url)
        await lease.close()
        # Keepalive: `leases` host leases (the default TTL 5 s, a keepalive every ttl/3).
        many = [await HostLease(client, ttl_s=5, safety_margin_s=1.0).grant()
                for _ in range(leases)]
        k0 = _etcd_counters(url)
        await asyncio.sleep(keepalive_s)
        k1 = _etcd_counters(url)
        interval = many[0].keepalive_interval_s if many else 0.0
        for h in many:
            await h.close()
        return {
            "lease_grant": _delta(c0, c1, 1),
            "acquire": _delta(c1, c2, n),
            "acquire_ms": round(acquire_s / n * 1000, 3),
            "release": _delta(c2, c3, n),
            "keepalive": {
                "leases": leases, "window_s": keepalive_s,
                "keepalive_interval_s": round(interval, 3),
                "keepalive_requests_per_host_per_s": round(1 / interval, 3) if interval else 0,
                "raft_proposals_per_host_per_s": round(
                    (k1["proposals"] - k0["proposals"]) / keepalive_s / max(1, leases), 3),
                "wal_fsyncs_per_host_per_s": round(
                    (k1["wal_fsyncs"] - k0["wal_fsyncs"]) / keepalive_s / max(1, leases), 3),
            },
        }
    finally:
        await client.close()


# -- Redis --------------------------------------------------------------------------

def _commandstats(client: RedisClient) -> dict[str, int]:
    info: Any = client.info("commandstats")
    return {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in info.items()}


def _stat_delta(before: dict[str, int], after: dict[str, int], per: int) -> dict[str, float]:
    out = {k: round((v - before.get(k, 0)) / per, 3) for k, v in after.items()
           if v - before.get(k, 0) > 0 and k not in ("info", "memory|usage")}
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


class _Proc:
    """One process committed through the real controller (version-checked activations)."""

    def __init__(self, client: RedisClient, pid: str, script: str, config: StoreConfig) -> None:
        self.pid = pid
        backend = RedisBackend(client, pid, 1, config)
        backend.claim()
        proc = Process.create(pid, memory={"n": 0}, scripts={"main": script})
        backend.create(proc)
        self.ctrl = ProcessController(proc, backend)
        self.keys = ProcessKeys(pid, config.prefix)
        self.n = 0

    def commit(self) -> None:
        self.n += 1
        request = {
            "protocol": "svit-control@1", "client_id": "cap", "request_id": f"r{self.n}",
            "process_id": self.pid, "expected_version": self.ctrl.process.version,
            "command": {"operation": "activate", "script": "main",
                        "input": encode_value({"to": SINK, "body": {"n": self.n}})},
        }
        resp = self.ctrl.execute(decode_request(json.dumps(request).encode()))
        if resp.outcome.status != "committed":
            raise RuntimeError(f"commit {self.n} of {self.pid}: {resp.outcome}")

    def memory(self, client: RedisClient) -> dict[str, int]:
        out: dict[str, int] = {}
        for key in self.keys.all():
            used = client.memory_usage(key, samples=0)
            if used:
                out[key.rsplit("}:", 1)[1]] = int(used)
        out["total"] = sum(out.values())
        return out


class _Worker:
    """A dispatcher worker on its own event loop in a thread."""

    def __init__(self, url: str, prefix: str) -> None:
        self.worker = DispatchWorker(DispatchConfig(
            redis_url=url, prefix=prefix, worker_id=f"cap-{prefix}", scan_interval_s=0.2,
            heartbeat_interval_s=0.2, worker_ttl_s=1.0, claim_ttl_s=1.0, poll_interval_s=0.2))
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread = threading.Thread(target=self._main, daemon=True)

    def _main(self) -> None:
        async def main() -> None:
            self.loop = asyncio.get_running_loop()
            await self.worker.run()
        asyncio.run(main())

    def __enter__(self) -> _Worker:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self.worker.stop)
        self.thread.join(30)


def _drain(client: RedisClient, pid: str, prefix: str, total: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        s = outbox_summary(client, [pid], prefix=prefix)[pid]
        if s.committed == total and s.pending == 0 and s.retained <= 1:
            return
        time.sleep(0.1)
    raise RuntimeError(f"dispatcher did not drain {pid} within {timeout_s} s")


def _redis_commit(server: RedisServer, n: int) -> dict[str, Any]:
    client = connect(server.url)
    prefix = "capc"
    proc = _Proc(client, "svit://cap/commit", SEND, StoreConfig(prefix=prefix))
    proc.commit()  # warm the script cache
    s0, a0 = _commandstats(client), int(client.info("persistence")["aof_current_size"])
    t = time.perf_counter()
    for _ in range(n):
        proc.commit()
    elapsed = time.perf_counter() - t
    s1, a1 = _commandstats(client), int(client.info("persistence")["aof_current_size"])
    commit = _stat_delta(s0, s1, n)
    with _Worker(server.url, prefix):
        _drain(client, proc.pid, prefix, n + 1, 60)
        time.sleep(0.3)  # the trim after the last batch
    s2 = _commandstats(client)
    dispatch = _stat_delta(s1, s2, n + 1)
    scripts = commit.get("evalsha", 0) + commit.get("eval", 0)
    plain = {k: v for k, v in commit.items() if k not in _IN_SCRIPT}
    return {
        "commits": n, "commits_per_s": round(n / elapsed, 1),
        "commands_per_commit": commit,
        "commands_per_commit_total": round(sum(commit.values()), 3),
        "scripts_per_commit": round(scripts, 3),
        "client_round_trips_per_commit": round(sum(plain.values()), 3),
        "aof_bytes_per_commit": round((a1 - a0) / n, 1),
        "fsyncs_per_commit_note": ("appendfsync always: Redis fsyncs the AOF once per event-"
                                   "loop iteration that wrote, so a sequential client pays one "
                                   "fsync per write script (scripts_per_commit); concurrent "
                                   "commits arriving together share one"),
        "dispatcher_commands_per_intent": dispatch,
        "dispatcher_commands_per_intent_total": round(sum(dispatch.values()), 3),
        "dispatcher_note": ("includes the worker's time-driven heartbeats, lease renewals and "
                            "scans over the drain window, and the sink's own XADD"),
    }


def _redis_memory(server: RedisServer, n1: int, n2: int, send_n1: int, send_n2: int
                  ) -> dict[str, Any]:
    client = connect(server.url)
    counter = _Proc(client, "svit://cap/counter", COUNTER, StoreConfig(prefix="capm"))
    at: dict[str, Any] = {}
    at["0"] = counter.memory(client)  # registered: created, never activated
    for i in range(1, n2 + 1):
        counter.commit()
        if i in (10, n1, n2):
            at[str(i)] = counter.memory(client)
    prefix = "caps"
    sender = _Proc(client, "svit://cap/sender", SEND, StoreConfig(prefix=prefix))
    sent: dict[str, Any] = {}
    with _Worker(server.url, prefix):
        for i in range(1, send_n2 + 1):
            sender.commit()
            if i in (send_n1, send_n2):
                _drain(client, sender.pid, prefix, i, 60)
                sent[str(i)] = sender.memory(client)
                sent[str(i)]["outbox_entries"] = int(client.xlen(sender.keys.outbox))
    snap_growth = ((sent[str(send_n2)].get("snapshot", 0) - sent[str(send_n1)].get("snapshot", 0))
                   / (send_n2 - send_n1))
    return {
        "counter_process": {"commits": [0, 10, n1, n2], "bytes": at},
        "sending_process": {"commits": [send_n1, send_n2], "bytes": sent,
                            "snapshot_bytes_per_sent_intent": round(snap_growth, 1)},
        "note": ("MEMORY USAGE, samples=0 (exact), per key family; 'signals' grows to its "
                 "cap (signal_retention, default 10 000 entries) and then stays; the sending "
                 "process's snapshot grows with /system/outbox (process state, not history)"),
    }


COUNTER_BY = """(define (main input)
  (let ((count (+ (read "/memory/count") (value-get input "/by"))))
    (do (write "/memory/count" count) (value-map "count" count))))"""


def _committed(resp: Any) -> int:
    outcome = resp.outcome
    if outcome.status != "committed":
        raise RuntimeError(f"activation not committed: {outcome}")
    return int(outcome.activation.version)


def _ray(actors: int, requests: int, idle_s: float) -> dict[str, Any]:
    import os

    import psutil

    from svit_cluster.client import SvitClient
    from svit_cluster.local import ClusterSpec, LocalCluster

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")

    def tree(pid: int) -> list[psutil.Process]:
        try:
            root = psutil.Process(pid)
            return [root, *root.children(recursive=True)]
        except psutil.Error:
            return []

    def actor_procs(cluster: LocalCluster) -> list[psutil.Process]:
        """The process actors' workers of this cluster's hosts (descendants of each
        host's ``ray start``), never another cluster's on the same machine."""
        out = []
        for p in [q for h in cluster.doc["hosts"].values() for q in tree(int(h["pid"]))]:
            try:
                if "ProcessActor" in " ".join(p.cmdline()):
                    out.append(p)
            except psutil.Error:
                continue
        return out

    def cpu(procs: list[psutil.Process]) -> float:
        total = 0.0
        for p in procs:
            try:
                t = p.cpu_times()
                total += t.user + t.system
            except psutil.Error:
                continue
        return total

    with tempfile.TemporaryDirectory(prefix="svit-bench-cap-ray-") as tmp:
        with local_cluster(ClusterSpec(state_dir=Path(tmp), hosts=1)) as cluster:
            url, token = cluster.doc["gateway"]["url"], cluster.doc["tokens"]["admin"]
            gateway = tree(int(cluster.doc["gateway"]["pid"]))
            pids = [f"svit://local/cap-{i}" for i in range(actors)]
            with SvitClient(url, token) as c:
                versions = {}
                for pid in pids:
                    c.create_process(pid, memory={"count": 0}, scripts={"counter": COUNTER_BY})
                    versions[pid] = _committed(c.activate(pid, "counter", {"by": 1},
                                                          expected_version=0))
                time.sleep(2.0)
                procs = actor_procs(cluster)
                pss = []
                for p in procs:
                    try:
                        pss.append(p.memory_full_info().pss)
                    except psutil.Error:
                        continue
                c0 = cpu(procs)
                time.sleep(idle_s)
                idle = cpu(procs) - c0
                g0, a0 = cpu(gateway), cpu(procs)
                t = time.perf_counter()
                for i in range(requests):
                    pid = pids[i % len(pids)]
                    versions[pid] = _committed(c.activate(
                        pid, "counter", {"by": 1}, expected_version=versions[pid]))
                elapsed = time.perf_counter() - t
                g1, a1 = cpu(gateway), cpu(procs)
    return {
        "active_processes": actors, "actor_worker_processes": len(pss),
        "pss_mib_total": round(sum(pss) / 2**20, 1),
        "pss_mib_per_active_process": round(sum(pss) / 2**20 / max(1, actors), 1),
        "pss_mib_per_worker_process": round(sum(pss) / 2**20 / max(1, len(pss)), 1),
        "idle_cpu_ms_per_s_per_active_process": round(idle * 1000 / idle_s / max(1, actors), 2),
        "requests": requests, "requests_per_s_sequential": round(requests / elapsed, 1),
        "gateway_cpu_ms_per_request": round((g1 - g0) * 1000 / requests, 3),
        "actor_cpu_ms_per_request": round((a1 - a0) * 1000 / requests, 3),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small counts (CI smoke, < 60 s)")
    ap.add_argument("--commits", type=int, default=2000)
    ap.add_argument("--leases", type=int, default=50)
    ap.add_argument("--keepalive-s", type=float, default=10.0)
    ap.add_argument("--ray", action="store_true",
                    help="also measure Ray actor PSS and gateway CPU (starts a 1-host cluster)")
    ap.add_argument("--ray-only", action="store_true", help="only the --ray section")
    ap.add_argument("--actors", type=int, default=20)
    ap.add_argument("--requests", type=int, default=500)
    args = ap.parse_args()
    # quick: fewer operations; both memory points of each process lie past a
    # snapshot, and the commit window and the last memory points past the
    # receipt cap too (so its trimming runs), as in the full run; the keepalive
    # window spans more than one keepalive interval of a 5 s lease
    snap, past_cap = DEFAULT_SNAPSHOT_EVERY + 10, DEFAULT_RECEIPTS + 10
    n_commit, n_own = (past_cap, 10) if args.quick else (args.commits, 500)
    n1, n2 = (snap, past_cap) if args.quick else (1000, 10_000)
    s1, s2 = (snap, past_cap) if args.quick else (500, 2000)
    leases, keepalive_s = (2, 2.0) if args.quick else (args.leases, args.keepalive_s)
    started = time.perf_counter()
    result: dict[str, Any]
    if args.ray_only:
        result = {"bench": "capacity", "ray": _ray(args.actors, args.requests, 10.0),
                  "elapsed_s": round(time.perf_counter() - started, 1)}
        print(json.dumps(result, indent=2))
        return 0
    with tempfile.TemporaryDirectory(prefix="svit-bench-capacity-") as tmp:
        etcd = EtcdServer(Path(tmp) / "etcd", die_with_parent=True)
        rs = RedisServer(Path(tmp) / "redis", appendfsync="always", die_with_parent=True)
        etcd.start()
        rs.start()
        try:
            result = {
                "bench": "capacity", "quick": args.quick, "python": platform.python_version(),
                "etcd": asyncio.run(_etcd(etcd, n_own, leases, keepalive_s)),
                "redis_commit": _redis_commit(rs, n_commit),
                "redis_memory": _redis_memory(rs, n1, n2, s1, s2),
            }
        finally:
            rs.stop()
            etcd.stop()
    if args.ray and not args.quick:
        result["ray"] = _ray(args.actors, args.requests, 10.0)
    result["elapsed_s"] = round(time.perf_counter() - started, 1)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
