"""``svit-cluster create | activate | state | delete | list | fork``: processes via a gateway.

Each command is one SDK call (:class:`~svit_cluster.client.SvitClient`) with
the shared conventions of :mod:`svit_cluster.cli._util`: the gateway and token
from ``--url``/``--token``, else ``SVIT_URL``/``SVIT_TOKEN``, else
``./.svit/cluster.json`` (``--state-dir DIR``: ``DIR/cluster.json``, its admin
token); ``--output json``; exit codes 0 ok, 1 refused or not committed, 2
usage, 3 unavailable or inconclusive. ``svit-cluster`` registers them
(:data:`COMMANDS`).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from svit_cluster.cli._util import (
    EXIT_FAILED,
    emit,
    gateway_options,
    output_option,
    timeout_option,
)
from svit_cluster.defaults import DEFAULT_PROCESS_PAGE, PROCESS_PAGE_MAX
from svit_cluster.errors import NotFound, UnavailableError

__all__ = ["COMMANDS"]


def _json_argument(text: str, what: str) -> Any:
    """``text`` as JSON; ``@PATH`` reads the file at PATH.

    Raises:
        click.BadParameter: unreadable file or not JSON (usage error, exit 2).
    """
    if text.startswith("@"):
        try:
            text = Path(text[1:]).read_text()
        except OSError as exc:
            raise click.BadParameter(f"cannot read {text[1:]}: {exc.strerror}",
                                     param_hint=what) from None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint=what) from None


def _scripts(specs: tuple[str, ...]) -> dict[str, str]:
    """``NAME=PATH`` pairs -> ``{name: source}``.

    Raises:
        click.BadParameter: a pair without ``=``, a repeated name, an unreadable file.
    """
    out: dict[str, str] = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise click.BadParameter(f"expected NAME=PATH, got {spec!r}", param_hint="--script")
        if name in out:
            raise click.BadParameter(f"script {name!r} given twice", param_hint="--script")
        try:
            out[name] = Path(path).read_text()
        except OSError as exc:
            raise click.BadParameter(f"cannot read {path}: {exc.strerror}",
                                     param_hint="--script") from None
    return out


#: The ``client_id`` of ``activate`` unless --client-id is given: one fixed id,
#: so a repeated --request-id finds its receipt (receipts are keyed by tenant,
#: client id and request id) and replays the outcome instead of conflicting.
CLI_CLIENT_ID = "svit-cluster-cli"


def _client(url: str | None, token: str | None, state_dir: Path | None,
            timeout_s: float, client_id: str | None = None) -> Any:
    from svit_cluster.client import SvitClient
    from svit_cluster.settings import resolve_gateway

    base, tok = resolve_gateway(url, token, state_dir=state_dir)
    return SvitClient(base, tok, timeout_s=timeout_s, client_id=client_id)


def _shown(value: Any) -> str:
    """``value`` as JSON: one line when short, else indented."""
    line = json.dumps(value, ensure_ascii=False, sort_keys=True)
    return line if len(line) <= 100 else json.dumps(value, ensure_ascii=False,
                                                     sort_keys=True, indent=2)


@click.command()
@click.argument("process_id")
@click.option("--memory", "memory_text", default=None, metavar="JSON|@FILE",
              help="Initial /memory: a JSON object, or @FILE to read it from a file "
                   "[default: {}].")
@click.option("--script", "script_specs", multiple=True, metavar="NAME=PATH",
              help="Put the Svit Lisp source in PATH at /lib/NAME (repeatable).")
@click.option("--passivate-after", "passivate_after_s", default=None,
              type=click.FloatRange(1.0, 7 * 24 * 3600.0),
              help="The process's own idle timeout in seconds [default: the cluster's].")
@gateway_options
@timeout_option
@output_option
def create(process_id: str, memory_text: str | None, script_specs: tuple[str, ...],
           passivate_after_s: float | None, url: str | None, token: str | None,
           state_dir: Path | None, timeout_s: float, output: str) -> None:
    """Create PROCESS_ID at version 0 with initial memory and scripts.

    \b
      svit-cluster create svit://local/agent --memory '{"status": "idle"}'
      svit-cluster create svit://local/counter --memory @memory.json --script inc=inc.svit

    Every process runs the cluster's reasoning loop: `svit-cluster chat` talks
    to it. Safe to retry: a repeat whose earlier attempt created the process
    with the same memory and scripts reports it as created.

    Exit 0 when created, 1 when refused (409 it exists with other content,
    400 a script that does not compile, 403 another tenant's id), 2 for a
    bad --memory or --script, 3 when the gateway is unavailable.
    """
    memory = _json_argument(memory_text, "--memory") if memory_text is not None else None
    if memory is not None and not isinstance(memory, dict):
        raise click.BadParameter("must be a JSON object", param_hint="--memory")
    scripts = _scripts(script_specs)
    with _client(url, token, state_dir, timeout_s) as client:
        result: dict[str, Any] = client.create_process(process_id, memory=memory,
                                                       scripts=scripts)
        if passivate_after_s is not None:
            result["residency"] = client.set_passivation(process_id, passivate_after_s)
    emit(output, result, lambda: click.echo(
        f"created {process_id} at version {result.get('version')}"
        + (f" with scripts {', '.join(sorted(scripts))}" if scripts else "")))


@click.command()
@click.argument("process_id")
@click.argument("script")
@click.argument("input_text", metavar="[INPUT]", required=False, default="null")
@click.option("--expected-version", type=click.IntRange(0), default=None,
              help="Commit only if the process is at this version [default: the "
                   "version read just before].")
@click.option("--request-id", default=None,
              help="Idempotency key: the same one again (with the same --client-id) "
                   "replays the first outcome instead of committing twice [default: random].")
@click.option("--client-id", default=CLI_CLIENT_ID, show_default=True,
              help="Idempotency namespace of --request-id.")
@gateway_options
@timeout_option
@output_option
def activate(process_id: str, script: str, input_text: str, expected_version: int | None,
             request_id: str | None, client_id: str, url: str | None, token: str | None,
             state_dir: Path | None, timeout_s: float, output: str) -> None:
    """Run /lib/SCRIPT of PROCESS_ID with INPUT (JSON, or @FILE; default null).

    \b
      svit-cluster activate svit://local/agent set-status '{"status": "busy"}'
      svit-cluster activate svit://local/counter inc '{"by": 1}' --expected-version 7

    One svit-control@1 request: it commits version N+1 only when the process
    is at N = --expected-version; otherwise it answers conflict with the
    actual version and changes nothing. Without --expected-version the
    version is read first (one observation), so a concurrent commit in
    between still makes it a conflict, never a blind overwrite.

    Exit 0 when committed (also a replay of the same --request-id), 1 on
    conflict or a rejected activation (the script failed: nothing
    committed), 3 when the outcome is unknown (the error line gives the
    --request-id and --expected-version to repeat it with: a repeat replays
    the outcome if it committed, and commits once if it did not).
    """
    from svit_cluster.client import new_request_id
    from svit_cluster.control import Committed, Conflict
    from svit_cluster.process import from_plain_json, to_plain_json

    value = from_plain_json(_json_argument(input_text, "INPUT"))
    rid = request_id or new_request_id()
    with _client(url, token, state_dir, timeout_s, client_id) as client:
        if expected_version is None:
            _, expected_version = client.state(process_id, "/thread/format")
        try:
            resp = client.activate(process_id, script, value,
                                   expected_version=expected_version, request_id=rid)
        except UnavailableError as exc:
            raise UnavailableError(
                f"{exc.message}; the outcome is unknown: repeat with --request-id {rid} "
                f"--expected-version {expected_version}", **exc.fields) from exc
    outcome = resp.outcome
    doc: dict[str, Any] = {"process_id": process_id, "client_id": client_id,
                           "request_id": rid,
                           "status": outcome.status, "replayed": resp.replayed,
                           "expected_version": expected_version}
    if isinstance(outcome, Committed):
        act = outcome.activation
        doc.update(version=act.version, output=to_plain_json(act.output),
                   changed=list(act.changed))
        line = (f"committed {process_id} version {act.version}"
                f"{' (replayed)' if resp.replayed else ''}: output {_shown(doc['output'])}")
    elif isinstance(outcome, Conflict):
        doc.update(version=outcome.actual_version)
        line = (f"conflict: {process_id} is at version {outcome.actual_version}, not "
                f"{expected_version}; nothing committed (read it again and retry)")
    else:
        doc.update(version=outcome.version, failure={"code": outcome.failure.code,
                                                     "message": outcome.failure.message})
        line = (f"rejected: {outcome.failure.code}: {outcome.failure.message}; nothing "
                f"committed (version {outcome.version})")
    emit(output, doc, lambda: click.echo(line, err=outcome.status != "committed"))
    if outcome.status != "committed":
        raise SystemExit(EXIT_FAILED)


@click.command()
@click.argument("process_id")
@click.argument("path", default="/memory")
@gateway_options
@timeout_option
@output_option
def state(process_id: str, path: str, url: str | None, token: str | None,
          state_dir: Path | None, timeout_s: float, output: str) -> None:
    """Print the value at PATH of PROCESS_ID (default /memory) and its version.

    \b
      svit-cluster state svit://local/agent /memory/status
      svit-cluster state svit://local/agent /inbox -o json | jq .value

    One observation: value and version belong together. A path with nothing
    at it reads as null. Exit 0, 1 when refused (404 no such process, 400 a
    malformed path, 403), 3 when the gateway is unavailable.
    """
    from svit_cluster.process import to_plain_json

    with _client(url, token, state_dir, timeout_s) as client:
        value, version = client.state(process_id, path)
    plain = to_plain_json(value)
    emit(output, {"process_id": process_id, "path": path, "version": version, "value": plain},
         lambda: click.echo(f"{path} at version {version}: {_shown(plain)}"))


@click.command()
@click.argument("process_id")
@gateway_options
@timeout_option
@click.option("--missing-ok", is_flag=True, help="Exit 0 when the process does not exist.")
@output_option
def delete(process_id: str, url: str | None, token: str | None, state_dir: Path | None,
           timeout_s: float, missing_ok: bool, output: str) -> None:
    """Delete PROCESS_ID: its log, snapshot, receipts, outbox and owner record.

    Fenced like a commit: an older owner can never write it back (the fence
    stays as a tombstone). Intents not yet delivered are dropped.

    Exit 0 when deleted (or, with --missing-ok, already absent), 1 when
    refused (404 not found, 403), 3 when the gateway is unavailable.
    """
    with _client(url, token, state_dir, timeout_s) as client:
        try:
            result = client.delete_process(process_id)
        except NotFound:
            if not missing_ok:
                raise
            result = {"process_id": process_id, "deleted": False, "missing": True}
    emit(output, result, lambda: click.echo(
        f"deleted {process_id}" if result.get("deleted") else f"{process_id}: not found"))


#: Pages ``list`` reads at most for one run (each page is bounded work on the gateway).
MAX_LIST_PAGES = 1000


@click.command(name="list")
@click.option("--tenant", default=None,
              help="Only this tenant's processes (an admin token; a tenant token "
                   "always lists its own).")
@click.option("--limit", type=click.IntRange(1, PROCESS_PAGE_MAX), default=DEFAULT_PROCESS_PAGE,
              show_default=True,
              help="Processes to print at most (then the cursor for --after).")
@click.option("--after", default=None, help="The cursor a previous run printed (`more:`).")
@gateway_options
@timeout_option
@output_option
def list_(tenant: str | None, limit: int, after: str | None, url: str | None,
          token: str | None, state_dir: Path | None, timeout_s: float, output: str) -> None:
    """The existing processes: id, version, whether active, owner host.

    \b
      svit-cluster list
      svit-cluster list --tenant local -o json | jq -r '.processes[].process_id'

    Follows the gateway's pages (each a bounded walk of the store, in the
    store's order) until LIMIT processes or the end; when more remain the
    last line (or "next" in JSON) is the cursor for --after. A process that
    exists for the whole listing is listed at least once. Exit 0 (also when
    there are none), 1 when refused (403: a tenant token naming another
    tenant), 3 when the gateway or its Redis is unavailable.
    """
    rows: list[Any] = []
    cursor = after
    with _client(url, token, state_dir, timeout_s) as client:
        for _ in range(MAX_LIST_PAGES):
            page = client.list_processes(tenant=tenant, limit=limit - len(rows),
                                         after=cursor)
            rows.extend(page.processes)
            cursor = page.next_after
            if cursor is None or len(rows) >= limit:
                break
    doc = {"processes": [{"process_id": p.process_id, "version": p.version,
                          "active": p.active, "host": p.host} for p in rows],
           "next": cursor}

    def text() -> None:
        if not rows:
            click.echo("no processes" + (f" of tenant {tenant}" if tenant else ""))
        else:
            from rich.console import Console
            from rich.table import Table

            table = Table(title_justify="left")
            for name in ("process", "version", "active", "host"):
                table.add_column(name, no_wrap=name != "process", overflow="fold")
            for p in rows:
                table.add_row(p.process_id, str(p.version), "yes" if p.active else "no",
                              p.host or "-")
            Console(width=None if sys.stdout.isatty() else 200).print(table)
        if cursor is not None:
            click.echo(f"more: --after {cursor}")

    emit(output, doc, text)


@click.command()
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


#: The commands, in the order ``svit-cluster`` registers them.
COMMANDS: tuple[click.Command, ...] = (create, activate, state, list_, delete, fork)
