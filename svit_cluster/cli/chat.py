"""``svit-cluster chat``: send messages to a process and stream its turns.

The gateway and token come from ``--state-dir`` (the local cluster's tenant
token), or ``--url`` and ``--token``, else ``SVIT_URL``/``SVIT_TOKEN``, else
``./.svit``. A failed turn prints, on stderr, the ``svit-cluster inbox drop``
command that dead-letters the message blocking the inbox. Exit codes: 0 every
turn completed, 1 a turn failed or waits behind a failed head, 3 a turn did not
end within ``--timeout`` (see :mod:`svit_cluster.cli._util`).
"""

from __future__ import annotations

import asyncio
import json
import secrets
import shlex
import sys
from pathlib import Path
from typing import Any

import click

from svit_cluster.cli._util import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_UNAVAILABLE,
    invoked_as,
    output_option,
)
from svit_cluster.defaults import DEFAULT_STATE_DIR

__all__ = ["COMMANDS"]


@click.command()
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
    return " ".join([invoked_as(), *(shlex.quote(a) for a in args)])


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


def _cluster_doc(state_dir: Path) -> dict[str, Any]:
    """``STATE_DIR/cluster.json`` of a local cluster (its gateway and tokens).

    Raises:
        click.UsageError: no cluster recorded there (exit 2).
    """
    path = state_dir.resolve() / "cluster.json"
    if not path.exists():
        raise click.UsageError(f"no cluster in {state_dir} (start one with `svit-cluster up`)")
    doc: dict[str, Any] = json.loads(path.read_text())
    return doc


#: The commands, in the order ``svit-cluster`` registers them.
COMMANDS: tuple[click.Command, ...] = (chat,)
