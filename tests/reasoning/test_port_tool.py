"""The model's ``port`` tool runs on the deployment's port registry (as the actor builds it).

The owner is built the way ``ProcessActor`` builds it: a ``ProcessController``
with the host's registry and fencing token, ``grant_ports()`` before serving,
and a ``TurnLoop`` given no ``port_runner`` hook. A simulated model's
``/port http {...}`` then calls a loopback HTTP server on the allowlist.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import redis

from svit_cluster.control import ProcessController
from svit_cluster.events import RedisEventLog, SignalKind
from svit_cluster.ports import PortsConfig, build_registry
from svit_cluster.process import Process
from svit_cluster.reasoning import ReasonerConfig, SimulatedReasoner, TurnLoop
from svit_cluster.store import RedisBackend, StoreConfig
from tests.reasoning._support import wait_for

pytestmark = pytest.mark.servers


@pytest.fixture
def server() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    seen: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
            seen.append({"key": self.headers.get("Idempotency-Key"), "body": body,
                         "token": self.headers.get("Svit-Fencing-Token")})
            data = f"got {body}".encode()
            self.send_response(201)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{httpd.server_address[1]}", seen
    finally:
        httpd.shutdown()
        httpd.server_close()


def _owner(client: redis.Redis, pid: str, prefix: str, token: int, allow: str,
           *, create: bool) -> tuple[ProcessController, RedisEventLog, TurnLoop]:
    backend = RedisBackend(client, pid, token, StoreConfig(prefix=prefix))
    backend.claim()
    if create:
        proc = Process.create(pid, memory={})
        backend.create(proc)
    else:
        restored = backend.restore()
        assert restored is not None
        proc = restored
    registry = build_registry(PortsConfig.parse(
        {"http": {"enabled": True, "allow_hosts": [allow]}}))
    ctrl = ProcessController(proc, backend, ports=registry, token=token)
    ctrl.grant_ports()
    log = RedisEventLog(client, pid, token, prefix=prefix)
    loop = TurnLoop(ctrl, log, SimulatedReasoner(), config=ReasonerConfig(retry_after_s=60),
                    attempt_tag=str(token))
    return ctrl, log, loop


async def test_the_model_calls_a_granted_http_port_through_the_registry(
    rclient: redis.Redis, pid: str, prefix: str, server: tuple[str, list[dict[str, Any]]]
) -> None:
    allow, seen = server
    ctrl, log, loop = _owner(rclient, pid, prefix, 7, allow, create=True)
    url = f"http://{allow}/hook"
    off_list = "http://127.0.0.2:9/nope"
    loop.start()
    try:
        for i, (target, body) in enumerate(((url, "hello"), (off_list, "x"))):
            ctrl.append_inbox("/port http " + json.dumps(
                {"url": target, "method": "POST", "body": body}))
            loop.wake()
            await wait_for(lambda n=i + 1: sum(
                s.kind is SignalKind.COMPLETION for s in log.signals()) == n)
    finally:
        await loop.stop()
    # exactly one request reached the server, with the host's key and the owner's token
    assert [(r["body"], r["token"]) for r in seen] == [("hello", "7")]
    assert str(seen[0]["key"]).startswith("svit-") and len(seen[0]["key"]) == 69
    acts = [r.event["data"] for r in log.recent(log.signals()[-1].data["session"], 64)
            if r.event["kind"] == "act"]
    assert acts[0]["name"] == "port"
    assert acts[0]["result"] == {"port": "http", "result": {
        "status": 201, "headers": {}, "body": "got hello"}}
    # off the allowlist: the model sees the refusal as a tool error, the turn completes
    assert acts[1]["result"]["error"]["code"] == "script_failed"
    assert "allowlist" in acts[1]["result"]["error"]["message"]
    replies = [s.data["response"]["content"] for s in log.signals()
               if s.kind is SignalKind.COMPLETION]
    assert "got hello" in replies[0]


async def test_a_re_run_turn_sends_the_same_key(
    rclient: redis.Redis, pid: str, prefix: str, server: tuple[str, list[dict[str, Any]]]
) -> None:
    """A turn whose owner fails before the ack is re-run by the next owner: the
    same call at the same place in the turn carries the same idempotency key."""
    allow, seen = server
    message = "/port http " + json.dumps({"url": f"http://{allow}/x", "method": "POST",
                                          "body": "once"})
    ctrl1, _, loop1 = _owner(rclient, pid, prefix, 1, allow, create=True)
    ctrl1.append_inbox(message)
    item = loop1._next_item()
    assert item is not None
    # the first owner runs the tool call, then loses the process before acknowledging
    ref = f"{item.session}.t{item.turn}.s0.c0"
    from svit_cluster.reasoning import validate_tool_calls

    (call,) = validate_tool_calls([{"id": "call-1", "name": "port", "arguments": {
        "name": "http", "input": json.loads(message.partition(" ")[2].partition(" ")[2])}}])
    first = loop1.tools.run(call, ref)
    assert first["result"]["body"] == "got once"
    _, log2, loop2 = _owner(rclient, pid, prefix, 2, allow, create=False)
    loop2.start()
    try:
        await wait_for(lambda: any(s.kind is SignalKind.COMPLETION for s in log2.signals()))
    finally:
        await loop2.stop()
    assert len(seen) == 2 and seen[0]["key"] == seen[1]["key"]
    assert [r["token"] for r in seen] == ["1", "2"]
