"""``svit-cluster demo``: the main job, end to end on a real local cluster.

1. Bring up a local cluster (etcd, Redis, Ray head, 3 hosts, gateway).
2. Create ``svit://local/example/planner`` with a ``plan`` script, bring it to
   version 7, and send exactly the request from the reference control-protocol
   document (``agent-a`` / ``turn-42``, expected version 7, goal "prepare
   release"): it commits version 8.
3. Create a counter; several clients race on expected versions and recompute on
   conflict. Midway, the host that owns the counter is SIGKILLed.
4. A live stale owner: freeze (SIGSTOP) the owner of a second process -- its
   process actor and the host agent that keeps its lease -- and send it a
   request, left in flight there. The lease runs out; a second request is
   placed on a new owner, which claims a higher fencing token and commits.
   Then the old actor is woken with its agent still frozen (as after a long GC
   pause, nothing local fences it out): it runs the request it holds and tries
   to commit. The refusal is read from the store's record of refused writes
   (``<prefix>:stale_writes``): by the Redis fence (its token is below the new
   owner's) or by its own lease guard. Then the rest of the owner resumes.
5. Print commits, conflicts, the stale owner's refused writes, the failover
   time (kill -> first commit on the new owner), whether the final counts equal
   the acknowledged commits, and whether the stored log chains verify.
6. Stop everything; return False if any check failed.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil
from rich.console import Console
from rich.table import Table

from svit_cluster.client import SvitClient, new_request_id
from svit_cluster.errors import SvitError
from svit_cluster.examples import REFERENCE_REQUEST
from svit_cluster.local import ClusterSpec, LocalCluster, cluster_status
from svit_cluster.store import DEFAULT_PREFIX, RedisBackend, connect, stale_writes_key

__all__ = ["run_demo"]

PLANNER = "svit://local/example/planner"
COUNTER_ID = "svit://local/example/counter"
STALE_ID = "svit://local/example/stale-owner"
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


def _owner(cluster: LocalCluster, process_id: str) -> tuple[str, int] | None:
    """``(host, fencing token)`` of the process's owner record in etcd, or None."""
    owner = cluster_status(cluster)["owners"].get(process_id)
    return None if owner is None else (str(owner["host"]), int(owner["token"]))


def _owner_host(cluster: LocalCluster, process_id: str) -> str | None:
    owner = _owner(cluster, process_id)
    return None if owner is None else owner[0]


