"""``svit-cluster``: the root command group, the program's entry point, completion.

The root group :data:`cli` registers every command of the modules beside it
(each lists its own in ``COMMANDS``): :mod:`.local` (the local cluster on this
machine), :mod:`.chat`, :mod:`.process` (processes through a gateway),
:mod:`.serve` (the components a container or pod runs), :mod:`.dispatch` (the
outbox dispatcher and its dead letters) and :mod:`.admin` (operator repairs).
Every expected failure below the root (a :class:`~svit_cluster.errors.SvitError`
or an ``httpx`` transport error) becomes one line on stderr and an exit code,
see :mod:`._util`. Commands that act on a local cluster find it through
``--state-dir`` (default ``./.svit``), where ``up`` writes ``cluster.json``;
commands that talk to a gateway read ``SVIT_URL`` and ``SVIT_TOKEN`` (then
``./.svit/cluster.json``), see :mod:`svit_cluster.settings`.
"""

from __future__ import annotations

import os
from typing import Any

import click
import httpx
from click.shell_completion import get_completion_class

from svit_cluster import __version__
from svit_cluster.cli import admin, chat, dispatch, local, process, serve
from svit_cluster.cli._util import fail
from svit_cluster.errors import SvitError, UnavailableError

__all__ = ["cli", "main"]


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
      svit-cluster smoke                 one authenticated activation against a gateway
      svit-cluster timers list PID       a process's pending timers (`timers cancel PID ID`)

    \b
    Conventions:
      SVIT_URL, SVIT_TOKEN               the gateway and bearer token (else ./.svit/cluster.json)
      --output json (or --json)          results as JSON on stdout; progress goes to stderr
      exit codes                         0 ok, 1 failed, 2 usage, 3 unavailable/inconclusive
      svit-cluster completion bash       shell completion (bash, zsh, fish)
    """


for _module in (local, chat, process, serve, dispatch, admin):
    for _command in _module.COMMANDS:
        cli.add_command(_command)


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
