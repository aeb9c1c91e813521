"""``svit-cluster gateway | host-agent | healthcheck | smoke``: what a container runs.

The long-running components (the gateway, one Ray node's host agent; the
outbox dispatcher is in :mod:`svit_cluster.cli.dispatch`) take their settings
from ``SVIT_*`` variables (or a local cluster's ``cluster.json``) and run until
stopped. ``healthcheck`` is the probe a container runs and ``smoke`` the check
``helm test`` runs: exit 0 healthy or committed, 1 not, 3 unreachable or
unavailable (see :mod:`svit_cluster.cli._util`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import httpx

from svit_cluster.cli._util import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_UNAVAILABLE,
    emit,
    gateway_options,
    output_option,
    waiting,
)
from svit_cluster.cluster import check_heartbeat
from svit_cluster.defaults import DEFAULT_GATEWAY_PORT
from svit_cluster.errors import ErrorCode, NotFound, SvitError

__all__ = ["COMMANDS"]


@click.command()
@click.option("--state-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Read the cluster from STATE_DIR/cluster.json; default: SVIT_* env vars.")
@click.option("--host", default="0.0.0.0", show_default=True, help="Bind address.")
@click.option("--port", default=DEFAULT_GATEWAY_PORT, show_default=True,
              type=click.IntRange(1, 65535))
@click.option("--max-request-bytes", default=None, type=click.IntRange(1),
              help="Request body cap (default: cluster setting or SVIT_MAX_REQUEST_BYTES).")
def gateway(state_dir: Path | None, host: str, port: int, max_request_bytes: int | None
            ) -> None:
    """Run the authenticated HTTP gateway (Ray driver + etcd route cache + uvicorn)."""
    from svit_cluster.cluster.serve import run_gateway

    run_gateway(state_dir=state_dir, host=host, port=port,
                max_request_bytes=max_request_bytes)


@click.command(name="host-agent")
@click.option("--host-id", envvar="SVIT_HOST_ID", required=True,
              help="This host's name (its Ray node carries resource svit_host:<name>).")
def host_agent(host_id: str) -> None:
    """Start this Ray node's host agent from SVIT_* env vars and keep it alive."""
    from svit_cluster.cluster.serve import run_host_agent

    run_host_agent(host_id)


#: What ``healthcheck`` asks without ``--url`` or ``SVIT_URL``: a gateway on this
#: machine at its default port.
_LOCAL_HEALTHZ = f"http://127.0.0.1:{DEFAULT_GATEWAY_PORT}/healthz"


@click.command()
@click.option("--url", default=None,
              help="Gateway URL that must answer 200 (ignored with --heartbeat) "
                   "[default: $SVIT_URL/healthz, else "
                   f"{_LOCAL_HEALTHZ}].")
@click.option("--timeout", "timeout_s", default=3.0, show_default=True,
              type=click.FloatRange(0.01), help="HTTP timeout in seconds.")
@click.option("--heartbeat", "heartbeat_file", default=None,
              type=click.Path(dir_okay=False, path_type=Path),
              help="Check a host agent's heartbeat file instead of a URL "
                   "(written by `svit-cluster host-agent`; no Ray driver is started).")
@click.option("--max-age", "max_age_s", default=30.0, show_default=True,
              type=click.FloatRange(min=0, min_open=True),
              help="With --heartbeat: oldest acceptable heartbeat, in seconds.")
@click.option("--require-lease", is_flag=True,
              help="With --heartbeat: also require the host lease to be held (readiness).")
@output_option
def healthcheck(url: str | None, timeout_s: float, heartbeat_file: Path | None,
                max_age_s: float, require_lease: bool, output: str) -> None:
    """Exit 0 when healthy, 1 when unhealthy, 3 when the URL is unreachable (container
    probes treat any non-zero exit as a failure).

    \b
    Gateway:     svit-cluster healthcheck --url http://127.0.0.1:8080/livez
    Host agent:  svit-cluster healthcheck --heartbeat FILE [--require-lease]
    """
    if heartbeat_file is not None:
        ok, reason = check_heartbeat(heartbeat_file, max_age_s=max_age_s,
                                     require_lease=require_lease)
        if output == "json":
            emit(output, {"heartbeat": str(heartbeat_file), "healthy": ok, "reason": reason},
                 lambda: None)
        else:
            click.echo(reason, err=not ok)
        raise SystemExit(EXIT_OK if ok else EXIT_FAILED)

    from svit_cluster.settings import ClientSettings

    if url is None:
        base = ClientSettings().url
        url = base.rstrip("/") + "/healthz" if base else _LOCAL_HEALTHZ
    doc: dict[str, Any] = {"url": url, "healthy": False, "status": None}
    try:
        resp = httpx.get(url, timeout=timeout_s)
        doc.update(status=resp.status_code, healthy=resp.status_code == 200)
        code = EXIT_OK if doc["healthy"] else EXIT_FAILED
    except httpx.HTTPError as exc:
        doc["error"] = f"{type(exc).__name__}: {exc}"
        code = EXIT_UNAVAILABLE
    emit(output, doc, lambda: click.echo(
        f"{url}: " + ("healthy" if doc["healthy"] else
                      f"UNHEALTHY (HTTP {doc['status']})" if doc["status"] else
                      f"unreachable ({doc['error']})")))
    raise SystemExit(code)


