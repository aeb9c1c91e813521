"""Real etcd and redis-server processes shared by every test package.

Session-scoped servers are shared (each test uses its own key prefix, cluster
name or process id); tests that stop, kill or restart a server take a dedicated
one (``fresh_redis``, ``fresh_etcd``, ``etcd3``: a 3-member etcd of its own).
Every server is stopped by its PID at teardown, also when a test fails, and
dies with the test run (PR_SET_PDEATHSIG) if pytest itself is killed.

``redis_target`` (and so ``rclient``) is parametrised over ``single`` (the
shared redis-server) and ``cluster`` (a real local Redis Cluster, 3 masters +
3 replicas, started once per session), so every store, events and dispatcher
test that takes them runs against both. For ``cluster`` it also sets
``SVIT_REDIS_CLUSTER=true`` for the test, so every component that connects
through ``svit_cluster.store.connect``/``async_connect`` on its own (dispatch
workers, signal sources) builds a cluster client. Pick one side with
``-k single`` or ``-k cluster``.

The store and ownership tests share ``config`` (a fresh store key prefix),
``pid``, ``cluster`` (fresh names) and ``make_lease`` (granted host leases on
the shared etcd); packages with their own ``pid`` or ``cluster`` override them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from svit_cluster.local import EtcdClusterServer, EtcdServer, RedisClusterServer, RedisServer
from svit_cluster.ownership import HostLease, LeaseState, open_client
from svit_cluster.store import StoreConfig, connect
from svit_cluster.store._redis import CLUSTER_ENV, RedisClient
from tests._postgres import PostgresServer, PostgresUnavailable
from tests._support import unique


@contextmanager
def running(server: RedisServer | EtcdServer | RedisClusterServer) -> Iterator[None]:
    """Start ``server`` and always stop it (by PID) afterwards."""
    server.start()
    try:
        yield
    finally:
        server.stop()


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("redis-shared"), die_with_parent=True)
    with running(server):
        yield server


@pytest.fixture(scope="session")
def etcd_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdServer]:
    server = EtcdServer(tmp_path_factory.mktemp("etcd-shared"), die_with_parent=True)
    with running(server):
        yield server


@pytest.fixture
def fresh_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A dedicated redis-server this test may stop, kill -9 or restart."""
    server = RedisServer(tmp_path / "redis-own", die_with_parent=True)
    with running(server):
        yield server


@pytest.fixture
def fresh_etcd(tmp_path: Path) -> Iterator[EtcdServer]:
    """A dedicated etcd this test may stop or restart."""
    server = EtcdServer(tmp_path / "etcd-own", die_with_parent=True)
    with running(server):
        yield server


@pytest.fixture
def etcd3(tmp_path: Path) -> Iterator[EtcdClusterServer]:
    """A local 3-member etcd (election timeout 1 s), stopped by PID afterwards."""
    server = EtcdClusterServer(tmp_path / "etcd3", members=3, die_with_parent=True)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def redis_cluster_server(tmp_path_factory: pytest.TempPathFactory
                         ) -> Iterator[RedisClusterServer]:
    """A real local Redis Cluster: 3 masters + 3 replicas on free loopback ports,
    ``appendfsync always``, ``noeviction``; every node stopped by its PID."""
    server = RedisClusterServer(tmp_path_factory.mktemp("redis-cluster"), masters=3,
                                replicas=1, die_with_parent=True)
    with running(server):
        yield server


@dataclass(frozen=True)
class RedisTarget:
    """Where a parametrised test's Redis is: ``url`` and whether it is a cluster."""

    url: str
    cluster: bool

    def connect(self) -> RedisClient:
        return connect(self.url, timeout_s=5, cluster=self.cluster)


@pytest.fixture(params=["single", "cluster"])
def redis_target(request: pytest.FixtureRequest,
                 monkeypatch: pytest.MonkeyPatch) -> RedisTarget:
    """The shared single redis-server, or the session's Redis Cluster."""
    if request.param == "cluster":
        cluster: RedisClusterServer = request.getfixturevalue("redis_cluster_server")
        monkeypatch.setenv(CLUSTER_ENV, "true")
        return RedisTarget(cluster.url, True)
    single: RedisServer = request.getfixturevalue("redis_server")
    monkeypatch.delenv(CLUSTER_ENV, raising=False)
    return RedisTarget(single.url, False)


@pytest.fixture
def rclient(redis_target: RedisTarget) -> Iterator[RedisClient]:
    client = redis_target.connect()
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def single_rclient(redis_server: RedisServer) -> Iterator[RedisClient]:
    """A client of the shared single redis-server only (never the cluster): for
    packages that override ``rclient`` with it (tests/faults, tests/chaos)."""
    client = connect(redis_server.url, timeout_s=5)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def config() -> StoreConfig:
    """A fresh key prefix per test."""
    return StoreConfig(prefix=unique("t"), snapshot_every=8, trim_margin=2, max_receipts=16)


@pytest.fixture
def pid() -> str:
    """A fresh process id."""
    return f"svit://test/{unique('p')}"


@pytest.fixture
def cluster() -> str:
    """A fresh cluster name."""
    return unique("c")


@pytest.fixture
async def make_lease(
    etcd_server: EtcdServer,
) -> AsyncIterator[Callable[..., Any]]:
    """Factory of granted host leases on the shared etcd (ttl 2 s, margin 0.5 s),
    returned HELD (waited for, up to 5 s).

    A 2-s lease is SUSPENDED when no keepalive succeeded for 0.75 s (twice its
    0.375-s interval); two CI runs found one SUSPENDED right after its grant,
    and the tests that use these leases are about fencing and ownership, not
    keepalive timing (those are tests/ownership and test_lease_*)."""
    made: list[HostLease] = []
    clients: list[Any] = []

    async def make(server: EtcdServer | None = None, **kwargs: Any) -> HostLease:
        client = open_client((server or etcd_server).endpoint, request_timeout_s=1.0)
        clients.append(client)
        options: dict[str, Any] = {"ttl_s": 2, "safety_margin_s": 0.5}
        options.update(kwargs)
        lease = HostLease(client, **options)
        made.append(lease)
        granted = await lease.grant()
        await granted.wait_for(LeaseState.HELD, timeout_s=5)
        return granted

    try:
        yield make
    finally:
        for lease in made:
            await lease.close()
        for client in clients:
            await client.close()


# -- PostgreSQL (sql_query mounts) ---------------------------------------------------
# One server per session, started on a free loopback port and stopped by its PID at
# teardown (SIGKILLed by Linux if pytest dies). Missing server binaries fail the
# tests that need them, naming the Debian package: they are never skipped.


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    server = PostgresServer()
    try:
        server.start()
    except PostgresUnavailable as exc:
        server.stop()
        pytest.fail(str(exc), pytrace=False)
    except BaseException:
        server.stop()
        raise
    try:
        yield server
    finally:
        server.stop()
