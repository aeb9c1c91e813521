"""Orchestration: start a cluster behind proxies, run workload + nemeses, heal, check, report.

One **leg** is one cluster lifetime::

    start proxies + cluster -> create processes -> observer on
    -> workload and nemesis schedule for duration_s (live progress)
    -> stop: drain in-flight requests, heal everything
    -> read final state through the gateway -> wait until the outbox dispatcher
       drained (main leg) -> dump logs and the outbox status -> check
    -> (main leg) lost-commit control -> tear everything down

A run is the main leg plus, when asked (always for ``smoke``), the two controls:

* **negative control** -- a second leg with fencing switched off
  (``LocalCluster.up(..., unsafe_disable_fencing=True)`` and an unfenced stale
  writer). The checker MUST report stale-token commits or divergence there;
  if stale commits landed and it reports nothing, the run fails.
* **timers negative control** -- the same negative leg arms and cancels timers
  while its dispatcher ignores committed cancels (the test-only
  ``SVIT_DISPATCH_UNSAFE_IGNORE_CANCELS``, set by ``local_launcher`` for a
  negative leg): a timer reported ``cancelled`` fires, and the ``timers``
  invariant MUST report it; if a cancel won and nothing is reported, the run fails.
* **lost-commit control** -- after the main leg is checked, one acknowledged
  stream entry above the snapshot is deleted from Redis, the logs are dumped
  again, and the checker MUST fail.

Teardown is in ``finally`` blocks: whatever happens (an exception, Ctrl-C,
SIGTERM), every nemesis is healed and every process the harness started is
stopped. A harness failure (a server did not come back, the cluster did not
start) makes the run **inconclusive**, never a pass.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import shutil
import signal
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import redis

from svit_cluster.dispatch import (
    DeliveryState,
    delivery_status,
    destination_records,
    list_timers,
    outbox_summary,
)
from svit_cluster.errors import ConfigurationError
from svit_cluster.store import DEFAULT_PREFIX, ProcessKeys, connect

from .checker import CheckResult, build_context, check, outbox_event
from .clock import Clock, MonotonicClock, wait_until
from .cluster import ETCD_MEMBERS, TOPOLOGIES, ChaosCluster, Launcher, LaunchSpec, local_launcher
from .daemon_pool import in_daemon_thread
from .errors import HarnessError
from .faults import NemesisContext
from .history import HistoryWriter, write_history
from .kinds import QUORUM_KINDS
from .leases import lease_loss_reasons, lease_losses
from .load import stop_all_loads
from .logs import StoredLogs, dump_process, dump_processes, write_logs
from .observer import StoreObserver
from .ports import PortServer, owner_log_lines
from .proxy import HubLinks
from .proxy_process import ProcessProxyHub
from .report import build_report, render_timeline, write_html, write_json, write_markdown
from .runner import NemesisRunner
from .schedule import build_schedule, check_topology, smoke_duration_s
from .spec import Schedule
from .stale import StaleWriter
from .timers import timers_event, timers_figures
from .workload import Workload, WorkloadConfig, WorkloadStats

__all__ = [
    "EXIT_CODES",
    "WORKLOADS",
    "LegResult",
    "NullProgress",
    "ProgressSink",
    "RunConfig",
    "RunOutcome",
    "run",
    "run_leg",
    "validate",
]

#: Process exit code per verdict.
EXIT_CODES = {"pass": 0, "fail": 1, "inconclusive": 3}
#: The workloads ``svit-chaos run --workload`` accepts.
WORKLOADS = ("counter", "ports")
#: Anomalies that show a stale owner committed (what the negative control must produce).
STALE_INVARIANTS = frozenset({"tokens", "chain", "acked", "unique", "refused"})


class ProgressSink(Protocol):
    """Where a run reports progress (the CLI draws a rich progress bar)."""

    def begin(self, leg: str, total_s: float) -> None: ...

    def update(self, elapsed_s: float, stats: WorkloadStats, active: list[str]) -> None: ...

    def message(self, text: str) -> None: ...

    def end(self) -> None: ...


class NullProgress:
    """Discards progress (library use, tests)."""

    def begin(self, leg: str, total_s: float) -> None:
        pass

    def update(self, elapsed_s: float, stats: WorkloadStats, active: list[str]) -> None:
        pass

    def message(self, text: str) -> None:
        pass

    def end(self) -> None:
        pass


@dataclass
class RunConfig:
    """Parameters of ``svit-chaos run``.

    Attributes:
        scenario: a name from :data:`~svit_chaos.schedule.SCENARIOS`.
        duration_s: workload seconds; 0 picks the scenario's default.
        seed: seeds the schedule and the clients.
        hosts, clients, processes: cluster and workload shape.
        out_dir: parent of the run directory.
        lease_ttl_s: host lease TTL (default 3 s).
        snapshot_every: commits between snapshots (default 50).
        negative_control, loss_control: run the controls (None: only for ``smoke``).
        prefix: the store's Redis key prefix (default ``"svit"``).
        heal_timeout_s: how long a healed server may take to answer (default 60 s).
        final_timeout_s: how long to wait for each process after healing (default 60 s).
        negative_duration_s: workload seconds of the negative leg (0: scenario minimum).
        request_timeout_s, op_deadline_s, drain_s: workload timing (see
            :class:`~svit_chaos.workload.WorkloadConfig`; defaults 5, 20 and 10 s).
        schedule: an explicit schedule for the main leg (overrides ``scenario``
            and ``duration_s``; the negative leg still uses ``negative``).
        send_every: in the main leg, every this many commits per process the
            workload ``send!``s an intent to the run's sink process (0: none).
            Runs longer than two minutes send proportionally less often, so the
            sink's dedup window (``DEDUP_WINDOW`` keys) keeps every delivered id.
        outbox_timeout_s: after healing, how long to wait for the dispatcher
            to deliver every committed intent and fire every timer (default 120 s).
        timer_every: in both legs, every this many commits per process the
            workload arms a timer to the run's sink, and every other timer meets
            a ``cancel!`` ``timer_every // 2`` commits later (0: no timers; see
            :mod:`svit_chaos.timers`). Needs a cluster with a dispatcher. Runs
            longer than two minutes arm proportionally less often, so the
            timer log (about ``TIMER_LOG_MAXLEN`` events per process) keeps
            every timer's events.
        timer_delay_ms: the timers' ``delay_ms`` (default 3000).
        workload: ``counter`` (the counting script) or ``ports`` (every
            activation also calls the ``http`` port against a recording test
            server on loopback; see :mod:`svit_chaos.ports`; no intents).
        port_dedup: in a ``ports`` run, whether the test server dedups by
            idempotency key (False: the negative control -- repeated calls
            apply twice and the ``ports`` invariant must report it).
        port_delay_s: in a ``ports`` run, seconds the test server waits before
            answering (default 0.05): owners spend more time between a port
            call and its commit, where a pause or kill makes a retry repeat it.
        topology: ``"single"`` (default) or ``"scaled"`` (3 Redis masters x 1
            replica and 3 etcd members; see :mod:`svit_chaos.cluster`).
        etcd_members: etcd members of the single topology: 3 (default, as in
            production: ``kill-etcd`` kills the leader only) or 1 (``kill-etcd``
            stops all of etcd), or 5.
        wait_replicas: ``WAIT`` replicas after every write script, for every
            process of the cluster (``SVIT_REDIS_WAIT_REPLICAS``); None leaves
            the environment's setting (0 = off unless set).
    """

    scenario: str = "smoke"
    duration_s: float = 0.0
    seed: int = 0
    hosts: int = 3
    clients: int = 4
    processes: int = 3
    out_dir: Path = Path("chaos-runs")
    lease_ttl_s: int = 3
    snapshot_every: int = 50
    negative_control: bool | None = None
    loss_control: bool | None = None
    prefix: str = DEFAULT_PREFIX
    heal_timeout_s: float = 60.0
    final_timeout_s: float = 60.0
    negative_duration_s: float = 0.0
    request_timeout_s: float = 5.0
    op_deadline_s: float = 20.0
    drain_s: float = 10.0
    schedule: Schedule | None = None
    send_every: int = 3
    outbox_timeout_s: float = 120.0
    timer_every: int = 10
    timer_delay_ms: int = 3000
    workload: str = "counter"
    port_dedup: bool = True
    port_delay_s: float = 0.05
    topology: str = "single"
    wait_replicas: int | None = None
    etcd_members: int = 3

    def duration_for(self, scenario: str) -> float:
        if scenario == self.scenario and self.schedule is not None:
            return self.schedule.duration_s
        if scenario == self.scenario and self.duration_s > 0:
            return self.duration_s
        if scenario == "negative" and self.negative_duration_s > 0:
            return self.negative_duration_s
        ttl = float(self.lease_ttl_s)
        if scenario == "smoke":
            return smoke_duration_s(ttl)
        if scenario == "negative":
            return (3.0 + (2 * ttl + 1) + (ttl + 2) + (3 * ttl + 1) + (ttl + 2) + (ttl + 3)
                    + (ttl + 3) + 1)
        if scenario == "scaled":
            return 180.0
        return 60.0


@dataclass
class LegResult:
    """What one leg produced."""

    name: str
    directory: Path
    history: list[dict[str, Any]]
    logs: StoredLogs
    result: CheckResult
    stale_commits: int = 0
    stale_attempts: int = 0
    controls: dict[str, Any] = field(default_factory=dict)


@dataclass
class RunOutcome:
    """The whole run: verdict, report document, directory, exit code."""

    verdict: str
    report: dict[str, Any]
    directory: Path
    legs: dict[str, LegResult]

    @property
    def exit_code(self) -> int:
        return EXIT_CODES.get(self.verdict, 3)


# -- one leg ----------------------------------------------------------------------------


async def _retry_blocking(fn: Callable[[], Any], *, timeout_s: float, clock: Clock) -> Any:
    deadline = clock.now() + timeout_s
    while True:
        try:
            return await asyncio.to_thread(fn)
        except Exception:
            if clock.now() >= deadline:
                raise
            await clock.sleep(0.5)


async def run_leg(
    name: str,
    config: RunConfig,
    directory: Path,
    *,
    launcher: Launcher,
    negative: bool,
    loss_control: bool,
    progress: ProgressSink,
    abort: asyncio.Event,
    clock: Clock | None = None,
) -> LegResult:
    """Run one cluster lifetime (see the module docstring); always tears down.

    Raises:
        HarnessError: the cluster did not start, or Redis could not be dumped.
    """
    clock = clock or MonotonicClock()
    directory.mkdir(parents=True, exist_ok=True)
    scenario = "negative" if negative else config.scenario
    duration = config.duration_for(scenario)
    run_id = f"r{config.seed}{name[:1]}{int(time.time()) % 100000}"
    # Ray's AF_UNIX socket paths must stay under 107 bytes: keep cluster state short
    state_dir = Path(tempfile.mkdtemp(prefix="svit-chaos-"))
    hub = ProcessProxyHub().start()  # bytes never wait for this process's GIL
    port_server = PortServer(dedup=config.port_dedup, delay_s=config.port_delay_s).start() \
        if config.workload == "ports" else None
    history = HistoryWriter(directory / "history.jsonl", clock=clock)
    cluster: ChaosCluster | None = None
    observer: StoreObserver | None = None
    runner: NemesisRunner | None = None
    direct: Any = None
    errors: list[str] = []
    try:
        progress.message(f"[{name}] starting a {config.hosts}-host cluster")
        spec = LaunchSpec(state_dir=state_dir, hosts=config.hosts,
                          lease_ttl_s=config.lease_ttl_s, snapshot_every=config.snapshot_every,
                          negative_control=negative, hub=hub,
                          progress=lambda m: progress.message(f"[{name}] {m}"),
                          ports=_port_grants(port_server),
                          topology=config.topology, wait_replicas=config.wait_replicas,
                          etcd_members=config.etcd_members)
        cluster = await asyncio.to_thread(launcher, spec)
        if config.schedule is not None and not negative:
            schedule = config.schedule
            duration = schedule.duration_s
        else:
            schedule = build_schedule(scenario, hosts=cluster.host_names(),
                                      duration_s=duration, lease_ttl_s=config.lease_ttl_s,
                                      seed=config.seed, host_restart=cluster.host_restart,
                                      topology=config.topology)
        (directory / "schedule.json").write_text(json.dumps(schedule.to_json(), indent=2))
        wl_config = WorkloadConfig(run_id=run_id, clients=config.clients,
                                   processes=config.processes, seed=config.seed,
                                   request_timeout_s=config.request_timeout_s,
                                   op_deadline_s=config.op_deadline_s, drain_s=config.drain_s,
                                   send_every=_send_every(config.send_every, duration)
                                   if not negative and port_server is None
                                   and getattr(cluster, "dispatchers", 0) > 0 else 0,
                                   port_url=port_server.url if port_server else "",
                                   timer_every=_send_every(config.timer_every, duration)
                                   if port_server is None
                                   and getattr(cluster, "dispatchers", 0) > 0 else 0,
                                   timer_delay_ms=config.timer_delay_ms)
        history.record("meta", leg=name, scenario=scenario, seed=config.seed,
                       sink=wl_config.sink, send_every=wl_config.send_every,
                       timer_every=wl_config.timer_every,
                       timer_delay_ms=wl_config.timer_delay_ms,
                       workload=config.workload, port_url=wl_config.port_url,
                       negative_control=negative, duration_s=duration,
                       processes=wl_config.process_ids(), hosts=cluster.host_names(),
                       lease_ttl_s=config.lease_ttl_s, schedule=schedule.to_json(),
                       topology=config.topology, wait_replicas=config.wait_replicas,
                       etcd_members=config.etcd_members, host_leases=bool(cluster.cluster_name),
                       config={k: str(v) for k, v in asdict(config).items()
                               if k != "schedule"})
        workload = Workload(cluster.gateway_url, cluster.admin_token, history, wl_config,
                            clock=clock)
        progress.message(f"[{name}] creating {config.processes} processes")
        await workload.setup()
        direct = connect(cluster.redis_url, timeout_s=1.0,
                         cluster=bool(getattr(cluster, "redis_cluster", False)))
        observer = StoreObserver(direct, workload.processes, history, prefix=config.prefix,
                                 etcd_endpoint=cluster.etcd_endpoint if cluster.cluster_name
                                 else None, cluster=cluster.cluster_name)
        observer.start()
        stale = StaleWriter(direct, history, run_id=run_id, prefix=config.prefix,
                            unfenced=negative)
        # the planner's host rule holds at run time for its own schedules; an
        # explicit schedule's overlaps are meant
        planned = config.schedule is None or negative
        runner = NemesisRunner(schedule, NemesisContext(cluster.target, history,
                                                        workload.processes, stale),
                               clock=clock, heal_timeout_s=config.heal_timeout_s,
                               hosts=cluster.host_names() if planned else (),
                               warm=cluster.target.warm_hosts if planned else None)
        await _drive(workload, runner, schedule, duration, progress, abort, clock, name)
        errors.extend(runner.errors)
        if runner.skipped:
            progress.message(f"[{name}] {len(runner.skipped)} window(s) skipped, the host "
                             f"rule not holding until their end: {', '.join(runner.skipped)}")
        if runner.errors:
            progress.message(f"[{name}] harness errors: {'; '.join(runner.errors[:3])}")
        progress.message(f"[{name}] reading the final state")
        target = cluster.target
        for service in ("redis", "etcd"):
            if not await wait_until(
                lambda s=service: in_daemon_thread(functools.partial(target.service_ready, s)),
                timeout_s=config.heal_timeout_s, clock=clock,
            ):
                errors.append(f"{service} did not come back after healing")
        if loss_control and not abort.is_set():  # the control's acknowledged victim
            def above_snapshot(process: str, version: int) -> bool:
                try:
                    snap = dump_process(direct, process, prefix=config.prefix).final_snapshot
                except redis.RedisError:
                    return False  # unknown: commit once more
                return snap is None or version > snap.version

            settled = await workload.commit_after_heal(above_snapshot,
                                                       timeout_s=config.final_timeout_s)
            progress.message(f"[{name}] settle commit above the snapshot: "
                             f"{'none' if settled is None else f'version {settled}'}")
        await workload.read_final(timeout_s=5.0 if negative else config.final_timeout_s)
        if wl_config.timer_every:  # first: the outbox status then also sees them fired
            await _record_timers(direct, workload, history, config, progress, clock, name)
        if workload.sink is not None:
            await _record_outbox(direct, workload, history, config, progress, clock, name)
        if port_server is not None:
            await _record_ports(port_server, state_dir, history, progress, clock, name)
        observer.stop()
        await _record_lease_reasons(state_dir, history, progress, name)
        progress.message(f"[{name}] dumping logs and checking")
        collected = observer.snapshot()
        logs = await _retry_blocking(
            lambda: dump_processes(direct, workload.processes, prefix=config.prefix,
                                   collected=collected),
            timeout_s=config.heal_timeout_s, clock=clock)
        write_logs(directory / "logs.jsonl", logs)
        if abort.is_set():
            errors.append("interrupted")
        history.close()
        events = history.events
        result = check(events, logs, harness_errors=errors)
        (directory / "check.json").write_text(json.dumps(result.to_json(), indent=2))
        leg = LegResult(name, directory, events, logs, result,
                        stale_commits=stale.committed, stale_attempts=stale.attempts)
        if loss_control and not abort.is_set():
            leg.controls["lost_commit"] = await asyncio.to_thread(
                _lost_commit_control, direct, workload.processes, events, collected,
                directory.parent / "lost-commit-control", config.prefix)
        return leg
    except HarnessError:
        raise
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        raise HarnessError(f"[{name}] {type(exc).__name__}: {exc}", stage="run") from exc
    finally:
        _teardown(runner, observer, cluster, hub, history, direct, progress, name)
        if port_server is not None:
            port_server.close()
        _archive(state_dir, directory / "cluster-logs")


async def _record_outbox(client: Any, workload: Workload, history: HistoryWriter,
                         config: RunConfig, progress: ProgressSink, clock: Clock,
                         name: str) -> None:
    """Wait (bounded) until no intent is pending, then record the ``outbox`` event."""
    sink = workload.sink
    assert sink is not None
    deadline = clock.now() + config.outbox_timeout_s
    next_report = clock.now()
    statuses: list[Any] = []
    found_once = False
    drained = False
    while True:
        try:
            found = await asyncio.to_thread(delivery_status, client, workload.processes,
                                            prefix=config.prefix)
            statuses = list(found.values())
            found_once = True
        except Exception as exc:  # Redis still recovering: try again until the deadline
            progress.message(f"[{name}] outbox status unreadable: {exc}")
        pending = sum(s.state == DeliveryState.PENDING for s in statuses)
        if found_once and pending == 0:
            drained = True
            break
        if clock.now() >= deadline:
            break
        if clock.now() >= next_report:
            progress.message(f"[{name}] waiting for the dispatcher: {pending} of "
                             f"{len(statuses)} intents pending")
            next_report = clock.now() + 5.0
        await clock.sleep(0.5)
    record: Any = None
    error: str | None = None
    try:
        record = await _retry_blocking(
            lambda: destination_records(client, sink, prefix=config.prefix),
            timeout_s=10.0, clock=clock)
    except Exception as exc:
        error = f"{type(exc).__name__}: {str(exc)[:300]}"
    summaries: list[Any] = []
    try:  # read after the drain; without it the trimmed intents look lost (and are reported)
        summaries = list((await asyncio.to_thread(
            outbox_summary, client, workload.processes, prefix=config.prefix)).values())
    except Exception as exc:
        progress.message(f"[{name}] outbox summary unreadable (trimmed intents will be "
                         f"reported missing): {type(exc).__name__}: {str(exc)[:300]}")
    dead = sum(s.state == DeliveryState.DEAD_LETTERED for s in statuses)
    progress.message(f"[{name}] outbox: {len(statuses)} intents, "
                     f"{'drained' if drained else 'NOT drained'}, {dead} dead-lettered")
    history.record("outbox", **outbox_event(sink, statuses, record, drained=drained,
                                            error=error, summaries=summaries))


async def _record_timers(client: Any, workload: Workload, history: HistoryWriter,
                         config: RunConfig, progress: ProgressSink, clock: Clock,
                         name: str) -> None:
    """Wait (bounded by ``outbox_timeout_s``) until no timer is pending, then record
    the ``timers`` event (:func:`~svit_chaos.timers.timers_event`)."""
    def pending() -> int:
        return sum(len(list_timers(client, config.prefix, pid, limit=1000).timers)
                   for pid in workload.processes)

    deadline = clock.now() + config.outbox_timeout_s
    next_report = clock.now()
    left: int | None = None
    while True:
        try:
            left = await asyncio.to_thread(pending)
        except Exception as exc:  # Redis still recovering: try again until the deadline
            progress.message(f"[{name}] timers unreadable: {exc}")
        if left == 0 or clock.now() >= deadline:
            break
        if clock.now() >= next_report:
            progress.message(f"[{name}] waiting for the dispatcher: {left} timers pending")
            next_report = clock.now() + 5.0
        await clock.sleep(0.5)
    doc = await _retry_blocking(
        lambda: timers_event(client, workload.processes, prefix=config.prefix,
                             drained=left == 0, wall_ms=int(time.time() * 1000)),
        timeout_s=10.0, clock=clock)
    fired = sum(1 for p in doc["processes"].values() for e in p["log"]
                if e.get("event") == "fired")
    progress.message(f"[{name}] timers: {fired} fired, "
                     f"{'drained' if left == 0 else f'{left} still pending'}")
    history.record("timers", **doc)


async def _record_lease_reasons(state_dir: Path, history: HistoryWriter,
                                progress: ProgressSink, name: str) -> None:
    """When a host lost a lease, record why its agent said it did (from the cluster's
    log files, before they are archived) and say so on the progress line."""
    losses = lease_losses(history.events)
    if not losses:
        return
    reasons = await asyncio.to_thread(lease_loss_reasons, state_dir)
    history.record("lease_reasons", reasons=reasons)
    for loss in losses:
        where = (f"in load window {', '.join(loss.load_windows)}" if loss.load_windows
                 else "outside load windows")
        why = (f"explained by {', '.join(loss.explained_by)}" if loss.explained_by
               else "NOT explained by a fault")
        progress.message(f"[{name}] host {loss.host} lost lease {loss.lease} at "
                         f"{loss.t:.1f} s, {where}, {why}"
                         + (f": {reasons[str(loss.lease)]}" if str(loss.lease) in reasons
                            else ""))


def _port_grants(server: PortServer | None) -> dict[str, Any]:
    """The cluster's ports for a run: ``http`` to the test server only (or nothing)."""
    if server is None:
        return {}
    return {"http": {"enabled": True, "allow_hosts": [server.allow_host], "timeout_s": 5.0}}


