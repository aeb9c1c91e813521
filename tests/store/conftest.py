"""Real etcd and redis-server processes for the store and ownership tests.

Session-scoped servers are shared; each test gets fresh key prefixes, cluster
names and process ids so tests never see each other's data. Tests that stop,
kill or restart a server get a dedicated one (``fresh_redis``, ``fresh_etcd``).
Every server is stopped by its PID at teardown, also when a test fails, and
dies with the test run (PR_SET_PDEATHSIG) if pytest itself is killed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from svit_cluster.local import EtcdServer, RedisServer
from svit_cluster.ownership import HostLease, open_client
from svit_cluster.store import StoreConfig, connect
from tests.store._support import unique


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("redis-shared"), die_with_parent=True)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def etcd_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdServer]:
    server = EtcdServer(tmp_path_factory.mktemp("etcd-shared"), die_with_parent=True)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def fresh_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A dedicated redis-server this test may stop, kill -9 or restart."""
    server = RedisServer(tmp_path / "redis-own", die_with_parent=True)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def fresh_etcd(tmp_path: Path) -> Iterator[EtcdServer]:
    """A dedicated etcd this test may stop or restart."""
    server = EtcdServer(tmp_path / "etcd-own", die_with_parent=True)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def rclient(redis_server: RedisServer) -> Iterator[redis.Redis]:
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
    return f"svit://test/{unique('p')}"


@pytest.fixture
def cluster() -> str:
    return unique("c")


@pytest.fixture
async def make_lease(
    etcd_server: EtcdServer,
) -> AsyncIterator[Callable[..., Any]]:
    """Factory of granted host leases on the shared etcd (ttl 2 s, margin 0.5 s)."""
    made: list[HostLease] = []
    clients: list[Any] = []

    async def make(server: EtcdServer | None = None, **kwargs: Any) -> HostLease:
        client = open_client((server or etcd_server).endpoint, request_timeout_s=1.0)
        clients.append(client)
        options: dict[str, Any] = {"ttl_s": 2, "safety_margin_s": 0.5}
        options.update(kwargs)
        lease = HostLease(client, **options)
        made.append(lease)
        return await lease.grant()

    try:
        yield make
    finally:
        for lease in made:
            await lease.close()
        for client in clients:
            await client.close()
