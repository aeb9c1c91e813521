"""Real etcd and redis-server processes shared by every test package.

Session-scoped servers are shared (each test uses its own key prefix, cluster
name or process id); tests that stop, kill or restart a server take a dedicated
one (``fresh_redis``, ``fresh_etcd``). Every server is stopped by its PID at
teardown, also when a test fails, and dies with the test run
(PR_SET_PDEATHSIG) if pytest itself is killed.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis

from svit_cluster.local import EtcdServer, RedisServer
from svit_cluster.store import connect


@contextmanager
def running(server: RedisServer | EtcdServer) -> Iterator[None]:
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
def rclient(redis_server: RedisServer) -> Iterator[redis.Redis]:
    client = connect(redis_server.url, timeout_s=5)
    try:
        yield client
    finally:
        client.close()
