"""A retry after its receipt was evicted must not apply twice.

Real redis-server, the real fenced store (``RedisBackend`` + ``ProcessController``),
the real gateway app under uvicorn and the real SDK. Only the wire is faked:
an httpx transport forwards client 1's first ``/v1/control`` request, lets the
server answer it (so version 1 commits), runs 256 commits of another client
(evicting client 1's receipt from the 256-entry FIFO) and then loses the reply
(``httpx.ReadError``). The SDK retries the same request id, gets ``conflict``
and must not recompute blindly: the count ends at exactly 257 (or the helper
raises ``OutcomeUnknownError``), never 258.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
import redis

from svit_cluster import errors as svit_errors
from svit_cluster.client import AsyncSvitClient, SvitClient
from svit_cluster.control import ControlResponse
from svit_cluster.errors import SvitError
from svit_cluster.gateway import Principal, TokenStore, create_app
from svit_cluster.inprocess import InProcessRouter
from svit_cluster.store import StoreConfig
from tests.events._server import serve
from tests.gateway._redis_router import RedisRouter

TOKEN = "tenant-token-0123456789"
ADMIN = "admin-token-0123456789"
COUNTER = """(define (main input)
  (let ((count (+ (read "/memory/count") (value-get input "/by"))))
    (do (write "/memory/count" count) (value-map "count" count))))"""
EVICTING = 256  # DEFAULT_RECEIPTS: one more receipt than this evicts the oldest
_prefixes = itertools.count()


@pytest.fixture
def gateway(rclient: redis.Redis, request: pytest.FixtureRequest) -> Iterator[str]:
    """The gateway over Redis (``retain``: ``"default"`` store config, or
    ``"retained"``: ``trim_margin`` 1024), or the in-memory ``InProcessRouter``
    (``"memory"``)."""
    retain = getattr(request, "param", "default")
    prefix = f"evict{next(_prefixes)}"
    config = (StoreConfig(prefix=prefix) if retain == "default"
              else StoreConfig(prefix=prefix, trim_margin=1024))
    tokens = TokenStore()
    tokens.add(TOKEN, Principal(tenant="acme"))
    tokens.add(ADMIN, Principal(tenant=None, admin=True))
    router: Any = InProcessRouter() if retain == "memory" else RedisRouter(rclient, config)
    with serve(create_app(router, tokens)) as url:
        yield url


def _is_control(request: httpx.Request) -> bool:
    return request.method == "POST" and request.url.path == "/v1/control"


class LosingTransport(httpx.BaseTransport):
    """Loses the reply of the first ``/v1/control`` call after the server answered it
    (``lose="reply"``) or loses the request before sending it (``lose="request"``);
    runs ``between`` in the gap, then raises ``httpx.ReadError``."""

    def __init__(self, between: Callable[[], None], lose: str = "reply") -> None:
        self.inner = httpx.HTTPTransport()
        self.between = between
        self.lose = lose
        self.lost = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if _is_control(request) and self.lost == 0:
            self.lost += 1
            if self.lose == "reply":
                response = self.inner.handle_request(request)
                response.read()
                assert response.status_code == 200, response.text
                assert response.json()["outcome"]["status"] == "committed"
            self.between()
            raise httpx.ReadError("reply lost", request=request)
        return self.inner.handle_request(request)

    def close(self) -> None:
        self.inner.close()


class AsyncLosingTransport(httpx.AsyncBaseTransport):
    """The async form of :class:`LosingTransport`."""

    def __init__(self, between: Callable[[], None], lose: str = "reply") -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.between = between
        self.lose = lose
        self.lost = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if _is_control(request) and self.lost == 0:
            self.lost += 1
            if self.lose == "reply":
                response = await self.inner.handle_async_request(request)
                await response.aread()
                assert response.status_code == 200, response.text
                assert response.json()["outcome"]["status"] == "committed"
            await asyncio.to_thread(self.between)
            raise httpx.ReadError("reply lost", request=request)
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


def _setup(url: str, pid: str) -> Callable[[], None]:
    with SvitClient(url, TOKEN, client_id="setup") as c:
        c.create_process(pid, memory={"count": 0}, scripts={"counter": COUNTER})

    def evict() -> None:
        """Another client commits EVICTING times: client 1's receipt leaves the FIFO."""
        with SvitClient(url, TOKEN, client_id="other") as other:
            for _ in range(EVICTING):
                _, version = other.state(pid, "/memory/count")
                resp = other.activate(pid, "counter", {"by": 1}, expected_version=version)
                assert resp.outcome.status == "committed"

    return evict


def _count(url: str, pid: str) -> int:
    with SvitClient(url, TOKEN) as c:
        value, _ = c.state(pid, "/memory/count")
    assert isinstance(value, int)
    return value


def _sync_client(url: str, transport: httpx.BaseTransport) -> SvitClient:
    client = SvitClient(url, TOKEN, client_id="client-1", max_wait_s=0.05)
    client._http.close()
    client._http = httpx.Client(transport=transport, timeout=10)
    return client


def _async_client(url: str, transport: httpx.AsyncBaseTransport) -> AsyncSvitClient:
    client = AsyncSvitClient(url, TOKEN, client_id="client-1", max_wait_s=0.05)
    client._http = httpx.AsyncClient(transport=transport, timeout=10)
    return client


