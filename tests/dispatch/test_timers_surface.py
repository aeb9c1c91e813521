"""A process's durable timers through the gateway, the SDK (sync and async) and the CLI.

The gateway (uvicorn on loopback, in-process router) reads the same Redis as a
real :class:`DispatchWorker`, which parks the timers written to the outbox
streams (in the commit script's shape, as ``test_timers.py`` does) and fires
the short one to the webhook stub. Each test runs against the single
redis-server and against the Redis Cluster (``redis_target``).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from svit_cluster.cli import cli
from svit_cluster.client import AsyncSvitClient, SvitClient, Timer, TimerPage
from svit_cluster.dispatch import DispatchKeys, list_timers, timer_log
from svit_cluster.errors import Forbidden, InvalidInput
from svit_cluster.gateway import Principal, TokenStore, create_app
from svit_cluster.inprocess import InProcessRouter
from svit_cluster.process import canonical_json
from tests._support import wait_for
from tests.conftest import RedisTarget
from tests.dispatch._support import WebhookStub
from tests.events._server import serve

pytestmark = pytest.mark.servers

ADMIN = "timers-admin-token-0123456789"
ACME = "timers-acme-token-0123456789"
BETA = "timers-beta-token-0123456789"
HOUR_MS = 3_600_000


def _arm(client: Any, prefix: str, pid: str, version: int, to: str, due_ms: int) -> str:
    """One delayed intent in the pid's outbox stream, as the commit script writes it."""
    mid = f"{pid}:{version}:0"
    client.xadd(DispatchKeys(prefix).outbox(pid), {
        "intent": canonical_json({"message_id": mid, "to": to, "body": {"n": version},
                                  "delay_ms": max(0, due_ms - int(time.time() * 1000)),
                                  "due_ms": due_ms}),
        "version": str(version)})
    return mid


@dataclass
class Armed:
    """What :func:`armed` set up: acme's five parked timers (due order) and its
    fired one, and beta's parked one."""

    acme: str
    pending: list[tuple[str, int]]  # (id, due_ms)
    to: str
    fired: str
    beta: str
    beta_timer: str


@pytest.fixture
def armed(rclient: Any, prefix: str, make_worker: Any, stub: WebhookStub) -> Armed:
    acme, beta = f"svit://acme/{uuid.uuid4().hex[:8]}", f"svit://beta/{uuid.uuid4().hex[:8]}"
    path = f"/ok/{uuid.uuid4().hex[:8]}"
    to = stub.base + path
    now = int(time.time() * 1000)
    # versions 1..5 armed in reverse due order, so due order != version order
    pending = [(_arm(rclient, prefix, acme, v, to, now + HOUR_MS + (6 - v) * 1000),
                now + HOUR_MS + (6 - v) * 1000) for v in range(1, 6)][::-1]
    fired = _arm(rclient, prefix, acme, 6, to, now + 200)
    beta_timer = _arm(rclient, prefix, beta, 1, to, now + HOUR_MS)
    make_worker()
    wait_for(lambda: stub.keys_for(path) == [fired], what="the short timer's delivery")
    wait_for(lambda: any(e["event"] == "fired" for e in timer_log(rclient, prefix, acme)),
             what="the short timer's done")
    wait_for(lambda: len(list_timers(rclient, prefix, acme).timers) == 5, what="acme parked")
    wait_for(lambda: list_timers(rclient, prefix, beta).timers, what="beta parked")
    return Armed(acme, pending, to, fired, beta, beta_timer)


@pytest.fixture
def gateway(redis_target: RedisTarget, prefix: str) -> Iterator[str]:
    tokens = TokenStore()
    tokens.add(ADMIN, Principal(tenant=None, admin=True))
    tokens.add(ACME, Principal(tenant="acme"))
    tokens.add(BETA, Principal(tenant="beta"))
    app = create_app(InProcessRouter(), tokens, redis_url=redis_target.url,
                     store_prefix=prefix)
    with serve(app) as base:
        yield base


def call(base: str, token: str, method: str, path: str, **kw: Any) -> httpx.Response:
    return httpx.request(method, base + path, headers={"Authorization": f"Bearer {token}"},
                         timeout=10, **kw)


def listed(base: str, token: str, pid: str, **params: Any) -> dict[str, Any]:
    r = call(base, token, "GET", "/v1/processes/timers", params={"process_id": pid, **params})
    assert r.status_code == 200, r.text
    doc: dict[str, Any] = r.json()
    return doc


def cancel(base: str, token: str, pid: str, timer_id: str) -> httpx.Response:
    return call(base, token, "POST", "/v1/processes/timers/cancel",
                json={"process_id": pid, "timer_id": timer_id})


# -- HTTP ----------------------------------------------------------------------------


