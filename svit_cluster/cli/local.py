"""``svit-cluster up | down | env | status | kill-host | ... | demo``: the local cluster.

Every command here acts on the cluster ``up`` starts on this machine (loopback
only): it finds it through ``--state-dir`` (default ``./.svit``), where ``up``
writes ``cluster.json``, and calls one :class:`~svit_cluster.local.LocalCluster`
method. The fault commands (``kill-host``, ``pause-host``, ``resume-host``,
``kill-redis``, ``kill-etcd``) signal processes by the PIDs ``cluster.json``
records and print what they signalled. ``demo`` starts and stops its own cluster.
Exit codes and ``--output {text,json}``: see :mod:`svit_cluster.cli._util`.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click

from svit_cluster.cli._util import (
    EXIT_FAILED,
    EXIT_OK,
    emit,
    invoked_as,
    output_option,
    waiting,
)
from svit_cluster.defaults import (
    DEFAULT_LEASE_TTL_S,
    DEFAULT_LOCAL_DISPATCHERS,
    DEFAULT_LOCAL_HOSTS,
    DEFAULT_MAX_ACTIVE_PER_HOST,
    DEFAULT_MAX_EVENTS,
    DEFAULT_PASSIVATE_AFTER_S,
    DEFAULT_SIGNAL_RETENTION,
    DEFAULT_SNAPSHOT_EVERY,
    DEFAULT_STATE_DIR,
    LEASE_TTL_S_MAX,
    LEASE_TTL_S_MIN,
    LOCAL_DISPATCHERS_MAX,
    LOCAL_HOSTS_MAX,
    MAX_ACTIVE_PER_HOST_MAX,
    RETENTION_MAX,
    RETENTION_MIN,
)
from svit_cluster.errors import ConfigurationError, UnavailableError

__all__ = ["COMMANDS", "reasoner_options"]

_state_dir = click.option(
    "--state-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=DEFAULT_STATE_DIR,
    show_default=True,
    help="Folder holding the local cluster's data, logs and cluster.json.",
)


def _progress(message: str) -> None:
    """One progress line on stderr (stdout stays the result)."""
    click.echo(f"  … {message}", err=True)


@click.command()
@_state_dir
@click.option("--hosts", default=DEFAULT_LOCAL_HOSTS, show_default=True,
              type=click.IntRange(1, LOCAL_HOSTS_MAX),
              help="Number of Ray worker hosts (each runs one host agent).")
@click.option("--lease-ttl", "lease_ttl_s", default=DEFAULT_LEASE_TTL_S, show_default=True,
              type=click.IntRange(LEASE_TTL_S_MIN, LEASE_TTL_S_MAX),
              help="Host lease TTL in seconds.")
@click.option("--snapshot-every", default=DEFAULT_SNAPSHOT_EVERY, show_default=True,
              type=click.IntRange(1), help="Commits between snapshots of a process.")
@click.option("--passivate-after", "passivate_after_s", default=DEFAULT_PASSIVATE_AFTER_S,
              show_default=True, type=click.FloatRange(0.1),
              help="Idle seconds before an actor passivates.")
@click.option("--dispatchers", default=DEFAULT_LOCAL_DISPATCHERS, show_default=True,
              type=click.IntRange(0, LOCAL_DISPATCHERS_MAX),
              help="Outbox dispatcher worker processes.")
@click.option("--allow-webhook-host", "webhook_hosts", multiple=True,
              help="Let the dispatcher call webhooks on HOST or HOST:PORT (repeatable).")
@click.option("--reasoner", "reasoner_kind", type=click.Choice(["simulated", "openai"]),
              default="simulated", show_default=True,
              help="The model behind every process's reasoning loop.")
@click.option("--reasoner-url", default=None,
              help="OpenAI-compatible base URL, e.g. https://api.openai.com/v1 (openai).")
@click.option("--model", default=None, help="Model name sent to the reasoner (openai).")
@click.option("--reasoner-key-env", default="SVIT_REASONER_API_KEY", show_default=True,
              help="Environment variable holding the reasoner's API key (read by the "
                   "hosts; the key itself is never a flag).")
@click.option("--instructions", default=None,
              help="Operator instructions for every process (/thread/instructions).")
@click.option("--ports", "ports_file", default=None,
              type=click.Path(dir_okay=False, exists=True, path_type=Path),
              help="JSON file with the ports block (http/llm/spawn, allowlists, limits); "
                   "default: no port is granted.")
@click.option("--mounts", "mounts_file", default=None,
              type=click.Path(dir_okay=False, exists=True, path_type=Path),
              help="JSON file with the mount grants: a list of {name, kind (folder, "
                   "writable_folder, sql_query, value), source, processes: [id patterns]} "
                   "(see docs/mounts.md); default: nothing is mounted.")
@click.option("--redis-cluster", "redis_cluster", default=None, metavar="M[xR]",
              help="Run a Redis Cluster of M masters (>= 3) with R replicas each "
                   "(e.g. 3x1) instead of one redis-server.")
@click.option("--etcd-members", default=1, show_default=True, type=click.IntRange(1, 7),
              help="etcd members (1, 3, 5 or 7).")
@click.option("--max-active-per-host", "max_active_per_host",
              default=DEFAULT_MAX_ACTIVE_PER_HOST, show_default=True,
              type=click.IntRange(0, MAX_ACTIVE_PER_HOST_MAX),
              help="Process actors one host runs at once (its residency budget); at the "
                   "budget the least recently used idle process passivates for a new one. "
                   "0: derived from the host's share of this machine (16 per CPU, at most "
                   "half its memory at 96 MiB each; see docs/capacity.md).")
@click.option("--signal-retention", default=DEFAULT_SIGNAL_RETENTION, show_default=True,
              type=click.IntRange(RETENTION_MIN, RETENTION_MAX),
              help="Observer signals kept per process (a capped Redis stream).")
@click.option("--max-events", default=DEFAULT_MAX_EVENTS, show_default=True,
              type=click.IntRange(RETENTION_MIN, RETENTION_MAX),
              help="Reasoning events kept per session of a process (a capped Redis "
                   "stream; see docs/capacity.md).")
@output_option
def up(state_dir: Path, hosts: int, lease_ttl_s: int, snapshot_every: int,
       passivate_after_s: float, dispatchers: int, webhook_hosts: tuple[str, ...],
       reasoner_kind: str, reasoner_url: str | None, model: str | None,
       reasoner_key_env: str, instructions: str | None, ports_file: Path | None,
       mounts_file: Path | None, redis_cluster: str | None, etcd_members: int,
       max_active_per_host: int,
       signal_retention: int, max_events: int, output: str) -> None:
    """Start a complete local cluster in the background and wait until it is healthy.

    Writes STATE_DIR/cluster.json with the gateway URL, the tokens and every
    component's PID. etcd and redis-server must be on PATH
    (apt-get install etcd-server redis-server). With --reasoner openai, export
    the API key in the variable --reasoner-key-env names before running `up`. Then
    `eval "$(svit-cluster env --state-dir STATE_DIR)"` sets SVIT_URL and SVIT_TOKEN.
    """
    from svit_cluster.local import ClusterSpec, LocalCluster

    reasoner = reasoner_options(reasoner_kind, reasoner_url, model, reasoner_key_env,
                                instructions)
    try:
        ports = json.loads(ports_file.read_text()) if ports_file is not None else {}
    except ValueError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint="--ports") from None
    try:
        mounts = json.loads(mounts_file.read_text()) if mounts_file is not None else []
    except ValueError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint="--mounts") from None
    masters, replicas = 0, 0
    if redis_cluster is not None:
        m, _, r = redis_cluster.lower().partition("x")
        if not m.isdigit() or (r and not r.isdigit()):
            raise click.BadParameter("expected M or MxR, e.g. 3x1", param_hint="--redis-cluster")
        masters, replicas = int(m), int(r or 0)
    with waiting("starting the local cluster") as step, _start_failure(state_dir):
        cluster = LocalCluster.up(
            ClusterSpec(state_dir=state_dir, hosts=hosts, lease_ttl_s=lease_ttl_s,
                        snapshot_every=snapshot_every, passivate_after_s=passivate_after_s,
                        dispatchers=dispatchers,
                        dispatch_options={"webhook_hosts": list(webhook_hosts)},
                        reasoner=reasoner,
                        ports=ports if isinstance(ports, dict) else {"invalid": ports},
                        mounts=mounts,
                        redis_masters=masters, redis_replicas=replicas,
                        etcd_members=etcd_members,
                        max_active_per_host=max_active_per_host,
                        signal_retention=signal_retention, max_events=max_events),
            progress=step,
        )
    doc = cluster.doc
    reasoner_line = reasoner_kind + (f" {model} at {reasoner_url}"
                                     if reasoner_kind == "openai" else "")

    def text() -> None:
        click.echo(f"cluster up: gateway {doc['gateway']['url']}, hosts "
                   f"{', '.join(sorted(doc['hosts']))}")
        click.echo(f"reasoner: {reasoner_line}")
        click.echo(f"admin token in {cluster.path} (tokens.admin); to use it:")
        click.echo(f'  eval "$({invoked_as()} env --state-dir {state_dir})"')

    emit(output, {"cluster": doc["cluster"], "gateway_url": doc["gateway"]["url"],
                  "hosts": sorted(doc["hosts"]), "cluster_json": str(cluster.path),
                  "reasoner": reasoner_kind}, text)


@contextlib.contextmanager
def _start_failure(state_dir: Path) -> Iterator[None]:
    """An ``unavailable`` error while ``up`` starts the cluster says what to do
    about a local start (``up`` has stopped what it started), not about a gateway."""
    try:
        yield
    except UnavailableError as exc:
        raise UnavailableError(exc.message, **{**exc.fields, "advice": (
            f"nothing of it is left running; fix the cause above and run `{invoked_as()} up "
            f"--state-dir {state_dir}` again")}) from exc


def reasoner_options(kind: str, url: str | None, model: str | None, key_env: str,
                     instructions: str | None) -> dict[str, Any]:
    """The ``reasoner`` section of ``cluster.json`` for ``up``'s options (no key).

    Raises:
        ConfigurationError: ``openai`` without a URL or model, a bad variable name.
    """
    from svit_cluster.reasoning import ReasonerConfig

    if not key_env.replace("_", "").isalnum():
        raise ConfigurationError("--reasoner-key-env must be an environment variable name")
    doc: dict[str, Any] = {"kind": kind, "api_key_env": key_env}
    if kind == "openai":
        doc.update(base_url=url or "", model=model or "")
    elif url or model:
        raise ConfigurationError("--reasoner-url and --model need --reasoner openai")
    if instructions:
        doc["instructions"] = instructions
    ReasonerConfig.from_dict(doc)  # validates
    if kind == "openai" and not os.environ.get(key_env):
        _progress(f"note: {key_env} is not set; the reasoner is called without a key")
    return doc


@click.command()
@_state_dir
@output_option
def down(state_dir: Path, output: str) -> None:
    """Stop every component of the local cluster by PID."""
    from svit_cluster.local import LocalCluster

    cluster = LocalCluster.load(state_dir)
    with waiting("stopping the local cluster") as step:
        cluster.down(progress=step)
    emit(output, {"down": True, "cluster": cluster.doc.get("cluster"),
                  "state_dir": str(state_dir)}, lambda: click.echo("cluster down"))


@click.command()
@_state_dir
@output_option
def env(state_dir: Path, output: str) -> None:
    """Print shell exports of SVIT_URL and SVIT_TOKEN for the local cluster.

    \b
      eval "$(svit-cluster env)"      then SvitClient() and every command find it
    """
    from svit_cluster.local import LocalCluster

    doc = LocalCluster.load(state_dir).doc
    url, token = doc["gateway"]["url"], doc["tokens"]["admin"]
    emit(output, {"SVIT_URL": url, "SVIT_TOKEN": token}, lambda: click.echo(
        f"export SVIT_URL={shlex.quote(url)}\nexport SVIT_TOKEN={shlex.quote(token)}"))


@click.command()
@_state_dir
@output_option
def status(state_dir: Path, output: str) -> None:
    """Hosts, leases, owners and live actors of the local cluster (a diagnostic: exit 0
    whenever it could report; use `healthcheck` for a pass/fail check).

    \b
    Per host: its process and lease; from its agent (through the gateway's
    GET /v1/admin/hosts): active actors / residency budget, warm spares, the
    summed PSS of its process actors (warm spares included, so an idle host
    shows some), the keepalive lag, the idle age of its least
    recently used process, processes passivated at the budget, leases lost.
    """
    from svit_cluster.local import LocalCluster, cluster_status

    info = cluster_status(LocalCluster.load(state_dir))
    if output == "json":
        emit(output, info, lambda: None)
        return
    click.echo(f"gateway {info['gateway']['url']}: "
               f"{'healthy' if info['gateway']['healthy'] else 'UNHEALTHY'}")
    for host in info["hosts"]:
        lease = host.get("lease")
        # a dead host's lease stays in etcd until its TTL ends (or a peer revokes it)
        stale = " (in etcd until its TTL ends)" if lease and not host["alive"] else ""
        click.echo(f"  {host['name']}: process {'up' if host['alive'] else 'DOWN'}, "
                   f"lease {lease or '-'}{stale}, owners {host.get('owners', 0)}")
        agent = host.get("agent")
        if agent and agent.get("answered"):
            lru = agent.get("lru_idle_s")
            click.echo(
                f"      actors {agent.get('actors')}/{agent.get('max_active')}, spares "
                f"{agent.get('spares')}, PSS {agent.get('pss_mib') or 0:.0f} MiB, keepalive lag "
                f"{agent.get('keepalive_lag_s') or 0:.3f} s (max "
                f"{agent.get('max_keepalive_lag_s') or 0:.3f}), LRU idle "
                f"{'-' if lru is None else f'{lru:.0f} s'}, passivated at budget "
                f"{agent.get('evictions', 0)}, lost leases {len(agent.get('lost_leases') or [])}")
        elif agent is not None or info.get("agents_error"):
            click.echo("      agent: no answer" + (f" ({info['agents_error']})"
                                                   if info.get("agents_error") else ""))
    click.echo(f"owners: {len(info['owners'])}")
    for svc in ("redis", "etcd"):
        procs = info[svc].get("nodes" if svc == "redis" else "members", [])
        click.echo(f"{svc}: " + ", ".join(
            f"{p['name']} {'up' if p['alive'] else 'DOWN'}" for p in procs))


def _fault_command(name: str, target: str) -> Callable[[Callable[..., None]], click.Command]:
    """The command ``name`` acting on TARGET (``HOST``, ``NODE``, ``MEMBER``) of the
    local cluster in ``--state-dir``, with ``--output``."""

    def decorate(fn: Callable[..., None]) -> click.Command:
        return click.command(name=name)(_state_dir(click.argument(target)(output_option(fn))))

    return decorate


def _signalled(name: str, host: str, pids: list[int], output: str, signal: str,
               undo: str = "", state_dir: Path | None = None) -> None:
    """Report the PIDs a host fault command sent ``signal`` to; in text, also
    the command that undoes it (``undo``, run on the same ``state_dir``)."""
    def text() -> None:
        click.echo(f"{name} {host}: {signal} sent to {len(pids)} processes "
                   f"(pids {', '.join(map(str, pids)) or 'none'})")
        if undo:
            click.echo(f"undo: {invoked_as()} {undo} {host} --state-dir {state_dir}")

    emit(output, {"command": name, "host": host, "pids": pids}, text)


@_fault_command("kill-host", "host")
def kill_host(state_dir: Path, host: str, output: str) -> None:
    """SIGKILL HOST's raylet and all its worker processes."""
    from svit_cluster.local import LocalCluster

    pids = LocalCluster.load(state_dir).kill_host(host)
    _signalled("kill-host", host, pids, output, "SIGKILL", "restart-host", state_dir)


