"""Helpers for the dispatcher tests: a webhook stub, real commits, waiting."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from svit_cluster.control import ProcessController, decode_request
from svit_cluster.local import ClusterSpec, LocalCluster, free_port
from svit_cluster.process import Process, Transaction, encode_value
from svit_cluster.store import RedisBackend, StoreConfig

SEND = """(define (main input)
  (do (send! (value-get input "/to") (value-get input "/body"))
      (write "/memory/n" (+ 1 (read "/memory/n")))
      1))"""
SEND_TWO = """(define (main input)
  (do (send! (value-get input "/a") (value-get input "/body"))
      (send! (value-get input "/b") (value-get input "/body"))
      1))"""


@dataclass
class Hit:
    """One request the stub received."""

    path: str
    host: str
    key: str | None
    body: dict[str, Any]
    at: float


@dataclass
class WebhookStub:
    """A real HTTP server (uvicorn + starlette) on a free loopback port.

    Paths: ``/ok`` 200; ``/fail`` 500; ``/reject`` 400 while :attr:`rejecting`
    is set, else 200; ``/flaky`` 503 on the first :attr:`flaky_failures`
    attempts of each key; ``/slow`` 200 after :attr:`slow_s`; ``/hang`` sleeps
    :attr:`hang_s`; ``/redirect`` 302 to ``/ok``; ``/garbage`` 200 with junk.
    """

    port: int = field(default_factory=free_port)
    hits: list[Hit] = field(default_factory=list)
    rejecting: bool = True
    flaky_failures: int = 2
    slow_s: float = 0.03
    hang_s: float = 5.0
    _attempts: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: uvicorn.Server | None = None
    _thread: threading.Thread | None = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _handle(self, request: Request) -> Response:
        raw = await request.body()
        try:
            body = json.loads(raw)
        except ValueError:
            body = {}
        key = request.headers.get("idempotency-key")
        path = request.url.path
        with self._lock:
            self.hits.append(Hit(path, request.headers.get("host", ""), key, body, time.time()))
            self._attempts[f"{path} {key}"] += 1
            attempt = self._attempts[f"{path} {key}"]
        if path == "/fail":
            return PlainTextResponse("boom", status_code=500)
        if path == "/reject":
            return PlainTextResponse("no", status_code=400 if self.rejecting else 200)
        if path == "/flaky" and attempt <= self.flaky_failures:
            return PlainTextResponse("later", status_code=503)
        if path == "/slow":
            await asyncio.sleep(self.slow_s)
        if path == "/hang":
            await asyncio.sleep(self.hang_s)
        if path == "/redirect":
            return Response(status_code=302, headers={"Location": f"{self.base}/ok"})
        if path == "/garbage":
            return Response(b"\x00\xff not json", status_code=200)
        return PlainTextResponse("ok")

    def start(self) -> WebhookStub:
        app = Starlette(routes=[Route("/{path:path}", self._handle, methods=["POST"])])
        self._server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port,
                                                     log_level="warning", lifespan="off"))
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("webhook stub did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(10)

    def keys_for(self, path: str) -> list[str | None]:
        with self._lock:
            return [h.key for h in self.hits if h.path == path]

    def hits_for(self, path: str) -> list[Hit]:
        with self._lock:
            return [h for h in self.hits if h.path == path]


class Sender:
    """A process committed through the real fenced commit script (RedisBackend)."""

    def __init__(self, client: redis.Redis, pid: str, prefix: str, script: str = SEND) -> None:
        self.pid = pid
        backend = RedisBackend(client, pid, 1, StoreConfig(prefix=prefix))
        backend.claim()
        proc = Process.create(pid, memory={"n": 0}, scripts={"send": script})
        backend.create(proc)
        self.ctrl = ProcessController(proc, backend)
        self._n = 0

    def send(self, **input: Any) -> list[str]:
        """One activation; returns the committed intent ids."""
        self._n += 1
        version = self.ctrl.process.version
        request = {
            "protocol": "svit-control@1", "client_id": "t", "request_id": f"r{self._n}",
            "process_id": self.pid, "expected_version": version,
            "command": {"operation": "activate", "script": "send",
                        "input": encode_value(input)},
        }
        resp = self.ctrl.execute(decode_request(json.dumps(request).encode()))
        assert resp.outcome.status == "committed", resp.outcome
        return [m.message_id for m in resp.outcome.activation.messages]




def new_pid(kind: str) -> str:
    """A fresh process id ``svit://local/<kind>-<8 hex>``."""
    return f"svit://local/{kind}-{uuid.uuid4().hex[:8]}"


def webhook_cluster(state_dir: Path, stub: WebhookStub, *, hosts: int, lease_ttl_s: int,
                    dispatchers: int, reasoner: dict[str, Any] | None = None
                    ) -> Iterator[LocalCluster]:
    """A real local cluster whose dispatchers may deliver webhooks to ``stub`` only,
    for a module fixture to ``yield from``: it is taken down when the fixture ends.

    Args:
        state_dir: the cluster's state directory (a fresh temp dir).
        stub: the webhook server; its loopback ``host:port`` is the one allowed host.
        hosts, lease_ttl_s, dispatchers, reasoner: as :class:`ClusterSpec` (lease
            TTL in seconds; ``reasoner`` None: the spec's default).
    """
    lc = LocalCluster.up(ClusterSpec(
        state_dir=state_dir, hosts=hosts, lease_ttl_s=lease_ttl_s, dispatchers=dispatchers,
        dispatch_options={"webhook_hosts": [f"127.0.0.1:{stub.port}"]},
        **({"reasoner": reasoner} if reasoner is not None else {})))
    try:
        yield lc
    finally:
        lc.down()


def inbox_appends(rc: redis.Redis, pid: str) -> list[str]:
    """Ids of the items appended to ``pid``'s inbox, in log order, read from Redis
    directly (reading through the gateway would activate the process)."""
    out = []
    for entry in RedisBackend(rc, pid, 1).entries():
        record = Transaction.decode(entry.record)
        for m in record.mutations:
            if record.source == "inbox.append" and m.op == "append" and m.path == "/inbox":
                out.append(m.value["id"])  # type: ignore[index]
    return out
