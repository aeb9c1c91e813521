"""The route sweep against the cluster gateway: no client input gets a 5xx.

The table of ``tests/gateway/_sweep.py`` (malformed and hostile input to every
route) over real HTTP to the gateway of the package's local cluster (etcd,
Redis, Ray hosts; the Ray router), so every error also crosses the actor and
agent boundaries. The in-process gateway gets the same table in
``tests/gateway/test_no_5xx_sweep.py``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import httpx
import pytest

from svit_cluster.local import LocalCluster
from tests.gateway._sweep import CASES, Case, Ids, check, setup_processes

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def sweep(cluster: LocalCluster) -> Iterator[tuple[httpx.Client, Ids, dict[str, str]]]:
    tokens = {"tenant": cluster.doc["tokens"]["local"], "admin": cluster.doc["tokens"]["admin"]}
    with httpx.Client(base_url=cluster.doc["gateway"]["url"], timeout=90) as client:
        ids = Ids(uuid.uuid4().hex[:8])
        setup_processes(client, ids, tokens)
        yield client, ids, tokens


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_route_answers_a_typed_4xx(sweep: tuple[httpx.Client, Ids, dict[str, str]],
                                   case: Case) -> None:
    client, ids, tokens = sweep
    problems = check(client, case, ids, tokens, cluster=True)
    assert not problems, f"{case.method} {case.path} ({case.name}): {problems}"