@_fault_command("pause-host", "host")
def pause_host(state_dir: Path, host: str, output: str) -> None:
    """SIGSTOP every process of HOST (a frozen, stale owner)."""
    from svit_cluster.local import LocalCluster

    pids = LocalCluster.load(state_dir).pause_host(host)
    _signalled("pause-host", host, pids, output, "SIGSTOP", "resume-host", state_dir)


@_fault_command("resume-host", "host")
def resume_host(state_dir: Path, host: str, output: str) -> None:
    """SIGCONT every process of HOST."""
    from svit_cluster.local import LocalCluster

    pids = LocalCluster.load(state_dir).resume_host(host)
    _signalled("resume-host", host, pids, output, "SIGCONT")


def _killed(name: str, what: str, target: str, pid: int, output: str) -> None:
    """Report the PID a store fault command killed."""
    emit(output, {"command": name, what: target, "pid": pid},
         lambda: click.echo(f"{name} {target}: SIGKILL sent to pid {pid}"))


@_fault_command("kill-redis", "NODE")
def kill_redis(state_dir: Path, node: str, output: str) -> None:
    """SIGKILL Redis NODE (n0.. of a Redis Cluster: its replica takes over)."""
    from svit_cluster.local import LocalCluster

    _killed("kill-redis", "node", node, LocalCluster.load(state_dir).kill_redis(node), output)


