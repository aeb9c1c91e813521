"""A Ray-free stand-in for a local cluster, for the CLI tests.

* the real gateway app (auth, error bodies, admin dead-letter routes over the
  real redis-server) under uvicorn on a loopback port, routing to the
  in-memory ``InProcessRouter``;
* a ``cluster.json`` that points at it, at the session etcd and Redis, and at
  two "hosts" that are ``sleep`` processes this test started (so ``kill-host``,
  ``pause-host``, ``resume-host`` and ``down`` signal only our own PIDs; the
  recorded Redis/etcd PIDs are null so ``down`` never stops the shared servers).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from svit_cluster.errors import UnavailableError
from svit_cluster.gateway import Principal, TokenStore, create_app
from svit_cluster.gateway._router import ProcessInfo
from svit_cluster.inprocess import InProcessRouter
from svit_cluster.local import EtcdServer, RedisServer
from svit_cluster.local._ray import RayNode
from svit_cluster.process import Script, Value
from tests.events._server import serve

ADMIN = "admin-token-0123456789"
ACME = "acme-token-0123456789"
_n = itertools.count(1)


class CliRouter(InProcessRouter):
    """InProcessRouter with two knobs: a slow ``create`` and an unavailable ``state``."""

    def __init__(self) -> None:
        super().__init__()
        self.slow_create_s = 0.0
        self.unavailable = False

    async def create(self, process_id: str, memory: Value, scripts: dict[str, Script]
                     ) -> ProcessInfo:
        if self.slow_create_s:
            await asyncio.sleep(self.slow_create_s)
        if self.unavailable:
            raise UnavailableError("no live host owns the process")
        return await super().create(process_id, memory, scripts)


@dataclass
class FakeCluster:
    state_dir: Path
    url: str
    router: CliRouter
    hosts: dict[str, subprocess.Popen[bytes]]
    doc: dict[str, object]


@pytest.fixture(scope="module")
def gateway(redis_server: RedisServer) -> Iterator[tuple[str, CliRouter]]:
    tokens = TokenStore()
    tokens.add(ADMIN, Principal(tenant=None, admin=True))
    tokens.add(ACME, Principal(tenant="acme"))
    router = CliRouter()
    with serve(create_app(router, tokens, redis_url=redis_server.url)) as url:
        yield url, router


@pytest.fixture
def fake_cluster(tmp_path: Path, gateway: tuple[str, CliRouter], redis_server: RedisServer,
                 etcd_server: EtcdServer) -> Iterator[FakeCluster]:
    url, router = gateway
    router.slow_create_s, router.unavailable = 0.0, False
    hosts = {name: subprocess.Popen(["sleep", "120"]) for name in ("h1", "h2")}
    stand_in_gateway = subprocess.Popen(["sleep", "120"])  # `down` stops this PID
    state = tmp_path / "state"
    state.mkdir()
    doc: dict[str, object] = {
        "cluster": f"cli-{next(_n)}-{tmp_path.name[-12:]}",
        "state_dir": str(state),
        "lease_ttl_s": 5, "snapshot_every": 100, "passivate_after_s": 300.0,
        "max_request_bytes": 1 << 20,
        "tokens": {"admin": ADMIN, "local": ACME},
        "gateway": {"url": url, "pid": stand_in_gateway.pid},
        "redis": {"url": redis_server.url, "pid": None},
        "etcd": {"endpoint": etcd_server.endpoint, "pid": None},
        "hosts": {name: RayNode(name, state / name, state / f"{name}.log",
                                pid=proc.pid).to_json() for name, proc in hosts.items()},
    }
    (state / "cluster.json").write_text(json.dumps(doc))
    try:
        yield FakeCluster(state, url, router, hosts, doc)
    finally:
        for proc in [*hosts.values(), stand_in_gateway]:
            proc.kill()
            proc.wait(5)


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No SVIT_URL/SVIT_TOKEN and an empty working directory (no ./.svit)."""
    monkeypatch.delenv("SVIT_URL", raising=False)
    monkeypatch.delenv("SVIT_TOKEN", raising=False)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    return cwd
