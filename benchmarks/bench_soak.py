"""Soak: a 3-host local cluster under a long, steady load with host kills.

Run::

    python -m benchmarks.bench_soak [--quick] [--duration-s 1800] [--agents 50]
                                    [--sends 50000] [--kill-every-s 300] [--hosts 3]

What runs, at once, on a local cluster of ``--hosts`` hosts with one outbox dispatcher
delivering to a local webhook (a uvicorn server in this process):

* **a sender**: one process whose script sends one webhook intent and writes
  once per activation, activated in a closed loop (one client) until
  ``--duration-s`` has passed *and* it committed ``--sends`` activations;
* **agents**: ``--agents`` processes running reasoning turns continuously
  for ``--duration-s`` (one client each: a message, then wait for its turn
  to end), against an OpenAI-compatible model server we did not write (LLMock, started by
  ``benchmarks/_llm.py``, ``--model-latency-ms`` per reply): every turn is a
  tool call, its result, then a final answer;
* **a nemesis**: every ``--kill-every-s`` one host (h1, h2, ... in turn) is
  killed and restarted.

Prints one JSON document with, per minute of the load: the sender's
activation p50/p99 (ms), Redis ``used_memory``, the sender's and an average
agent's Redis key sizes (``MEMORY USAGE`` of every key of the process), each
host's memory (PSS of its Ray node's processes), the etcd database size (the
file and what is in use), and the agent turns completed; then the
least-squares slope of each series over the second half of the load (bounded
structures fill to their caps first; the etcd file fills until the pages its
5-minute compactions free are reused, about 15 minutes, hence a 30-minute
load by default) in units per minute and as a share of its mean (``flat``:
the series moved less than ``FLAT_SHARE`` of its mean over that half, or its
slope is within ``TREND_Z`` standard errors of 0, i.e. within noise). The
latency and turn trends leave out the minutes a host kill disturbs; each
kill's window is reported on its own (``failover_windows``: the sender's
p50/p99/max and the agents' turns per minute in it). The sender's key size
is also judged against its own history (``sender_keys_by_history``: per
10 000 commits over the second half of its commits), which a size sampled
once a minute between snapshots and approximate stream trims saws around.
At the end it checks,
after the dispatcher drained: every acknowledged sender commit is in the
process once (the version, the count written by the script and the
acknowledged count agree), every committed intent reached the webhook, no
intent is pending or dead, every process's stored log verifies on a
read-only restore (``anomalies``: the safety checks that failed); and, as
liveness, which agents' inboxes still hold a message
(``agent_inboxes_not_empty``, counted in ``stuck_inboxes``: every agent's
last turn should have completed, so any is a finding).

``--quick`` (CI): 2 hosts, 12 s, 1 agent, at least 30 sends, one host killed
(4 s in) and restarted, samples every 2 s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from benchmarks._cluster import local_cluster
from benchmarks._llm import LLMServer, start_llm_server
from benchmarks.bench_residency import host_pss_mib, pct
from svit_cluster.chat import chat_turn
from svit_cluster.client import AsyncSvitClient, RecoveredCommit
from svit_cluster.defaults import DEFAULT_MAX_EVENTS, DEFAULT_SIGNAL_RETENTION
from svit_cluster.dispatch import outbox_summary
from svit_cluster.errors import OutcomeUnknownError, SvitError
from svit_cluster.local import ClusterSpec, LocalCluster, free_port
from svit_cluster.store import ProcessKeys, RedisBackend, connect

#: A series is flat when it moved less than this share of its mean over the
#: trend's window, or when its slope is within noise (below). It grows when it
#: rose by this share or more and the slope is not within noise.
FLAT_SHARE = 0.10
#: A slope is within noise when it lies within this many standard errors of 0
#: (1.96: a two-sided 95 % interval by the normal law, which is narrower than
#: Student's t for the few points of a window, so it calls growth sooner).
TREND_Z = 1.96
#: Seconds after a killed host's restart before its memory counts again
#: (its new Ray node starts workers as processes move back).
HOST_WARMUP_S = 120.0
#: Seconds after a killed host's restart during which the load is still
#: failing over (leases run out, processes restore on other hosts, the
#: restarted node takes processes back). Sample windows that overlap a kill's
#: window [kill, restart + FAILOVER_SETTLE_S] are left out of the latency
#: and turn trends, which measure growth; ``failover_windows`` reports each
#: kill's window on its own.
FAILOVER_SETTLE_S = 120.0
#: The series a failover disturbs (the rest are sizes, read at one instant).
FAILOVER_SERIES = ("activation_p50_ms", "activation_p99_ms", "turns")

SENDER = "svit://local/soak-sender"
HOOK = """(define (main input)
  (do (send! (value-get input "/to") (value-map "n" (value-get input "/n")))
      (write "/memory/n" (value-get input "/n"))
      (value-get input "/n")))"""


class Webhook:
    """A real HTTP sink on a free loopback port: counts deliveries by idempotency key."""

    def __init__(self) -> None:
        self.port = free_port()
        self.posts = 0
        self.keys: set[str] = set()
        self._lock = threading.Lock()
        app = Starlette(routes=[Route("/hook", self._hook, methods=["POST"])])
        self._server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port,
                                                     log_level="warning", lifespan="off"))
        self._thread = threading.Thread(target=self._server.run, daemon=True)

    async def _hook(self, request: Request) -> Response:
        await request.body()
        with self._lock:
            self.posts += 1
            self.keys.add(request.headers.get("idempotency-key", ""))
        return Response(status_code=200)

    def start(self) -> Webhook:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("the webhook sink did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(10)


@dataclass
class Tally:
    """What the load did, with the second (since the load started) of each event."""

    started: float = field(default_factory=time.monotonic)
    activations: list[tuple[float, float]] = field(default_factory=list)  # (t_s, seconds)
    acked_versions: list[int] = field(default_factory=list)
    outcome_unknown: int = 0
    sender_errors: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    turns: list[float] = field(default_factory=list)  # t_s of each completed turn
    turn_failures: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    kills: list[dict[str, Any]] = field(default_factory=list)
    sender_done: float = float("inf")  # t_s when the sender's loop ended

    def now(self) -> float:
        return time.monotonic() - self.started


async def run_sender(url: str, token: str, hook: str, tally: Tally, end: float,
                     sends: int) -> None:
    async with AsyncSvitClient(url, token, client_id="soak-sender", attempts=60,
                               max_wait_s=2.0, timeout_s=60) as c:
        await c.create_process(SENDER, memory={"n": 0}, scripts={"hook": HOOK})
        while time.monotonic() < end or len(tally.acked_versions) < sends:
            t0 = time.perf_counter()
            try:
                resp = await c.activate_until_committed(
                    SENDER, "hook", lambda _seen, version: {"to": hook, "n": version + 1},
                    observe_path="/memory/n")
            except OutcomeUnknownError:
                tally.outcome_unknown += 1
                continue
            except SvitError as exc:  # counted; the loop goes on (a fault window)
                tally.sender_errors[exc.code] += 1
                await asyncio.sleep(0.5)
                continue
            if isinstance(resp, RecoveredCommit):
                version = resp.version
            elif resp.outcome.status == "committed":
                version = resp.outcome.activation.version
            else:  # rejected (the script failed): nothing committed
                failure = getattr(resp.outcome, "failure", None)
                tally.sender_errors[f"{resp.outcome.status} {getattr(failure, 'code', '')}"] += 1
                continue
            tally.activations.append((tally.now(), time.perf_counter() - t0))
            tally.acked_versions.append(version)
        tally.sender_done = tally.now()


async def run_agent(url: str, token: str, pid: str, tally: Tally, end: float) -> None:
    """Turns one after another until ``end`` (monotonic seconds)."""
    async with AsyncSvitClient(url, token, client_id=f"soak-{pid}", attempts=60,
                               max_wait_s=2.0, timeout_s=60) as c:
        await c.create_process(pid, memory={"status": "idle", "turns": 0})
        n = 0
        while time.monotonic() < end:
            n += 1
            try:
                outcome = await chat_turn(c, pid, f"turn {n}: note it in /memory/status",
                                          emit=lambda _line: None, timeout_s=120)
            except TimeoutError:
                tally.turn_failures["timeout"] += 1
                continue
            except SvitError as exc:
                tally.turn_failures[exc.code] += 1
                await asyncio.sleep(1.0)
                continue
            if outcome.ok:
                tally.turns.append(tally.now())
            else:
                tally.turn_failures[str(getattr(outcome, "failure", None) or "failed")[:60]] += 1


def key_bytes(client: Any, pid: str) -> int:
    return sum(int(client.memory_usage(k, samples=0) or 0) for k in ProcessKeys(pid).all())


def key_breakdown(client: Any, pid: str) -> dict[str, dict[str, int]]:
    """Every Redis key of ``pid`` (its ``{P}`` hash tag): bytes and entries, so
    the end of a run shows which structure holds what and whether it is at its cap."""
    keys = ProcessKeys(pid)
    out: dict[str, dict[str, int]] = {}
    for raw in client.scan_iter(match=f"{keys.prefix}:{{{pid}}}:*", count=500):
        key = raw.decode() if isinstance(raw, bytes) else raw
        kind = client.type(key)
        kind = kind.decode() if isinstance(kind, bytes) else kind
        size = {"stream": client.xlen, "hash": client.hlen, "zset": client.zcard,
                "list": client.llen, "set": client.scard}.get(kind)
        out[key.split("}", 1)[1] or key] = {
            "bytes": int(client.memory_usage(key, samples=0) or 0),
            "entries": int(size(key)) if size else 1}
    return out


def etcd_db_kib(endpoint: str) -> dict[str, float]:
    """The etcd database size (KiB) of the member answering, from etcd's JSON
    gateway (``/v3/maintenance/status``): ``file`` (``dbSize``, the bbolt file,
    which compaction does not shrink but stops from growing, since compacted
    pages are reused) and ``in_use`` (``dbSizeInUse``, what the live keys and
    the retained history take)."""
    req = urllib.request.Request(f"http://{endpoint}/v3/maintenance/status", data=b"{}",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=5) as resp:
        status = json.loads(resp.read())
    return {"file": round(int(status["dbSize"]) / 1024, 1),
            "in_use": round(int(status["dbSizeInUse"]) / 1024, 1)}


class Sampler(threading.Thread):
    """Every ``every_s``: Redis, key sizes, host memory, etcd size."""

    def __init__(self, cluster: LocalCluster, agents: list[str], tally: Tally,
                 every_s: float, llm: LLMServer) -> None:
        super().__init__(daemon=True)
        self.cluster, self.agents, self.tally, self.every_s = cluster, agents, tally, every_s
        self.llm = llm
        self.stop = threading.Event()
        self.rows: list[dict[str, Any]] = []

    def run(self) -> None:
        rc = connect(self.cluster.doc["redis"]["url"])
        try:
            while not self.stop.wait(self.every_s):
                try:
                    self.llm.clear_requests()  # the mock's request journal is not ours to grow
                    self.rows.append(self.sample(rc))
                except Exception as exc:  # a fault window: one sample missed
                    print(f"sample failed: {exc!r}", file=sys.stderr)
        finally:
            rc.close()

    def sample(self, rc: Any) -> dict[str, Any]:
        hosts = {h: host_pss_mib(self.cluster, h) for h in sorted(self.cluster.doc["hosts"])}
        agent_bytes = [key_bytes(rc, pid) for pid in self.agents]
        return {
            "t_s": round(self.tally.now(), 1),
            "redis_used_memory_mib": round(int(rc.info("memory")["used_memory"]) / 2**20, 2),
            "sender_keys_kib": round(key_bytes(rc, SENDER) / 1024, 1),
            "agent_keys_kib_mean": (round(statistics.mean(agent_bytes) / 1024, 1)
                                    if agent_bytes else None),
            "host_pss_mib": hosts,
            **{f"etcd_db_{k}_kib": v
               for k, v in etcd_db_kib(self.cluster.doc["etcd"]["endpoint"]).items()},
        }


def nemesis(cluster: LocalCluster, tally: Tally, every_s: float, end: float,
            stop: threading.Event) -> None:
    hosts = sorted(cluster.doc["hosts"])
    turn = 0
    while not stop.wait(every_s) and time.monotonic() < end:
        host = hosts[turn % len(hosts)]
        turn += 1
        t0 = tally.now()
        try:
            cluster.kill_host(host)
            cluster.restart_host(host)
            tally.kills.append({"host": host, "t_s": round(t0, 1),
                                "restarted_in_s": round(tally.now() - t0, 1)})
        except Exception as exc:
            tally.kills.append({"host": host, "t_s": round(t0, 1), "error": repr(exc)[:200]})


def per_minute(tally: Tally, rows: list[dict[str, Any]], every_s: float) -> list[dict[str, Any]]:
    """One row per sample window: activation p50/p99 and turns in it, plus the sample."""
    out = []
    prev = 0.0
    for row in rows:
        t = row["t_s"]
        lat = [d for ts, d in tally.activations if prev <= ts < t]
        p50, p99 = pct(lat, 0.5), pct(lat, 0.99)
        out.append({"minute": round(t / 60, 2),
                    "from_s": round(prev, 1),
                    "activations": len(lat),
                    "activation_p50_ms": None if p50 is None else round(p50 * 1000, 2),
                    "activation_p99_ms": None if p99 is None else round(p99 * 1000, 2),
                    "turns": sum(1 for ts in tally.turns if prev <= ts < t),
                    **row})
        prev = t
    return out


def kill_window(kill: dict[str, Any], settle_s: float) -> tuple[float, float]:
    """``(start_s, end_s)`` of a kill's disturbance: from the kill to
    ``settle_s`` after its restart (a failed restart counts as instant)."""
    start = float(kill["t_s"])
    return start, start + float(kill.get("restarted_in_s") or 0.0) + settle_s


def trends(table: list[dict[str, Any]],
           kills: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Slope per minute of each series over the second half of the rows, and
    whether it is flat there (bounded structures first fill up to their caps:
    signals, receipts, the tail, the outbox window; the etcd file until the
    pages its compactions free are reused).

    Per series: ``slope_per_min`` and its standard error ``slope_se``,
    ``mean``, ``moved_share`` (the fitted change over the window as a share
    of the mean), ``flat`` (it moved less than ``FLAT_SHARE`` either way, or
    its slope is within ``TREND_Z`` standard errors of 0) and ``grows`` (it
    rose by ``FLAT_SHARE`` or more and its slope is not within noise: the
    verdict a bound cares about; a falling latency is not flat but does not
    grow). A trend asks whether a series grows with the run's
    history, not what a fault costs, so (``kills``: ``{host, t_s,
    restarted_in_s}`` each): a killed host's memory restarts from its new Ray
    node, and its series leaves out the samples from its kill until
    ``HOST_WARMUP_S`` after its restart; the latency and turn series
    (``FAILOVER_SERIES``) leave out every sample window that overlaps a kill
    window (``kill_window`` with ``FAILOVER_SETTLE_S``), whichever host it
    hit. ``left_out`` counts the samples each series left out."""
    series: dict[str, list[tuple[float, float]]] = defaultdict(list)
    left_out: dict[str, int] = defaultdict(int)
    windows = [kill_window(k, FAILOVER_SETTLE_S) for k in kills or ()]
    for row in table[len(table) // 2:]:
        failing_over = any(row.get("from_s", row["t_s"]) <= end and start <= row["t_s"]
                           for start, end in windows)
        for key in ("activation_p50_ms", "activation_p99_ms", "redis_used_memory_mib",
                    "sender_keys_kib", "agent_keys_kib_mean", "etcd_db_file_kib",
                    "etcd_db_in_use_kib", "turns"):
            if row.get(key) is None:
                continue
            if key in FAILOVER_SERIES and failing_over:
                left_out[key] += 1
                continue
            series[key].append((row["minute"], float(row[key])))
        for host, mib in row["host_pss_mib"].items():
            key = f"host_pss_mib.{host}"
            if any(k["host"] == host
                   and kill_window(k, HOST_WARMUP_S)[0] <= row["t_s"]
                   <= kill_window(k, HOST_WARMUP_S)[1] for k in kills or ()):
                left_out[key] += 1
            else:
                series[key].append((row["minute"], float(mib)))
    return {key: {**judge(points, "slope_per_min"), "left_out": left_out[key]}
            for key, points in series.items()}


def judge(points: list[tuple[float, float]], unit: str) -> dict[str, Any]:
    """One trend verdict on ``(x, value)`` points (see :func:`trends`): the
    slope per unit of x under the key ``unit``, ``slope_se``, ``mean``,
    ``points``, ``moved_share``, ``flat`` and ``grows``."""
    s, se = fit(points)
    mean = statistics.mean(v for _, v in points)
    span = points[-1][0] - points[0][0] if len(points) > 1 else 0.0
    change = None if s is None or not mean else s * span / abs(mean)
    # within noise: the slope's interval at TREND_Z standard errors holds 0
    noise = se is not None and s is not None and abs(s) <= TREND_Z * se
    return {unit: None if s is None else round(s, 3),
            "slope_se": None if se is None else round(se, 3),
            "mean": round(mean, 2),
            "points": len(points),
            "moved_share": None if change is None else round(abs(change), 3),
            "flat": None if change is None else abs(change) < FLAT_SHARE or noise,
            "grows": None if change is None else change >= FLAT_SHARE and not noise}


def history_trend(table: list[dict[str, Any]],
                  key: str = "sender_keys_kib") -> dict[str, Any]:
    """The sender's Redis key size against its own history, not the clock:
    each sample's value at the sender's acknowledged commits so far, over the
    second half of its commits (load and sender-alone rows alike: the size of
    a process's keys depends on what it committed, not on the load beside
    it), judged as :func:`judge` does, with the slope in KiB per 10 000
    commits (``slope_per_10k_commits``). Also ``min``/``max`` of the values
    in that half and the commits it spans (``from_commit``, ``to_commit``)."""
    done, points = 0, []
    for row in table:
        done += int(row["activations"])
        if row.get(key) is not None:
            points.append((done / 10_000, float(row[key])))
    half = [(x, v) for x, v in points if x * 10_000 >= done / 2]
    if not half:
        return {"points": 0}
    return {**judge(half, "slope_per_10k_commits"),
            "min": min(v for _, v in half), "max": max(v for _, v in half),
            "from_commit": round(half[0][0] * 10_000), "to_commit": round(half[-1][0] * 10_000)}


def fit(points: list[tuple[float, float]]) -> tuple[float | None, float | None]:
    """Least-squares ``(slope, standard error of the slope)`` of ``(minute,
    value)`` points, per minute: slope None below 2 points or 2 distinct
    minutes, standard error None below 3 points."""
    if len(points) < 2 or len({x for x, _ in points}) < 2:
        return None, None
    xs, ys = [x for x, _ in points], [y for _, y in points]
    s, intercept = statistics.linear_regression(xs, ys)
    if len(points) < 3:
        return s, None
    mx = statistics.mean(xs)
    residual = sum((y - (s * x + intercept)) ** 2 for x, y in points) / (len(points) - 2)
    return s, math.sqrt(residual / sum((x - mx) ** 2 for x in xs))


def failover_windows(tally: Tally) -> list[dict[str, Any]]:
    """Per kill, what the sender and the agents saw in its window
    (``kill_window`` with ``FAILOVER_SETTLE_S``): the host, the window in
    seconds since the load started, the sender's activations in it with their
    p50/p99/max (ms), and the agent turns per minute in it."""
    out = []
    for kill in tally.kills:
        start, end = kill_window(kill, FAILOVER_SETTLE_S)
        lat = [d for ts, d in tally.activations if start <= ts <= end]
        minutes = (end - start) / 60
        p50, p99 = pct(lat, 0.5), pct(lat, 0.99)
        out.append({"host": kill["host"], "from_s": round(start, 1), "to_s": round(end, 1),
                    "activations": len(lat),
                    "p50_ms": None if p50 is None else round(p50 * 1000, 1),
                    "p99_ms": None if p99 is None else round(p99 * 1000, 1),
                    "max_ms": round(max(lat) * 1000, 1) if lat else None,
                    "turns_per_min": round(sum(1 for t in tally.turns if start <= t <= end)
                                           / minutes, 1) if minutes else None})
    return out


def verify(cluster: LocalCluster, agents: list[str], tally: Tally,
           hook: Webhook) -> dict[str, Any]:
    """The end-of-run checks (see the module docstring); each with its figures."""
    rc = connect(cluster.doc["redis"]["url"])
    try:
        deadline = time.monotonic() + 180
        while True:
            summary = outbox_summary(rc, [SENDER])[SENDER]
            if summary.pending == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        sender = RedisBackend(rc, SENDER, 1).restore()
        restored: dict[str, str] = {}
        inbox_left: dict[str, int] = {}
        for pid in [SENDER, *agents]:
            try:
                proc = RedisBackend(rc, pid, 1).restore()
                restored[pid] = "ok" if proc is not None else "missing"
                if proc is not None and pid != SENDER:
                    left = proc.read("/inbox")
                    if isinstance(left, list) and left:
                        inbox_left[pid] = len(left)
            except SvitError as exc:
                restored[pid] = f"{exc.code}: {exc.message[:120]}"
    finally:
        rc.close()
    acked = tally.acked_versions
    version = sender.version if sender is not None else None
    n = sender.read("/memory/n") if sender is not None else None
    checks = {
        "acked_commits_distinct": len(set(acked)) == len(acked),
        "version_covers_acked": version is not None and (not acked or max(acked) <= version),
        "count_written_equals_version": n == version,
        "unknown_outcomes_account_for_the_rest": (
            version is not None and version - len(acked) <= tally.outcome_unknown),
        "intents_committed": summary.committed,
        "intents_delivered": summary.delivered,
        "intents_pending": summary.pending,
        "intents_dead_lettered": summary.dead_lettered,
        "webhook_unique_keys": len(hook.keys),
        "webhook_posts": hook.posts,
        "every_intent_reached_the_webhook": len(hook.keys) >= summary.committed,
        "logs_verify": all(v == "ok" for v in restored.values()),
        "restore_failures": {k: v for k, v in restored.items() if v != "ok"},
        "agent_inboxes_not_empty": inbox_left,
    }
    checks["anomalies"] = sum(1 for k in ("acked_commits_distinct", "version_covers_acked",
                                          "count_written_equals_version",
                                          "unknown_outcomes_account_for_the_rest",
                                          "every_intent_reached_the_webhook", "logs_verify")
                              if not checks[k]) + (summary.pending + summary.dead_lettered > 0)
    checks["stuck_inboxes"] = len(inbox_left)
    return checks


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true",
                    help="CI smoke run: 2 hosts, 12 s, 1 agent, at least 30 sends, "
                         "one host kill and restart")
    ap.add_argument("--duration-s", type=float, default=1800.0,
                    help="load duration (s); the trends read its second half")
    ap.add_argument("--agents", type=int, default=50, help="agent processes")
    ap.add_argument("--sends", type=int, default=50_000,
                    help="the sender runs at least this many activations")
    ap.add_argument("--kill-every-s", type=float, default=300.0,
                    help="seconds between host kills (each host restarted at once)")
    ap.add_argument("--sample-every-s", type=float, default=60.0)
    ap.add_argument("--hosts", type=int, default=3,
                    help="hosts (at least 2: a killed host's processes fail over)")
    ap.add_argument("--model-latency-ms", type=int, default=200,
                    help="the model server's delay per reply (ms)")
    ap.add_argument("--signal-retention", type=int, default=DEFAULT_SIGNAL_RETENTION,
                    help="observer signals kept per process (up --signal-retention); lower "
                         "it so the caps fill within the first half of the load")
    ap.add_argument("--max-events", type=int, default=DEFAULT_MAX_EVENTS,
                    help="reasoning events kept per session (up --max-events)")
    args = ap.parse_args()
    if args.quick:
        # one kill: the nemesis waits for the restart (a Ray node and its agent,
        # several seconds) and then kill_every_s more, past the end of the load
        args.duration_s, args.agents, args.sends, args.hosts = 12.0, 1, 30, 2
        args.kill_every_s, args.sample_every_s = 4.0, 2.0
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    hook = Webhook().start()
    llm = start_llm_server(latency_ms=args.model_latency_ms)
    # the hosts read the key from their environment (never from cluster.json)
    os.environ.setdefault("SVIT_REASONER_API_KEY", "unused-by-the-mock")
    agents = [f"svit://local/soak-agent-{i}" for i in range(args.agents)]
    try:
        with tempfile.TemporaryDirectory(prefix="svit-soak-") as tmp:
            with local_cluster(ClusterSpec(
                    state_dir=Path(tmp), hosts=args.hosts, lease_ttl_s=5, dispatchers=1,
                    dispatch_options={"webhook_hosts": [f"127.0.0.1:{hook.port}"]},
                    reasoner={"kind": "openai", "base_url": llm.base_url,
                              "model": "gpt-4o-mini"},
                    signal_retention=args.signal_retention,
                    max_events=args.max_events)) as cluster:
                result = run(cluster, args, hook, llm, agents)
    finally:
        llm.stop()
        hook.stop()
    print(json.dumps(result, indent=2))
    return 0