@click.command()
@gateway_options
@click.option("--tenant", default="smoke", show_default=True)
@click.option("--timeout", "timeout_s", default=10.0, show_default=True,
              type=click.FloatRange(0.01), help="Seconds per HTTP call.")
@click.option("--attempts", default=3, show_default=True, type=click.IntRange(1, 100),
              help="Tries per call for transport errors and unavailable answers.")
@click.option("--process-id", default=None,
              help="Process to use (default svit://<tenant>/helm-test): created when missing, "
                   "reused otherwise.")
@click.option("--delete/--keep", "delete", default=False, show_default=True,
              help="Delete the smoke process afterwards (what `helm test` does).")
@output_option
def smoke(url: str | None, token: str | None, state_dir: Path | None, tenant: str,
          timeout_s: float, attempts: int, process_id: str | None, delete: bool,
          output: str) -> None:
    """Run one authenticated activation on the smoke process.

    The process is created when missing and reused otherwise (a concurrent run
    only causes a retry: the activation increments ``/memory/n`` against the
    observed version). With ``--delete`` it is deleted afterwards, whatever
    the outcome, so `helm test` leaves nothing behind; a process already gone
    (another run deleted it) is fine.

    Exit 0 when it committed (and, with --delete, was deleted), 1 when refused
    or not committed, 3 when the gateway is unreachable or unavailable.
    """
    from svit_cluster.client import RecoveredCommit, SvitClient
    from svit_cluster.settings import resolve_gateway

    base, tok = resolve_gateway(url, token, state_dir=state_dir)
    pid = process_id or f"svit://{tenant}/helm-test"
    script = '(define (main input) (do (write "/memory/n" (+ 1 (read "/memory/n"))) 1))'
    deleted: bool | None = None
    with waiting(f"smoke {pid}") as step:
        def retrying(attempt: int, exc: BaseException, wait_s: float) -> None:
            cause = exc.code if isinstance(exc, SvitError) else type(exc).__name__
            step.note(f"attempt {attempt}/{attempts} failed ({cause}); "
                      f"retrying in {wait_s:.1f} s")

        with SvitClient(base, tok, timeout_s=timeout_s, attempts=attempts,
                        max_wait_s=1.0, on_retry=retrying) as client:
            try:
                client.create_process(pid, memory={"n": 0}, scripts={"inc": script})
            except SvitError as exc:
                if exc.code != ErrorCode.CONFLICT:
                    raise
                # made by an earlier run: reused
            try:
                resp = client.activate_until_committed(pid, "inc", None)
            finally:
                deleted = _delete_quietly(client, pid) if delete else None
    status = "committed" if isinstance(resp, RecoveredCommit) else resp.outcome.status
    ok = status == "committed"
    doc: dict[str, Any] = {"process_id": pid, "status": status, "ok": ok, "url": base}
    if deleted is not None:
        doc["deleted"] = deleted
    emit(output, doc, lambda: click.echo(
        f"smoke {pid}: {status}" + ("; deleted" if deleted else "")))
    raise SystemExit(EXIT_OK if ok else EXIT_FAILED)


def _delete_quietly(client: Any, pid: str) -> bool:
    """Delete ``pid``; True when deleted or already gone.

    Raises:
        SvitError: any other answer (the smoke run then fails with it).
    """
    try:
        client.delete_process(pid)
    except NotFound:
        pass
    return True


#: The commands, in the order ``svit-cluster`` registers them.
COMMANDS: tuple[click.Command, ...] = (gateway, host_agent, healthcheck, smoke)
