"""``svit-cluster``: run a local cluster, its gateway, faults, and the demo.

Every command that acts on a local cluster finds it through
``--state-dir`` (default ``./.svit``), where ``up`` writes ``cluster.json``.
Commands that talk to a gateway read ``SVIT_URL`` and ``SVIT_TOKEN`` (then
``./.svit/cluster.json``), see :mod:`svit_cluster.settings`. Exit codes and
``--output {text,json}``: see :mod:`svit_cluster._cliutil`.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import os
import secrets
import shlex
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import click
import httpx
from click.shell_completion import get_completion_class
from rich.console import Console
from rich.table import Table

from svit_cluster import __version__
from svit_cluster._cliutil import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_UNAVAILABLE,
    emit,
    fail,
    gateway_options,
    output_option,
    timeout_option,
    waiting,
)
from svit_cluster.cluster import check_heartbeat
from svit_cluster.defaults import (
    DEFAULT_GATEWAY_PORT,
    DEFAULT_LEASE_TTL_S,
    DEFAULT_LOCAL_DISPATCHERS,
    DEFAULT_LOCAL_HOSTS,
    DEFAULT_MAX_ACTIVE_PER_HOST,
    DEFAULT_MAX_EVENTS,
    DEFAULT_PASSIVATE_AFTER_S,
    DEFAULT_SIGNAL_RETENTION,
    DEFAULT_SNAPSHOT_EVERY,
    DEFAULT_STATE_DIR,
    DEFAULT_TIMER_PAGE,
    LEASE_TTL_S_MAX,
    LEASE_TTL_S_MIN,
    LOCAL_DISPATCHERS_MAX,
    LOCAL_HOSTS_MAX,
    MAX_ACTIVE_PER_HOST_MAX,
    RETENTION_MAX,
    RETENTION_MIN,
    TIMER_PAGE_MAX,
)
from svit_cluster.errors import ConfigurationError, ErrorCode, NotFound, SvitError, UnavailableError
from svit_cluster.store import DEFAULT_PREFIX, RedisFences, connect

__all__ = ["main"]

_state_dir = click.option(
    "--state-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=DEFAULT_STATE_DIR,
    show_default=True,
    help="Folder holding the local cluster's data, logs and cluster.json.",
)

def _progress(message: str) -> None:
    click.echo(f"  … {message}", err=True)


class _Cli(click.Group):
    """The root group: expected failures anywhere below become one line + exit code."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except SvitError as exc:
            fail(exc)
        except httpx.HTTPError as exc:
            fail(UnavailableError(f"{type(exc).__name__}: {exc}",
                                  timeout=isinstance(exc, httpx.TimeoutException)))


@click.group(cls=_Cli, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="svit-cluster")
def cli() -> None:
    """Fenced, durable hosting of Svit processes on Ray, etcd and Redis.

    \b
    Local cluster on this machine (loopback only):
      svit-cluster up --hosts 3          start etcd, Redis, Ray head + 3 hosts, gateway
      svit-cluster status                hosts, leases, owners, live actors
      svit-cluster kill-host h2          SIGKILL a host's raylet and its workers
      svit-cluster pause-host h2         SIGSTOP a host (resume-host to continue)
      svit-cluster restart-host h2       start a killed host again; add-host adds one
      svit-cluster down                  stop everything by PID
      svit-cluster etcd-restored         after restoring etcd from a backup (see its --help)
      svit-cluster demo                  the end-to-end demo (starts and stops its own cluster)
      svit-cluster chat PID [MESSAGE]    send a message to a process and stream its turn

    \b
    Processes, through a gateway (SVIT_URL/SVIT_TOKEN, else ./.svit):
      svit-cluster create PID --memory '{...}' --script NAME=PATH
      svit-cluster activate PID SCRIPT '{"by": 1}' [--expected-version N]
      svit-cluster state PID [PATH]      a value and its version
      svit-cluster list                  processes (id, version, active, host), paged
      svit-cluster delete PID            delete a process (fenced; the helm test cleans up with it)
      svit-cluster inbox drop PID ...    dead-letter an inbox head whose turn keeps failing

    \b
    Components (what the Helm chart runs):
      svit-cluster gateway               the authenticated HTTP gateway
      svit-cluster host-agent            this Ray node's host agent
      svit-cluster healthcheck           exit 0 when a gateway (URL) or agent (heartbeat) is healthy
      svit-cluster smoke --url URL       one authenticated activation against a gateway
      svit-cluster timers list PID       a process's pending timers (`timers cancel PID ID`)

    \b
    Conventions:
      SVIT_URL, SVIT_TOKEN               the gateway and bearer token (else ./.svit/cluster.json)
      --output json (or --json)          results as JSON on stdout; progress goes to stderr
      exit codes                         0 ok, 1 failed, 2 usage, 3 unavailable/inconclusive
      svit-cluster completion bash       shell completion (bash, zsh, fish)
    """


