"""``svit-cluster dispatcher …`` and ``svit-cluster dead-letters …`` (click groups).

Registered in :mod:`svit_cluster.cli` (whose root group turns expected failures
into one line and an exit code, see :mod:`svit_cluster.cli._util`).
``dispatcher run`` is one worker in this OS process; ``dead-letters`` talks to
a gateway's admin API (admin token; ``SVIT_URL``/``SVIT_TOKEN``).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import Any

import click
import httpx

from svit_cluster.cli._util import emit, fail, output_option
from svit_cluster.defaults import (
    DEAD_LETTER_PAGE_MAX,
    DEFAULT_DEAD_LETTER_PAGE,
    DEFAULT_REDRIVE_LIMIT,
)
from svit_cluster.dispatch import (
    DispatchConfig,
    read_cluster_json,
    run_worker,
    status_and_summary,
)
from svit_cluster.errors import ConfigurationError, NotFound, SvitError, UnavailableError
from svit_cluster.store import connect

__all__ = ["COMMANDS", "dead_letters", "dispatcher"]

#: ``DispatchConfig``'s field defaults, named in the ``run`` options' help (the
#: options default to None: an unset option keeps the config's default).
_DEFAULT: dict[str, Any] = {f.name: f.default for f in dataclasses.fields(DispatchConfig)}

_state_dir = click.option(
    "--state-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
    help="A local cluster's folder: read Redis, gateway and admin token from cluster.json.",
)


@click.group(name="dispatcher")
def dispatcher() -> None:
    """The outbox dispatcher: run a worker, show delivery status.

    \b
      svit-cluster dispatcher run --state-dir .svit          one worker (run more to scale)
      svit-cluster dispatcher status --state-dir .svit svit://local/a
    """


@dispatcher.command("run")
@_state_dir
@click.option("--redis-url", default=None,
              help="Commit-log Redis [default: SVIT_REDIS_URL]; not needed with --state-dir.")
@click.option("--gateway-url", default=None,
              help="Gateway for svit:// destinations [default: SVIT_GATEWAY_URL, else "
                   "SVIT_URL].")
@click.option("--token", default=None,
              help="Admin bearer token for that gateway [default: SVIT_TOKEN].")
@click.option("--worker-id", default=None, help="Consumer name (default <hostname>-<pid>).")
@click.option("--allow-webhook-host", "hosts", multiple=True,
              help="Allow webhooks to HOST or HOST:PORT (repeatable).")
@click.option("--max-attempts", type=click.IntRange(1), default=None,
              help=f"Attempts before dead-lettering (default {_DEFAULT['max_attempts']}).")
@click.option("--claim-idle", "claim_idle_s", type=click.FloatRange(0), default=None,
              help="Seconds before a dead worker's pending entries are reclaimed "
                   f"(default {_DEFAULT['claim_idle_s']:g}).")
@click.option("--claim-ttl", "--lease-ttl", "claim_ttl_s", type=click.FloatRange(0.1), default=None,
              help=f"Per-stream claim TTL in seconds (default {_DEFAULT['claim_ttl_s']:g}; "
                   "--lease-ttl is the old name).")
@click.option("--dead-letter-max-count", "dead_letter_max_count", type=click.IntRange(1),
              default=None, help="Dead letters kept at most, oldest removed first "
                                 f"(default {_DEFAULT['dead_letter_max_count']}).")
@click.option("--dead-letter-max-age", "dead_letter_max_age_s", type=click.FloatRange(0.001),
              default=None, help="Seconds a dead letter is kept at most (default "
                                 f"{_DEFAULT['dead_letter_max_age_s']:g}, "
                                 f"{_DEFAULT['dead_letter_max_age_s'] / 86_400:g} days).")
@click.option("--metrics-port", type=click.IntRange(0, 65535), default=None,
              help="Serve Prometheus metrics on this port.")
@click.option("--options", "options_json", default=None,
              help='More DispatchConfig options as JSON, e.g. \'{"batch_size": 16}\'.')
@click.option("--log-level", default="INFO", show_default=True)
def run(state_dir: Path | None, redis_url: str | None, gateway_url: str | None,
        token: str | None, worker_id: str | None, hosts: tuple[str, ...],
        max_attempts: int | None, claim_idle_s: float | None, claim_ttl_s: float | None,
        dead_letter_max_count: int | None, dead_letter_max_age_s: float | None,
        metrics_port: int | None, options_json: str | None, log_level: str) -> None:
    """Run one dispatcher worker until SIGTERM/SIGINT."""
    from svit_cluster.settings import DispatcherSettings, load_settings

    env = load_settings(DispatcherSettings)  # options win; a bad variable exits here
    redis_url = redis_url or env.redis_url
    gateway_url = gateway_url or env.gateway_url or env.url
    token = token or env.token
    logging.basicConfig(level=log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    overrides: dict[str, Any] = json.loads(options_json) if options_json else {}
    overrides.update({k: v for k, v in {
        "redis_url": redis_url, "gateway_url": gateway_url, "gateway_token": token,
        "worker_id": worker_id, "max_attempts": max_attempts, "claim_idle_s": claim_idle_s,
        "claim_ttl_s": claim_ttl_s, "metrics_port": metrics_port,
        "dead_letter_max_count": dead_letter_max_count,
        "dead_letter_max_age_s": dead_letter_max_age_s,
    }.items() if v is not None})
    if hosts:
        overrides["webhook_hosts"] = tuple(hosts)
    try:
        if state_dir is not None:
            config = DispatchConfig.from_cluster_json(state_dir / "cluster.json", **overrides)
        else:
            config = DispatchConfig.from_mapping(overrides)
    except SvitError as exc:
        fail(exc)
    except TypeError as exc:
        raise click.UsageError(f"missing --redis-url or --state-dir ({exc})") from exc
    run_worker(config)


@dispatcher.command("status")
@_state_dir
@click.option("--redis-url", default=None, help="Commit-log Redis [default: SVIT_REDIS_URL].")
@output_option
@click.argument("process_ids", nargs=-1, required=True)
def status(state_dir: Path | None, redis_url: str | None, output: str,
           process_ids: tuple[str, ...]) -> None:
    """Delivery status (pending / delivered / dead_lettered) of PROCESS_IDS' intents.

    The counts line (text output) is per stream counters and stays right after
    acknowledged entries were trimmed; ``-o json`` lists the retained and the
    pending or dead-lettered intents (trimmed delivered ones are not listed).
    """

    cluster: bool | None = None  # None: SVIT_REDIS_CLUSTER decides
    if redis_url is None and state_dir is None:
        from svit_cluster.settings import DispatcherSettings, load_settings

        redis_url = load_settings(DispatcherSettings).redis_url
    if redis_url is None and state_dir is not None:
        try:  # the local cluster's record, read as `run --state-dir` reads it
            doc = read_cluster_json(state_dir / "cluster.json")
            redis_url = str(doc["redis"]["url"])
            cluster = bool(doc["redis"].get("cluster")) or None
        except SvitError as exc:
            fail(exc)
        except (KeyError, TypeError, AttributeError) as exc:
            fail(ConfigurationError(f"malformed cluster document: {exc!r}"))
    if redis_url is None:
        raise click.UsageError("give --redis-url or --state-dir")
    client = connect(redis_url, cluster=cluster)
    result, summary = status_and_summary(client, process_ids)
    # Counts come from each stream's entries-added counter (trimming removes
    # acknowledged entries), not from counting the listed intents.
    counts: Counter[str] = Counter()
    for s in summary.values():
        counts.update({"pending": s.pending, "delivered": s.delivered,
                       "dead_lettered": s.dead_lettered, "committed": s.committed,
                       "trimmed": s.trimmed})
    emit(output, [asdict(s) for s in result.values()], lambda: click.echo(
        " ".join(f"{k}={counts.get(k, 0)}" for k in ("pending", "delivered", "dead_lettered",
                                                      "committed", "trimmed"))))


@click.group(name="dead-letters")
def dead_letters() -> None:
    """List and re-drive the dispatcher's dead letters (through a gateway, admin token)."""