def run(cluster: LocalCluster, args: argparse.Namespace, hook: Webhook, llm: LLMServer,
        agents: list[str]) -> dict[str, Any]:
    url, token = cluster.doc["gateway"]["url"], cluster.doc["tokens"]["admin"]
    tally = Tally()
    end = time.monotonic() + args.duration_s
    sampler = Sampler(cluster, agents, tally, args.sample_every_s, llm)
    stop = threading.Event()
    killer = threading.Thread(target=nemesis, args=(cluster, tally, args.kill_every_s, end, stop),
                              daemon=True)
    sampler.start()
    killer.start()

    async def load() -> None:
        await asyncio.gather(
            run_sender(url, token, f"http://127.0.0.1:{hook.port}/hook", tally, end, args.sends),
            *(run_agent(url, token, pid, tally, end) for pid in agents))

    try:
        asyncio.run(load())
    finally:
        stop.set()
        sampler.stop.set()
        killer.join(120)
        sampler.join(30)
    # rows of the load only: a client still waiting for its last turn is not load
    rows = [r for r in sampler.rows if r["t_s"] <= tally.sender_done + args.sample_every_s / 2]
    table = per_minute(tally, rows, args.sample_every_s)
    return {
        "config": {"duration_s": args.duration_s, "agents": args.agents, "sends": args.sends,
                   "kill_every_s": args.kill_every_s, "sample_every_s": args.sample_every_s,
                   "hosts": args.hosts, "lease_ttl_s": 5,
                   "signal_retention": args.signal_retention,
                   "max_events": args.max_events},
        "seconds": round(tally.now(), 1),
        "sender_activations": len(tally.acked_versions),
        "sender_outcome_unknown": tally.outcome_unknown,
        "sender_errors": dict(tally.sender_errors),
        "turns_completed": len(tally.turns),
        "turn_failures": dict(tally.turn_failures),
        "kills": tally.kills,
        "failover_windows": failover_windows(tally),
        "per_minute": table,
        # the full load (sender, agents, kills) and, if the sender needed longer
        # for --sends, the sender alone: two workloads, judged apart
        "trends": trends([r for r in table if r["t_s"] <= args.duration_s + 1], tally.kills),
        "trends_sender_alone": trends([r for r in table if r["t_s"] > args.duration_s + 1],
                                      tally.kills),
        "sender_keys_by_history": history_trend(table),
        "checks": verify(cluster, agents, tally, hook),
        "keys_at_end": _keys_at_end(cluster, agents),
    }


def _keys_at_end(cluster: LocalCluster, agents: list[str]) -> dict[str, Any]:
    rc = connect(cluster.doc["redis"]["url"])
    try:
        return {"sender": key_breakdown(rc, SENDER),
                **({"agent_0": key_breakdown(rc, agents[0])} if agents else {})}
    finally:
        rc.close()


if __name__ == "__main__":
    raise SystemExit(main())
