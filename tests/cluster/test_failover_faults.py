"""Failover bounds per fault kind, on the session's real
local cluster (3 hosts, lease TTL 3 s; tests/cluster/conftest.py).

Failover is measured the way a client sees it: from the fault (owner loss) to
the first request answered by an owner on ANOTHER host (committed, or refused
with a version conflict: either way a commit was possible there). Each fault
hits a host that owns :data:`PER_FAULT` processes, probed in parallel (a fresh
single-attempt request every 0.2 s each), so p100 is over several samples.
After each fault the host is restored (``LocalCluster.restart_host``).

Bounded, p100 <= TTL + 1.5 s:

* host kill: SIGKILL of the raylet and every worker of the host (Ray declares
  the node dead within ~1.5 s; the gateway's node watch revokes the lease);
* SIGTERM of every process of the host (the raylet shuts down, Ray declares
  the node dead at once; same revoke);
* host pause: SIGSTOP of every process of the host, held past TTL + 1.5 s
  (nothing on the host runs: Ray's verdict, ~1.5 s, then the gateway's revoke,
  or the lease's own expiry, whichever comes first). The gateway abandons a
  call in flight to the paused owner the moment its record goes and resends
  a control request to the new owner once, and places the moved processes
  over the survivors' warm spares (activations under way count as load);
* raylet-only stop: SIGSTOP of the raylet, its workers (agent, process actors)
  untouched -- the agent's health check (every 0.2 s) sees the raylet stopped
  and revokes its own lease; new processes created during the stop must not
  be placed on the half-dead host;
* agent-only kill: SIGKILL of the HostAgent worker (raylet and process actors
  stay) -- the gateway's watch finds the agent actor gone from Ray's GCS and
  revokes its host's lease.

Before each fault the test waits until every host has its warm spare actors
(``warm_spares``, 2): the bound assumes warm survivors; past its spares a host
first starts a Ray worker per activation (seconds on this 2-core machine).

Measured (printed), with a documented bound:

* a host cut off from etcd (its etcd proxy DROPs): nobody else can tell a
  host cut off from etcd from a slow one (Ray still lists it alive, its agent
  answers calls), so the host itself decides: its lease goes LOST by its own
  clock at the local deadline (send time of the last keepalive that got
  through + TTL - safety margin: 1.7-2.25 s after the cut at TTL 3, margin
  0.75 s, keepalive interval 0.56 s); it stops serving and gets the lease
  revoked at once by a peer agent that reaches etcd (``AgentLease.revoke_lost``)
  instead of waiting for etcd's expiry (up to a TTL after the last keepalive,
  plus etcd's expiry scan). Then the gateway's etcd watch sees the records go
  and places the processes elsewhere. Floor: about TTL - margin + one claim
  (~2.5 s here). It cannot be lower without giving up the lease before its
  deadline, i.e. at the first failed keepalive -- which would turn every etcd
  hiccup (a member's loss, a 1-2 s leader election) into a
  failover. Bound TTL + 1.5 s.
* an etcd restart while a host is dead (kill at t = 0, etcd SIGKILLed at
  0.8 TTL and started again): etcd renews every lease to a full TTL when it
  restarts; the dead host's lease is normally revoked by the gateway once Ray
  declares its node dead (~1.5 s, before the restart), but nobody can claim
  anything while etcd is down, and the SURVIVORS' leases also miss keepalives
  during the outage: with TTL 3 s an outage of ~1.5-2 s passes their local
  deadline (TTL - safety margin), so they drop their actors and rejoin with a
  new lease before they can take the processes over. Hence the bound: the
  moment etcd answers again + 2 TTL + 1.5 s (one TTL for a lease renewed by
  the restart, one for the survivors' rejoin). A longer TTL lets survivors
  ride out the outage; a 3-member etcd (no full outage) avoids it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import signal
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import psutil
import pytest
from svit_chaos.proxy import Link, LinkMode

from svit_cluster.client import SvitClient
from svit_cluster.errors import SvitError
from svit_cluster.local import LocalCluster
from svit_cluster.local._status import _etcd_view

pytestmark = pytest.mark.cluster

#: Processes owned by the victim host per fault (p100 is over these samples).
PER_FAULT = 3
#: Margin over the lease TTL that failover must stay within, in seconds.
MARGIN_S = 1.5

COUNTER = """(define (main input)
  (let ((count (+ (read "/memory/count") (value-get input "/by"))))
    (do (write "/memory/count" count) (value-map "count" count))))"""


def new_counter(client: SvitClient) -> str:
    pid = f"svit://local/f-{uuid.uuid4().hex[:10]}"
    client.create_process(pid, memory={"count": 0}, scripts={"counter": COUNTER})
    return pid


def etcd_view(cluster: LocalCluster) -> dict:
    """``{"hosts": {host: registration}, "owners": {pid: record}}`` read from etcd now."""
    return asyncio.run(_etcd_view(cluster.doc["etcd"]["endpoint"], cluster.doc["cluster"]))


def owner_host(cluster: LocalCluster, pid: str) -> str | None:
    """The host of ``pid``'s ownership record in etcd (None: not owned, or etcd down)."""
    try:
        record = etcd_view(cluster)["owners"].get(pid)
    except Exception:
        return None
    return None if record is None else str(record["host"])