async def _record_ports(server: PortServer, state_dir: Path, history: HistoryWriter,
                        progress: ProgressSink, clock: Clock, name: str) -> None:
    """Record the test server's requests and the owners' not-committed warnings.

    Waits a little first: a resumed stale owner's last port call and its
    warning may still be on their way.
    """
    await clock.sleep(1.0)
    owner_logs = await asyncio.to_thread(owner_log_lines, state_dir)
    event = server.event()
    repeated = len(event["requests"]) - len({r["key"] for r in event["requests"]})
    progress.message(f"[{name}] port server: {len(event['requests'])} calls, {repeated} "
                     f"repeated, {len(owner_logs)} not-committed warnings in owner logs")
    history.record("ports", **event, owner_logs=owner_logs)


#: Which of the cluster's files a run keeps: its own and Ray's logs, and the
#: output of every Ray worker (the host agents and lease keepers log there).
ARCHIVED = ("*.log", "worker-*.out", "worker-*.err")
#: A file larger than this is left out; so is everything past the total.
ARCHIVE_FILE_MAX_BYTES = 64 * 1024 * 1024
ARCHIVE_TOTAL_MAX_BYTES = 512 * 1024 * 1024


def _archive(state_dir: Path, target: Path) -> None:
    """Keep the cluster's logs (:data:`ARCHIVED`, non-empty, within the size
    bounds) in the run directory, then remove its state."""
    total = 0
    with contextlib.suppress(OSError):
        for pattern in ARCHIVED:
            for path in state_dir.rglob(pattern):
                size = path.stat().st_size if path.is_file() else 0
                if not 0 < size < ARCHIVE_FILE_MAX_BYTES \
                        or total + size > ARCHIVE_TOTAL_MAX_BYTES:
                    continue
                total += size
                dest = target / path.relative_to(state_dir)
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(path, dest)
    shutil.rmtree(state_dir, ignore_errors=True)


