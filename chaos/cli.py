"""``svit-chaos``: run a chaos scenario, or re-check a saved history offline.

Exit codes: 0 pass, 1 fail (an anomaly, or a control the checker missed),
3 inconclusive (the harness could not prove anything: a server did not come
back, a run was interrupted, something could not be verified), 2 usage error.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from svit_cluster.errors import ConfigurationError

from .availability import availability_report, markdown_tables
from .checker import build_context, check
from .cluster import ETCD_MEMBERS, TOPOLOGIES
from .errors import HistoryError
from .history import read_history
from .leases import leases_markdown, leases_report
from .logs import read_logs
from .report import ports_markdown
from .run import EXIT_CODES, WORKLOADS, RunConfig, run, validate
from .schedule import SCENARIOS
from .timers import timers_figures, timers_markdown
from .workload import WorkloadStats

__all__ = ["main"]


class RichProgress:
    """A rich progress bar over the workload duration, with live counters."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self._progress: Progress | None = None
        self._task: Any = None

    def begin(self, leg: str, total_s: float) -> None:
        self._progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(),
            TextColumn("{task.completed:>5.0f}/{task.total:.0f} s"), TimeElapsedColumn(),
            TextColumn("{task.fields[stats]}"), console=self.console, transient=False)
        self._progress.start()
        self._task = self._progress.add_task(leg, total=total_s, stats="")

    def update(self, elapsed_s: float, stats: WorkloadStats, active: list[str]) -> None:
        if self._progress is None:
            return
        faults = f" | faults: {', '.join(active)}" if active else ""
        text = (f"ok {stats.ok} fail {stats.fail} unknown {stats.info} "
                f"in-flight {stats.in_flight}{faults}")
        self._progress.update(self._task, completed=min(elapsed_s, self._progress.tasks[0].total
                                                        or elapsed_s), stats=text)

    def message(self, text: str) -> None:
        self.console.log(text)

    def end(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None


@click.group()
def main() -> None:
    """Chaos harness for svit_cluster: nemeses, workload, history, checker, report."""


@main.command("run")
@click.option("--scenario", default=None,
              type=click.Choice(list(SCENARIOS)),
              help="Fault scenario (or 'random'); default smoke, or scaled with "
                   "--topology scaled.")
@click.option("--topology", type=click.Choice(list(TOPOLOGIES)), default=RunConfig.topology,
              show_default=True,
              help="single: one redis-server and --etcd-members etcd members, each host "
                   "behind its own proxies; scaled: a Redis Cluster of 3 masters x 1 replica "
                   "and 3 etcd members.")
@click.option("--etcd-members", type=click.IntRange(min(ETCD_MEMBERS), max(ETCD_MEMBERS)),
              default=RunConfig.etcd_members, show_default=True,
              help="etcd members of the single topology: 1, 3 or 5. 3 is production's shape: "
                   "kill-etcd "
                   "kills the leader and the others elect a new one (kill-etcd-majority "
                   "takes the quorum away); 1: kill-etcd stops all of etcd.")
@click.option("--wait-replicas", type=click.IntRange(0, 16), default=None,
              help="WAIT for this many replicas after every write (SVIT_REDIS_WAIT_REPLICAS "
                   "of the cluster; default: the environment's, 0 = off).")
@click.option("--duration", "duration_s", type=float, default=RunConfig.duration_s,
              help="Workload seconds (0: the scenario's default).")
@click.option("--seed", type=int, default=RunConfig.seed, show_default=True)
@click.option("--hosts", type=click.IntRange(1, 16), default=RunConfig.hosts, show_default=True)
@click.option("--clients", type=click.IntRange(1, 256), default=RunConfig.clients,
              show_default=True)
@click.option("--processes", type=click.IntRange(1, 256), default=RunConfig.processes,
              show_default=True)
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path),
              default=RunConfig.out_dir, show_default=True)
@click.option("--lease-ttl", "lease_ttl_s", type=click.IntRange(1, 60),
              default=RunConfig.lease_ttl_s, show_default=True,
              help="Host lease TTL in seconds.")
@click.option("--snapshot-every", type=click.IntRange(1, 100000),
              default=RunConfig.snapshot_every, show_default=True)
@click.option("--negative-control/--no-negative-control", default=None,
              help="Also run with fencing off; the checker must fail it (default: smoke only).")
@click.option("--loss-control/--no-loss-control", default=None,
              help="Delete an acknowledged entry afterwards; the checker must fail it "
                   "(default: smoke only).")
@click.option("--workload", type=click.Choice(list(WORKLOADS)), default=RunConfig.workload,
              show_default=True,
              help="'ports': every activation also calls the http port against a recording "
                   "test server on loopback (repeats counted, results checked).")
@click.option("--timer-every", type=click.IntRange(0, 100000), default=RunConfig.timer_every,
              show_default=True,
              help="Arm a timer every N commits per process (every other one meets a "
                   "cancel); 0: no timers.")
@click.option("--timer-delay-ms", type=click.IntRange(0, 3_600_000),
              default=RunConfig.timer_delay_ms,
              show_default=True, help="The timers' delay_ms.")
@click.option("--port-dedup/--no-port-dedup", default=RunConfig.port_dedup, show_default=True,
              help="With --workload ports: the test server dedups by idempotency key "
                   "(--no-port-dedup is a negative control: the checker must fail).")