def _metric(text: str, name: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and not line.startswith("#"):
            m = re.match(rf"{re.escape(name)}(\{{[^}}]*\}})?\s+([0-9.eE+-]+)", line)
            if m:
                total += float(m.group(2))
    return total


def _verify_log(cluster: LocalCluster, live_root_hash: str, process_id: str = COUNTER_ID
                ) -> tuple[bool, str]:
    """Restore a process from Redis (snapshot + tail, chain verified) and compare hashes."""
    client = connect(cluster.doc["redis"]["url"])
    try:
        reader = RedisBackend(client, process_id, token=1)
        proc = reader.restore()
        if proc is None:
            return False, f"{process_id} missing from the store"
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


@dataclass
class _StaleResult:
    process_id: str = STALE_ID
    #: why the scene proved nothing (the frozen actor no longer owned the
    #: process when the request reached it); empty when it was staged as meant
    void: str = ""
    #: the void reasons of the attempts staged before this one
    voided: list[str] = field(default_factory=list)
    old_host: str | None = None
    new_host: str | None = None
    old_token: int | None = None
    new_token: int | None = None
    paused_s: float | None = None
    #: seconds from the freeze to the new owner's commit of the +1
    takeover_s: float | None = None
    #: the in-flight request's fate: "committed" (the gateway re-sent it to the
    #: new owner when the frozen owner's record went) or an error code
    inflight: str = ""
    inflight_token: int | None = None
    refusals: list[dict[str, str]] = field(default_factory=list)
    count: Any = None
    version: int | None = None
    log_ok: bool = False
    log_detail: str = ""
    error: str = ""

    @property
    def counted_once(self) -> bool:
        """The +100 counts once if the new owner committed it, never if not."""
        if self.inflight == "committed":
            return self.count == 102 and self.version == 3
        return self.count == 2 and self.version == 2

    @property
    def count_detail(self) -> str:
        if self.inflight == "committed":
            return (f"count {self.count} at version {self.version} (expected 102 at 3: 1, "
                    "then the +100 re-sent to the new owner, then +1; the old owner's "
                    "own commit of it refused)")
        return (f"count {self.count} at version {self.version} (expected 2 at 2: the +100 "
                f"was left with the frozen owner ({self.inflight or 'no answer'}) and "
                "refused when it woke)")

    def inflight_line(self) -> str:
        if self.inflight == "committed":
            return (f"the request in flight to it was re-sent by the gateway and committed "
                    f"once by the new owner (token {self.inflight_token})")
        return "the request in flight to it was never applied"

    @property
    def by_fence(self) -> int:
        return sum(1 for r in self.refusals if r.get("by") == "fence")

    @property
    def by_self(self) -> int:
        return sum(1 for r in self.refusals if r.get("by") == "self")


def _owner_processes(cluster: LocalCluster, host: str) -> dict[str, list[int]]:
    """PIDs of ``host``'s Svit processes: ``agent`` (HostAgent) and ``actors`` (ProcessActor).

    The Ray raylet and the node's other daemons are not included.
    """
    found: dict[str, list[int]] = {"agent": [], "actors": []}
    for pid in cluster.node(host).pids():
        try:
            title = " ".join(psutil.Process(pid).cmdline())
        except psutil.Error:
            continue
        if "ray::HostAgent" in title:
            found["agent"].append(pid)
        elif "ray::ProcessActor" in title:
            found["actors"].append(pid)
    return found


def _signal(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def _socket_backlog(pids: list[int]) -> int:
    """Bytes received but not yet read by ``pids``' TCP sockets (Linux ``/proc``):
    grows when a request reaches a stopped process."""
    inodes: set[str] = set()
    for pid in pids:
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    link = os.readlink(f"/proc/{pid}/fd/{fd}")
                    if link.startswith("socket:["):
                        inodes.add(link[8:-1])
    total = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if len(fields) > 9 and fields[9] in inodes:
                    total += int(fields[4].split(":")[1], 16)
    return total


class _Inflight(threading.Thread):
    """The stale-owner scene's +100, sent once (one attempt, no retry) from a
    thread; ``outcome`` is ``(status, owner token)`` or the ``SvitError``."""

    def __init__(self, url: str, token: str, process_id: str) -> None:
        super().__init__(daemon=True)
        self._url, self._token, self._process_id = url, token, process_id
        self.outcome: tuple[str, int | None] | SvitError = SvitError("not sent")

    def run(self) -> None:
        try:
            with SvitClient(self._url, self._token, client_id="demo-stale-inflight",
                            attempts=1, timeout_s=15.0) as c:
                sent = c.activate(self._process_id, "counter", {"by": 100}, expected_version=1,
                                  request_id=new_request_id())
                self.outcome = (sent.outcome.status, c.last_owner_token)
        except SvitError as exc:
            self.outcome = exc


#: times the stale-owner scene is staged before the demo reports it void
STALE_ATTEMPTS = 3


def _stale_owner(cluster: LocalCluster, url: str, token: str, console: Console,
                 *, wait_refusal_s: float = 30.0) -> _StaleResult:
    """The stale-owner scene (``_stale_scene``), staged again when void.

    The scene proves something only if the actor it freezes still owns the
    process when the request reaches it. On a busy machine the cluster can
    move the process first (a host whose keepalive starves loses its lease);
    the attempt then neither proves nor disproves the fence, so it is reported
    as void, everything is woken, and the scene is staged on a fresh process,
    at most ``STALE_ATTEMPTS`` times. If every attempt is void, ``error`` says
    why each was.
    """
    voided: list[str] = []
    for attempt in range(1, STALE_ATTEMPTS + 1):
        process_id = STALE_ID if attempt == 1 else f"{STALE_ID}-{attempt}"
        res = _stale_scene(cluster, url, token, console, process_id,
                           wait_refusal_s=wait_refusal_s)
        res.voided = voided
        if not res.void:
            return res
        voided.append(res.void)
        console.print(f"[yellow]stale-owner scene void[/] ({process_id}): {res.void}")
    res.error = (f"the stale-owner scene was void in all {STALE_ATTEMPTS} attempts: "
                 + "; ".join(voided))
    return res


def _stale_scene(cluster: LocalCluster, url: str, token: str, console: Console,
                 process_id: str, *, wait_refusal_s: float) -> _StaleResult:
    """Freeze the owner with a request in flight, let a new owner take over, wake the old.

    The owner's processes on its host are paused (SIGSTOP), as in a long GC
    pause: first its process actors, then, once a request (+100, one attempt)
    waits unread in the frozen actor's socket (at most 15 s), the host agent,
    whose lease keeper then revokes the host's lease at once. The Ray node
    itself keeps answering (pausing the whole node makes Ray declare it dead
    within ~2 s and kill its workers, so the old owner never wakes). When
    the owner record goes, the gateway abandons the call and sends
    the same request once to a new owner, which claims a higher fencing token
    and commits it (or the client gives up: then the request is left with the
    frozen owner alone). A second request (+1) commits on the new owner. Then
    only the old actor is woken, its agent still frozen so nothing local
    fences it out: it runs the request it holds and tries to commit -- and the
    fence refuses it, so the +100 counts once either way. Waits are
    event-driven: the requests' answers, then a blocking ``XREAD`` on the
    store's refusals stream (at most ``wait_refusal_s``).
    """

    res = _StaleResult(process_id=process_id)
    with SvitClient(url, token, client_id="demo-stale-setup") as c:
        c.create_process(process_id, memory={"count": 0}, scripts={"counter": COUNTER})
        c.activate(process_id, "counter", {"by": 1}, expected_version=0)
        res.old_token = c.last_owner_token
    res.old_host = _owner_host(cluster, process_id)
    if res.old_host is None or res.old_token is None:
        res.error = "no owner recorded for the stale-owner process"
        return res
    procs = _owner_processes(cluster, res.old_host)
    if not procs["agent"] or not procs["actors"]:
        res.error = f"owner processes not found on {res.old_host}: {procs}"
        return res
    rkey = stale_writes_key(DEFAULT_PREFIX)
    redis_client = connect(cluster.doc["redis"]["url"])
    frozen = procs["agent"] + procs["actors"]
    try:
        last: Any = redis_client.xrevrange(rkey, count=1)
        cursor = last[0][0] if last else "0-0"
        # The actor first: its host keeps the lease, so the request below is
        # routed to it and waits in its socket. Only then the agent, whose
        # keeper revokes the host's lease within a watch poll: had the agent
        # stopped first, the process could move before the request left, and
        # the new owner would answer it with nothing stale to refuse.
        _signal(procs["actors"], signal.SIGSTOP)
        paused_at = time.monotonic()
        backlog = _socket_backlog(procs["actors"])
        console.print(f"[yellow]froze the owner's actor on {res.old_host}[/] (SIGSTOP, token "
                      f"{res.old_token}); sending it a request")
        inflight = _Inflight(url, token, process_id)
        inflight.start()
        deadline = time.monotonic() + 15.0
        while (_socket_backlog(procs["actors"]) <= backlog and inflight.is_alive()
               and time.monotonic() < deadline):
            time.sleep(0.02)
        reached = _socket_backlog(procs["actors"]) > backlog
        owner = _owner(cluster, process_id)
        if not (reached and inflight.is_alive() and owner == (res.old_host, res.old_token)):
            res.void = (f"the request {'reached' if reached else 'never reached'} the frozen "
                        f"actor and was {'still waiting' if inflight.is_alive() else 'answered'}"
                        f"; the owner record then named {owner} (the frozen owner was "
                        f"{res.old_host}, token {res.old_token})")
            _signal(procs["actors"], signal.SIGCONT)
            inflight.join()
            return res
        _signal(procs["agent"], signal.SIGSTOP)
        console.print("[yellow]froze its host agent[/] once the request waited in the actor: "
                      "the host's lease is revoked and the process moves")
        inflight.join()
        if isinstance(inflight.outcome, SvitError):
            res.inflight = inflight.outcome.code
            console.print(f"in-flight request (+100): {res.inflight} (left with the frozen "
                          "owner)")
        else:
            res.inflight, res.inflight_token = inflight.outcome
            if res.inflight_token == res.old_token:
                res.error = "the frozen owner answered"
            console.print(f"in-flight request (+100): {res.inflight} by the new owner "
                          f"(token {res.inflight_token}): the gateway re-sent it when the "
                          "frozen owner's record went")
        try:
            with SvitClient(url, token, client_id="demo-stale-takeover", attempts=400,
                            max_wait_s=0.5, timeout_s=10.0) as c:
                resp = c.activate(process_id, "counter", {"by": 1},
                                  expected_version=2 if res.inflight == "committed" else 1,
                                  request_id=new_request_id())
                res.new_token = c.last_owner_token
            res.takeover_s = time.monotonic() - paused_at
            res.new_host = _owner_host(cluster, process_id)
            console.print(f"new owner of the frozen process: {res.new_host} (token "
                          f"{res.new_token}); its +1: {resp.outcome.status}")
            _signal(procs["actors"], signal.SIGCONT)
            console.print(f"[yellow]woke the old actor[/] on {res.old_host} (its host agent "
                          "still frozen)")
            deadline = time.monotonic() + wait_refusal_s
            while not res.refusals and time.monotonic() < deadline:
                block_ms = max(1, min(1000, int((deadline - time.monotonic()) * 1000)))
                got: Any = redis_client.xread({rkey: cursor}, block=block_ms)
                for _key, entries in got or []:
                    for entry_id, raw in entries:
                        cursor = entry_id
                        entry = {k.decode(): v.decode() for k, v in raw.items()}
                        if (entry.get("process_id") == process_id
                                and entry.get("token") == str(res.old_token)):
                            res.refusals.append(entry)
        finally:
            res.paused_s = time.monotonic() - paused_at
            _signal(frozen, signal.SIGCONT)
            console.print(f"[yellow]woke the old host agent[/] on {res.old_host} too (the "
                          f"owner was frozen {res.paused_s:.1f} s in all)")
    finally:
        _signal(frozen, signal.SIGCONT)  # whatever path left: nothing stays stopped
        redis_client.close()
    for r in res.refusals:
        how = (f"refused by the Redis fence (token {r.get('token')} < fence {r.get('fence')})"
               if r.get("by") == "fence" else
               f"refused by its own lease guard ({r.get('reason', '')})")
        console.print(f"[red]stale owner on {res.old_host}[/]: {r.get('op')} {how}")
    with SvitClient(url, token, client_id="demo-stale-check") as c:
        res.count, res.version = c.state(process_id, "/memory/count")
        snap = c.snapshot(process_id)["snapshot"]
    res.log_ok, res.log_detail = _verify_log(cluster, snap["root_hash"], process_id)
    return res


def run_demo(*, state_dir: Path | None, hosts: int = 3, clients: int = 4, ops: int = 60,
             lease_ttl_s: int = 3, json_summary: bool = False) -> bool:
    """Run the demo; returns True when every check passed. Always tears down.

    With ``json_summary`` the tables and progress go to stderr and one JSON
    document ``{ok, checks: [{name, ok, detail}], metrics: {...}}`` to stdout.
    """
    console = Console(stderr=json_summary, soft_wrap=True)  # no mid-line breaks when piped
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

        def racing_text() -> str:
            return f"{clients} clients racing on the counter: {tally.commits}/{total} commits"

        with console.status(racing_text()) as racing:
            while tally.commits < total // 3 and any(t.is_alive() for t in threads):
                racing.update(racing_text())
                time.sleep(0.05)
            victim = _owner_host(cluster, COUNTER_ID)
            kill_at = time.monotonic()
            if victim is not None:
                pids = cluster.kill_host(victim)
                # Measure from the moment every process of the host is dead: a request
                # sent earlier may still have been answered by the old owner, which
                # would make the failover look instantaneous.
                kill_at = time.monotonic()
                console.print(f"[red]killed host {victim}[/] ({len(pids)} processes) after "
                              f"{tally.commits} commits")
            for t in threads:
                joined_by = time.monotonic() + 300
                while t.is_alive() and time.monotonic() < joined_by:
                    t.join(timeout=0.2)
                    racing.update(racing_text())
        after = [done for sent, done in tally.commit_times if sent >= kill_at]
        failover_s = (min(after) - kill_at) if after else None
        new_owner = _owner_host(cluster, COUNTER_ID)

        # -- a live stale owner: pause, take over, resume ----------------------------------
        with console.status("stale owner: freeze the owner, wait for a new owner, wake "
                            "the old one, wait for the fence's refusal…"):
            stale = _stale_owner(cluster, url, token, console)

        # -- checks ----------------------------------------------------------------------
        with SvitClient(url, token, client_id="demo-check") as admin:
            count, version = admin.state(COUNTER_ID, "/memory/count")
            snap = admin.snapshot(COUNTER_ID)["snapshot"]
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
            ("live stale owner's commit refused", bool(stale.refusals) and not stale.error,
             stale.error or f"owner on {stale.old_host} (token {stale.old_token}) frozen "
             f"{stale.paused_s or 0:.1f} s, {stale.new_host} (token {stale.new_token}) took "
             f"over {stale.takeover_s or 0:.1f} s after the freeze; the in-flight +100: "
             f"{stale.inflight or 'no answer'} (token {stale.inflight_token}); the woken old "
             f"owner's writes refused: {stale.by_fence} by the Redis fence, {stale.by_self} "
             "by its own lease guard"
             + (f" (staged again after {len(stale.voided)} void attempt(s): "
                f"{'; '.join(stale.voided)})" if stale.voided else "")),
            ("stale owner's request applied at most once", stale.counted_once,
             stale.count_detail),
            ("stale-owner log chain verifies", stale.log_ok, stale.log_detail),
        ]
        table = Table(title="svit-cluster demo", caption=(
            "conflicts: a racing client's expected version was already taken, so it "
            "observed and recomputed (normal when clients race). fenced answers: requests "
            "the gateway answered 'fenced' (an owner lost its token). A stale owner's "
            "write is refused by the Redis fence (its token is below the process's "
            "fence) or, before it reaches Redis, by its own lease guard (its lease is "
            "known lost). unavailable answers: the gateway said retry; the SDK did, "
            "with the same request id."))
        table.add_column("metric")
        table.add_column("value", justify="right")
        table.add_row("commits (acknowledged)", str(tally.commits))
        table.add_row(f"conflicts ({clients} racing clients recomputed)", str(tally.conflicts))
        table.add_row("fenced answers (gateway to clients)", f"{fenced:.0f}")
        table.add_row("stale-owner writes refused by the fence", str(stale.by_fence))
        table.add_row("stale-owner writes refused by its lease guard", str(stale.by_self))
        table.add_row("unavailable answers (retried by the SDK)", f"{unavailable:.0f}")
        table.add_row("counter: killed owner host", str(victim))
        table.add_row("counter: new owner host", str(new_owner))
        table.add_row("failover (kill -> first commit)",
                      f"{failover_s:.2f} s" if failover_s is not None else "n/a")
        table.add_row("lease TTL", f"{lease_ttl_s} s")
        console.print(table)
        for name, ok, detail in checks:
            console.print(f"{'[green]PASS[/]' if ok else '[red]FAIL[/]'} {name}: {detail}")
        if all(ok for _, ok, _ in checks):
            mech = ("the Redis fence" if stale.by_fence else "its own lease guard")
            summary["proven"] = (
                f"Proven: a live stale owner (on {stale.old_host}, token {stale.old_token}) "
                f"woke after a {stale.paused_s or 0:.1f} s freeze and its commit was refused "
                f"by {mech} while {stale.new_host} (token {stale.new_token}) owned the "
                f"process; {stale.inflight_line()}; every acknowledged commit is in the log "
                f"exactly once and both log chains verify.")
            console.print(f"[bold green]{summary['proven']}[/]")
        else:
            failed = [name for name, ok, _ in checks if not ok]
            console.print(f"[bold red]Not proven[/]: {len(failed)} check(s) failed "
                          f"({'; '.join(failed)}). Run again with --state-dir DIR to keep "
                          "the cluster's logs (DIR/logs) for a look.")
        summary["metrics"] = {
            "commits": tally.commits, "conflicts": tally.conflicts,
            "fenced_rejections": int(fenced), "unavailable_answers": int(unavailable),
            "killed_host": victim, "new_owner": new_owner, "failover_s": failover_s,
            "lease_ttl_s": lease_ttl_s,
            "stale_owner": {"old_host": stale.old_host, "old_token": stale.old_token,
                            "new_host": stale.new_host, "new_token": stale.new_token,
                            "paused_s": stale.paused_s, "takeover_s": stale.takeover_s,
                            "inflight": stale.inflight,
                            "inflight_token": stale.inflight_token,
                            "refused_by_fence": stale.by_fence,
                            "refused_by_own_guard": stale.by_self,
                            "refusals": stale.refusals,
                            "process_id": stale.process_id, "voided": stale.voided}}
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