def _teardown(runner: NemesisRunner | None, observer: StoreObserver | None,
              cluster: ChaosCluster | None, hub: HubLinks[Any], history: HistoryWriter,
              direct: Any, progress: ProgressSink, name: str) -> None:
    """Heal and stop everything, synchronously, never raising."""
    if runner is not None and runner.active:
        progress.message(f"[{name}] healing {len(runner.active)} active fault(s)")
        runner.heal_all_sync()
    if stopped := stop_all_loads():  # a load whose heal did not run or did not end it
        progress.message(f"[{name}] stopped load processes {stopped}")
    if observer is not None:
        observer.stop()
    hub.heal_all()
    if cluster is not None:
        progress.message(f"[{name}] stopping the cluster")
        with contextlib.suppress(Exception):
            cluster.close()
    hub.close()
    if direct is not None:
        with contextlib.suppress(Exception):
            direct.close()
    history.close()


async def _drive(workload: Workload, runner: NemesisRunner, schedule: Schedule,
                 duration: float, progress: ProgressSink, abort: asyncio.Event,
                 clock: Clock, name: str) -> None:
    """Run the workload and the schedule for ``duration`` seconds (or until ``abort``)."""
    stop = asyncio.Event()
    progress.begin(name, duration)
    start = clock.now()
    work = asyncio.ensure_future(workload.run(stop))
    faults = asyncio.ensure_future(runner.run(stop))

    async def ticker() -> None:
        while True:
            progress.update(clock.now() - start, workload.stats, runner.active_labels)
            if clock.now() - start >= duration or abort.is_set():
                stop.set()
            if abort.is_set() or (stop.is_set() and work.done()):
                break  # after the duration, keep drawing while requests drain
            await clock.sleep(0.25)

    tick = asyncio.ensure_future(ticker())
    try:
        await asyncio.gather(tick, faults, work)
    finally:
        stop.set()
        for task in (tick, faults, work):
            if not task.done():
                task.cancel()
        await asyncio.gather(tick, faults, work, return_exceptions=True)
        progress.update(clock.now() - start, workload.stats, runner.active_labels)
        progress.end()