def first_answer_after(url: str, token: str, pid: str, version: int, start: float,
                       *, limit_s: float,
                       accept: Callable[[], bool] = lambda: True,
                       failures: list[tuple[float, str, str]] | None = None) -> float | None:
    """Seconds from ``start`` to the first request an owner answered and ``accept()``
    held right after (e.g. "the owner is on another host"), or None past ``limit_s``."""
    answered: list[float] = []
    stop = threading.Event()

    def probe() -> None:
        with SvitClient(url, token, attempts=1, timeout_s=limit_s) as c:
            try:
                c.activate(pid, "counter", {"by": 1}, expected_version=version)
            except SvitError as exc:
                if exc.code != "conflict":
                    if failures is not None:
                        failures.append((time.monotonic() - start, exc.code, exc.message[:70]))
                    return
            except Exception as exc:  # a client timeout
                if failures is not None:
                    failures.append((time.monotonic() - start, type(exc).__name__, ""))
                return
            at = time.monotonic() - start
            if accept():
                answered.append(at)
                stop.set()
            elif failures is not None:
                failures.append((at, "answered", "but not (yet) by another owner"))

    threads = []
    while not stop.is_set() and time.monotonic() - start < limit_s:
        t = threading.Thread(target=probe, daemon=True)
        t.start()
        threads.append(t)
        stop.wait(0.2)
    for t in threads:
        t.join(timeout=limit_s)
    return min(answered) if answered else None


def create_and_commit(url: str, token: str, *, limit_s: float) -> float | None:
    """Create a counter and commit once; seconds taken, or None past ``limit_s``."""
    pid = f"svit://local/f-{uuid.uuid4().hex[:10]}"
    start = time.monotonic()
    created = False
    while (left := limit_s - (time.monotonic() - start)) > 0:
        with SvitClient(url, token, attempts=1, timeout_s=left) as c:
            try:
                if not created:
                    c.create_process(pid, memory={"count": 0}, scripts={"counter": COUNTER})
                    created = True
                c.activate(pid, "counter", {"by": 1}, expected_version=0)
                return time.monotonic() - start
            except SvitError as exc:
                if exc.code == "conflict":  # created by an attempt whose answer was lost
                    created = True
                    if "version" in exc.message:
                        return time.monotonic() - start
            except Exception:  # a client timeout: the limit is reached
                pass
        time.sleep(0.1)
    return None