def _gateway(state_dir: Path | None, url: str | None, token: str | None) -> tuple[str, str]:
    from svit_cluster.settings import resolve_gateway

    base, tok = resolve_gateway(url, token, state_dir=state_dir)
    if not tok:
        raise click.UsageError("no admin token: give --token, export SVIT_TOKEN, or "
                               "--state-dir")
    return base.rstrip("/"), tok


def _call(method: str, url: str, token: str, path: str, *, timeout_s: float,
          **kw: Any) -> Any:
    """One admin call; a 4xx/5xx raises the typed SDK error (see svit_cluster.client)."""
    from svit_cluster.client import raise_for_response

    try:
        resp = httpx.request(method, url + path, headers={"Authorization": f"Bearer {token}"},
                             timeout=timeout_s, **kw)
    except httpx.TransportError as exc:
        timeout = isinstance(exc, httpx.TimeoutException)
        raise UnavailableError(f"gateway {url} {'timed out' if timeout else 'unreachable'}: "
                               f"{type(exc).__name__}: {exc}", timeout=timeout) from exc
    raise_for_response(resp)
    return resp.json()


_gateway_options = [
    _state_dir,
    click.option("--url", default=None,
                 help="Gateway base URL [default: SVIT_URL, then ./.svit/cluster.json]."),
    click.option("--token", default=None, help="Admin token [default: SVIT_TOKEN]."),
    click.option("--timeout", "timeout_s", default=30.0, show_default=True,
                 type=click.FloatRange(0.01), help="Seconds to wait for the gateway."),
]