def test_timers_are_listed_in_due_order_page_by_page(gateway: str, armed: Armed) -> None:
    ids: list[str] = []
    after: str | None = None
    pages = 0
    while True:
        doc = listed(gateway, ACME, armed.acme, limit=2, **({"after": after} if after else {}))
        pages += 1
        assert doc["process_id"] == armed.acme
        assert len(doc["timers"]) <= 2
        for t in doc["timers"]:
            assert set(t) == {"id", "to", "due_ms", "state", "version"}
            assert (t["to"], t["state"]) == (armed.to, "pending")
            assert t["version"] == int(t["id"].split(":")[-2])
        ids += [t["id"] for t in doc["timers"]]
        after = doc["next"]
        if after is None:
            break
    assert pages == 3
    assert ids == [tid for tid, _ in armed.pending]  # due order, the fired one gone
    whole = listed(gateway, ACME, armed.acme)  # default limit 100: one page
    assert [(t["id"], t["due_ms"]) for t in whole["timers"]] == armed.pending
    assert whole["next"] is None
    # a process without timers: an empty page, not an error
    empty = listed(gateway, ACME, "svit://acme/none-here")
    assert (empty["timers"], empty["next"]) == ([], None)


def test_cancel_outcomes_over_http(gateway: str, armed: Armed, rclient: Any,
                                   prefix: str) -> None:
    first = armed.pending[0][0]
    answers = [cancel(gateway, ACME, armed.acme, tid)
               for tid in (first, first, armed.fired, f"{armed.acme}:999:0")]
    assert [r.status_code for r in answers] == [200] * 4
    assert [r.json()["outcome"] for r in answers] == [
        "cancelled", "already_cancelled", "too_late", "unknown"]
    assert answers[0].json() == {"process_id": armed.acme, "timer_id": first,
                                 "outcome": "cancelled"}
    assert [t.id for t in list_timers(rclient, prefix, armed.acme).timers] == \
        [tid for tid, _ in armed.pending[1:]]
    r = call(gateway, ACME, "GET", "/v1/processes/timers/log",
             params={"process_id": armed.acme, "limit": 4})
    assert r.status_code == 200
    events = r.json()["events"]
    assert [(e["event"], e["id"], e.get("by")) for e in events] == [
        ("cancelled", first, "operator"), ("already_cancelled", first, "operator"),
        ("too_late", armed.fired, "operator"), ("unknown", f"{armed.acme}:999:0", "operator")]
    assert all(e["at_ms"].isdigit() for e in events)


def test_another_tenant_is_refused_and_a_foreign_timer_id_is_400(
        gateway: str, armed: Armed, rclient: Any, prefix: str) -> None:
    # beta's token on acme's process: 403 before Redis is read, on every route
    for method, path, kw in (
            ("GET", "/v1/processes/timers", {"params": {"process_id": armed.acme}}),
            ("GET", "/v1/processes/timers/log", {"params": {"process_id": armed.acme}}),
            ("POST", "/v1/processes/timers/cancel",
             {"json": {"process_id": armed.acme, "timer_id": armed.pending[0][0]}})):
        r = call(gateway, BETA, method, path, **kw)
        assert (r.status_code, r.json()["error"]["code"]) == (403, "forbidden"), (path, r.text)
    # acme naming its own process but beta's timer: refused, beta's timer stays
    r = cancel(gateway, ACME, armed.acme, armed.beta_timer)
    assert (r.status_code, r.json()["error"]["code"]) == (400, "invalid_value"), r.text
    assert armed.acme in r.json()["error"]["message"]
    for bad in ("x", f"{armed.acme}:a:0", f"{armed.acme}:1", f"{armed.acme}x:1:0",
                f"{armed.acme}:1:0:0"):
        r = cancel(gateway, ACME, armed.acme, bad)
        assert (r.status_code, r.json()["error"]["code"]) == (400, "invalid_value"), bad
    assert [t.id for t in list_timers(rclient, prefix, armed.beta).timers] == \
        [armed.beta_timer]
    assert len(list_timers(rclient, prefix, armed.acme).timers) == 5
    # the tenant itself and an admin may
    assert [t["id"] for t in listed(gateway, BETA, armed.beta)["timers"]] == \
        [armed.beta_timer]
    assert [t["id"] for t in listed(gateway, ADMIN, armed.beta)["timers"]] == \
        [armed.beta_timer]
    assert cancel(gateway, ADMIN, armed.beta, armed.beta_timer).json()["outcome"] \
        == "cancelled"