def run_command(scenario: str | None, topology: str, etcd_members: int,
                wait_replicas: int | None,
                duration_s: float, seed: int, hosts: int, clients: int,
                processes: int, out_dir: Path, lease_ttl_s: int, snapshot_every: int,
                negative_control: bool | None, loss_control: bool | None,
                workload: str, port_dedup: bool, timer_every: int,
                timer_delay_ms: int) -> None:
    """Start a local cluster behind proxies, inject faults under load, check, report."""
    console = Console(stderr=True)
    if scenario is None:
        scenario = "scaled" if topology == "scaled" else "smoke"
    config = RunConfig(scenario=scenario, duration_s=duration_s, seed=seed, hosts=hosts,
                       clients=clients, processes=processes, out_dir=out_dir,
                       lease_ttl_s=lease_ttl_s, snapshot_every=snapshot_every,
                       negative_control=negative_control, loss_control=loss_control,
                       workload=workload, port_dedup=port_dedup,
                       timer_every=timer_every, timer_delay_ms=timer_delay_ms,
                       topology=topology, wait_replicas=wait_replicas,
                       etcd_members=etcd_members)
    try:
        validate(config)
    except ConfigurationError as exc:
        raise click.UsageError(exc.message) from exc
    try:
        outcome = asyncio.run(run(config, progress=RichProgress(console),
                                  install_signal_handlers=True))
    except KeyboardInterrupt:
        console.print("[red]interrupted; everything started was stopped[/red]")
        sys.exit(EXIT_CODES["inconclusive"])
    report = outcome.report
    color = {"pass": "green", "fail": "red"}.get(outcome.verdict, "yellow")
    console.print(f"[bold {color}]{outcome.verdict.upper()}[/] "
                  f"faults {report.get('faults_total', 0)} "
                  f"acked {report.get('acked_commits', 0)} "
                  f"anomalies {report.get('anomaly_count', 0)}")
    for name, control in sorted(report.get("controls", {}).items()):
        console.print(f"  control {name}: {control['verdict']} -- {control.get('detail', '')}")
    for error in report.get("harness_errors", [])[:10]:
        console.print(f"  [yellow]harness: {error}[/]")
    for anomaly in report.get("anomalies", [])[:20]:
        console.print(f"  [red]{anomaly['invariant']}[/] {anomaly['process']}: "
                      f"{anomaly['message']} (lines {anomaly['lines']})")
    if report.get("ports"):
        console.print(ports_markdown(report["ports"]), markup=False, highlight=False,
                      soft_wrap=True)
    if report.get("timers"):
        console.print(timers_markdown(report["timers"]), markup=False, highlight=False,
                      soft_wrap=True)
    for flag in (report.get("host_leases") or {}).get("flags", []):
        console.print(f"  [yellow]flag[/] {flag}")
    console.print(leases_markdown(report.get("host_leases")), markup=False, highlight=False,
                  soft_wrap=True)
    if report.get("availability"):
        # plain text: the markdown tables are meant to be pasted as they are
        console.print(markdown_tables(report["availability"], max_processes=10),
                      markup=False, highlight=False, soft_wrap=True)
    console.print(f"report: {outcome.directory / 'report.html'}")
    sys.exit(outcome.exit_code)


@main.command("check")
@click.argument("history", type=click.Path(exists=True, path_type=Path))
@click.option("--logs", "logs_path", type=click.Path(exists=True, dir_okay=False,
                                                     path_type=Path),
              help="Dumped logs (default: logs.jsonl next to the history).")
@click.option("--json", "as_json", is_flag=True, help="Print the full result as JSON.")
@click.option("--save-fixture", type=click.Path(file_okay=False, path_type=Path),
              help="Copy history and logs into this directory (a regression fixture).")
def check_command(history: Path, logs_path: Path | None, as_json: bool,
                  save_fixture: Path | None) -> None:
    """Re-run the checker on a saved HISTORY (a file or a run/leg directory), offline."""
    console = Console(stderr=True)
    if history.is_dir():
        history = history / "history.jsonl"
    logs_path = logs_path or history.with_name("logs.jsonl")
    try:
        events = read_history(history)
        logs = read_logs(logs_path)
    except (OSError, HistoryError) as exc:
        raise click.UsageError(str(exc)) from exc
    result = check(events, logs)
    if save_fixture is not None:
        save_fixture.mkdir(parents=True, exist_ok=True)
        shutil.copy(history, save_fixture / "history.jsonl")
        shutil.copy(logs_path, save_fixture / "logs.jsonl")
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2))
    else:
        color = {"pass": "green", "fail": "red"}.get(result.verdict, "yellow")
        console.print(f"[bold {color}]{result.verdict.upper()}[/] "
                      f"{result.stats['operations']} operations, {result.stats['ok']} acked, "
                      f"{len(result.anomalies)} anomalies, {len(result.unverified)} unverified")
        for a in result.anomalies:
            console.print(f"  [red]{a.invariant}[/] {a.process}: {a.message} "
                          f"(versions {list(a.versions)}, tokens {list(a.tokens)}, "
                          f"lines {list(a.lines)})")
        for u in result.unverified[:20]:
            console.print(f"  [yellow]unverified[/] {u.process}: {u.message}")
        for e in result.harness_errors:
            console.print(f"  [yellow]harness[/] {e}")
        console.print(leases_markdown(leases_report(events)), markup=False, highlight=False,
                      soft_wrap=True)
        if any(ev.get("kind") == "timers" for ev in events):
            console.print(timers_markdown(timers_figures(build_context(events, logs))),
                          markup=False, highlight=False, soft_wrap=True)
        console.print(markdown_tables(availability_report(events, logs), max_processes=10),
                      markup=False, highlight=False, soft_wrap=True)
    sys.exit(EXIT_CODES[result.verdict])


if __name__ == "__main__":  # pragma: no cover
    main()
