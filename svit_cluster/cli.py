"""``svit-cluster``: run a local cluster, its gateway, faults, and the demo.

Every command that acts on a local cluster finds it through
``--state-dir`` (default ``./.svit``), where ``up`` writes ``cluster.json``.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import click

from svit_cluster import __version__
from svit_cluster.errors import SvitError

__all__ = ["main"]

DEFAULT_STATE_DIR = Path(".svit")
_state_dir = click.option(
    "--state-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=DEFAULT_STATE_DIR,
    show_default=True,
    help="Folder holding the local cluster's data, logs and cluster.json.",
)


def _fail(exc: SvitError) -> None:
    click.echo(f"error: {exc.code}: {exc.message}", err=True)
    raise SystemExit(2)


def _progress(message: str) -> None:
    click.echo(f"  … {message}", err=True)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="svit-cluster")
def cli() -> None:
    """Fenced, durable hosting of Svit processes on Ray, etcd and Redis.

    \b
    Local cluster on this machine (loopback only):
      svit-cluster up --hosts 3          start etcd, Redis, Ray head + 3 hosts, gateway
      svit-cluster status                hosts, leases, owners, live actors
      svit-cluster kill-host h2          SIGKILL a host's raylet and its workers
      svit-cluster pause-host h2         SIGSTOP a host (resume-host to continue)
      svit-cluster down                  stop everything by PID
      svit-cluster etcd-restored         after restoring etcd from a backup (see its --help)
      svit-cluster demo                  the end-to-end demo (starts and stops its own cluster)

    \b
    Components (what the Helm chart runs):
      svit-cluster gateway               the authenticated HTTP gateway
      svit-cluster host-agent            this Ray node's host agent
      svit-cluster healthcheck           exit 0 when a gateway (URL) or agent (heartbeat) is healthy
      svit-cluster smoke --url URL       one authenticated activation against a gateway
    """


@cli.command()
@_state_dir
@click.option("--hosts", default=3, show_default=True, type=click.IntRange(1, 16),
              help="Number of Ray worker hosts (each runs one host agent).")
@click.option("--lease-ttl", "lease_ttl_s", default=5, show_default=True,
              type=click.IntRange(1, 300), help="Host lease TTL in seconds.")
@click.option("--snapshot-every", default=100, show_default=True, type=click.IntRange(1),
              help="Commits between snapshots of a process.")
@click.option("--passivate-after", "passivate_after_s", default=300.0, show_default=True,
              type=click.FloatRange(0.1), help="Idle seconds before an actor passivates.")
@click.option("--dispatchers", default=1, show_default=True, type=click.IntRange(0, 16),
              help="Outbox dispatcher worker processes.")
@click.option("--allow-webhook-host", "webhook_hosts", multiple=True,
              help="Let the dispatcher call webhooks on HOST or HOST:PORT (repeatable).")
@click.option("--redis-cluster", "redis_cluster", default=None, metavar="M[xR]",
              help="Run a Redis Cluster of M masters (>= 3) with R replicas each "
                   "(e.g. 3x1) instead of one redis-server.")
@click.option("--etcd-members", default=1, show_default=True, type=click.IntRange(1, 7),
              help="etcd members (1, 3, 5 or 7).")
def up(state_dir: Path, hosts: int, lease_ttl_s: int, snapshot_every: int,
       passivate_after_s: float, dispatchers: int, webhook_hosts: tuple[str, ...],
       redis_cluster: str | None, etcd_members: int) -> None:
    """Start a complete local cluster in the background and wait until it is healthy.

    Writes STATE_DIR/cluster.json with the gateway URL, the tokens and every
    component's PID. etcd and redis-server must be on PATH
    (apt-get install etcd-server redis-server).
    """
    from svit_cluster.local import ClusterSpec, LocalCluster

    masters, replicas = 0, 0
    if redis_cluster is not None:
        m, _, r = redis_cluster.lower().partition("x")
        if not m.isdigit() or (r and not r.isdigit()):
            raise click.BadParameter("expected M or MxR, e.g. 3x1", param_hint="--redis-cluster")
        masters, replicas = int(m), int(r or 0)
    try:
        cluster = LocalCluster.up(
            ClusterSpec(state_dir=state_dir, hosts=hosts, lease_ttl_s=lease_ttl_s,
                        snapshot_every=snapshot_every, passivate_after_s=passivate_after_s,
                        dispatchers=dispatchers,
                        dispatch_options={"webhook_hosts": list(webhook_hosts)},
                        redis_masters=masters, redis_replicas=replicas,
                        etcd_members=etcd_members),
            progress=_progress,
        )
    except SvitError as exc:
        _fail(exc)
    doc = cluster.doc
    click.echo(f"cluster up: gateway {doc['gateway']['url']}, hosts "
               f"{', '.join(sorted(doc['hosts']))}")
    click.echo(f"admin token in {cluster.path} (tokens.admin)")


@cli.command()
@_state_dir
def down(state_dir: Path) -> None:
    """Stop every component of the local cluster by PID."""
    from svit_cluster.local import LocalCluster

    try:
        LocalCluster.load(state_dir).down(progress=_progress)
    except SvitError as exc:
        _fail(exc)
    click.echo("cluster down")


@cli.command()
@_state_dir
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
def status(state_dir: Path, as_json: bool) -> None:
    """Hosts, leases, owners and live actors of the local cluster."""
    from svit_cluster.local import LocalCluster
    from svit_cluster.local._status import cluster_status

    try:
        info = cluster_status(LocalCluster.load(state_dir))
    except SvitError as exc:
        _fail(exc)
    if as_json:
        click.echo(json.dumps(info, indent=2, sort_keys=True))
        return
    click.echo(f"gateway {info['gateway']['url']}: "
               f"{'healthy' if info['gateway']['healthy'] else 'UNHEALTHY'}")
    for host in info["hosts"]:
        click.echo(f"  {host['name']}: process {'up' if host['alive'] else 'DOWN'}, "
                   f"lease {host.get('lease') or '-'}, owners {host.get('owners', 0)}")
    click.echo(f"owners: {len(info['owners'])}")
    for svc in ("redis", "etcd"):
        procs = info[svc].get("nodes" if svc == "redis" else "members", [])
        click.echo(f"{svc}: " + ", ".join(
            f"{p['name']} {'up' if p['alive'] else 'DOWN'}" for p in procs))



@cli.command(name="etcd-restored")
@click.option("--state-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="A local cluster's folder: etcd, Redis and the cluster name come from "
                   "its cluster.json (otherwise give --etcd, --redis and --cluster).")
@click.option("--etcd", "etcd_endpoint", default=None, help="The restored etcd, HOST:PORT.")
@click.option("--redis", "redis_url", default=None, help="The cluster's Redis, redis://HOST:PORT/DB.")
@click.option("--cluster", "cluster_name", default=None, help="The cluster name.")
@click.option("--prefix", default=None, help="The store's Redis key prefix [default: svit].")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
def etcd_restored(state_dir: Path | None, etcd_endpoint: str | None, redis_url: str | None,
                  cluster_name: str | None, prefix: str | None, as_json: bool) -> None:
    """Run once after restoring etcd from a backup (snapshot restore).

    \b
    A restore takes etcd revisions back, so new fencing tokens would fall below
    the Redis fences, and brings back ownership records of the backup's time.
    This raises the fence epoch (the high part of every token) past the
    highest Redis fence, and releases ownership records whose token is below
    their process's fence or whose host is not registered under the record's
    lease. Safe to run more than once and while hosts run. Exit 0 on success,
    2 when etcd or Redis fails.
    """
    from svit_cluster.ownership import open_client, recover_after_restore
    from svit_cluster.store import DEFAULT_PREFIX, RedisFences, connect

    if state_dir is not None:
        from svit_cluster.local import LocalCluster

        try:
            doc = LocalCluster.load(state_dir).doc
        except SvitError as exc:
            _fail(exc)
        etcd_endpoint = etcd_endpoint or doc["etcd"]["endpoint"]
        redis_url = redis_url or doc["redis"]["url"]
        cluster_name = cluster_name or doc["cluster"]
    if not (etcd_endpoint and redis_url and cluster_name):
        raise click.UsageError("give --state-dir, or all of --etcd, --redis and --cluster")

    async def run() -> dict[str, Any]:
        client = open_client(etcd_endpoint)
        redis_client = connect(redis_url)
        try:
            report = await recover_after_restore(
                client, cluster_name, RedisFences(redis_client, prefix=prefix or DEFAULT_PREFIX))
            return report.to_dict()
        finally:
            redis_client.close()
            await client.close()

    try:
        info = asyncio.run(run())
    except SvitError as exc:
        _fail(exc)
    if as_json:
        click.echo(json.dumps(info, indent=2, sort_keys=True))
        return
    click.echo(f"fence epoch {info['epoch_before']} -> {info['epoch_after']} (highest fence "
               f"{info['highest_fence']} of {info['fences']}); ownership records released "
               f"{len(info['released'])}, kept {info['kept']}")
    for pid, reason in info["released"].items():
        click.echo(f"  released {pid}: {reason}")

def _host_command(name: str, action: str) -> Any:
    @cli.command(name=name)
    @_state_dir
    @click.argument("host")
    def command(state_dir: Path, host: str) -> None:
        from svit_cluster.local import LocalCluster

        try:
            cluster = LocalCluster.load(state_dir)
            pids = getattr(cluster, action)(host)
        except SvitError as exc:
            _fail(exc)
        click.echo(f"{name} {host}: signalled {len(pids)} processes")

    command.__doc__ = {
        "kill_host": "SIGKILL HOST's raylet and all its worker processes.",
        "pause_host": "SIGSTOP every process of HOST (a frozen, stale owner).",
        "resume_host": "SIGCONT every process of HOST.",
    }[action]
    return command


def _store_command(name: str, action: str, what: str) -> Any:
    @cli.command(name=name)
    @_state_dir
    @click.argument(what)
    def command(state_dir: Path, **kwargs: str) -> None:
        from svit_cluster.local import LocalCluster

        target = kwargs[what.lower()]
        try:
            pid = getattr(LocalCluster.load(state_dir), action)(target)
        except SvitError as exc:
            _fail(exc)
        click.echo(f"{name} {target}: SIGKILL sent to pid {pid}")

    command.__doc__ = {
        "kill_redis": "SIGKILL Redis NODE (n0.. of a Redis Cluster: its replica takes over).",
        "kill_etcd": "SIGKILL etcd MEMBER (m0.. of an etcd cluster).",
    }[action]
    return command


_store_command("kill-redis", "kill_redis", "NODE")
_store_command("kill-etcd", "kill_etcd", "MEMBER")
_host_command("kill-host", "kill_host")
_host_command("pause-host", "pause_host")
_host_command("resume-host", "resume_host")

from svit_cluster.dispatch.cli import dead_letters, dispatcher  # noqa: E402

cli.add_command(dispatcher)
cli.add_command(dead_letters)


@cli.command()
@click.option("--state-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Use (and keep) this folder; default: a fresh temporary folder.")
@click.option("--hosts", default=3, show_default=True, type=click.IntRange(2, 8))
@click.option("--clients", default=4, show_default=True, type=click.IntRange(1, 32),
              help="Concurrent clients racing on the counter.")
@click.option("--ops", default=60, show_default=True, type=click.IntRange(10, 10_000),
              help="Committed increments each client makes.")
@click.option("--lease-ttl", "lease_ttl_s", default=3, show_default=True,
              type=click.IntRange(1, 60))
def demo(state_dir: Path | None, hosts: int, clients: int, ops: int, lease_ttl_s: int) -> None:
    """The main job: a 3-host cluster, the reference request, racing clients, a host kill.

    Exits non-zero if any check fails. Everything it starts is stopped again.
    """
    from svit_cluster.demo import run_demo

    ok = run_demo(state_dir=state_dir, hosts=hosts, clients=clients, ops=ops,
                  lease_ttl_s=lease_ttl_s)
    raise SystemExit(0 if ok else 1)


@cli.command()
@click.option("--state-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Read the cluster from STATE_DIR/cluster.json; default: SVIT_* env vars.")
@click.option("--host", default="0.0.0.0", show_default=True, help="Bind address.")
@click.option("--port", default=8080, show_default=True, type=click.IntRange(1, 65535))
@click.option("--max-request-bytes", default=None, type=click.IntRange(1),
              help="Request body cap (default: cluster setting or SVIT_MAX_REQUEST_BYTES).")
def gateway(state_dir: Path | None, host: str, port: int, max_request_bytes: int | None
            ) -> None:
    """Run the authenticated HTTP gateway (Ray driver + etcd route cache + uvicorn)."""
    from svit_cluster.cluster.serve import serve_gateway

    try:
        asyncio.run(serve_gateway(state_dir=state_dir, host=host, port=port,
                                  max_request_bytes=max_request_bytes))
    except SvitError as exc:
        _fail(exc)


@cli.command(name="host-agent")
@click.option("--host-id", envvar="SVIT_HOST_ID", required=True,
              help="This host's name (its Ray node carries resource svit_host:<name>).")
def host_agent(host_id: str) -> None:
    """Start this Ray node's host agent from SVIT_* env vars and keep it alive."""
    from svit_cluster.cluster.serve import run_host_agent

    try:
        run_host_agent(host_id)
    except SvitError as exc:
        _fail(exc)