@_fault_command("kill-etcd", "MEMBER")
def kill_etcd(state_dir: Path, member: str, output: str) -> None:
    """SIGKILL etcd MEMBER (m0.. of an etcd cluster)."""
    from svit_cluster.local import LocalCluster

    _killed("kill-etcd", "member", member, LocalCluster.load(state_dir).kill_etcd(member),
            output)


@click.command(name="restart-host")
@_state_dir
@click.argument("host")
@click.option("--timeout", "timeout_s", default=90.0, show_default=True,
              type=click.FloatRange(1.0), help="Seconds to wait for the host to be live.")
@output_option
def restart_host(state_dir: Path, host: str, timeout_s: float, output: str) -> None:
    """Start HOST again (after kill-host) with its agent; waits until it is live."""
    from svit_cluster.local import LocalCluster

    with waiting(f"restarting host {host}"):
        LocalCluster.load(state_dir).restart_host(host, timeout_s=timeout_s)
    emit(output, {"host": host, "live": True},
         lambda: click.echo(f"restart-host {host}: live"))


@click.command(name="add-host")
@_state_dir
@click.argument("host", required=False)
@click.option("--timeout", "timeout_s", default=90.0, show_default=True,
              type=click.FloatRange(1.0), help="Seconds to wait for the host to be live.")