def _commit_all(url: str, token: str, versions: dict[str, int], pids: list[str]) -> None:
    """Create (if new) and commit once each of ``pids`` in parallel (``versions``
    updated). A process whose create or commit failed (an overloaded machine:
    the SDK's retries ran out) is left out of ``versions``."""
    def one(pid: str) -> None:
        with SvitClient(url, token, attempts=10, max_wait_s=0.5, timeout_s=20) as c:
            try:
                if pid not in versions:
                    c.create_process(pid, memory={"count": 0}, scripts={"counter": COUNTER})
                    versions[pid] = 0
                out = c.activate(pid, "counter", {"by": 1}, expected_version=versions[pid])
                assert out.outcome.status == "committed", out
                versions[pid] += 1
            except SvitError as exc:
                print(f"  (setup: {pid} left out: {exc.code}: {exc.message[:80]})")
                versions.pop(pid, None)

    if not pids:
        return
    with concurrent.futures.ThreadPoolExecutor(len(pids)) as pool:
        list(pool.map(one, pids))


def processes_on_one_host(cluster: LocalCluster, url: str, token: str,
                          count: int = PER_FAULT) -> tuple[str, dict[str, int]]:
    """Create counters (in parallel) until one host owns ``count`` of them at once;
    returns that host and ``{process: version}`` for those processes, each
    committed again right before returning (so none is idle long enough to
    passivate, 4 s here, before the fault) and still owned by that host."""
    versions: dict[str, int] = {}
    # Up to 8 rounds: right after a host was restored (the previous test) its
    # activations start cold Ray workers; a commit may fail on a busy machine.
    for _ in range(8):
        fresh = [f"svit://local/f-{uuid.uuid4().hex[:10]}" for _ in range(3 * count)]
        _commit_all(url, token, versions, fresh)
        # Commit every one again at once: a round of creates can outlast the 4 s
        # idle limit (cold workers after a restore), so the first of it had
        # passivated by the count below and no host held ``count`` (ci6b, ci7d).
        # Right after this, all of ``versions`` are live: 3 * count processes on
        # 3 hosts, so one host owns at least ``count`` unless a commit failed.
        _commit_all(url, token, versions, list(versions))
        by_host: dict[str, list[str]] = {}
        # Every live one counts, not only this round's: placement spreads a batch
        # over the hosts (activations under way count as load), so one round
        # alone gives each host about ``count``, fewer when a setup commit fails
        # on a busy machine. (Those that passivated meanwhile have no record.)
        for p, record in etcd_view(cluster)["owners"].items():
            if p in versions:
                by_host.setdefault(str(record["host"]), []).append(p)
        if not by_host:
            continue
        host, pids = max(by_host.items(), key=lambda kv: len(kv[1]))
        if len(pids) < count:
            continue
        chosen = pids[:count]
        _commit_all(url, token, versions, chosen)
        owners = etcd_view(cluster)["owners"]
        if all(p in versions and owners.get(p, {}).get("host") == host for p in chosen):
            return host, {p: versions[p] for p in chosen}
    raise AssertionError(f"no host came to own {count} live processes at once")


def wait_warm(cluster: LocalCluster, url: str, token: str, pids: dict[str, int],
              *, spares: int = 2, timeout_s: float = 40.0,
              hosts: list[str] | None = None) -> float:
    """Wait (bounded) until every host's agent (or those of ``hosts``) has
    ``spares`` warm process actors (the setup above used some up), committing
    on ``pids`` every round so none passivates meanwhile; returns the seconds
    waited. The bound under test assumes warm survivors: beyond its spares, an
    activation first starts a Ray worker (seconds on a busy machine); that is
    capacity, not failover."""
    import ray

    from svit_cluster.cluster import agent_name

    connect_ray(cluster)
    namespace = f"svit-{cluster.doc['cluster']}"
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        counts = []
        for host in sorted(hosts or cluster.doc["hosts"]):
            try:
                agent = ray.get_actor(agent_name(host), namespace=namespace)
                counts.append(int(ray.get(agent.status.remote(), timeout=10)["spares"]))
            except Exception:
                counts.append(0)
        _commit_all(url, token, pids, list(pids))
        if min(counts) >= spares:
            break
        time.sleep(0.5)
    return time.monotonic() - started


def agent_status(cluster: LocalCluster, host: str) -> dict[str, Any]:
    """``host``'s agent's ``status()``."""
    import ray

    from svit_cluster.cluster import agent_name

    connect_ray(cluster)
    agent = ray.get_actor(agent_name(host), namespace=f"svit-{cluster.doc['cluster']}")
    return dict(ray.get(agent.status.remote(), timeout=10))


