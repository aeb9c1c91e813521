"""Signals, observers and the reasoning loop on a real local cluster.

Reuses the session cluster of ``conftest.py``; one extra gateway process is
started (and stopped) for the cross-gateway test.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from svit_cluster.client import AsyncSvitClient, Subscription
from svit_cluster.events import Lagged, Signal
from svit_cluster.local import LocalCluster, free_port, ray_env, stop_pid
from svit_cluster.local._status import cluster_status

pytestmark = pytest.mark.cluster

COUNTER = """(define (main input)
  (let ((count (+ (read "/memory/count") (value-get input "/by"))))
    (do (write "/memory/count" count) (value-map "count" count))))"""
ONE_TURN = ["committed", "canonical_event", "message", "canonical_event", "message",
            "committed", "completion"]


def client(url: str, token: str) -> AsyncSvitClient:
    return AsyncSvitClient(url, token, attempts=80, max_wait_s=0.5, timeout_s=30)


async def new_process(c: AsyncSvitClient) -> str:
    pid = f"svit://local/chat-{uuid.uuid4().hex[:10]}"
    await c.create_process(pid, memory={"count": 0}, scripts={"counter": COUNTER})
    return pid


async def collect(sub: Subscription, until: str, count: int = 1,
                  timeout_s: float = 60.0) -> list[Signal | Lagged]:
    out: list[Signal | Lagged] = []

    async def run() -> None:
        seen = 0
        async for item in sub:
            out.append(item)
            if isinstance(item, Signal) and item.kind == until:
                seen += 1
                if seen == count:
                    return

    await asyncio.wait_for(run(), timeout_s)
    return out


def kinds(items: list[Signal | Lagged]) -> list[str]:
    return [str(s.kind) if isinstance(s, Signal) else "lagged" for s in items]


async def test_one_turn_publishes_the_exact_signal_order(gateway: tuple[str, str]) -> None:
    url, token = gateway
    async with client(url, token) as c:
        pid = await new_process(c)
        async with c.events(pid) as sub, c.outbox(pid) as outbox:
            await c.inbox(pid, {"content": "hello", "id": "m-1"})
            got = await collect(sub, "completion")
            (done,) = await collect(outbox, "completion")
        assert kinds(got) == ONE_TURN
        sigs = [s for s in got if isinstance(s, Signal)]
        # the first message also commits the /thread session metadata
        assert sigs[0].data["paths"] == ["/inbox", "/thread/format", "/thread/instructions",
                                         "/thread/process_id", "/thread/session_id",
                                         "/thread/system_prompt"]
        assert [s.data["seq"] for s in sigs[1:5]] == [1, 1, 2, 2]
        assert sigs[5].data["version"] == sigs[6].data["version"] == 2
        assert isinstance(done, Signal) and done.id == sigs[6].id
        assert done.data["response"]["content"] == "echo: hello"
        assert len({s.token for s in sigs}) == 1  # one owner
        assert await c.read_versioned(pid, "/inbox") == ([], 2)


async def test_lagged_observer_recovers_the_same_view(gateway: tuple[str, str]) -> None:
    url, token = gateway
    async with client(url, token) as c:
        pid = await new_process(c)
        async with c.events(pid) as fast, c.events(pid, buffer=4) as slow:
            for i in range(3):
                await c.inbox(pid, f'/exec counter {{"by": {i + 1}}}')
            fast_items = await collect(fast, "completion", count=3)
            fast_final = await c.read_versioned(pid, "/")
            slow_items: list[Signal | Lagged] = []
            while not any(isinstance(s, Lagged) for s in slow_items):
                slow_items.append(await asyncio.wait_for(slow.__anext__(), 10))
        assert "lagged" not in kinds(fast_items)
        fast_view = {s.data["seq"]: s.data["event"] for s in fast_items
                     if isinstance(s, Signal) and s.kind == "canonical_event"}
        history = await c.recent_events(pid, 4096)
        slow_view = {e["seq"]: e["event"] for e in history}
        slow_view.update({s.data["seq"]: s.data["event"] for s in slow_items
                          if isinstance(s, Signal) and s.kind == "canonical_event"})
        assert slow_view == fast_view
        assert await c.read_versioned(pid, "/") == fast_final
        assert fast_final[0]["memory"]["count"] == 6  # type: ignore[index]
        assert await c.recent_messages(pid, 4096) == [
            s.data for s in fast_items if isinstance(s, Signal) and s.kind == "message"]


@pytest.fixture
def second_gateway(cluster: LocalCluster) -> Iterator[str]:
    port = free_port()
    state = Path(cluster.doc["state_dir"])
    log = open(state / "logs" / "gateway-b.log", "ab")
    proc = subprocess.Popen(
        [sys.executable, "-m", "svit_cluster.cli", "gateway", "--state-dir", str(state),
         "--host", "127.0.0.1", "--port", str(port)],
        stdout=log, stderr=subprocess.STDOUT, env=ray_env(), start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            assert proc.poll() is None, "second gateway exited; see logs/gateway-b.log"
            try:
                if httpx.get(url + "/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "second gateway never became healthy"
            time.sleep(0.3)
        yield url
    finally:
        stop_pid(proc.pid)
        log.close()


async def test_observer_on_one_gateway_sees_commits_made_through_another(
    gateway: tuple[str, str], second_gateway: str
) -> None:
    url_a, token = gateway
    async with client(url_a, token) as a, client(second_gateway, token) as b:
        pid = await new_process(a)
        async with b.events(pid) as sub:
            committed = await a.activate_until_committed(pid, "counter", {"by": 7})
            await a.inbox(pid, "across gateways")
            got = await collect(sub, "completion")
        assert committed.outcome.status == "committed"
        sigs = [s for s in got if isinstance(s, Signal)]
        assert sigs[0].kind == "committed" and sigs[0].data["paths"] == ["/memory/count"]
        assert sigs[0].data["version"] == 1
        assert kinds(got)[1:] == ONE_TURN
        assert sigs[-1].data["response"]["content"] == "echo: across gateways"


async def test_host_kill_mid_turn_completes_each_item_exactly_once(
    cluster: LocalCluster, gateway: tuple[str, str]
) -> None:
    url, token = gateway
    async with client(url, token) as c:
        pid = await new_process(c)
        async with c.events(pid) as sub:
            await c.inbox(pid, {"content": "/sleep 3 survive", "id": "k-1"})
            await collect(sub, "canonical_event")  # the turn has started on the owner
        before = (await asyncio.to_thread(cluster_status, cluster))["owners"][pid]
        await asyncio.to_thread(cluster.kill_host, before["host"])
        try:
            await c.inbox(pid, {"content": "after the kill", "id": "k-2"})  # re-places
            async with c.events(pid, after="0") as replay:
                everything = await collect(replay, "completion", count=2, timeout_s=90)
            after = (await asyncio.to_thread(cluster_status, cluster))["owners"][pid]
            assert after["host"] != before["host"] and after["token"] > before["token"]
            done = [s.data for s in everything
                    if isinstance(s, Signal) and s.kind == "completion"]
            assert [d["message_id"] for d in done] == ["k-1", "k-2"]
            assert done[0]["response"]["content"] == "echo: survive"
            sigs = [s for s in everything if isinstance(s, Signal)]
            tokens = [s.token for s in sigs]
            assert tokens == sorted(tokens)  # the stale owner appended nothing after the claim
            history = await c.recent_events(pid, 4096)
            assert [e["token"] for e in history] == sorted(e["token"] for e in history)
            assert history[-1]["token"] == after["token"]
            # killed mid-turn: the old owner began turn 1, only the new owner finished it
            old = [e["event"]["kind"] for e in history if e["token"] == before["token"]]
            assert old == ["user"]
            assert sum(1 for e in history if e["event"]["kind"] == "reply") == 2
            assert (await c.read_versioned(pid, "/inbox"))[0] == []
        finally:
            await asyncio.to_thread(cluster.restart_host, before["host"])