@output_option
def add_host(state_dir: Path, host: str | None, timeout_s: float, output: str) -> None:
    """Add a Ray host (named HOST, default h<N+1>) and its agent; waits until it is live."""
    from svit_cluster.local import LocalCluster

    with waiting(f"adding host {host or ''}".rstrip()):
        name = LocalCluster.load(state_dir).add_host(host, timeout_s=timeout_s)
    emit(output, {"host": name, "live": True}, lambda: click.echo(f"add-host {name}: live"))


@click.command()
@click.option("--state-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Use (and keep) this folder; default: a fresh temporary folder.")
@click.option("--hosts", default=3, show_default=True, type=click.IntRange(2, 8),
              help="Ray hosts of the local cluster (one is killed midway).")
@click.option("--clients", default=4, show_default=True, type=click.IntRange(1, 32),
              help="Concurrent clients racing on the counter.")
@click.option("--ops", default=60, show_default=True, type=click.IntRange(10, 10_000),
              help="Committed increments each client makes.")
@click.option("--lease-ttl", "lease_ttl_s", default=3, show_default=True,
              type=click.IntRange(1, 60),
              help="Host lease TTL in seconds: failover comes within about this long.")
@output_option
def demo(state_dir: Path | None, hosts: int, clients: int, ops: int, lease_ttl_s: int,
         output: str) -> None:
    """The main job: 3 hosts, the reference request, racing clients, a host kill, a stale owner.

    The stale owner: the owner of a second process is frozen with a request in
    flight, a new owner takes over, the old one wakes and its commit is refused
    by the Redis fence (counted from the store's record of refused writes).

    Exits non-zero if any check fails. Everything it starts is stopped again.
    """
    from svit_cluster.demo import run_demo

    ok = run_demo(state_dir=state_dir, hosts=hosts, clients=clients, ops=ops,
                  lease_ttl_s=lease_ttl_s, json_summary=output == "json")
    raise SystemExit(EXIT_OK if ok else EXIT_FAILED)


#: The commands, in the order ``svit-cluster`` registers them.
COMMANDS: tuple[click.Command, ...] = (
    up, down, env, status, kill_host, pause_host, resume_host, kill_redis, kill_etcd,
    restart_host, add_host, demo)