def measure_failover(cluster: LocalCluster, url: str, token: str, victim: str,
                     pids: dict[str, int], start: float, *, limit_s: float
                     ) -> list[float | None]:
    """Per process: seconds from ``start`` to the first answer by an owner on a host
    other than ``victim`` (None: none within ``limit_s``). Also prints, per
    process, when its record under ``victim`` went and when a new owner's
    record appeared (etcd polled every 0.1 s): detection vs. activation."""
    done = threading.Event()
    gone: dict[str, float] = {}
    moved: dict[str, float] = {}
    failures: dict[str, list[tuple[float, str, str]]] = {}

    def watch() -> None:
        while not done.is_set() and time.monotonic() - start < limit_s:
            try:
                owners = etcd_view(cluster)["owners"]
            except Exception:
                time.sleep(0.1)
                continue
            now = time.monotonic() - start
            for pid in pids:
                host = owners.get(pid, {}).get("host")
                if host != victim:
                    gone.setdefault(pid, now)
                if host not in (None, victim):
                    moved.setdefault(pid, now)
            time.sleep(0.1)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        with concurrent.futures.ThreadPoolExecutor(len(pids)) as pool:
            futures = [pool.submit(
                first_answer_after, url, token, pid, version, start, limit_s=limit_s,
                accept=lambda pid=pid: owner_host(cluster, pid) not in (None, victim),
                failures=failures.setdefault(pid, []))
                for pid, version in pids.items()]
            took = [f.result() for f in futures]
    finally:
        done.set()
        watcher.join(5)
    for pid in pids:
        g, m = gone.get(pid), moved.get(pid)
        print(f"  {pid}: record under {victim} gone at "
              f"{None if g is None else round(g, 2)} s, new owner's record at "
              f"{None if m is None else round(m, 2)} s")
        last = sorted(failures.get(pid, []))[-3:]
        if last:
            print("    last failed probes: " + "; ".join(
                f"{t:.2f} s {code} {msg}" for t, code, msg in last))
    return took


def report(kind: str, victim: str, ttl: float, took: list[float | None]) -> str:
    shown = [None if t is None else round(t, 2) for t in took]
    done = [t for t in took if t is not None]
    p100 = max(done) if len(done) == len(took) else None
    line = (f"FAILOVER {kind}: victim {victim}, TTL {ttl} s, per process {shown} s, "
            f"p100 {None if p100 is None else round(p100, 2)} s "
            f"(bound TTL + {MARGIN_S} = {ttl + MARGIN_S} s)")
    print(line)
    return line


def node_procs(cluster: LocalCluster, host: str) -> list[psutil.Process]:
    out = []
    for pid in cluster.node(host).pids():
        try:
            out.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            continue
    return out


def agent_pids(cluster: LocalCluster, host: str) -> list[int]:
    """The worker process running ``host``'s HostAgent actor (``ray::HostAgent...``)."""
    pids = []
    for proc in node_procs(cluster, host):
        try:
            if " ".join(proc.cmdline()).startswith("ray::HostAgent"):
                pids.append(proc.pid)
        except psutil.Error:
            continue
    return pids


def signal_pids(pids: list[int], sig: int) -> list[int]:
    done = []
    for pid in pids:
        try:
            os.kill(pid, sig)
            done.append(pid)
        except ProcessLookupError:
            continue
    return done


def _kill(cluster: LocalCluster, host: str) -> list[int]:
    return cluster.kill_host(host)


def _term(cluster: LocalCluster, host: str) -> list[int]:
    return signal_pids(cluster.node(host).pids(), signal.SIGTERM)


def _pause(cluster: LocalCluster, host: str) -> list[int]:
    return cluster.pause_host(host)


def _stop_raylet(cluster: LocalCluster, host: str) -> list[int]:
    raylet = cluster.node(host).raylet_pid()
    assert raylet is not None
    return signal_pids([raylet], signal.SIGSTOP)  # the agent and actors keep running


