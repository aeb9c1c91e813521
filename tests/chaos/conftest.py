"""Real redis-server and etcd processes for the chaos harness tests (no Ray).

Every server is stopped by its PID at teardown, also when a test fails, and
dies with the test run (PR_SET_PDEATHSIG) if pytest itself is killed.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from svit_cluster.local import EtcdServer, RedisServer
from svit_cluster.store import connect


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("chaos-redis"), die_with_parent=True)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def fresh_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A dedicated redis-server this test may kill -9 and restart."""
    server = RedisServer(tmp_path / "redis-own", die_with_parent=True)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def fresh_etcd(tmp_path: Path) -> Iterator[EtcdServer]:
    """A dedicated etcd this test may kill and restart."""
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
