"""A zombie dispatcher worker: paused (SIGSTOP) past its claim with a webhook call in flight.

W1 (its own OS process) sends an intent's webhook request; the test server holds
that request. W1 is stopped with SIGSTOP past its claim TTL; W2 takes the claim,
reclaims the entry and delivers it (200). Then the held request is answered 422
and W1 resumes: W1 would dead-letter the intent, but every write after a
network call is fenced by the claim token, so the dead letter is refused and the
intent stays ``delivered``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from svit_cluster.dispatch import DeliveryState, DispatchKeys, delivery_status
from svit_cluster.local import free_port
from tests._support import wait_for
from tests.conftest import RedisTarget
from tests.dispatch._support import Sender

pytestmark = pytest.mark.servers


class GateServer:
    """A webhook server on a free loopback port: the first request is held until
    :attr:`release` is set and then answered 422; every later one gets 200."""

    def __init__(self) -> None:
        self.port = free_port()
        self.release = threading.Event()
        self.keys: list[str | None] = []
        self.answers: list[int] = []
        self._lock = threading.Lock()
        app = Starlette(routes=[Route("/{path:path}", self._handle, methods=["POST"])])
        self._server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port,
                                                     log_level="warning", lifespan="off"))
        self._thread = threading.Thread(target=self._server.run, daemon=True)

    async def _handle(self, request: Request) -> Response:
        await request.body()
        with self._lock:
            first = not self.keys
            self.keys.append(request.headers.get("idempotency-key"))
        if first:
            await asyncio.to_thread(self.release.wait, 60)
        status = 422 if first else 200
        with self._lock:
            self.answers.append(status)
        return PlainTextResponse("unprocessable" if first else "ok", status_code=status)

    def __enter__(self) -> GateServer:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("gate server did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *_: object) -> None:
        self.release.set()
        self._server.should_exit = True
        self._thread.join(10)


_W1 = """
import json, logging, sys
from svit_cluster.dispatch import DispatchConfig, run_worker
logging.basicConfig(level=logging.INFO, stream=sys.stderr)
run_worker(DispatchConfig.from_mapping(json.loads(sys.argv[1])))
"""


@pytest.fixture
def gate() -> Iterator[GateServer]:
    with GateServer() as server:
        yield server


def options(redis_target: RedisTarget, prefix: str, port: int, worker: str) -> dict[str, Any]:
    return {
        "redis_url": redis_target.url, "prefix": prefix, "worker_id": worker,
        "scan_interval_s": 0.2, "heartbeat_interval_s": 0.2, "worker_ttl_s": 1.0,
        "claim_ttl_s": 1.0, "claim_idle_s": 0.5, "poll_interval_s": 0.5, "max_attempts": 1,
        # long enough that the held request is answered, not timed out, after the pause
        "sink_timeout_s": 60.0, "webhook_hosts": [f"127.0.0.1:{port}"],
    }


def test_a_paused_worker_cannot_dead_letter_what_its_successor_delivered(
    rclient: redis.Redis, redis_target: RedisTarget, prefix: str, gate: GateServer,
    make_worker: Any, tmp_path: Path,
) -> None:
    sender = Sender(rclient, f"svit://t/{uuid.uuid4().hex[:10]}", prefix)
    (intent_id,) = sender.send(to=f"http://127.0.0.1:{gate.port}/hook", body={"n": 1})
    log_path = tmp_path / "w1.log"
    with log_path.open("wb") as log:
        w1 = subprocess.Popen(
            [sys.executable, "-c", _W1,
             json.dumps(options(redis_target, prefix, gate.port, "w1-zombie"))],
            stdout=subprocess.DEVNULL, stderr=log, env=dict(os.environ))
    try:
        wait_for(lambda: gate.keys, what="W1's webhook request")
        os.kill(w1.pid, signal.SIGSTOP)  # W1 paused with its request in flight
        w2 = options(redis_target, prefix, gate.port, "w2")
        make_worker(**{**w2, "webhook_hosts": tuple(w2["webhook_hosts"])})
        wait_for(lambda: delivery_status(rclient, [sender.pid], prefix=prefix)[intent_id].state
                 is DeliveryState.DELIVERED, what="W2's delivery")
        assert gate.keys == [intent_id, intent_id] and gate.answers == [200]
        gate.release.set()  # the held request is answered 422 ...
        wait_for(lambda: gate.answers == [200, 422], what="the 422 answer")
        time.sleep(0.2)
        os.kill(w1.pid, signal.SIGCONT)  # ... and W1 resumes past its claim

        dead = DispatchKeys(prefix).dead

        def w1_acted() -> bool:
            return rclient.xlen(dead) > 0 or b"refused" in log_path.read_bytes()

        wait_for(w1_acted, what="W1 handling the 422")
        time.sleep(0.5)  # anything W1 writes next would land now
        status = delivery_status(rclient, [sender.pid], prefix=prefix)[intent_id]
        assert status.state is DeliveryState.DELIVERED, status
        assert rclient.xlen(dead) == 0  # the refused provisional letter was removed
        assert b"refused (fenced)" in log_path.read_bytes()
    finally:
        if w1.poll() is None:
            os.kill(w1.pid, signal.SIGCONT)
            w1.terminate()
            try:
                w1.wait(15)
            except subprocess.TimeoutExpired:
                w1.kill()
                w1.wait(5)


async def test_lease_tokens_fence_acks_and_dead_letters(redis_target: RedisTarget,
                                                        prefix: str) -> None:
    """The scripts alone: a new holder gets a higher token; the old token's ack and
    dead-letter settle are refused; a dead letter for an acknowledged entry is
    refused even with the current token; a renewal keeps the token."""
    from svit_cluster.dispatch._claim import StreamClaims
    from svit_cluster.dispatch._redisutil import async_client

    client = async_client(redis_target.url)
    keys = DispatchKeys(prefix)
    stream = keys.outbox("svit://t/fence")
    try:
        e1 = (await client.xadd(stream, {"intent": "{}"})).decode()
        e2 = (await client.xadd(stream, {"intent": "{}"})).decode()
        await client.xgroup_create(stream, "g", id="0")
        await client.xreadgroup("g", "c", {stream: ">"})  # both pending
        w1 = StreamClaims(client, keys, "w1", claim_ttl_s=0.2, worker_ttl_s=1)
        w2 = StreamClaims(client, keys, "w2", claim_ttl_s=5, worker_ttl_s=1)
        (t1,) = (await w1.claim([stream])).values()
        assert t1 >= 1 and (await w1.claim([stream]))[stream] == t1  # renewal: same token
        assert (await w2.claim([stream]))[stream] == 0  # held by w1
        await asyncio.sleep(0.3)  # w1's claim expires
        (t2,) = (await w2.claim([stream])).values()
        assert t2 == t1 + 1
        assert await w1.ack(stream, "g", e1, t1) == "fenced"
        assert await w1.settle_dead(stream, "g", e1, t1, "1-1") == "fenced"
        assert len(await client.xpending_range(stream, "g", min="-", max="+", count=10)) == 2
        assert await w2.ack(stream, "g", e1, t2) == "ok"  # delivered
        assert await w2.settle_dead(stream, "g", e1, t2, "1-1") == "settled"  # stays delivered
        assert await w2.settle_dead(stream, "g", e2, t2, "1-2") == "ok"
        assert await client.hgetall(DispatchKeys.dead_settled(stream)) == {e2.encode(): b"1-2"}
        assert await client.xpending_range(stream, "g", min="-", max="+", count=10) == []
    finally:
        await client.aclose()
