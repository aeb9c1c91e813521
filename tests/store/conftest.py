"""Store and ownership fixtures; the etcd and redis-server processes come from tests/conftest.py."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from svit_cluster.local import EtcdServer
from svit_cluster.ownership import HostLease, LeaseState, open_client
from svit_cluster.store import StoreConfig
from tests._support import unique
from tests.conftest import running
from tests.store._support import ConfiguredRedis


@pytest.fixture
def config() -> StoreConfig:
    """A fresh key prefix per test."""
    return StoreConfig(prefix=unique("t"), snapshot_every=8, trim_margin=2, max_receipts=16)


@pytest.fixture
def no_config_redis(tmp_path: Path) -> Iterator[ConfiguredRedis]:
    """A dedicated redis-server with ``CONFIG`` renamed away, as managed Redis
    services do."""
    server = ConfiguredRedis(tmp_path / "redis-noconfig", ["--rename-command", "CONFIG", ""])
    with running(server):
        yield server


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