def _lost_commit_control(client: Any, processes: list[str], events: list[dict[str, Any]],
                         collected: StoredLogs, directory: Path, prefix: str) -> dict[str, Any]:
    """Delete one acknowledged entry above the snapshot, re-dump, re-check: must fail."""
    acked = {(e.get("process"), e.get("version")): e.get("rid")
             for e in events if e.get("kind") == "ok"}
    before = dump_processes(client, processes, prefix=prefix, collected=collected)
    victim: tuple[str, int] | None = None
    for process in processes:
        log = before.processes[process]
        snap = log.final_snapshot
        base = snap.version if snap is not None else 0
        for version in sorted(log.entries, reverse=True):
            if version > base and (process, version) in acked:
                if victim is None or version > victim[1]:
                    victim = (process, version)
                break
    if victim is None:
        return {"verdict": "inconclusive", "expected": "fail",
                "detail": "no acknowledged entry above a snapshot to delete"}
    process, version = victim
    client.xdel(ProcessKeys(process, prefix).stream, f"{version}-0")
    after = dump_processes(client, processes, prefix=prefix, collected=collected)
    directory.mkdir(parents=True, exist_ok=True)
    write_logs(directory / "logs.jsonl", after)
    write_history(directory / "history.jsonl", events)
    result = check(events, after)
    (directory / "check.json").write_text(json.dumps(result.to_json(), indent=2))
    caught = any(a.process == process and version in a.versions for a in result.anomalies)
    return {"verdict": "pass" if caught else "fail", "expected": "fail",
            "detail": f"deleted {process} version {version} ({acked[victim]}); checker "
                      f"{'reported' if caught else 'did NOT report'} it "
                      f"({len(result.anomalies)} anomalies)",
            "anomalies": len(result.anomalies)}