@cli.command()
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
       redis_cluster: str | None, etcd_members: int, max_active_per_host: int,
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
    masters, replicas = 0, 0
    if redis_cluster is not None:
        m, _, r = redis_cluster.lower().partition("x")
        if not m.isdigit() or (r and not r.isdigit()):
            raise click.BadParameter("expected M or MxR, e.g. 3x1", param_hint="--redis-cluster")
        masters, replicas = int(m), int(r or 0)
    with waiting("starting the local cluster") as step:
        cluster = LocalCluster.up(
            ClusterSpec(state_dir=state_dir, hosts=hosts, lease_ttl_s=lease_ttl_s,
                        snapshot_every=snapshot_every, passivate_after_s=passivate_after_s,
                        dispatchers=dispatchers,
                        dispatch_options={"webhook_hosts": list(webhook_hosts)},
                        reasoner=reasoner,
                        ports=ports if isinstance(ports, dict) else {"invalid": ports},
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
        click.echo(f'  eval "$({_invoked_as()} env --state-dir {state_dir})"')

    emit(output, {"cluster": doc["cluster"], "gateway_url": doc["gateway"]["url"],
                  "hosts": sorted(doc["hosts"]), "cluster_json": str(cluster.path),
                  "reasoner": reasoner_kind}, text)


def _invoked_as() -> str:
    """How to call this CLI again in a hint: ``svit-cluster`` when that name on PATH
    is the program running, else the path it was started by (``.venv/bin/svit-cluster``
    in a venv that is not activated)."""
    argv0 = Path(sys.argv[0])
    if argv0.name != "svit-cluster":
        return "svit-cluster"  # python -m, or a test runner
    found = shutil.which(argv0.name)
    if found is not None and Path(found).resolve() == argv0.resolve():
        return argv0.name
    return str(sys.argv[0])


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


@cli.command()
@click.argument("process_id")
@click.argument("message", required=False)
@click.option("--state-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Use the local cluster in STATE_DIR (its gateway and tenant token); "
                   "default ./.svit unless --url is given.")
@click.option("--url", default=None,
              help="Gateway base URL (instead of --state-dir) [default: SVIT_URL].")
@click.option("--token", envvar="SVIT_TOKEN", default=None,
              help="Bearer token (SVIT_TOKEN); with --state-dir the local tenant's.")
@click.option("--message-id", default=None,
              help="The inbox id of MESSAGE (what `inbox drop --message-id` names) "
                   "[default: random chat-<hex>].")
@click.option("--timeout", "timeout_s", default=120.0, show_default=True,
              type=click.FloatRange(0.1), help="Seconds to wait for one turn.")
@output_option
def chat(process_id: str, message: str | None, state_dir: Path | None, url: str | None,
         token: str | None, message_id: str | None, timeout_s: float, output: str) -> None:
    """Send MESSAGE to PROCESS_ID and stream the turn's events until it completes.

    Without MESSAGE, reads messages line by line from stdin (an empty line or
    EOF ends; on a terminal it shows a `you> ` prompt).

    A message whose turn fails stays at the head of the inbox and blocks every
    later message until a turn of it succeeds or it is dropped: chat then
    prints the failed message's id and the `svit-cluster inbox drop` command
    that drops it, also when the failed message is an earlier one (at once:
    the loop retries the head when a new message arrives).

    Exit 0 when every turn completed, 1 when a turn failed or waits behind a
    failed head, 3 when a turn did not end within --timeout (the message
    stays queued and may still be answered).

    With --output json, stdout is JSON Lines: one object per event as it
    arrives ({"event": "message", "message_id", "message": {role, content,
    tool_calls...}}, {"event": "lagged", ...}, {"event": "failed", "message_id",
    "code", "message"}, {"event": "blocked", "message_id", "head_message_id",
    "head_hash", "code", "message"}), then one {"event": "turn", "message_id",
    "ok", "answer", "version", "failure"} per turn when it ends, or
    {"event": "timeout", "message_id", "timeout_s"}.
    """
    from svit_cluster.chat import chat_turn
    from svit_cluster.client import AsyncSvitClient

    if message_id is not None and message is None:
        raise click.UsageError("--message-id needs MESSAGE (one message)")
    hint_where = ["--url", url] if url is not None else []
    if state_dir is None and url is None:
        from svit_cluster.settings import ClientSettings, load_settings

        url = load_settings(ClientSettings).url  # the shared convention, then ./.svit
        if url is None:
            state_dir = DEFAULT_STATE_DIR
    if state_dir is not None and state_dir != DEFAULT_STATE_DIR:
        hint_where = ["--state-dir", str(state_dir)]
    if state_dir is not None:
        doc = _cluster_doc(state_dir)
        url = url or doc["gateway"]["url"]
        token = token or doc["tokens"]["local"]
    if not url or not token:
        raise click.UsageError("give --state-dir, or --url and --token (SVIT_TOKEN)")
    interactive = message is None and output == "text" and _stdin_is_terminal()
    timed_out: list[str] = []

    async def run() -> bool:
        async with AsyncSvitClient(url, token) as client:
            lines = [message] if message is not None else None
            if interactive:
                click.echo(f"chat with {process_id}: type a message and press Enter; an "
                           "empty line or Ctrl-D quits", err=True)
            ok = True
            while True:
                if lines is not None:
                    if not lines:
                        return ok
                    text = lines.pop(0)
                else:
                    if interactive:
                        click.echo("you> ", nl=False, err=True)
                    text = await asyncio.to_thread(sys.stdin.readline)
                    text = text.rstrip("\n")
                    if not text:
                        return ok
                mid = message_id or f"chat-{secrets.token_hex(8)}"
                try:
                    if output == "json":
                        outcome = await chat_turn(client, process_id, text,
                                                  emit=lambda _: None, message_id=mid,
                                                  timeout_s=timeout_s, on_event=_json_line)
                        _json_line({"event": "turn", "message_id": mid, "ok": outcome.ok,
                                    "answer": outcome.answer, "version": outcome.version,
                                    "failure": outcome.failure})
                    else:
                        outcome = await chat_turn(client, process_id, text, emit=click.echo,
                                                  message_id=mid, timeout_s=timeout_s,
                                                  echo_user=not interactive)
                except TimeoutError:
                    timed_out.append(mid)
                    if output == "json":
                        _json_line({"event": "timeout", "message_id": mid,
                                    "timeout_s": timeout_s})
                    click.echo(f"error: timeout: no answer to message {mid} within "
                               f"{timeout_s:g} s; it stays queued and may still be "
                               "answered (raise --timeout to wait longer)", err=True)
                    if not interactive:
                        return False
                    continue
                if outcome.failure is not None:
                    _drop_hint(process_id, outcome.failure, hint_where)
                ok = ok and outcome.ok

    ok = asyncio.run(run())
    if timed_out:
        raise SystemExit(EXIT_UNAVAILABLE)
    raise SystemExit(EXIT_OK if ok else EXIT_FAILED)


def _stdin_is_terminal() -> bool:
    """Whether chat reads from a person at a terminal (then it shows a prompt)."""
    return sys.stdin.isatty()


def _drop_command(process_id: str, failure: dict[str, Any], where: list[str]) -> str:
    """The ``svit-cluster inbox drop`` command that dead-letters the failed
    message of a chat ``failure`` (:class:`svit_cluster.chat.TurnOutcome`): by
    ``--message-id`` when it has one, else by ``--hash``; the reason names the
    failure code; ``where`` (``--state-dir DIR`` or ``--url URL``) as chat got it."""
    name = (["--message-id", failure["message_id"]] if failure.get("message_id")
            else ["--hash", str(failure.get("inbox_hash"))])
    args = ["inbox", "drop", process_id, *name,
            "--reason", f"turn failed: {failure.get('code')}", *where]
    return " ".join([_invoked_as(), *(shlex.quote(a) for a in args)])


def _drop_hint(process_id: str, failure: dict[str, Any], where: list[str]) -> None:
    """Tell the user, on stderr, what a failed message means and how to drop it."""
    if failure.get("blocking"):
        why = ("the message ahead of it failed and stays at the head of the inbox; later "
               "messages are answered once a retry of it succeeds, or after dropping it:")
    else:
        why = ("the message stays at the head of the inbox and is retried; later messages "
               "wait behind it. If it can never succeed, drop it:")
    click.echo(f"  {why}\n  {_drop_command(process_id, failure, where)}", err=True)


def _json_line(doc: dict[str, Any]) -> None:
    """One JSON Lines record on stdout (``chat --output json``)."""
    click.echo(json.dumps(doc, sort_keys=True, default=str))


@cli.group()
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


@cli.group()
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


def _cluster_doc(state_dir: Path) -> dict[str, Any]:
    path = state_dir.resolve() / "cluster.json"
    if not path.exists():
        raise click.UsageError(f"no cluster in {state_dir} (start one with `svit-cluster up`)")
    doc: dict[str, Any] = json.loads(path.read_text())
    return doc


@cli.command()
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


@cli.command()
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


@cli.command()
@_state_dir
@output_option
def status(state_dir: Path, output: str) -> None:
    """Hosts, leases, owners and live actors of the local cluster (a diagnostic: exit 0
    whenever it could report; use `healthcheck` for a pass/fail check).

    \b
    Per host: its process and lease; from its agent (through the gateway's
    GET /v1/admin/hosts): active actors / residency budget, warm spares, the
    summed PSS of its actors, the keepalive lag, the idle age of its least
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
        click.echo(f"  {host['name']}: process {'up' if host['alive'] else 'DOWN'}, "
                   f"lease {host.get('lease') or '-'}, owners {host.get('owners', 0)}")
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


@cli.command(name="etcd-restored")
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


def _host_command(name: str, action: str) -> Any:
    @cli.command(name=name)
    @_state_dir
    @click.argument("host")
    @output_option
    def command(state_dir: Path, host: str, output: str) -> None:
        from svit_cluster.local import LocalCluster

        cluster = LocalCluster.load(state_dir)
        pids = getattr(cluster, action)(host)
        emit(output, {"command": name, "host": host, "pids": pids},
             lambda: click.echo(f"{name} {host}: signalled {len(pids)} processes"))

    command.help = {
        "kill_host": "SIGKILL HOST's raylet and all its worker processes.",
        "pause_host": "SIGSTOP every process of HOST (a frozen, stale owner).",
        "resume_host": "SIGCONT every process of HOST.",
    }[action]
    return command


def _store_command(name: str, action: str, what: str) -> Any:
    doc = {
        "kill_redis": "SIGKILL Redis NODE (n0.. of a Redis Cluster: its replica takes over).",
        "kill_etcd": "SIGKILL etcd MEMBER (m0.. of an etcd cluster).",
    }[action]

    @cli.command(name=name, help=doc)
    @_state_dir
    @click.argument(what)
    @output_option
    def command(state_dir: Path, output: str, **kwargs: str) -> None:
        from svit_cluster.local import LocalCluster

        target = kwargs[what.lower()]
        pid = getattr(LocalCluster.load(state_dir), action)(target)
        emit(output, {"command": name, what.lower(): target, "pid": pid},
             lambda: click.echo(f"{name} {target}: SIGKILL sent to pid {pid}"))

    return command


_store_command("kill-redis", "kill_redis", "NODE")
_store_command("kill-etcd", "kill_etcd", "MEMBER")
_host_command("kill-host", "kill_host")
_host_command("pause-host", "pause_host")
_host_command("resume-host", "resume_host")



@cli.command(name="restart-host")
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


@cli.command(name="add-host")
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


from svit_cluster.dispatch.cli import dead_letters, dispatcher  # noqa: E402

cli.add_command(dispatcher)
cli.add_command(dead_letters)

from svit_cluster._process_commands import COMMANDS as _PROCESS_COMMANDS  # noqa: E402

for _command in _PROCESS_COMMANDS:
    cli.add_command(_command)


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


@cli.command()
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


@cli.command(name="host-agent")
@click.option("--host-id", envvar="SVIT_HOST_ID", required=True,
              help="This host's name (its Ray node carries resource svit_host:<name>).")
def host_agent(host_id: str) -> None:
    """Start this Ray node's host agent from SVIT_* env vars and keep it alive."""
    from svit_cluster.cluster.serve import run_host_agent

    run_host_agent(host_id)


#: What ``healthcheck`` asks without ``--url`` or ``SVIT_URL``: a gateway on this
#: machine at its default port.
_LOCAL_HEALTHZ = f"http://127.0.0.1:{DEFAULT_GATEWAY_PORT}/healthz"


@cli.command()
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


@cli.command()
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


@cli.command()
@click.argument("process_id")
@click.argument("new_process_id")
@click.option("--history", is_flag=True,
              help="Also share PROCESS_ID's reasoning history (its acknowledged turns) "
                   "with the child, whose turns then continue after it.")
@gateway_options
@click.option("--timeout", "timeout_s", default=10.0, show_default=True,
              type=click.FloatRange(0.01), help="Seconds per HTTP call.")
@output_option
def fork(process_id: str, new_process_id: str, history: bool, url: str | None,
         token: str | None, state_dir: Path | None, timeout_s: float, output: str) -> None:
    """Fork PROCESS_ID into NEW_PROCESS_ID (same state and version, new identity).

    Without --history the child starts a fresh reasoning session; with it the
    child's session starts with the parent's events up to its last
    acknowledged turn, and parent and child diverge from there.

    Exit 0 when forked, 1 when refused (404 unknown parent, 409 the child
    exists, 403), 3 when the gateway is unavailable.
    """
    from svit_cluster.client import SvitClient
    from svit_cluster.settings import resolve_gateway

    base, tok = resolve_gateway(url, token, state_dir=state_dir)
    with SvitClient(base, tok, timeout_s=timeout_s) as client:
        result = client.fork(process_id, new_process_id, history=history)
    shared = result.get("history")
    emit(output, result, lambda: click.echo(
        f"forked {process_id} -> {new_process_id}"
        + (f" (history up to event {shared['upto_seq']})" if shared else "")))

@cli.command()
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion(shell: str) -> None:
    """Print the shell completion script for SHELL (click's built-in completion).

    \b
      bash:  eval "$(svit-cluster completion bash)"   (or save to ~/.bash_completion.d/)
      zsh:   eval "$(svit-cluster completion zsh)"    (in ~/.zshrc)
      fish:  svit-cluster completion fish > ~/.config/fish/completions/svit-cluster.fish
    """
    comp_cls = get_completion_class(shell)
    assert comp_cls is not None  # click ships bash, zsh and fish
    comp = comp_cls(cli, {}, "svit-cluster", "_SVIT_CLUSTER_COMPLETE")
    click.echo(comp.source())


def main() -> None:
    """Console entry point."""
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    cli(prog_name="svit-cluster")


if __name__ == "__main__":
    main()