def _kill_agent(cluster: LocalCluster, host: str) -> list[int]:
    pids = agent_pids(cluster, host)
    assert pids, f"no HostAgent worker found on {host}"
    return signal_pids(pids, signal.SIGKILL)


FAULTS: dict[str, Callable[[LocalCluster, str], list[int]]] = {
    "host-kill": _kill,
    "sigterm": _term,
    "host-pause": _pause,
    "raylet-stop": _stop_raylet,
    "agent-kill": _kill_agent,
}


def restore(cluster: LocalCluster, host: str) -> None:
    """Bring ``host`` back (SIGCONT whatever was stopped, then a fresh node and agent)."""
    signal_pids(cluster.node(host).pids(), signal.SIGCONT)
    cluster.restart_host(host)
    assert cluster.wait_healthy(timeout_s=90)["hosts_live"] == 3


# A paused host is detected by Ray's verdict (~1.5 s, then the gateway's revoke)
# or its lease's expiry. It missed the bound in early runs (p100 4.08-10.65 s at
# TTL 3; 28.25 s at load ~26, when the new owner's host lost its own lease);
# since calls in flight are abandoned and resent when the record goes and
# placement spreads the moved processes over warm spares it passed four runs in
# a row (p100 3.33, 3.41, 4.02 and, on 2026-12-01, 3.11 s), so it runs by default.
@pytest.mark.parametrize("kind", list(FAULTS))
def test_failover_within_ttl_plus_1_5_s(
    cluster: LocalCluster, gateway: tuple[str, str], kind: str
) -> None:
    url, token = gateway
    ttl = cluster.spec.lease_ttl_s
    victim, pids = processes_on_one_host(cluster, url, token)
    wait_warm(cluster, url, token, pids)
    start = time.monotonic()
    FAULTS[kind](cluster, victim)
    try:
        took = measure_failover(cluster, url, token, victim, pids, start,
                                limit_s=max(30.0, 4 * ttl))
        line = report(kind, victim, ttl, took)
        assert all(t is not None for t in took), line
        assert max(t for t in took if t is not None) <= ttl + MARGIN_S, line
        if kind == "raylet-stop":
            # New processes placed while the raylet is stopped: placement must not
            # pick the half-dead host (its agent still answers, but nothing can
            # start there), so each is created and commits within TTL + 1.5 s.
            # The failover above used the survivors' warm spares: wait until
            # they are back, so what is timed is placement, not a cold Ray
            # worker start (a CI run under load: the second new process needed
            # one and missed the bound).
            survivors = [h for h in cluster.doc["hosts"] if h != victim]
            waited = wait_warm(cluster, url, token, {}, hosts=survivors)
            print(f"  survivors warm again after {waited:.2f} s")
            for n in range(3):
                t = create_and_commit(url, token, limit_s=ttl + MARGIN_S)
                print(f"  new process {n} during the raylet stop: committed after "
                      f"{t if t is None else round(t, 2)} s")
                assert t is not None, f"new process {n} not committed within TTL + 1.5 s"
    finally:
        restore(cluster, victim)