def _negative_verdict(leg: LegResult) -> dict[str, Any]:
    stale = [a for a in leg.result.anomalies if a.invariant in STALE_INVARIANTS]
    if stale:
        return {"verdict": "pass", "expected": "fail",
                "detail": f"checker reported {len(stale)} stale-owner anomalies "
                          f"({leg.stale_commits} stale commits landed)"}
    if leg.stale_commits == 0:
        why = "; ".join(leg.result.harness_errors[:3])
        return {"verdict": "inconclusive", "expected": "fail",
                "detail": f"no stale commit landed ({leg.stale_attempts} stale attempts; "
                          "without an attempt no failover happened under the stale writer)"
                          + (f"; harness errors: {why}" if why else "")}
    return {"verdict": "fail", "expected": "fail",
            "detail": f"{leg.stale_commits} stale commits landed but the checker reported "
                      "nothing"}


def _armed_timers(leg: LegResult) -> bool:
    """The leg's workload armed timers (a cluster with a dispatcher, not the ports
    workload): ``timer_every`` of its ``meta`` event."""
    return any(ev.get("kind") == "meta" and ev.get("timer_every") for ev in leg.history)


def _negative_timers_verdict(leg: LegResult) -> dict[str, Any]:
    """The ignore-cancels control: every timer whose cancel won (``cancelled``)
    fired anyway, so the ``timers`` invariant must report at least one."""
    caught = [a for a in leg.result.anomalies
              if a.invariant == "timers" and "reported cancelled and also delivered" in a.message]
    figures = timers_figures(build_context(leg.history, leg.logs)) or {}
    won = (figures.get("cancel_outcomes") or {}).get("cancelled", 0)
    if caught:
        return {"verdict": "pass", "expected": "fail",
                "detail": f"checker reported {len(caught)} timers delivered though cancelled "
                          f"({won} acknowledged cancels won, "
                          f"{figures.get('armed_acked', 0)} timers armed)"}
    if not won:
        return {"verdict": "inconclusive", "expected": "fail",
                "detail": f"no acknowledged cancel won ({figures.get('cancels_acked', 0)} "
                          f"cancels, {figures.get('armed_acked', 0)} timers armed): nothing "
                          "for the ignoring dispatcher to fire"}
    return {"verdict": "fail", "expected": "fail",
            "detail": f"{won} cancels won but the checker reported no cancelled timer "
                      "delivered"}


