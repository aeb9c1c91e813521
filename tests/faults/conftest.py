"""The fault-injection tests put a TCP proxy in front of ONE redis-server.

A Redis Cluster client discovers the nodes' real addresses and would go around
the proxy, so these tests use the single shared server only: ``rclient`` here
overrides the suite-wide fixture that is parametrised over {single, cluster}.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from svit_cluster.local import RedisServer
from svit_cluster.store import connect


@pytest.fixture
def rclient(redis_server: RedisServer) -> Iterator[redis.Redis]:
    client = connect(redis_server.url, timeout_s=5)
    try:
        yield client
    finally:
        client.close()
