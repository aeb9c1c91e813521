"""A committed inbox message always gets an owner whose loop drives it, without
a new request, whatever happened to the previous owner or to the notice of its
death (real local cluster: 3 hosts, lease TTL 3 s, the third-party LLMock).

Every check reads Redis and etcd directly until the message is answered: a
request through the gateway would activate the process itself and hide a
message nobody drives.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from benchmarks._llm import LLMServer, start_llm_server
from svit_cluster.client import SvitClient
from svit_cluster.local import ClusterSpec, LocalCluster
from svit_cluster.local._status import _etcd_view
from svit_cluster.store import ProcessKeys

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("SVIT_REASONER_API_KEY", "unused-by-the-mock")

#: The loop's retry after a failed turn (s); the process's idle timeout is shorter.
RETRY_S = 2.0


@pytest.fixture(scope="module")
def llm() -> Iterator[LLMServer]:
    server = start_llm_server(tool_mode="off")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def agents(llm: LLMServer) -> Iterator[LocalCluster]:
    state = Path(tempfile.mkdtemp(prefix="svr-"))
    lc = LocalCluster.up(ClusterSpec(
        state_dir=state, hosts=3, lease_ttl_s=3, passivate_after_s=60.0,
        reasoner={"kind": "openai", "base_url": llm.base_url, "model": "gpt-4o-mini",
                  "retry_after_s": RETRY_S, "max_retry_after_s": 2 * RETRY_S}))
    try:
        yield lc
    finally:
        lc.down()
        shutil.rmtree(state, ignore_errors=True)


@pytest.fixture(scope="module")
def rclient(agents: LocalCluster) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(agents.doc["redis"]["url"])
    try:
        yield client
    finally:
        client.close()


def _client(cluster: LocalCluster) -> SvitClient:
    return SvitClient(cluster.doc["gateway"]["url"], cluster.doc["tokens"]["admin"])


def owner_of(cluster: LocalCluster, pid: str) -> str | None:
    owners = asyncio.run(_etcd_view(cluster.doc["etcd"]["endpoint"],
                                    cluster.doc["cluster"]))["owners"]
    record = owners.get(pid)
    return None if record is None else str(record["host"])


def signals(rclient: redis.Redis, pid: str, kind: str) -> list[dict[str, Any]]:
    """The ``kind`` signals of ``pid`` in its Redis signal stream (no activation)."""
    out = []
    for _id, fields in rclient.xrange(ProcessKeys(pid).signals):
        if fields.get(b"kind") == kind.encode():
            out.append(json.loads(fields[b"data"]))
    return out


def wait_for(check: Any, limit_s: float, every_s: float = 0.2) -> float | None:
    """Seconds until ``check()`` is true, or None past ``limit_s``."""
    start = time.monotonic()
    while time.monotonic() - start < limit_s:
        if check():
            return time.monotonic() - start
        time.sleep(every_s)
    return None


def test_a_process_in_back_off_keeps_its_queued_message_driven(
        agents: LocalCluster, llm: LLMServer, rclient: redis.Redis) -> None:
    """The turn fails once (the model answers 500); the loop waits ``RETRY_S``
    before retrying, and the process's idle timeout (1 s) ends before that. The
    message must still be answered without another request."""
    pid = f"svit://local/backoff-{uuid.uuid4().hex[:8]}"
    with _client(agents) as c:
        c.create_process(pid, memory={})
        c.set_passivation(pid, 1.0)
        llm.script({"type": "fail", "status": 500})
        c.inbox(pid, {"content": "hello", "id": "m1"})
    failed = wait_for(lambda: signals(rclient, pid, "failed"), 15)
    assert failed is not None, "the scripted failure never reached the loop"
    took = wait_for(lambda: signals(rclient, pid, "completion"), 20)
    print(f"\nINBOX-REDRIVE back-off: answered {took} s after the failed turn "
          f"(retry {RETRY_S} s, idle timeout 1 s)")
    assert took is not None, (
        f"the queued message was never answered (owner now: {owner_of(agents, pid)})")
    with _client(agents) as c:
        assert c.state(pid, "/inbox")[0] == []


def test_a_message_whose_owner_died_unnoticed_is_driven_by_a_new_owner(
        agents: LocalCluster, llm: LLMServer, rclient: redis.Redis) -> None:
    """The owner's host dies mid-turn and re-registers under a new lease before
    its old lease ends (a fast restart), so etcd deletes the owner record
    without the host's registration and no gateway sees an orphan. The
    message must still be answered without another request."""
    from svit_cluster.ownership import host_key, open_client

    pid = f"svit://local/orphan-{uuid.uuid4().hex[:8]}"
    with _client(agents) as c:
        c.create_process(pid, memory={})
        victim = owner_of(agents, pid)
        assert victim is not None
        llm.script({"type": "delay", "seconds": 30})  # the turn is in flight when killed
        c.inbox(pid, {"content": "hello", "id": "m1"})
    # the turn's user event is appended before the model is asked
    assert wait_for(lambda: signals(rclient, pid, "canonical_event"), 10) is not None
    time.sleep(0.5)  # the model's request is in flight
    ttl = int(agents.spec.lease_ttl_s)
    key = host_key(agents.doc["cluster"], victim)

    async def registration() -> bytes:
        client = open_client(agents.doc["etcd"]["endpoint"])
        try:
            return bytes((await client.get(key)).value)
        finally:
            await client.close()

    async def reregister(value: bytes) -> None:
        client = open_client(agents.doc["etcd"]["endpoint"])
        try:
            lease = await client.lease(ttl)
            await client.put(key, value, lease=lease.id)
        finally:
            await client.close()

    # The registration moves to a new lease first, so whatever ends the old
    # lease (its expiry, or a revoke once Ray declares the node dead) deletes
    # the owner record without the registration: no orphan is paired.
    asyncio.run(reregister(asyncio.run(registration())))
    agents.kill_host(victim)  # the module's last test: the cluster goes down after it
    llm.reset()
    took = wait_for(lambda: signals(rclient, pid, "completion"), ttl + 25)
    print(f"\nINBOX-REDRIVE orphan: answered {took} s after the kill (TTL {ttl} s)")
    assert took is not None, (
        f"the queued message was never answered (owner now: {owner_of(agents, pid)})")
    with _client(agents) as c:
        assert c.state(pid, "/inbox")[0] == []
