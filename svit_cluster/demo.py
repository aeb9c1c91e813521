"""``svit-cluster demo``: the main job, end to end on a real local cluster.

1. Bring up a local cluster (etcd, Redis, Ray head, 3 hosts, gateway).
2. Create ``svit://local/example/planner`` with a ``plan`` script, bring it to
   version 7, and send exactly the request from the reference control-protocol
   document (``agent-a`` / ``turn-42``, expected version 7, goal "prepare
   release"): it commits version 8.
3. Create a counter; several clients race on expected versions and recompute on
   conflict. Midway, the host that owns the counter is SIGKILLed.
4. Print commits, conflicts, fenced rejections, the failover time (kill -> first
   commit on the new owner), whether the final count equals the acknowledged
   commits, and whether the stored log chain verifies.
5. Stop everything; return False if any check failed.
"""

from __future__ import annotations

import json
import re
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from svit_cluster.client import SvitClient, new_request_id
from svit_cluster.errors import SvitError
from svit_cluster.examples import REFERENCE_REQUEST
from svit_cluster.local import ClusterSpec, LocalCluster

__all__ = ["run_demo"]

PLANNER = "svit://local/example/planner"
COUNTER_ID = "svit://local/example/counter"
PLAN = """
(define (main input)
  (let ((plans (read "/memory/plans"))
        (goal (value-get input "/goal")))
    (do
      (write "/memory/plans" (concat plans (value-array goal)))
      (log-info! (format "planned {}" goal))
      (value-map "planned" goal "steps" (+ 1 (len plans))))))
"""
COUNTER = """
(define (main input)
  (let ((count (+ (read "/memory/count") (value-get input "/by"))))
    (do
      (write "/memory/count" count)
      (value-map "count" count))))
"""
@dataclass
class _Tally:
    lock: threading.Lock = field(default_factory=threading.Lock)
    commits: int = 0
    conflicts: int = 0
    rejected: int = 0
    errors: list[str] = field(default_factory=list)
    commit_times: list[tuple[float, float]] = field(default_factory=list)  # (sent, done)


def _client_loop(url: str, token: str, n: int, ops: int, tally: _Tally,
                 start: threading.Event) -> None:
    client = SvitClient(url, token, client_id=f"demo-client-{n}", attempts=80,
                        max_wait_s=0.5, timeout_s=8.0)
    start.wait()
    done = 0
    try:
        while done < ops:
            _, version = client.state(COUNTER_ID, "/memory/count")
            sent = time.monotonic()
            resp = client.activate(COUNTER_ID, "counter", {"by": 1},
                                   expected_version=version, request_id=new_request_id())
            status = resp.outcome.status
            with tally.lock:
                if status == "committed":
                    tally.commits += 1
                    tally.commit_times.append((sent, time.monotonic()))
                    done += 1
                elif status == "conflict":
                    tally.conflicts += 1
                elif resp.outcome.status == "rejected":
                    tally.rejected += 1
                    tally.errors.append(f"client {n}: rejected {resp.outcome.failure.code}")
                    return
    except SvitError as exc:
        with tally.lock:
            tally.errors.append(f"client {n}: {exc}")
    finally:
        client.close()


def _owner_host(cluster: LocalCluster, process_id: str) -> str | None:
    from svit_cluster.local._status import cluster_status

    owner = cluster_status(cluster)["owners"].get(process_id)
    return None if owner is None else str(owner["host"])