def _check_recovered(result: Any, pid: str) -> None:
    from svit_cluster.client import RecoveredCommit

    assert isinstance(result, RecoveredCommit), result
    assert (result.process_id, result.client_id, result.version) == (pid, "client-1", 1)


@pytest.mark.parametrize("gateway", ["retained", "memory"], indirect=True)
def test_sync_lost_reply_after_eviction_is_recovered_not_reapplied(gateway: str) -> None:
    pid = "svit://acme/evict-sync"
    transport = LosingTransport(_setup(gateway, pid))
    with _sync_client(gateway, transport) as c1:
        result = c1.activate_until_committed(pid, "counter", {"by": 1},
                                             observe_path="/memory/count")
    assert transport.lost == 1
    assert _count(gateway, pid) == EVICTING + 1
    _check_recovered(result, pid)


@pytest.mark.parametrize("gateway", ["retained"], indirect=True)
async def test_async_lost_reply_after_eviction_is_recovered_not_reapplied(
        gateway: str) -> None:
    pid = "svit://acme/evict-async"
    transport = AsyncLosingTransport(_setup(gateway, pid))
    async with _async_client(gateway, transport) as c1:
        result = await c1.activate_until_committed(pid, "counter", {"by": 1},
                                                   observe_path="/memory/count")
    assert transport.lost == 1
    assert _count(gateway, pid) == EVICTING + 1
    _check_recovered(result, pid)


def test_sync_lost_reply_after_trim_raises_outcome_unknown(gateway: str) -> None:
    """Default store config: version 1's entry is trimmed after 256 commits."""
    pid = "svit://acme/evict-trim-sync"
    transport = LosingTransport(_setup(gateway, pid))
    raised: SvitError | None = None
    with _sync_client(gateway, transport) as c1:
        try:
            c1.activate_until_committed(pid, "counter", {"by": 1},
                                        observe_path="/memory/count")
        except SvitError as exc:
            raised = exc
    assert _count(gateway, pid) == EVICTING + 1  # never EVICTING + 2
    assert isinstance(raised, svit_errors.OutcomeUnknownError), raised
    assert raised.code == "outcome_unknown"
    fields = raised.fields
    assert (fields["process_id"], fields["client_id"]) == (pid, "client-1")
    assert len(fields["request_id"]) == 32 and fields["expected_version"] == 0
    assert fields["retained_from_version"] > 1


async def test_async_lost_reply_after_trim_raises_outcome_unknown(gateway: str) -> None:
    pid = "svit://acme/evict-trim-async"
    transport = AsyncLosingTransport(_setup(gateway, pid))
    raised: SvitError | None = None
    async with _async_client(gateway, transport) as c1:
        try:
            await c1.activate_until_committed(pid, "counter", {"by": 1},
                                              observe_path="/memory/count")
        except SvitError as exc:
            raised = exc
    assert _count(gateway, pid) == EVICTING + 1  # never EVICTING + 2
    assert isinstance(raised, svit_errors.OutcomeUnknownError), raised


@pytest.mark.parametrize("gateway", ["retained"], indirect=True)
def test_lost_request_is_recomputed_when_the_log_proves_it_never_committed(
        gateway: str) -> None:
    """The request never reached the server: the retained log proves it, so the
    helper recomputes and commits once (the count ends at 257 too)."""
    pid = "svit://acme/evict-lost-request"
    transport = LosingTransport(_setup(gateway, pid), lose="request")
    with _sync_client(gateway, transport) as c1:
        result = c1.activate_until_committed(pid, "counter", {"by": 1},
                                             observe_path="/memory/count")
    assert isinstance(result, ControlResponse) and result.outcome.status == "committed"
    assert result.outcome.activation.version == EVICTING + 1
    assert _count(gateway, pid) == EVICTING + 1


@pytest.mark.parametrize("gateway", ["retained"], indirect=True)
def test_request_status_endpoint_is_partitioned_by_principal(gateway: str) -> None:
    pid = "svit://acme/evict-status"
    _setup(gateway, pid)
    with SvitClient(gateway, TOKEN, client_id="client-1") as c:
        resp = c.activate(pid, "counter", {"by": 1}, expected_version=0, request_id="r-1")
        assert resp.outcome.status == "committed"
        mine = c.request_status(pid, "r-1")
        assert (mine["committed"], mine["version"], mine["retained_from_version"]) == (
            True, 1, 1)
        unknown = c.request_status(pid, "r-2")
        assert (unknown["committed"], unknown["version"]) == (False, None)
        with pytest.raises(SvitError) as bad:
            c.request_status(pid, "not a valid id!")
        assert bad.value.code == "decode_error"
    with SvitClient(gateway, ADMIN, client_id="client-1") as admin:
        theirs = admin.request_status(pid, "r-1")  # same ids, another principal
        assert (theirs["committed"], theirs["version"]) == (False, None)
    other = httpx.get(gateway + "/v1/processes/requests",
                      params={"process_id": "svit://other/p", "client_id": "client-1",
                              "request_id": "r-1"},
                      headers={"Authorization": f"Bearer {TOKEN}"})
    assert other.status_code == 403
