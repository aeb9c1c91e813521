"""The route sweep against the in-process gateway: no client input gets a 5xx.

Every case of :data:`tests.gateway._sweep.CASES` (malformed and hostile input to
every route: bad JSON, wrong types, huge values under the byte cap, bad and
foreign process ids, scripts that do not compile, bad versions, cursors and
tokens, unicode oddities) is sent to ``create_app(InProcessRouter(), ...)``
with the timer and dead-letter routes on the shared redis-server, and must get
its typed 4xx (or its documented success), never a 5xx. The cluster gateway
gets the same table in ``tests/cluster/test_no_5xx_sweep_cluster.py``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from svit_cluster.gateway import Principal, TokenStore, create_app
from svit_cluster.inprocess import InProcessRouter
from svit_cluster.local import RedisServer
from tests.gateway._sweep import CASES, Case, Ids, check, routes_of, setup_processes

TOKENS = {"tenant": "local-token-0123456789", "admin": "admin-token-0123456789"}


@pytest.fixture(scope="module")
def sweep(redis_server: RedisServer) -> Iterator[tuple[TestClient, Ids]]:
    tokens = TokenStore()
    tokens.add(TOKENS["tenant"], Principal(tenant="local"))
    tokens.add(TOKENS["admin"], Principal(tenant=None, admin=True))
    prefix = f"sweep{uuid.uuid4().hex[:8]}"
    app = create_app(InProcessRouter(), tokens, redis_url=redis_server.url, store_prefix=prefix)
    # A 5xx must come back as an answer to assert on, not as the app's exception.
    with TestClient(app, raise_server_exceptions=False) as client:
        ids = Ids(uuid.uuid4().hex[:8])
        setup_processes(client, ids, TOKENS)
        yield client, ids


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_route_answers_a_typed_4xx(sweep: tuple[TestClient, Ids], case: Case) -> None:
    client, ids = sweep
    problems = check(client, case, ids, TOKENS, cluster=False)
    assert not problems, f"{case.method} {case.path} ({case.name}): {problems}"


def test_table_covers_every_route() -> None:
    """Every API route of the gateway has at least one case (a new route joins the table)."""
    tokens = TokenStore()
    tokens.add(TOKENS["admin"], Principal(tenant=None, admin=True))
    app = create_app(InProcessRouter(), tokens)
    swept = {(c.method, c.path.split("?")[0]) for c in CASES}
    public = {("GET", p) for p in ("/healthz", "/readyz", "/livez", "/metrics")}
    missing = set(routes_of(app)) - swept - public
    assert not missing, f"routes without a sweep case: {sorted(missing)}"