# -- the whole run ----------------------------------------------------------------------


def _combine(main: str, controls: dict[str, dict[str, Any]]) -> str:
    verdicts = [main, *(c["verdict"] for c in controls.values())]
    if "fail" in verdicts:
        return "fail"
    if "inconclusive" in verdicts:
        return "inconclusive"
    return "pass"


def validate(config: RunConfig) -> None:
    """Fail fast, before anything starts, on a scenario that cannot run.

    Raises:
        ConfigurationError: unknown scenario, too short a duration, too few
            hosts, or a workload shape out of range.
    """
    if config.clients < 1 or config.processes < 1 or config.hosts < 1:
        raise ConfigurationError("hosts, clients and processes must be >= 1")
    if config.workload not in WORKLOADS:
        raise ConfigurationError(f"unknown workload {config.workload!r} (one of "
                                 f"{', '.join(WORKLOADS)})")
    if config.topology not in TOPOLOGIES:
        raise ConfigurationError(f"unknown topology {config.topology!r}; topologies: "
                                 f"{', '.join(TOPOLOGIES)}")
    if config.scenario == "scaled" and config.topology != "scaled":
        raise ConfigurationError("scenario scaled needs --topology scaled")
    if config.etcd_members not in ETCD_MEMBERS:
        raise ConfigurationError(f"etcd_members must be one of "
                                 f"{', '.join(map(str, ETCD_MEMBERS))}")
    if config.wait_replicas is not None and not 0 <= config.wait_replicas <= 16:
        raise ConfigurationError("wait_replicas must be in 0..16")
    hosts = [f"h{i + 1}" for i in range(config.hosts)]
    legs = [config.scenario]
    negative = config.negative_control if config.negative_control is not None else (
        config.scenario == "smoke")
    if negative:
        legs.append("negative")
    for scenario in legs:
        if scenario == config.scenario and config.schedule is not None:
            schedule = config.schedule
            check_topology(schedule, config.topology)
        else:
            schedule = build_schedule(scenario, hosts=hosts,
                                      duration_s=config.duration_for(scenario),
                                      lease_ttl_s=config.lease_ttl_s, seed=config.seed,
                                      topology=config.topology)
        quorum = set(schedule.kinds()) & set(QUORUM_KINDS)
        if quorum and config.topology == "single" and config.etcd_members < 3:
            raise ConfigurationError(f"nemeses {', '.join(sorted(quorum))} need several etcd "
                                     "members (--etcd-members 3)")


