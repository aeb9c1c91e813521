"""The chaos harness reads stored logs with single-node replies (issue 20 item 4,
chaos on a Redis Cluster, is not done yet), so its tests use the single shared
redis-server: ``rclient`` here overrides the suite-wide fixture that is
parametrised over {single, cluster}.
"""

from __future__ import annotations

import pytest
import redis


@pytest.fixture
def rclient(single_rclient: redis.Redis) -> redis.Redis:
    return single_rclient
