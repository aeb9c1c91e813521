"""What one active process costs while it idles, and how fast a passive one comes back.

Run::

    python -m benchmarks.bench_actor_cost [--quick] [--actors 100] [--idle-s 20]
                                          [--cold 20] [--bare 10] [--compile-bytecode]

Starts a one-host local cluster (the ``LocalCluster`` launcher's Ray settings),
prints one JSON document, stops the cluster. Issue 18 item 2 and 3 targets:
idle CPU <= 1 ms/s per active process over 100 of them, PSS <= 55 MB per
process actor, cold activation p50 <= 50 ms with a warm spare.

* **idle** -- after ``--actors`` counter processes were created and activated
  once, CPU (user + system seconds from ``/proc/<pid>/stat`` of every thread)
  over ``--idle-s`` seconds of each component: the process-actor worker
  processes (Ray names them ``ray::ProcessActor``; the warm spares are
  included), the host agent, the raylet, the GCS, the gateway. Actor CPU is
  divided by the number of active processes (``..._per_active_process``, the
  spares' share included) and by the number of actor workers
  (``..._per_actor_worker``, comparable with one bare Ray actor); the per-thread
  breakdown (thread names, summed over all actor workers) says where it goes.
* **pss** -- PSS and USS of each actor worker from ``/proc/<pid>/smaps_rollup``
  (shared pages split fairly between the processes that map them).
* **cold** -- ``--cold`` passive processes brought back one at a time: each is
  passivated by its agent's own ``release`` (the path an idle actor takes),
  then the client's first ``activate`` is timed until its commit is answered
  (placement, ownership transaction, fence claim, spare bind, restore,
  activation, commit). Between two of them the bench waits until the host has
  its warm spares back, so each one is served "with a warm spare".
* **bare** -- ``--bare`` async Ray actors that import nothing of ours, with the
  process actor's options, idle in the same window: Ray's own floor per worker
  (its core worker wakes the main thread every 10 ms to check signals), with
  its own per-thread breakdown. ``vs_bare`` puts the two side by side: the
  process actor worker's median PSS above the bare actor's, and its idle CPU
  above the bare actor's in percent (per worker and per active process).
* **bytecode** -- whether the workers load svit_cluster's cached bytecode or
  compile its sources at import (``--compile-bytecode`` caches it first, as a
  wheel install does; an editable checkout run with ``PYTHONDONTWRITEBYTECODE``
  has none, and compiling leaves garbage in every worker's heap).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

COUNTER = """(define (main input)
  (let ((count (+ (read "/memory/count") (value-get input "/by"))))
    (do (write "/memory/count" count) (value-map "count" count))))"""
_TICK = os.sysconf("SC_CLK_TCK")


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _children(pid: int) -> list[int]:
    out: list[int] = []
    todo = [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        for task in Path(f"/proc/{p}/task").glob("*"):
            try:
                kids = (task / "children").read_text().split()
            except OSError:
                continue
            todo.extend(int(k) for k in kids)
    return out


def _thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds (user + system) of each thread of ``pid``, keyed by ``comm`` name."""
    out: dict[str, float] = defaultdict(float)
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            stat = (task / "stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        out[name] += (int(fields[11]) + int(fields[12])) / _TICK
    return out


def _cpu(pids: list[int]) -> float:
    return sum(sum(_thread_cpu(p).values()) for p in pids)


def _rollup(pid: int) -> dict[str, int]:
    """``Pss`` and USS (private clean + dirty) in bytes from ``/proc/<pid>/smaps_rollup``."""
    vals: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[-1] == "kB":
            vals[key] = int(parts[0]) * 1024
    return {"pss": vals.get("Pss", 0),
            "uss": vals.get("Private_Clean", 0) + vals.get("Private_Dirty", 0)}


def _components(root_pids: list[int], gateway_pid: int) -> dict[str, list[int]]:
    comps: dict[str, list[int]] = defaultdict(list)
    for root in root_pids:
        for pid in _children(root):
            cmd = _cmdline(pid)
            if "ProcessActor" in cmd:
                comps["actors"].append(pid)
            elif "BareActor" in cmd:
                comps["bare_ray_actors"].append(pid)
            elif "HostAgent" in cmd:
                comps["agent"].append(pid)
            elif "/raylet" in cmd.split(" ")[0] or cmd.split(" ")[0].endswith("raylet"):
                comps["raylet"].append(pid)
            elif "gcs_server" in cmd.split(" ")[0]:
                comps["gcs"].append(pid)
            else:
                comps["other_ray"].append(pid)
    comps["gateway"] = _children(gateway_pid)
    return comps


def _spares_ready(agent: Any, want: int, timeout_s: float = 30.0) -> None:
    import ray

    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if ray.get(agent.status.remote()).get("spares", 0) >= want:
            return
        time.sleep(0.05)


def _retry(call: Any, *, timeout_s: float = 180.0) -> Any:
    """``call()`` again while it answers ``unavailable`` (a host lease SUSPENDED on a
    loaded machine, an overloaded agent); the callers reuse one request id, so a
    retry never commits twice."""
    from svit_cluster.errors import UnavailableError

    end = time.monotonic() + timeout_s
    while True:
        try:
            return call()
        except UnavailableError:
            if time.monotonic() > end:
                raise
            time.sleep(0.5)


def _passivate(agent: Any, pid: str, timeout_s: float = 120.0) -> None:
    """Release ``pid`` through its agent (the path an idle actor's passivation takes)."""
    import ray

    end = time.monotonic() + timeout_s
    while True:
        ans = ray.get(agent.activate.remote(pid))  # an Outcome[Activated]
        activated = ans.value
        if activated is not None and activated.status == "serving" and ray.get(
                agent.release.remote(pid, activated.token, "bench passivate")):
            return
        if time.monotonic() > end:
            raise RuntimeError(f"could not passivate {pid}: {ans.error or activated}")
        time.sleep(0.5)


def _start_bare(n: int, host: str) -> list[Any]:
    """``n`` bare async Ray actors with the process actor's options (no imports of
    ours): Ray's own per-worker floor, measured in the same idle window."""
    import ray

    @ray.remote(num_cpus=0, max_concurrency=64)
    class BareActor:
        async def ping(self) -> int:
            return os.getpid()

    handles = [BareActor.options(resources={f"svit_host:{host}": 1}).remote()  # type: ignore[attr-defined]
               for _ in range(n)]
    ray.get([h.ping.remote() for h in handles])
    return handles


def _bytecode(compile_first: bool) -> str:
    """How the workers get svit_cluster's bytecode: ``"cached"`` (``__pycache__``
    holds it, as after a wheel install), ``"written at first import"``, or
    ``"compiled in every worker"`` (no cache and ``PYTHONDONTWRITEBYTECODE`` set:
    each worker compiles every module it imports; its heap keeps most of what
    compiling freed).
    ``compile_first`` compiles the package's bytecode before (``compileall``)."""
    import compileall
    import importlib.util

    import svit_cluster

    root = Path(svit_cluster.__file__).parent
    if compile_first:
        compileall.compile_dir(str(root), quiet=1)
    if Path(importlib.util.cache_from_source(str(root / "cluster" / "_actor.py"))).exists():
        return "cached"
    return ("compiled in every worker" if os.environ.get("PYTHONDONTWRITEBYTECODE")
            else "written at first import")


def run(actors: int, idle_s: float, cold: int, bare: int = 0,
        compile_first: bool = False) -> dict[str, Any]:
    import ray

    from benchmarks._cluster import running
    from svit_cluster.client import SvitClient, new_request_id
    from svit_cluster.errors import ConflictError
    from svit_cluster.local import ClusterSpec, LocalCluster

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    from svit_cluster.errors import UnavailableError

    result: dict[str, Any] = {"svit_cluster_bytecode": _bytecode(compile_first)}
    with tempfile.TemporaryDirectory(prefix="svit-bac-", dir="/tmp") as tmp:
        for attempt in range(3):  # a loaded machine sometimes misses a start timeout
            try:
                # a budget above everything this bench activates: nothing passivates
                cluster = LocalCluster.up(ClusterSpec(state_dir=Path(tmp) / str(attempt),
                                                      hosts=1, dispatchers=0,
                                                      max_active_per_host=actors + cold + 8))
                break
            except UnavailableError:
                if attempt == 2:
                    raise
        with running(cluster):
            try:
                doc = cluster.doc
                url, token = doc["gateway"]["url"], doc["tokens"]["admin"]
                roots = [int(h["pid"]) for h in doc["hosts"].values()]
                roots.append(int(doc["ray"]["head"]["pid"]))
                ray.init(address=doc["ray"]["address"], namespace=f"svit-{doc['cluster']}",
                         logging_level="ERROR", log_to_driver=False)
                host = next(iter(doc["hosts"]))
                agent = ray.get_actor(f"agent:{host}")
                pids = [f"svit://local/cost-{i}" for i in range(actors + cold)]
                with SvitClient(url, token) as c:
                    for pid in pids:
                        try:
                            _retry(lambda pid=pid: c.create_process(
                                pid, memory={"count": 0}, scripts={"counter": COUNTER}))
                        except ConflictError:  # a retried create that had succeeded
                            pass
                        rid = new_request_id()
                        resp = _retry(lambda pid=pid, rid=rid: c.activate(
                            pid, "counter", {"by": 1}, expected_version=0, request_id=rid))
                        assert resp.outcome.status == "committed", resp.outcome
                    # -- cold: passivate `cold` processes, then bring each back once --
                    cold_ms: list[float] = []
                    for pid in pids[actors:]:
                        _passivate(agent, pid)
                    # the route cache forgets the released owners through its etcd watch
                    time.sleep(1.0)
                    for i, pid in enumerate(pids[actors:]):
                        _spares_ready(agent, 1)
                        time.sleep(0.3)
                        t0 = time.perf_counter()
                        rid = new_request_id()
                        resp = _retry(lambda pid=pid, rid=rid: c.activate(
                            pid, "counter", {"by": 1}, expected_version=1, request_id=rid))
                        cold_ms.append((time.perf_counter() - t0) * 1000)
                        assert resp.outcome.status == "committed", (i, resp.outcome)
                    # keep exactly `actors` active: passivate the cold ones again, and
                    # stop the workers they leave as surplus spares
                    for pid in pids[actors:]:
                        _passivate(agent, pid)
                    ray.get(agent.trim_spares.remote(0.0))
                    st = ray.get(agent.status.remote())
                    assert st["actors"] == actors, st
                    _spares_ready(agent, 1)
                    bare_handles = _start_bare(bare, host) if bare else []
                    time.sleep(3.0)  # let the killed workers go and the spares settle
                    comps = _components(roots, int(doc["gateway"]["pid"]))
                    before = {k: {p: _thread_cpu(p) for p in v} for k, v in comps.items()}
                    t0 = time.monotonic()
                    time.sleep(idle_s)
                    wall = time.monotonic() - t0
                    after = {k: {p: _thread_cpu(p) for p in v} for k, v in comps.items()}
                    mem = [_rollup(p) for p in comps["actors"]]
                    bare_mem = [_rollup(p)["pss"] for p in comps.get("bare_ray_actors", [])]
                    del bare_handles
            finally:
                ray.shutdown()
    cpu_ms_s: dict[str, float] = {}
    threads: dict[str, dict[str, float]] = {"actors": defaultdict(float),
                                            "bare_ray_actors": defaultdict(float)}
    for comp, procs in after.items():
        total = 0.0
        for p, th in procs.items():
            for name, sec in th.items():
                d = sec - before[comp].get(p, {}).get(name, 0.0)
                total += d
                if comp in threads:
                    threads[comp][name] += d
        cpu_ms_s[comp] = round(total * 1000 / wall, 2)

    def by_thread(comp: str, per: int) -> dict[str, float]:
        return {k: round(v * 1000 / wall / max(1, per), 3)
                for k, v in sorted(threads[comp].items(), key=lambda kv: -kv[1]) if v > 0}

    pss = [m["pss"] for m in mem]
    uss = [m["uss"] for m in mem]
    workers = len(comps["actors"])
    worker_cpu = cpu_ms_s["actors"] / max(1, workers)
    bare_cpu = cpu_ms_s.get("bare_ray_actors", 0.0) / max(1, len(bare_mem))
    pss_median = statistics.median(pss) / 2**20
    bare_pss = statistics.median(bare_mem) / 2**20 if bare_mem else None
    result.update({
        "active_processes": actors,
        "actor_worker_processes": len(comps["actors"]),
        "idle_window_s": round(wall, 1),
        "idle_cpu_ms_per_s_per_active_process": round(
            cpu_ms_s["actors"] / max(1, actors), 3),
        "idle_cpu_ms_per_s_by_component": cpu_ms_s,
        "idle_cpu_ms_per_s_per_active_process_by_thread": by_thread("actors", actors),
        "idle_cpu_ms_per_s_per_actor_worker": round(worker_cpu, 3),
        "bare_ray_actors": len(bare_mem),
        "bare_ray_actor_idle_cpu_ms_per_s": round(bare_cpu, 3),
        "bare_ray_actor_idle_cpu_ms_per_s_by_thread": by_thread("bare_ray_actors",
                                                                len(bare_mem)),
        "bare_ray_actor_pss_mib_median": round(bare_pss, 1) if bare_pss is not None else None,
        "pss_mib_per_actor_worker_median": round(pss_median, 1),
        "pss_mib_per_actor_worker_mean": round(statistics.fmean(pss) / 2**20, 1),
        "uss_mib_per_actor_worker_median": round(statistics.median(uss) / 2**20, 1),
        # side by side, same window: what a process actor's worker costs above a
        # bare Ray actor's (the target: at most +10 MiB PSS and +10 % idle CPU)
        "vs_bare": None if bare_pss is None or bare_cpu <= 0 else {
            "pss_mib_above": round(pss_median - bare_pss, 1),
            "idle_cpu_per_worker_pct_above": round((worker_cpu / bare_cpu - 1) * 100, 1),
            "idle_cpu_per_active_process_pct_above": round(
                (cpu_ms_s["actors"] / max(1, actors) / bare_cpu - 1) * 100, 1)},
        "cold_activations": len(cold_ms),
        "cold_activation_ms_p50": round(_pct(cold_ms, 0.5), 1) if cold_ms else None,
        "cold_activation_ms_p90": round(_pct(cold_ms, 0.9), 1) if cold_ms else None,
        "cold_activation_ms_all": [round(x, 1) for x in cold_ms],
    })
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true",
                    help="2 actors, 2 s idle, 2 cold, 1 bare (CI smoke)")
    ap.add_argument("--actors", type=int, default=100)
    ap.add_argument("--idle-s", type=float, default=20.0)
    ap.add_argument("--cold", type=int, default=20)
    ap.add_argument("--bare", type=int, default=10,
                    help="bare Ray actors idling alongside (Ray's own per-worker floor)")
    ap.add_argument("--compile-bytecode", action="store_true",
                    help="compile svit_cluster's bytecode first, as a wheel install does "
                         "(else, with PYTHONDONTWRITEBYTECODE set, each worker compiles "
                         "the sources it imports)")
    args = ap.parse_args()
    # quick: the idle window is long enough for a bare actor's CPU to cross one
    # clock tick (10 ms), so vs_bare is computed
    actors, idle_s, cold, bare = ((2, 2.0, 2, 1) if args.quick
                                  else (args.actors, args.idle_s, args.cold, args.bare))
    started = time.perf_counter()
    # stdout carries the one JSON document: anything Ray prints while we run (its
    # raylet warnings reach the driver even with log_to_driver=False) goes to stderr.
    # (At the descriptor level too: child processes inherit descriptor 1.)
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            out = {"bench": "actor_cost", "quick": args.quick,
                   **run(actors, idle_s, cold, bare, args.compile_bytecode),
                   "elapsed_s": 0.0}
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
    out["elapsed_s"] = round(time.perf_counter() - started, 1)
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