async def run(
    config: RunConfig,
    *,
    launcher: Launcher | None = None,
    progress: ProgressSink | None = None,
    clock: Clock | None = None,
    install_signal_handlers: bool = False,
) -> RunOutcome:
    """Run a scenario (and its controls), write the report, return the outcome.

    Args:
        config: the run's parameters.
        launcher: starts clusters (default :func:`~svit_chaos.cluster.local_launcher`).
        progress: live progress (default none).
        clock: injectable clock (default monotonic).
        install_signal_handlers: stop gracefully on SIGINT/SIGTERM (the CLI sets it).

    Returns:
        The outcome; never raises for harness failures (they make it inconclusive).

    Raises:
        ConfigurationError: the configuration cannot run (see :func:`validate`);
            nothing was started.
    """
    launcher = launcher or local_launcher
    progress = progress or NullProgress()
    validate(config)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    directory = config.out_dir / f"{config.scenario}-seed{config.seed}-{stamp}"
    directory.mkdir(parents=True, exist_ok=True)
    negative = config.negative_control if config.negative_control is not None else (
        config.scenario == "smoke")
    loss = config.loss_control if config.loss_control is not None else (
        config.scenario == "smoke")
    abort = asyncio.Event()
    loop = asyncio.get_running_loop()
    installed: list[signal.Signals] = []
    if install_signal_handlers:
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, _on_signal, abort, progress)
                installed.append(sig)
    legs: dict[str, LegResult] = {}
    controls: dict[str, dict[str, Any]] = {}
    errors: list[str] = []
    try:
        try:
            legs["main"] = await run_leg("main", config, directory / "main", launcher=launcher,
                                         negative=False, loss_control=loss, progress=progress,
                                         abort=abort, clock=clock)
            controls.update(legs["main"].controls)
        except HarnessError as exc:
            errors.append(str(exc))
        if negative and not abort.is_set() and "main" in legs:
            try:
                legs["negative"] = await run_leg(
                    "negative", config, directory / "negative", launcher=launcher,
                    negative=True, loss_control=False, progress=progress, abort=abort,
                    clock=clock)
                controls["negative"] = _negative_verdict(legs["negative"])
                if _armed_timers(legs["negative"]):
                    controls["negative_timers"] = _negative_timers_verdict(legs["negative"])
            except HarnessError as exc:
                errors.append(str(exc))
                controls["negative"] = {"verdict": "inconclusive", "expected": "fail",
                                        "detail": str(exc)}
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)
    if abort.is_set():
        errors.append("interrupted by a signal")
    return _finish(config, directory, legs, controls, errors)


