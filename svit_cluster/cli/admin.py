"""``svit-cluster inbox drop | timers list | timers cancel | etcd-restored``: repairs.

What an operator runs against a live cluster: dead-letter a process's inbox
head whose turn never succeeds, list and cancel its durable timers (through a
gateway: ``--url``/``--token``, else ``SVIT_URL``/``SVIT_TOKEN``, else
``./.svit``), and raise the fence epoch after etcd was restored from a backup
(straight to etcd and Redis). Exit codes and ``--output {text,json}``: see
:mod:`svit_cluster.cli._util`.
"""

from __future__ import annotations

import asyncio
import datetime
import sys
import time
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from svit_cluster.cli._util import (
    EXIT_FAILED,
    emit,
    fail,
    gateway_options,
    output_option,
    timeout_option,
)
from svit_cluster.defaults import DEFAULT_TIMER_PAGE, TIMER_PAGE_MAX
from svit_cluster.errors import SvitError
from svit_cluster.store import DEFAULT_PREFIX, RedisFences, connect

__all__ = ["COMMANDS"]


@click.group()
def inbox() -> None:
    """Operate on a process's inbox."""


@inbox.command(name="drop")
@click.argument("process_id")
@click.option("--message-id", default=None, help="The head's message id ({content, id}).")
@click.option("--hash", "head_hash", default=None, help="The head's content hash.")
@click.option("--reason", required=True, help="Why it is dropped (kept in the dead letter).")
@gateway_options
@output_option
def inbox_drop(process_id: str, message_id: str | None, head_hash: str | None, reason: str,
               state_dir: Path | None, url: str | None, token: str | None,
               output: str) -> None:
    """Dead-letter the head of PROCESS_ID's inbox (a message whose turn never succeeds).

    The head must be the message named by --message-id and/or --hash (exit 1
    with inbox_conflict otherwise, nothing changed). It moves to
    /thread/dead_letters (with the reason and the version) in one fenced
    commit, and the agent goes on with the next message.
    """
    from svit_cluster.client import SvitClient
    from svit_cluster.settings import resolve_gateway

    if message_id is None and head_hash is None:
        raise click.UsageError("give --message-id or --hash (the head to drop)")
    url, token = resolve_gateway(url, token, state_dir=state_dir)
    try:
        with SvitClient(url, token) as client:
            result = client.inbox_drop(process_id, reason=reason, message_id=message_id,
                                       head_hash=head_hash)
    except SvitError as exc:
        fail(exc)
    letter = result["dropped"]
    emit(output, result, lambda: click.echo(
        f"dropped {letter.get('message_id') or letter['inbox_hash']} from {process_id} "
        f"at version {result['version']} (kept in /thread/dead_letters)"))


@click.group()
def timers() -> None:
    """List and cancel a process's durable timers (delayed `send!`), through a gateway.

    \b
    A guest arms a timer with (send! to body (value-map "delay_ms" 8000)) and
    cancels it with (cancel! id); these commands are the operator's view:
      svit-cluster timers list svit://local/agent --state-dir .svit
      svit-cluster timers cancel svit://local/agent svit://local/agent:7:0
      svit-cluster timers list svit://local/agent -o json --limit 10 --after CURSOR

    The token is the process's tenant or an admin (--state-dir: the local
    cluster's admin token).
    """


def _due_in(due_ms: int, now_ms: float) -> str:
    """``2026-05-01 12:00:00.250Z (in 8.0 s)``: the due time, UTC, and how far off."""
    at = datetime.datetime.fromtimestamp(due_ms / 1000, tz=datetime.UTC)
    delta_s = (due_ms - now_ms) / 1000
    rel = f"in {delta_s:.1f} s" if delta_s >= 0 else f"{-delta_s:.1f} s ago"
    return f"{at:%Y-%m-%d %H:%M:%S}.{at.microsecond // 1000:03d}Z ({rel})"


@timers.command(name="list")
@click.argument("process_id")
@click.option("--limit", type=click.IntRange(1, TIMER_PAGE_MAX), default=DEFAULT_TIMER_PAGE,
              show_default=True, help="Parked timers per page.")
