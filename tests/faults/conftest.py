"""The fault-injection tests put a TCP proxy in front of ONE redis-server.

A Redis Cluster client discovers the nodes' real addresses and would go around
the proxy, so these tests use the single shared server only: ``rclient`` here
overrides the suite-wide fixture that is parametrised over {single, cluster}.
"""

from __future__ import annotations

import pytest
import redis


@pytest.fixture
def rclient(single_rclient: redis.Redis) -> redis.Redis:
    return single_rclient
