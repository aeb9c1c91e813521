"""A real redis-server for the signal and observer tests (stopped by PID at teardown)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest
import redis

from svit_cluster.local import RedisServer
from svit_cluster.store import connect

_n = itertools.count(1)


def unique(name: str) -> str:
    return f"{name}-{next(_n)}"


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("redis-events"), die_with_parent=True)
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
def pid() -> str:
    return f"svit://test/{unique('p')}"


@pytest.fixture
def prefix() -> str:
    return unique("ev")