@click.option("--after", default=None, help="The cursor a previous page printed (`next`).")
@gateway_options
@timeout_option
@output_option
def timers_list(process_id: str, limit: int, after: str | None, url: str | None,
                token: str | None, state_dir: Path | None, timeout_s: float,
                output: str) -> None:
    """PROCESS_ID's pending timers in due order: id, destination, due time, state.

    The first page starts with the timers being delivered right now (state
    firing). When more remain, the last line (or "next" in JSON) is the cursor
    for --after. Exit 0 (also when there are none), 1 when refused (403),
    3 when the gateway or its Redis is unavailable.

    \b
      svit-cluster timers list svit://local/agent --state-dir .svit
      svit-cluster timers list svit://local/agent -o json | jq '.timers[].id'
    """
    from svit_cluster.client import SvitClient
    from svit_cluster.settings import resolve_gateway

    base, tok = resolve_gateway(url, token, state_dir=state_dir)
    with SvitClient(base, tok, timeout_s=timeout_s) as client:
        page = client.timers(process_id, limit=limit, after=after)
    doc = {"process_id": process_id, "next": page.next_after,
           "timers": [{"id": t.id, "to": t.to, "due_ms": t.due_ms, "state": t.state,
                       "version": t.version} for t in page.timers]}

    def text() -> None:
        if not page.timers:
            click.echo(f"{process_id}: no pending timers")
            return
        now_ms = time.time() * 1000
        table = Table(title=f"timers of {process_id}", title_justify="left")
        for name in ("id", "to", "due (UTC)", "state", "version"):
            table.add_column(name, no_wrap=name != "to", overflow="fold")
        for t in page.timers:
            table.add_row(t.id, t.to, _due_in(t.due_ms, now_ms), t.state, str(t.version))
        Console(width=None if sys.stdout.isatty() else 200).print(table)
        if page.next_after is not None:
            click.echo(f"more: --after {page.next_after}")

    emit(output, doc, text)


@timers.command(name="cancel")
@click.argument("process_id")
@click.argument("timer_id")
@gateway_options
@timeout_option
@output_option
def timers_cancel(process_id: str, timer_id: str, url: str | None, token: str | None,
                  state_dir: Path | None, timeout_s: float, output: str) -> None:
    """Cancel TIMER_ID, a pending timer of PROCESS_ID (decided against its firing).

    TIMER_ID is the delayed intent's id, PROCESS_ID:VERSION:INDEX (what send!
    returned; `timers list` shows it). The outcome is printed:

    \b
      cancelled           removed before it fired: never delivered   (exit 0)
      already_cancelled   an earlier cancel removed it               (exit 0)
      too_late            firing or fired: it is, or was, delivered  (exit 1)
      unknown             no such timer of PROCESS_ID (never armed,
                          not parked yet, or long finished)          (exit 1)

    Exit 1 also when refused (400 a timer id of another process, 403), 3
    when the gateway or its Redis is unavailable (the cancel may or may not
    have applied: run it again; a repeat answers already_cancelled).

    \b
      svit-cluster timers cancel svit://local/agent svit://local/agent:7:0 --state-dir .svit
    """
    from svit_cluster.client import SvitClient
    from svit_cluster.settings import resolve_gateway

    base, tok = resolve_gateway(url, token, state_dir=state_dir)
    with SvitClient(base, tok, timeout_s=timeout_s) as client:
        outcome = client.cancel_timer(process_id, timer_id)
    emit(output, {"process_id": process_id, "timer_id": timer_id, "outcome": outcome},
         lambda: click.echo(f"{timer_id}: {outcome}"))
    if outcome not in ("cancelled", "already_cancelled"):
        raise SystemExit(EXIT_FAILED)


@click.command(name="etcd-restored")
@click.option("--state-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="A local cluster's folder: etcd, Redis and the cluster name come from "
                   "its cluster.json (otherwise give --etcd, --redis and --cluster).")
@click.option("--etcd", "etcd_endpoint", default=None, help="The restored etcd, HOST:PORT.")
@click.option("--redis", "redis_url", default=None, help="The cluster's Redis, redis://HOST:PORT/DB.")
@click.option("--cluster", "cluster_name", default=None, help="The cluster name.")
@click.option("--prefix", default=None, help="The store's Redis key prefix [default: svit].")
@output_option
def etcd_restored(state_dir: Path | None, etcd_endpoint: str | None, redis_url: str | None,
                  cluster_name: str | None, prefix: str | None, output: str) -> None:
    """Run once after restoring etcd from a backup (snapshot restore).

    \b
    A restore takes etcd revisions back, so new fencing tokens would fall below
    the Redis fences, and brings back ownership records of the backup's time.
    This raises the fence epoch (the high part of every token) past the
    highest Redis fence, and releases ownership records whose token is below
    their process's fence or whose host is not registered under the record's
    lease. Safe to run more than once and while hosts run. Exit 0 on success,
    3 when etcd or Redis fails.
    """
    from svit_cluster.ownership import open_client, recover_after_restore

    if state_dir is not None:
        from svit_cluster.local import LocalCluster

        doc = LocalCluster.load(state_dir).doc
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

    info = asyncio.run(run())
    if output == "json":
        emit(output, info, lambda: None)
        return
    click.echo(f"fence epoch {info['epoch_before']} -> {info['epoch_after']} (highest fence "
               f"{info['highest_fence']} of {info['fences']}); ownership records released "
               f"{len(info['released'])}, kept {info['kept']}")
    for pid, reason in info["released"].items():
        click.echo(f"  released {pid}: {reason}")


#: The commands, in the order ``svit-cluster`` registers them.
COMMANDS: tuple[click.Command, ...] = (inbox, timers, etcd_restored)