def test_a_host_holding_more_processes_than_the_survivors_floor_fails_over_warm(
    cluster: LocalCluster, gateway: tuple[str, str]
) -> None:
    """A paused host owning 6 processes, twice what the two survivors' floor of
    2 spares each takes: each survivor keeps 3 spares for it (its share of the
    busiest peer's processes, cluster._headroom), so all 6 bind warm and every
    one is answered by a new owner within TTL + 1.5 s."""
    url, token = gateway
    ttl = cluster.spec.lease_ttl_s
    # The setup must end with all 6 on the victim: on a busy machine one of them
    # can passivate while the survivors warm up (a commit that outlasts the idle
    # limit) and come back on a survivor, where it answers at once after the
    # pause and takes a spare the others need. Such a setup is redone.
    for _ in range(3):
        victim, pids = processes_on_one_host(cluster, url, token, count=6)
        survivors = [h for h in cluster.doc["hosts"] if h != victim]
        waited = wait_warm(cluster, url, token, pids, spares=3, hosts=survivors)
        # the target each survivor states (the count itself may be higher:
        # workers of processes passivated during the setup linger as surplus)
        deadline = time.monotonic() + 10
        while True:
            targets = {h: etcd_view(cluster)["hosts"].get(h, {}).get("spares")
                       for h in survivors}
            if all(isinstance(n, int) and n >= 3 for n in targets.values()) \
                    or time.monotonic() > deadline:
                break
            _commit_all(url, token, pids, list(pids))
            time.sleep(0.5)
        spares = {h: agent_status(cluster, h)["spares"] for h in survivors}
        print(f"  survivors' spare targets {targets}, spares {spares} after {waited:.2f} s")
        assert all(isinstance(n, int) and n >= 3 for n in targets.values()), targets
        assert min(spares.values()) >= 3, spares
        _commit_all(url, token, pids, list(pids))
        owners = etcd_view(cluster)["owners"]
        elsewhere = sorted(p for p in pids if owners.get(p, {}).get("host") != victim)
        if len(pids) == 6 and not elsewhere:
            break
        print(f"  setup redone: {elsewhere} no longer on {victim} ({len(pids)} left)")
    else:
        raise AssertionError("three setups in a row lost a process from the victim host")
    start = time.monotonic()
    _pause(cluster, victim)
    try:
        took = measure_failover(cluster, url, token, victim, pids, start,
                                limit_s=max(30.0, 4 * ttl))
        line = report("host-pause, 6 processes", victim, ttl, took)
        assert all(t is not None for t in took), line
        assert max(t for t in took if t is not None) <= ttl + MARGIN_S, line
    finally:
        restore(cluster, victim)


# 4.77 s at TTL 3 in the best run before the peer revoke (bound 4.5 s), when only
# etcd's expiry ended a cut-off host's lease. Now the host's own LOST (TTL - margin
# after its last keepalive, 1.7-2.25 s) triggers a revoke by a peer agent, so the
# floor is about 2.5 s (see the module docstring). Since: four runs in a row
# within the bound (p100 2.97, 3.33, 3.59 and, on 2026-12-01, 3.23 s).
def test_failover_of_a_host_cut_off_from_etcd(
    cluster: LocalCluster, gateway: tuple[str, str], etcd_links: dict[str, Link]
) -> None:
    """Measured; bound TTL + 1.5 s (see the module docstring for why not lower)."""
    url, token = gateway
    ttl = cluster.spec.lease_ttl_s
    victim, pids = processes_on_one_host(cluster, url, token)
    wait_warm(cluster, url, token, pids)
    start = time.monotonic()
    etcd_links[victim].set_mode(LinkMode.DROP)
    try:
        took = measure_failover(cluster, url, token, victim, pids, start,
                                limit_s=max(30.0, 4 * ttl))
        line = report("cut-etcd", victim, ttl, took)
        assert all(t is not None for t in took), line
        assert max(t for t in took if t is not None) <= ttl + MARGIN_S, line
    finally:
        etcd_links[victim].set_mode(LinkMode.PASS)
        restore(cluster, victim)


def test_failover_with_an_etcd_restart_while_the_host_is_dead(
    cluster: LocalCluster, gateway: tuple[str, str]
) -> None:
    """Measured; bound 2 TTL + 1.5 s (see the module docstring for why not lower)."""
    url, token = gateway
    ttl = cluster.spec.lease_ttl_s
    etcd = cluster.etcd
    assert etcd is not None, "the session cluster runs its own etcd"
    victim, pids = processes_on_one_host(cluster, url, token)
    wait_warm(cluster, url, token, pids)
    start = time.monotonic()
    cluster.kill_host(victim)
    try:
        time.sleep(max(0.0, start + 0.8 * ttl - time.monotonic()))
        restarted_at = time.monotonic() - start
        etcd.kill9()
        etcd.start()
        cluster.doc["etcd"]["pid"] = etcd.pid  # so `down` signals the live PID
        cluster.save()
        back_at = time.monotonic() - start
        took = measure_failover(cluster, url, token, victim, pids, start,
                                limit_s=max(30.0, 6 * ttl))
        line = report("etcd-restart-dead-host", victim, ttl, took)
        print(f"  etcd SIGKILLed at {restarted_at:.2f} s, answering again at {back_at:.2f} s")
        assert all(t is not None for t in took), line
        assert max(t for t in took if t is not None) <= back_at + 2 * ttl + MARGIN_S, line
    finally:
        restore(cluster, victim)


