"""The chaos harness reads stored logs with single-node replies (issue 20 item 4,
chaos on a Redis Cluster, is not done yet), so its tests use the single shared
redis-server: ``rclient`` here overrides the suite-wide fixture that is
parametrised over {single, cluster}.
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