def _on_signal(abort: asyncio.Event, progress: ProgressSink) -> None:
    if abort.is_set():
        raise KeyboardInterrupt  # a second signal: stop now (finally blocks still tear down)
    progress.message("signal received: stopping, healing and tearing down")
    abort.set()


def _finish(config: RunConfig, directory: Path, legs: dict[str, LegResult],
            controls: dict[str, dict[str, Any]], errors: list[str]) -> RunOutcome:
    main = legs.get("main")
    run_info = {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(config).items()
                if k != "schedule"}
    if config.schedule is not None:
        run_info["schedule"] = config.schedule.to_json()
    run_info["duration_s"] = config.duration_for(config.scenario)
    if main is None:
        report: dict[str, Any] = {"verdict": "inconclusive", "run": run_info,
                                  "harness_errors": errors, "controls": controls}
        write_json(directory / "report.json", report)
        return RunOutcome("inconclusive", report, directory, legs)
    main_verdict = main.result.verdict
    if errors and main_verdict == "pass":
        main_verdict = "inconclusive"
    verdict = _combine(main_verdict, controls)
    report = build_report(history=main.history, logs=main.logs, result=main.result,
                          run=run_info, controls=controls, verdict=verdict)
    report["harness_errors"] = [*report["harness_errors"], *errors]
    report["legs"] = {name: {"directory": str(leg.directory), "verdict": leg.result.verdict,
                             "anomalies": len(leg.result.anomalies),
                             "stale_commits": leg.stale_commits,
                             "stale_attempts": leg.stale_attempts}
                      for name, leg in legs.items()}
    write_json(directory / "report.json", report)
    write_markdown(directory / "report.md", report)
    png: bytes | None = None
    try:
        png = render_timeline(main.history, title=f"{config.scenario} seed {config.seed}",
                              faults=report["availability"]["faults"])
        (directory / "timeline.png").write_bytes(png)
    except Exception as exc:  # a missing plot must not hide the verdict
        report["harness_errors"].append(f"timeline not rendered: {exc}")
    write_html(directory / "report.html", report, png)
    if main.result.verdict == "fail":
        # keep the failing history and logs as a ready-made checker fixture
        fixture = directory / "failing-fixture"
        fixture.mkdir(exist_ok=True)
        for fname in ("history.jsonl", "logs.jsonl"):
            shutil.copy(main.directory / fname, fixture / fname)
    return RunOutcome(verdict, report, directory, legs)


def _send_every(base: int, duration_s: float) -> int:
    """``base`` for runs up to 120 s; proportionally rarer sends for longer runs."""
    if base <= 0 or duration_s <= 120:
        return base
    return max(base, int(base * duration_s / 120))