def connect_ray(cluster: LocalCluster) -> None:
    """Connect this test process to ``cluster``'s Ray, leaving any other Ray
    connection first: ``ray.init(..., ignore_reinit_error=True)`` keeps an
    existing one silently, and every ``ray.nodes()`` would then read the
    other cluster's node table."""
    import ray

    address = cluster.doc["ray"]["address"]
    if ray.is_initialized():
        # Ray reports the GCS at the node's own IP; the port names the cluster.
        gcs = str(ray.get_runtime_context().gcs_address)
        if gcs.rpartition(":")[2] == address.rpartition(":")[2]:
            return
        ray.shutdown()
    ray.init(address=address, namespace="svit-test-probe",
             logging_level="ERROR", log_to_driver=False)


def node_entry(node_id: str) -> dict[str, Any] | None:
    """Ray's node-table entry of ``node_id`` (Alive, NodeManagerAddress, ...), or None."""
    import ray

    for node in ray.nodes():
        if node.get("NodeID") == node_id:
            return {k: node.get(k) for k in ("Alive", "NodeManagerAddress",
                                             "NodeManagerPort", "DeathReason",
                                             "DeathReasonMessage")}
    return None


def wait_ray_dead(cluster: LocalCluster, node_id: str, *, timeout_s: float) -> float | None:
    """Monotonic time at which Ray's node table first lists ``node_id`` dead."""
    import ray

    connect_ray(cluster)
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        for node in ray.nodes():
            if node.get("NodeID") == node_id and not node["Alive"]:
                return time.monotonic()
        time.sleep(0.1)
    return None


# Ray's verdict on a SIGKILLed node comes ~1.1-1.5 s after the kill here (three
# failed health checks 0.5 s apart, the tuned settings of LocalCluster's Ray).
def test_ray_node_death_revokes_the_hosts_lease_at_once(
    cluster: LocalCluster, gateway: tuple[str, str]
) -> None:
    from svit_cluster.ownership import open_client

    ttl = cluster.spec.lease_ttl_s
    victim = sorted(cluster.doc["hosts"])[-1]
    registration = dict(etcd_view(cluster)["hosts"][victim])
    lease_id, node_id = registration["lease"], registration["node_id"]
    assert lease_id and node_id
    connect_ray(cluster)  # before the kill: ray.init takes seconds
    before = node_entry(node_id)
    assert before is not None and before.get("Alive") is True, (
        f"{victim}'s registered node {node_id} is not listed alive before the kill: {before}")
    # The suspect for the unexplained failures: an agent living on a Ray node left
    # over from an earlier incarnation of the host (same host resource), so the
    # kill below hits the current node and Ray never declares the registered one
    # dead. The node manager port tells the two apart (each start takes new ports).
    current = cluster.node(victim).node_manager_port
    assert before.get("NodeManagerPort") == current, (
        f"{victim}'s agent registered node {node_id} (node manager port "
        f"{before.get('NodeManagerPort')}), not the host's current Ray node (port "
        f"{current}): a node of an earlier incarnation is still alive: {before}")
    raylet = cluster.node(victim).raylet_pid()
    killed_at = time.monotonic()
    killed = cluster.kill_host(victim)
    try:
        assert raylet is not None and raylet in killed, (
            f"the kill of {victim} did not signal its raylet {raylet}: {killed}")
        dead_at = wait_ray_dead(cluster, node_id, timeout_s=30)
        assert dead_at is not None, (
            f"Ray never declared node {node_id} dead (raylet {raylet} killed with "
            f"{len(killed)} processes); its entry now: {node_entry(node_id)}")

        async def gone_after() -> float | None:
            client = open_client(cluster.doc["etcd"]["endpoint"])
            try:
                while time.monotonic() - dead_at < ttl + 2:
                    if (await client.get_lease_info(lease_id)).TTL == -1:
                        return time.monotonic() - dead_at
                    await asyncio.sleep(0.05)
                return None
            finally:
                await client.close()

        took = asyncio.run(gone_after())
        print(f"kill of {victim}: Ray declared its node dead after "
              f"{dead_at - killed_at:.2f} s; lease {lease_id} gone "
              f"{took if took is None else round(took, 2)} s after that (TTL {ttl} s)")
        assert took is not None
        # Revoked, not expired. Without a revoke the lease lives at least a TTL
        # after its last keepalive, which was at most one keepalive interval
        # ((TTL - margin) / 4 < TTL / 4) before the kill: so a lease gone sooner
        # than 3/4 TTL after the kill was revoked -- by the gateway's node or
        # agent watch, or by the host itself (a worker that sees its raylet die
        # may still shut its agent down). When Ray's verdict comes later than
        # that (a loaded machine), the gateway's own log is the evidence: it
        # logs the revoke after it returns (so wait for the line), and under
        # CPU starvation its deadline can fire although etcd applied the revoke
        # ("revoking ... failed", outcome unknown).
        gone_since_kill = dead_at - killed_at + took
        if gone_since_kill >= 0.75 * ttl - 0.1:
            wanted = (f"host {victim}: Ray declared node",
                      f"host {victim}: its agent is gone; revoked",
                      f"revoking the lease of dead host {victim} failed",
                      f"revoking the lease of agentless host {victim}")
            log_path = cluster.spec.state_dir / "logs" / "gateway.log"
            deadline = time.monotonic() + 10.0
            while True:
                log = log_path.read_text(errors="replace")
                if any(w in log for w in wanted) or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            assert any(w in log for w in wanted), (
                f"the lease went {gone_since_kill:.2f} s after the kill (TTL {ttl} s) and "
                "the gateway logged no revoke: it may just have expired")
    finally:
        cluster.restart_host(victim)
    assert cluster.wait_healthy(timeout_s=90)["hosts_live"] == 3


