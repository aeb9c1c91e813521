"""Fixtures: one real redis-server per session, a webhook stub, in-thread workers
(``redis_target``/``rclient`` from tests/conftest.py run each test against the
single server and against a Redis Cluster).

Every server is stopped by its PID at teardown (and dies with the test run via
PR_SET_PDEATHSIG); every worker thread is stopped in ``finally``.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from svit_cluster.client import SvitClient
from svit_cluster.dispatch import DispatchConfig, DispatchWorker
from svit_cluster.local import LocalCluster, RedisServer
from svit_cluster.store import connect
from tests.conftest import RedisTarget
from tests.dispatch._support import WebhookStub

_names = itertools.count(1)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("redis-dispatch"), appendfsync="everysec",
                         die_with_parent=True)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def prefix() -> str:
    """A fresh store prefix per test, so tests never see each other's streams."""
    return f"t{next(_names)}"


@pytest.fixture(scope="session")
def stub() -> Iterator[WebhookStub]:
    server = WebhookStub().start()
    try:
        yield server
    finally:
        server.stop()


class WorkerThread:
    """A :class:`DispatchWorker` on its own event loop in a thread."""

    def __init__(self, config: DispatchConfig) -> None:
        self.worker = DispatchWorker(config)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, daemon=True)

    def _main(self) -> None:
        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._ready.set()
            await self.worker.run()

        asyncio.run(main())

    def start(self) -> WorkerThread:
        self._thread.start()
        self._ready.wait(10)
        return self

    def stop(self) -> None:
        if self._loop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self.worker.stop)
        self._thread.join(30)


@pytest.fixture
def make_worker(redis_target: RedisTarget, prefix: str, stub: WebhookStub
                ) -> Iterator[Callable[..., WorkerThread]]:
    """Factory of started in-thread workers with fast test settings."""
    started: list[WorkerThread] = []

    def make(**options: Any) -> WorkerThread:
        base: dict[str, Any] = {
            "redis_url": redis_target.url, "prefix": prefix,
            "worker_id": f"w{next(_names)}", "scan_interval_s": 0.2,
            "heartbeat_interval_s": 0.2, "worker_ttl_s": 1.0, "claim_ttl_s": 1.0,
            "claim_idle_s": 0.5, "poll_interval_s": 0.5, "max_attempts": 3,
            "retry_initial_s": 0.02, "retry_max_s": 0.1, "sink_timeout_s": 2.0,
            "webhook_hosts": (f"127.0.0.1:{stub.port}",),
        }
        base.update(options)
        worker = WorkerThread(DispatchConfig.from_mapping(base)).start()
        started.append(worker)
        return worker

    try:
        yield make
    finally:
        for worker in started:
            worker.stop()



# For the modules that start a real LocalCluster as their module fixture ``cluster``:


@pytest.fixture(scope="module")
def admin(cluster: LocalCluster) -> Iterator[SvitClient]:
    """An admin SDK client of the module's cluster."""
    with SvitClient(cluster.doc["gateway"]["url"], cluster.doc["tokens"]["admin"]) as c:
        yield c


@pytest.fixture(scope="module")
def rc(cluster: LocalCluster) -> Iterator[redis.Redis]:
    """A redis-py client of the module's cluster's Redis."""
    client = connect(cluster.doc["redis"]["url"])
    try:
        yield client
    finally:
        client.close()
