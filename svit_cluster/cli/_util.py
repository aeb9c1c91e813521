"""Shared CLI conventions: exit codes, one-line failures, ``--output {text,json}``, hints.

Exit codes (every ``svit-cluster`` command):

* ``0`` -- success;
* ``1`` -- a check or operation failed (refused: 401, 403, 404, conflict, a
  rejected activation, an unhealthy answer);
* ``2`` -- usage error only (bad options, missing ``--url``/``SVIT_URL``,
  no cluster recorded in ``--state-dir``);
* ``3`` -- unavailable or inconclusive (connection refused, timeout, 502/503/504,
  etcd/Redis/Ray down).

Expected failures print one line on stderr, ``error: <code>: <cause>; <what to
do>``, never a traceback. Results go to stdout (JSON with ``--output json``);
progress and logs go to stderr: :func:`waiting` shows a rich spinner with the
current step and the elapsed time when stderr is a terminal, and one plain line
per step otherwise (pipes, CI logs), so stdout stays pure JSON either way.
A hint that prints a command to run next names the program as
:func:`invoked_as` finds it, so it runs as printed.
"""

from __future__ import annotations

import contextlib
import functools
import json
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click

from svit_cluster.defaults import DEFAULT_HTTP_TIMEOUT_S
from svit_cluster.errors import (
    ConfigurationError,
    FencedError,
    Forbidden,
    NotFound,
    OutcomeUnknownError,
    SvitError,
    Unauthenticated,
    UnavailableError,
)

__all__ = [
    "EXIT_FAILED",
    "EXIT_OK",
    "EXIT_UNAVAILABLE",
    "EXIT_USAGE",
    "F",
    "Step",
    "emit",
    "exit_code_for",
    "fail",
    "failure_line",
    "gateway_options",
    "invoked_as",
    "output_option",
    "timeout_option",
    "waiting",
]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_UNAVAILABLE = 3

F = TypeVar("F", bound=Callable[..., Any])


def exit_code_for(exc: SvitError) -> int:
    """``2`` for local configuration/usage, ``3`` for unavailable/unknown, else ``1``."""
    if isinstance(exc, ConfigurationError):
        return EXIT_USAGE
    if isinstance(exc, UnavailableError | OutcomeUnknownError | FencedError):
        return EXIT_UNAVAILABLE
    return EXIT_FAILED


def _advice(exc: SvitError) -> str:
    if isinstance(exc.fields.get("advice"), str):  # the raiser knows better
        return str(exc.fields["advice"])
    if isinstance(exc, Unauthenticated):
        return ("the gateway refused the bearer token (HTTP 401); set SVIT_TOKEN or --token "
                "to a token of this cluster (`svit-cluster env` prints a local cluster's)")
    if isinstance(exc, Forbidden):
        return ("the token may not do this (HTTP 403); use a token of the process's tenant, "
                "or an admin token")
    if isinstance(exc, NotFound) and exc.fields.get("status") == 404:
        return "not found (HTTP 404); check the process id and the gateway URL (SVIT_URL/--url)"
    if isinstance(exc, UnavailableError):
        if exc.fields.get("timeout"):
            return "timed out; retry later, or raise --timeout"
        return ("is the cluster up? check SVIT_URL/--url (`svit-cluster status`) and "
                "retry")
    return ""


def failure_line(exc: SvitError) -> str:
    """The single line printed for ``exc``: ``error: <code>: <message>[; <advice>]``."""
    advice = _advice(exc)
    line = f"error: {exc.code}: {exc.message}"
    return f"{line}; {advice}" if advice else line


def fail(exc: SvitError) -> NoReturn:
    """Print :func:`failure_line` on stderr and exit with :func:`exit_code_for`."""
    click.echo(failure_line(exc), err=True)
    raise SystemExit(exit_code_for(exc))


