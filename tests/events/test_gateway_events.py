"""The observer endpoints and the SDK's async iterators, on an in-memory gateway."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import pytest

from svit_cluster.client import AsyncSvitClient
from svit_cluster.errors import SvitError
from svit_cluster.events import Lagged, Signal
from svit_cluster.gateway import Principal, TokenStore, create_app
from svit_cluster.inprocess import InProcessRouter
from svit_cluster.reasoning import SimulatedReasoner
from tests.events._server import serve

ADMIN = "admin-token-0123456789"
ACME = "acme-token-0123456789"
OTHER = "other-token-0123456789"
PID = "svit://acme/chat"


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    tokens = TokenStore()
    tokens.add(ADMIN, Principal(tenant=None, admin=True))
    tokens.add(ACME, Principal(tenant="acme"))
    tokens.add(OTHER, Principal(tenant="other"))
    router = InProcessRouter(reasoner=SimulatedReasoner)
    with serve(create_app(router, tokens)) as base:
        httpx.post(base + "/v1/processes", json={"process_id": PID, "memory": {"n": 1}},
                   headers={"Authorization": f"Bearer {ACME}"}).raise_for_status()
        yield base


async def collect(sub: object, until: str, timeout_s: float = 10.0) -> list[Signal | Lagged]:
    out: list[Signal | Lagged] = []

    async def run() -> None:
        async for item in sub:  # type: ignore[attr-defined]
            out.append(item)
            if isinstance(item, Signal) and item.kind == until:
                return

    await asyncio.wait_for(run(), timeout_s)
    return out


async def test_exact_signal_order_of_one_turn(url: str) -> None:
    async with AsyncSvitClient(url, ACME) as c:
        async with c.events(PID) as sub, c.outbox(PID) as outbox:
            await c.inbox(PID, {"content": "hello", "id": "m-1"})
            got = await collect(sub, "completion")
            (done,) = await collect(outbox, "completion")
        assert [s.kind for s in got] == ["committed", "canonical_event", "message",
                                         "canonical_event", "message", "committed",
                                         "completion"]
        sigs = [s for s in got if isinstance(s, Signal)]
        # the first message also commits the /thread session metadata
        assert sigs[0].data["paths"] == ["/inbox", "/thread/format", "/thread/instructions",
                                         "/thread/process_id", "/thread/session_id",
                                         "/thread/system_prompt"]
        assert [s.data["seq"] for s in sigs[1:5]] == [1, 1, 2, 2]
        assert sigs[2].data["message"]["role"] == "user"
        assert sigs[4].data["message"] == {"turn": 1, "role": "assistant",
                                           "content": "echo: hello"}
        assert isinstance(done, Signal) and done.data == sigs[6].data
        assert done.data["message_id"] == "m-1"
        assert done.data["version"] == sigs[5].data["version"]
        value, _ = await c.read_versioned(PID, "/inbox")
        assert value == []
        messages = await c.recent_messages(PID, 2)
        assert [m["message"]["role"] for m in messages] == ["user", "assistant"]
        events = await c.recent_events(PID, 4096)
        assert [e["seq"] for e in events][-2:] == [events[-1]["seq"] - 1, events[-1]["seq"]]


async def test_slow_observer_lags_then_recovers_the_same_view(url: str) -> None:
    pid = "svit://acme/lagging"
    async with AsyncSvitClient(url, ACME) as c:
        await c.create_process(pid, memory={})
        async with c.events(pid) as fast, c.events(pid, buffer=3) as slow:
            for i in range(3):
                await c.inbox(pid, f"note {i}")
            fast_items: list[Signal | Lagged] = []
            for _ in range(3):
                fast_items.extend(await collect(fast, "completion"))
            fast_view = {s.data["seq"]: s.data["event"] for s in fast_items
                         if isinstance(s, Signal) and s.kind == "canonical_event"}
            fast_final = await c.read_versioned(pid, "/")
            slow_items: list[Signal | Lagged] = []
            while not any(isinstance(s, Lagged) for s in slow_items):
                slow_items.append(await asyncio.wait_for(slow.__anext__(), 5))
        assert not any(isinstance(s, Lagged) for s in fast_items)
        lag = slow_items[-1]
        assert isinstance(lag, Lagged) and lag.source == "client" and lag.missed
        # recovery: bounded history + one versioned read give the same view
        history = await c.recent_events(pid, 4096)
        slow_view = {e["seq"]: e["event"] for e in history}
        slow_view.update({s.data["seq"]: s.data["event"] for s in slow_items
                          if isinstance(s, Signal) and s.kind == "canonical_event"})
        assert slow_view == fast_view and len(fast_view) == 6
        assert await c.read_versioned(pid, "/") == fast_final
        fast_messages = [s.data for s in fast_items
                         if isinstance(s, Signal) and s.kind == "message"]
        assert await c.recent_messages(pid, 4096) == fast_messages


async def test_observer_endpoints_authorize_before_reading(url: str) -> None:
    async with httpx.AsyncClient(base_url=url) as h:
        params = {"process_id": PID}
        assert (await h.get("/v1/processes/events/recent", params=params)).status_code == 401
        r = await h.get("/v1/processes/events/recent", params=params,
                        headers={"Authorization": f"Bearer {OTHER}"})
        assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden"
        r = await h.get("/v1/processes/events", params=params,
                        headers={"Authorization": f"Bearer {OTHER}"})
        assert r.status_code == 403
        r = await h.get("/v1/processes/messages/recent",
                        params={"process_id": "svit://acme/none"},
                        headers={"Authorization": f"Bearer {ADMIN}"})
        assert r.status_code == 404
        for limit in (0, 4097):
            r = await h.get("/v1/processes/events/recent",
                            params={"process_id": PID, "limit": limit},
                            headers={"Authorization": f"Bearer {ADMIN}"})
            assert r.status_code == 400
        r = await h.get("/v1/processes/events", params={"process_id": PID, "after": "x-y"},
                        headers={"Authorization": f"Bearer {ADMIN}"})
        assert r.status_code == 400
    async with AsyncSvitClient(url, OTHER, attempts=1) as c:
        with pytest.raises(SvitError) as err:
            async with c.events(PID):
                pass
        assert err.value.code == "forbidden"


async def test_resume_from_a_cursor_replays_exactly_what_followed(url: str) -> None:
    async with AsyncSvitClient(url, ACME) as c:
        async with c.events(PID) as sub:
            await c.inbox(PID, "one")
            first = await collect(sub, "completion")
        cursor = first[0].id  # type: ignore[union-attr]
        async with c.events(PID, after=cursor) as again:
            replay = await collect(again, "completion")
        assert [s.to_json() for s in replay] == \
            [s.to_json() for s in first[1:]]  # type: ignore[union-attr]