def test_an_agent_turn_in_flight_on_a_killed_host_completes_without_a_new_request(
    cluster: LocalCluster, gateway: tuple[str, str]
) -> None:
    """The owner dies mid-turn; the gateway restores the process on a live host
    (its record went with the host's lease) and the new owner's loop answers
    the queued message. Before, nothing asked for the process again: the
    message stayed queued until some later request, and the client waited."""
    from svit_cluster.chat import chat_turn
    from svit_cluster.client import AsyncSvitClient

    url, token = gateway
    ttl = cluster.spec.lease_ttl_s
    pid = f"svit://local/agent-{uuid.uuid4().hex[:8]}"
    with SvitClient(url, token) as c:
        c.create_process(pid, memory={"status": "idle"})
    victim = owner_host(cluster, pid)
    assert victim is not None

    async def turn() -> Any:
        async with AsyncSvitClient(url, token, timeout_s=60) as client:
            return await chat_turn(client, pid, "/sleep 4", emit=lambda _line: None,
                                   timeout_s=ttl + 4 + 25)

    async def run() -> tuple[Any, float]:
        task = asyncio.create_task(turn())
        await asyncio.sleep(1.5)  # the turn is in flight on the victim
        assert await asyncio.to_thread(owner_host, cluster, pid) == victim
        killed_at = time.monotonic()
        await asyncio.to_thread(_kill, cluster, victim)
        outcome = await task
        return outcome, time.monotonic() - killed_at

    try:
        outcome, took = asyncio.run(run())
        print(f"\nAGENT-REHOME: turn completed {took:.2f} s after the kill of {victim} "
              f"(TTL {ttl} s, the model sleeps 4 s)")
        assert outcome.ok, outcome
        new_owner = owner_host(cluster, pid)
        assert new_owner is not None and new_owner != victim
        with SvitClient(url, token) as c:
            inbox, _ = c.state(pid, "/inbox")
        assert inbox == []
    finally:
        restore(cluster, victim)