def _metric(text: str, name: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and not line.startswith("#"):
            m = re.match(rf"{re.escape(name)}(\{{[^}}]*\}})?\s+([0-9.eE+-]+)", line)
            if m:
                total += float(m.group(2))
    return total


def _verify_log(cluster: LocalCluster, live_root_hash: str) -> tuple[bool, str]:
    """Restore the counter from Redis (snapshot + tail, chain verified) and compare hashes."""
    from svit_cluster.store import RedisBackend, connect

    client = connect(cluster.doc["redis"]["url"])
    try:
        reader = RedisBackend(client, COUNTER_ID, token=1)
        proc = reader.restore()
        if proc is None:
            return False, "counter missing from the store"
        stats = reader.last_restore
        ok = proc.root_hash == live_root_hash
        tail = stats.tail_entries if stats else -1
        return ok, (f"restored version {proc.version} from snapshot "
                    f"{stats.snapshot_version if stats else '?'} + {tail} entries; "
                    f"root hash {'matches' if ok else 'DIFFERS from'} the live process")
    except SvitError as exc:
        return False, f"log does not verify: {exc}"
    finally:
        client.close()


def run_demo(*, state_dir: Path | None, hosts: int = 3, clients: int = 4, ops: int = 60,
             lease_ttl_s: int = 3, json_summary: bool = False) -> bool:
    """Run the demo; returns True when every check passed. Always tears down.

    With ``json_summary`` the tables and progress go to stderr and one JSON
    document ``{ok, checks: [{name, ok, detail}], metrics: {...}}`` to stdout.
    """
    console = Console(stderr=json_summary)
    summary: dict[str, Any] = {"ok": False, "checks": [], "metrics": {}}
    tmp = None
    if state_dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="svit-demo-")
        state_dir = Path(tmp.name)
    checks: list[tuple[str, bool, str]] = []
    cluster: LocalCluster | None = None
    try:
        with console.status("starting the local cluster…") as status:
            cluster = LocalCluster.up(
                ClusterSpec(state_dir=state_dir, hosts=hosts, lease_ttl_s=lease_ttl_s,
                            snapshot_every=25),
                progress=lambda m: status.update(m),
            )
        doc = cluster.doc
        url, token = doc["gateway"]["url"], doc["tokens"]["admin"]
        hosts_up = ", ".join(sorted(doc["hosts"]))
        console.print(f"[bold]cluster up[/]: gateway {url}, hosts {hosts_up}")

        # -- the reference request ----------------------------------------------------
        with SvitClient(url, token, client_id="demo-setup") as admin:
            admin.create_process(PLANNER, memory={"plans": []}, scripts={"plan": PLAN})
            for i in range(7):
                admin.activate(PLANNER, "plan", {"goal": f"warm-up step {i + 1}"},
                               expected_version=i)
            resp = admin.send_raw(REFERENCE_REQUEST.encode())
            ref_ok = (resp.outcome.status == "committed"
                      and resp.outcome.activation.version == 8)
            detail = (f"{resp.outcome.status}"
                      + (f" version {resp.outcome.activation.version}, output "
                         f"{json.dumps(resp.model_dump(mode='json')['outcome']['activation']['output'])}"
                         if resp.outcome.status == "committed" else ""))
            console.print(f"reference request (agent-a/turn-42, expected 7): {detail}")
            checks.append(("reference request commits version 8", ref_ok, detail))
            again = admin.send_raw(REFERENCE_REQUEST.encode())
            checks.append(("exact retry replays the receipt", again.replayed is True,
                           f"replayed={again.replayed}"))
            admin.create_process(COUNTER_ID, memory={"count": 0}, scripts={"counter": COUNTER})

        # -- racing clients and a host kill ---------------------------------------------
        tally = _Tally()
        start = threading.Event()
        threads = [threading.Thread(target=_client_loop, args=(url, token, n, ops, tally, start),
                                    daemon=True) for n in range(clients)]
        for t in threads:
            t.start()
        start.set()
        total = clients * ops
        while tally.commits < total // 3 and any(t.is_alive() for t in threads):
            time.sleep(0.05)
        victim = _owner_host(cluster, COUNTER_ID)
        kill_at = time.monotonic()
        if victim is not None:
            pids = cluster.kill_host(victim)
            console.print(f"[red]killed host {victim}[/] ({len(pids)} processes) after "
                          f"{tally.commits} commits")
        for t in threads:
            t.join(timeout=300)
        after = [done for sent, done in tally.commit_times if sent >= kill_at]
        failover_s = (min(after) - kill_at) if after else None
        new_owner = _owner_host(cluster, COUNTER_ID)

        # -- checks ----------------------------------------------------------------------
        with SvitClient(url, token, client_id="demo-check") as admin:
            count, version = admin.state(COUNTER_ID, "/memory/count")
            snap = admin.snapshot(COUNTER_ID)["snapshot"]
        import httpx

        metrics = httpx.get(url + "/metrics", timeout=5).text
        fenced = _metric(metrics, "svit_fenced_total")
        unavailable = _metric(metrics, "svit_unavailable_total")
        log_ok, log_detail = _verify_log(cluster, snap["root_hash"])
        checks += [
            ("all clients finished", not tally.errors and tally.commits == total,
             "; ".join(tally.errors[:3]) or f"{tally.commits}/{total} commits"),
            ("final count == acknowledged commits", count == tally.commits,
             f"count {count}, acknowledged {tally.commits}, version {version}"),
            ("one version per commit", version == tally.commits,
             f"version {version}"),
            ("owner moved off the killed host", victim is not None and new_owner != victim,
             f"{victim} -> {new_owner}"),
            ("log chain verifies", log_ok, log_detail),
        ]
        table = Table(title="svit-cluster demo")
        table.add_column("metric")
        table.add_column("value", justify="right")
        table.add_row("commits (acknowledged)", str(tally.commits))
        table.add_row("conflicts (recomputed)", str(tally.conflicts))
        table.add_row("fenced rejections", f"{fenced:.0f}")
        table.add_row("unavailable answers (retried)", f"{unavailable:.0f}")
        table.add_row("killed host", str(victim))
        table.add_row("new owner", str(new_owner))
        table.add_row("failover (kill -> first commit)",
                      f"{failover_s:.2f} s" if failover_s is not None else "n/a")
        table.add_row("lease TTL", f"{lease_ttl_s} s")
        console.print(table)
        for name, ok, detail in checks:
            console.print(f"{'[green]PASS[/]' if ok else '[red]FAIL[/]'} {name}: {detail}")
        summary["metrics"] = {
            "commits": tally.commits, "conflicts": tally.conflicts,
            "fenced_rejections": int(fenced), "unavailable_answers": int(unavailable),
            "killed_host": victim, "new_owner": new_owner, "failover_s": failover_s,
            "lease_ttl_s": lease_ttl_s}
        summary["ok"] = all(ok for _, ok, _ in checks)
        return bool(summary["ok"])
    except SvitError as exc:
        console.print(f"[red]demo failed[/]: {exc}")
        summary["error"] = str(exc)
        return False
    finally:
        summary["checks"] = [{"name": n, "ok": ok, "detail": d} for n, ok, d in checks]
        if json_summary:
            print(json.dumps(summary, indent=2, sort_keys=True, default=str), flush=True)
        if cluster is not None:
            with console.status("stopping the cluster…"):
                cluster.down()
        if tmp is not None:
            tmp.cleanup()

