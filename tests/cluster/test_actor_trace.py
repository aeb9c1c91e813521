"""The process actor continues the caller's trace into the commit.

The ``ProcessActor`` class is driven directly (no Ray: Ray only transports the
call; its arguments are what the router sends) against the real fenced Redis
log. The router passes the gateway span's ``traceparent`` as the call's last
argument; the commit log entry must carry the same trace id.
"""

from __future__ import annotations

import itertools
from typing import Any

from svit_cluster.cluster import ClusterConfig, ProcessActor
from svit_cluster.cluster._results import CreateSpec
from svit_cluster.store import RedisBackend, StoreConfig, connect

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
INCOMING = f"00-{TRACE_ID}-00f067aa0ba902b7-01"
INCREMENT = """(define (main input)
  (let ((count (+ (read "/memory/count") 1)))
    (do (write "/memory/count" count) count)))"""
_ids = itertools.count()


def _body(pid: str, version: int, rid: str) -> bytes:
    import json

    return json.dumps({"protocol": "svit-control@1", "client_id": "c1", "request_id": rid,
                       "process_id": pid, "expected_version": version,
                       "command": {"operation": "activate", "script": "inc",
                                   "input": {"type": "null"}}}).encode()


async def test_actor_records_the_callers_trace_in_the_commit(redis_server: Any) -> None:
    from svit_cluster.process import Script

    pid = f"svit://t/actor-trace-{next(_ids)}-{id(object())}"
    cfg = ClusterConfig(redis_url=redis_server.url, reasoner={"enabled": False})
    actor = ProcessActor(cfg, "h1", pid, 7, "agent-h1")
    started = await actor.start(CreateSpec(memory={"count": 0},
                                           scripts={"inc": Script(INCREMENT)}))
    version = started.unwrap().version
    result = await actor.control(7, _body(pid, version, "r1"), "tenant:t", INCOMING)
    assert result.unwrap().response().outcome.status == "committed"
    result = await actor.inbox(7, {"hello": 1}, None, f"00-{'b' * 32}-00f067aa0ba902b7-00")
    assert result.unwrap().appended is True, result
    # untraced (an older router, or a call without a trace): no field
    result = await actor.control(7, _body(pid, version + 2, "r2"), "tenant:t")
    assert result.unwrap().response().outcome.status == "committed"

    client = connect(redis_server.url, timeout_s=5)
    try:
        entries = RedisBackend(client, pid, 7, StoreConfig()).entries()
    finally:
        client.close()
    traced = [e.trace for e in entries[-3:]]
    assert traced[0] is not None and traced[0].split("-")[1] == TRACE_ID
    assert traced[0].split("-")[2] != "00f067aa0ba902b7"  # the commit's own span id
    assert traced[1] is not None and traced[1].split("-")[1] == "b" * 32
    assert traced[2] is None
    await actor.fence_out("test over", 7)