@cli.command()
@click.option("--url", default="http://127.0.0.1:8080/healthz", show_default=True,
              help="Gateway URL that must answer 200 (ignored with --heartbeat).")
@click.option("--timeout", "timeout_s", default=3.0, show_default=True,
              help="HTTP timeout in seconds.")
@click.option("--heartbeat", "heartbeat_file", default=None,
              type=click.Path(dir_okay=False, path_type=Path),
              help="Check a host agent's heartbeat file instead of a URL "
                   "(written by `svit-cluster host-agent`; no Ray driver is started).")
@click.option("--max-age", "max_age_s", default=30.0, show_default=True,
              type=click.FloatRange(min=0, min_open=True),
              help="With --heartbeat: oldest acceptable heartbeat, in seconds.")
@click.option("--require-lease", is_flag=True,
              help="With --heartbeat: also require the host lease to be held (readiness).")
def healthcheck(url: str, timeout_s: float, heartbeat_file: Path | None, max_age_s: float,
                require_lease: bool) -> None:
    """Exit 0 when healthy, 1 otherwise (for container probes).

    \b
    Gateway:     svit-cluster healthcheck --url http://127.0.0.1:8080/livez
    Host agent:  svit-cluster healthcheck --heartbeat FILE [--require-lease]
    """
    if heartbeat_file is not None:
        from svit_cluster.cluster._heartbeat import check_heartbeat

        ok, reason = check_heartbeat(heartbeat_file, max_age_s=max_age_s,
                                     require_lease=require_lease)
        click.echo(reason, err=not ok)
        raise SystemExit(0 if ok else 1)

    import httpx

    try:
        ok = httpx.get(url, timeout=timeout_s).status_code == 200
    except httpx.HTTPError:
        ok = False
    raise SystemExit(0 if ok else 1)


@cli.command()
@click.option("--url", required=True, help="Gateway base URL.")
@click.option("--token", envvar="SVIT_TOKEN", required=True, help="Bearer token (SVIT_TOKEN).")
@click.option("--tenant", default="smoke", show_default=True)
def smoke(url: str, token: str, tenant: str) -> None:
    """Create a process and run one authenticated activation; exit 0 on success."""
    import uuid

    from svit_cluster.client import SvitClient

    pid = f"svit://{tenant}/smoke-{uuid.uuid4().hex[:8]}"
    script = '(define (main input) (do (write "/memory/n" (+ 1 (read "/memory/n"))) 1))'
    try:
        with SvitClient(url, token) as client:
            client.create_process(pid, memory={"n": 0}, scripts={"inc": script})
            resp = client.activate(pid, "inc", None, expected_version=0)
    except SvitError as exc:
        _fail(exc)
    ok = resp.outcome.status == "committed"
    click.echo(f"smoke {pid}: {resp.outcome.status}")
    raise SystemExit(0 if ok else 1)


def main() -> None:
    """Console entry point."""
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    cli(prog_name="svit-cluster")


if __name__ == "__main__":
    main()