def _with_gateway(fn: Any) -> Any:
    for option in reversed(_gateway_options):
        fn = option(fn)
    return fn


@dead_letters.command("list")
@_with_gateway
@click.option("--limit", type=click.IntRange(1, DEAD_LETTER_PAGE_MAX),
              default=DEFAULT_DEAD_LETTER_PAGE, show_default=True)
@click.option("--after", default=None, help="Page after this dead-letter id.")
@output_option
def list_letters(state_dir: Path | None, url: str | None, token: str | None, timeout_s: float,
                 limit: int, after: str | None, output: str) -> None:
    """Dead letters, oldest first."""
    base, tok = _gateway(state_dir, url, token)
    params: dict[str, Any] = {"limit": limit}
    if after:
        params["after"] = after
    doc = _call("GET", base, tok, "/v1/admin/dead-letters", params=params, timeout_s=timeout_s)
    if output == "json":
        emit(output, doc, lambda: None)
        return
    for d in doc["dead_letters"]:
        click.echo(f"{d['id']}  {d['intent_id'] or '?'} -> {d['to'] or '?'}  "
                   f"[{d['sink']}/{d['reason']}, {d['attempts']} attempts] {d['error'][:120]}")
    click.echo(f"{doc['count']} dead letter(s)")


@dead_letters.command("redrive")
@_with_gateway
@click.option("--all", "redrive_all", is_flag=True, help="Re-drive the oldest --limit letters.")
@click.option("--limit", type=click.IntRange(1, DEAD_LETTER_PAGE_MAX),
              default=DEFAULT_REDRIVE_LIMIT, show_default=True)
@output_option
@click.argument("ids", nargs=-1)
def redrive(state_dir: Path | None, url: str | None, token: str | None, timeout_s: float,
            redrive_all: bool, limit: int, output: str, ids: tuple[str, ...]) -> None:
    """Send dead letters IDS (or --all) back to delivery, with the same keys."""
    if not ids and not redrive_all:
        raise click.UsageError("give dead-letter IDS or --all")
    base, tok = _gateway(state_dir, url, token)
    body: dict[str, Any] = {"ids": list(ids)} if ids else {"all": True, "limit": limit}
    doc = _call("POST", base, tok, "/v1/admin/dead-letters/redrive", json=body,
                timeout_s=timeout_s)

    trimmed = list(doc.get("trimmed") or [])

    def text() -> None:
        click.echo(f"redriven {len(doc['redriven'])}, missing {len(doc['missing'])}, "
                   f"trimmed {len(trimmed)}")
        for missing in doc["missing"]:
            click.echo(f"  missing {missing}", err=True)

    emit(output, doc, text)
    if trimmed:  # gone for good: a failed operation (exit 1), unlike a retry's "missing"
        shown = ", ".join(trimmed[:5]) + (" ..." if len(trimmed) > 5 else "")
        fail(NotFound(f"dead letter(s) {shown}: {doc.get('trimmed_reason') or 'removed'}",
                      trimmed=trimmed))


#: The commands, in the order ``svit-cluster`` registers them.
COMMANDS: tuple[click.Command, ...] = (dispatcher, dead_letters)