def test_bad_input_is_a_typed_400_and_no_redis_is_503(gateway: str) -> None:
    pid = "svit://acme/x"
    for params, code in (
            ({"process_id": pid, "limit": 0}, "decode_error"),
            ({"process_id": pid, "limit": 1001}, "decode_error"),
            ({"process_id": pid, "limit": "many"}, "decode_error"),
            ({}, "decode_error"),
            ({"process_id": pid, "after": "not-a-cursor"}, "invalid_value"),
            ({"process_id": "no-scheme"}, "invalid_process_id")):
        r = call(gateway, ACME, "GET", "/v1/processes/timers", params=params)
        assert (r.status_code, r.json()["error"]["code"]) == (400, code), (params, r.text)
    for body in ({"process_id": pid}, {"process_id": pid, "timer_id": ""},
                 {"process_id": pid, "timer_id": "x" * 513}, {"timer_id": f"{pid}:1:0"}):
        r = call(gateway, ACME, "POST", "/v1/processes/timers/cancel", json=body)
        assert (r.status_code, r.json()["error"]["code"]) == (400, "decode_error"), body
    r = call(gateway, ACME, "GET", "/v1/processes/timers/log",
             params={"process_id": pid, "limit": 1001})
    assert r.status_code == 400
    tokens = TokenStore()
    tokens.add(ACME, Principal(tenant="acme"))
    with serve(create_app(InProcessRouter(), tokens)) as base:  # no Redis URL
        r = call(base, ACME, "GET", "/v1/processes/timers", params={"process_id": pid})
        assert (r.status_code, r.json()["error"]["code"]) == (503, "unavailable")
        r = cancel(base, ACME, pid, f"{pid}:1:0")
        assert (r.status_code, r.json()["error"]["code"]) == (503, "unavailable")


# -- SDK -----------------------------------------------------------------------------


def test_sdk_sync_and_async_list_and_cancel(gateway: str, armed: Armed) -> None:
    with SvitClient(gateway, ACME) as c:
        page = c.timers(armed.acme, limit=3)
        assert isinstance(page, TimerPage) and page.next_after is not None
        assert all(isinstance(t, Timer) for t in page.timers)
        rest = c.timers(armed.acme, after=page.next_after)
        assert rest.next_after is None
        assert [(t.id, t.due_ms, t.to, t.state) for t in page.timers + rest.timers] == \
            [(tid, due, armed.to, "pending") for tid, due in armed.pending]
        assert c.cancel_timer(armed.acme, armed.pending[0][0]) == "cancelled"
        assert c.cancel_timer(armed.acme, armed.fired) == "too_late"
        with pytest.raises(InvalidInput) as bad:
            c.cancel_timer(armed.acme, armed.beta_timer)
        assert bad.value.fields["status"] == 400
        with pytest.raises(Forbidden):
            c.timers(armed.beta)

    async def run() -> tuple[list[str], str, str]:
        async with AsyncSvitClient(gateway, ACME) as a:
            page = await a.timers(armed.acme, limit=100)
            again = await a.cancel_timer(armed.acme, armed.pending[0][0])
            gone = await a.cancel_timer(armed.acme, f"{armed.acme}:77:0")
            with pytest.raises(Forbidden):
                await a.cancel_timer(armed.beta, armed.beta_timer)
            return [t.id for t in page.timers], again, gone

    ids, again, gone = asyncio.run(run())
    assert ids == [tid for tid, _ in armed.pending[1:]]
    assert (again, gone) == ("already_cancelled", "unknown")


# -- CLI -----------------------------------------------------------------------------


def cli_run(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args))


def test_cli_lists_and_cancels_with_exit_codes(gateway: str, armed: Armed) -> None:
    auth = ["--url", gateway, "--token", ACME]
    r = cli_run("timers", "list", armed.acme, *auth, "-o", "json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert [t["id"] for t in doc["timers"]] == [tid for tid, _ in armed.pending]
    assert doc["next"] is None
    r = cli_run("timers", "list", armed.acme, *auth, "--limit", "2")
    assert r.exit_code == 0, r.output
    for tid, _ in armed.pending[:2]:
        assert tid in r.stdout
    assert armed.pending[2][0] not in r.stdout
    cursor = r.stdout.strip().splitlines()[-1]
    assert cursor.startswith("more: --after ")
    r = cli_run("timers", "list", armed.acme, *auth, "--limit", "2", "--json",
                "--after", cursor.removeprefix("more: --after "))
    assert [t["id"] for t in json.loads(r.stdout)["timers"]] == \
        [tid for tid, _ in armed.pending[2:4]]
    r = cli_run("timers", "list", "svit://acme/none-here", *auth)
    assert (r.exit_code, r.stdout.strip()) == (0, "svit://acme/none-here: no pending timers")

    first = armed.pending[0][0]
    outcomes = []
    for tid in (first, first, armed.fired, f"{armed.acme}:999:0"):
        r = cli_run("timers", "cancel", armed.acme, tid, *auth)
        outcomes.append((r.exit_code, r.stdout.strip()))
    assert outcomes == [(0, f"{first}: cancelled"), (0, f"{first}: already_cancelled"),
                        (1, f"{armed.fired}: too_late"),
                        (1, f"{armed.acme}:999:0: unknown")]
    r = cli_run("timers", "cancel", armed.acme, armed.pending[1][0], *auth, "-o", "json")
    assert (r.exit_code, json.loads(r.stdout)["outcome"]) == (0, "cancelled")
    # refused: another tenant's process (403), another process's timer (400): exit 1
    r = cli_run("timers", "cancel", armed.beta, armed.beta_timer, *auth)
    assert r.exit_code == 1 and "forbidden" in r.stderr and "Traceback" not in r.output
    r = cli_run("timers", "cancel", armed.acme, armed.beta_timer, *auth)
    assert r.exit_code == 1 and "invalid_value" in r.stderr