def output_option(fn: F) -> F:
    """Add ``--output {text,json}`` and its alias ``--json``; the command gets ``output``."""

    @click.option("--output", "-o", "output", type=click.Choice(["text", "json"]),
                  default="text", show_default=True,
                  help="Result format on stdout (logs and progress go to stderr).")
    @click.option("--json", "as_json", is_flag=True, help="Same as --output json.")
    @functools.wraps(fn)
    def wrapper(*args: Any, as_json: bool, output: str, **kwargs: Any) -> Any:
        return fn(*args, output="json" if as_json else output, **kwargs)

    return wrapper  # type: ignore[return-value]


_GATEWAY_OPTIONS = (
    click.option("--url", default=None, help="Gateway base URL [default: SVIT_URL, then "
                 "./.svit/cluster.json]."),
    click.option("--token", default=None, help="Bearer token [default: SVIT_TOKEN]."),
    click.option("--state-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
                 help="Take URL and admin token from STATE_DIR/cluster.json."),
)


def gateway_options(fn: F) -> F:
    """Add ``--url``, ``--token`` and ``--state-dir``: where a command finds the
    gateway and its token (resolved by :func:`svit_cluster.settings.resolve_gateway`)."""
    for option in reversed(_GATEWAY_OPTIONS):
        fn = option(fn)
    return fn


#: ``--timeout`` of a command that makes HTTP calls: seconds per call
#: (``defaults.DEFAULT_HTTP_TIMEOUT_S``).
timeout_option = click.option("--timeout", "timeout_s", default=DEFAULT_HTTP_TIMEOUT_S,
                              show_default=True,
                              type=click.FloatRange(0.01), help="Seconds per HTTP call.")


def emit(output: str, doc: Any, text: Callable[[], None]) -> None:
    """Print ``doc`` as JSON on stdout when ``output == "json"``, else call ``text()``."""
    if output == "json":
        click.echo(json.dumps(doc, indent=2, sort_keys=True, default=str))
    else:
        text()


def invoked_as() -> str:
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


class Step:
    """What :func:`waiting` yields: ``step(message)`` starts the next step (a
    ``progress=`` callback); :meth:`note` prints one line (a retry, a warning)."""

    def __init__(self, title: str, progress: Any = None) -> None:
        self._title = title
        self._progress = progress  # rich Progress, or None: plain lines
        self._task: Any = None
        self._current: str | None = None
        self._since = time.monotonic()
        if progress is not None:
            self._task = progress.add_task(title, total=None)

    def __call__(self, message: str) -> None:
        if self._progress is None:
            click.echo(f"  … {message}", err=True)
            return
        self.done()
        self._current, self._since = message, time.monotonic()
        self._progress.update(self._task, description=f"{self._title}: {message}")

    def note(self, message: str) -> None:
        """One line on stderr (above the spinner on a terminal)."""
        if self._progress is None:
            click.echo(f"  … {message}", err=True)
        else:
            self._progress.console.print(f"  [yellow]![/] {message}", highlight=False)

    def done(self) -> None:
        """Keep the current step as one line with its duration (terminal only)."""
        if self._progress is not None and self._current is not None:
            self._progress.console.print(
                f"  [green]✓[/] {self._current} [dim]({time.monotonic() - self._since:.1f} s)[/]",
                highlight=False)
            self._current = None


@contextlib.contextmanager
def waiting(title: str) -> Iterator[Step]:
    """Progress of a wait that may last more than a second, on stderr only.

    Yields a :class:`Step`: call it with each step's message (pass it as a
    ``progress=`` callback), or :meth:`Step.note` a line. On a terminal (stderr
    is a TTY, or rich is forced with ``FORCE_COLOR``): a rich spinner line
    ``<title>: <step>`` with the elapsed time, each finished step kept as one
    line with its duration. Otherwise one plain line ``  … <message>`` per step
    or note. Nothing is written to stdout.
    """
    from rich.console import Console

    console = Console(stderr=True)
    if not console.is_terminal:
        yield Step(title)
        return
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    columns = (SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as progress:
        step = Step(title, progress)
        yield step
        step.done()
