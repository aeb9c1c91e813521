"""A create whose reply is lost must not turn into "already exists" on the retry.

When the first POST commits but its reply never reaches the client (timeout),
the SDK retries the same call and the gateway truthfully answers "already
exists". An SDK retry after an unknown outcome must not report its own effect as
a conflict (as a retried control request after its receipt was evicted must not
apply twice): after a retried attempt, an "already exists" whose ``/memory`` and
``/lib`` equal the request is this create's result; anything else stays a
``ConflictError``.

Real gateway under uvicorn over the in-memory router, real SDK; only the wire is
faked: the transport forwards the first create, lets the server answer (so the
process exists), then raises ``httpx.ReadError`` as a lost reply would.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from svit_cluster.client import AsyncSvitClient, SvitClient
from svit_cluster.errors import ConflictError, UnavailableError
from svit_cluster.gateway import Principal, TokenStore, create_app
from svit_cluster.inprocess import InProcessRouter
from tests.events._server import serve

ADMIN = "admin-token-0123456789"
SCRIPT = '(define (main input) (do (write "/memory/n" (+ 1 (read "/memory/n"))) 1))'


@pytest.fixture
def gateway() -> Iterator[str]:
    tokens = TokenStore()
    tokens.add(ADMIN, Principal(tenant=None, admin=True))
    with serve(create_app(InProcessRouter(), tokens)) as url:
        yield url


def _is_create(request: httpx.Request) -> bool:
    return request.method == "POST" and request.url.path == "/v1/processes"


class LoseFirstCreateReply(httpx.BaseTransport):
    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()
        self.lost = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        if _is_create(request) and self.lost == 0:
            response.read()
            assert response.status_code == 201  # the server did create it
            self.lost += 1
            raise httpx.ReadError("reply lost", request=request)
        return response


class AsyncLoseFirstCreateReply(httpx.AsyncBaseTransport):
    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.lost = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        if _is_create(request) and self.lost == 0:
            await response.aread()
            assert response.status_code == 201
            self.lost += 1
            raise httpx.ReadError("reply lost", request=request)
        return response


def _sync_client(url: str) -> tuple[SvitClient, LoseFirstCreateReply]:
    client = SvitClient(url, ADMIN, max_wait_s=0.05)
    transport = LoseFirstCreateReply()
    client._http = httpx.Client(transport=transport, timeout=5)
    return client, transport


def test_create_with_a_lost_reply_is_reported_created(gateway: str) -> None:
    client, transport = _sync_client(gateway)
    with client:
        got: dict[str, Any] = client.create_process(
            "svit://acme/made", memory={"n": 0}, scripts={"inc": SCRIPT})
        assert transport.lost == 1
        assert got["recovered"] is True and got["version"] == 0
        assert client.state("svit://acme/made", "/memory/n") == (0, 0)


def test_a_retried_create_meeting_other_content_is_still_a_conflict(gateway: str) -> None:
    """Negative control: the existing process differs from the request -> 409 stays."""
    with SvitClient(gateway, ADMIN) as other:
        other.create_process("svit://acme/taken", memory={"n": 5}, scripts={"inc": SCRIPT})
    client = SvitClient(gateway, ADMIN, max_wait_s=0.05)
    with client:

        class FailOnce(httpx.BaseTransport):
            def __init__(self) -> None:
                self.inner = httpx.HTTPTransport()
                self.failed = False

            def handle_request(self, request: httpx.Request) -> httpx.Response:
                if _is_create(request) and not self.failed:
                    self.failed = True
                    raise httpx.ConnectError("refused", request=request)
                return self.inner.handle_request(request)

        client._http = httpx.Client(transport=FailOnce(), timeout=5)
        with pytest.raises(ConflictError):
            client.create_process("svit://acme/taken", memory={"n": 0}, scripts={"inc": SCRIPT})


def test_a_create_without_an_unknown_attempt_keeps_its_conflict(gateway: str) -> None:
    """A first-attempt 409 is a real conflict even with identical content."""
    with SvitClient(gateway, ADMIN) as c:
        c.create_process("svit://acme/twice", memory={"n": 0}, scripts={"inc": SCRIPT})
        with pytest.raises(ConflictError):
            c.create_process("svit://acme/twice", memory={"n": 0}, scripts={"inc": SCRIPT})


async def test_async_create_with_a_lost_reply_is_reported_created(gateway: str) -> None:
    async with AsyncSvitClient(gateway, ADMIN, max_wait_s=0.05) as client:
        transport = AsyncLoseFirstCreateReply()
        client._http = httpx.AsyncClient(transport=transport, timeout=5)
        got = await client.create_process("svit://acme/amade", memory={"n": 0},
                                          scripts={"inc": SCRIPT})
        assert transport.lost == 1
        assert got["recovered"] is True
        assert await client.state("svit://acme/amade", "/memory/n") == (0, 0)


class ClaimedButNotCreated(httpx.BaseTransport):
    """The cluster's race, on the wire: attempt 1 fails with an unknown outcome
    (503: its activation lost the host lease after claiming the process), attempt
    2 meets that claim before it is released and the gateway answers 409 "already
    exists" -- yet the process was never created. Attempt 3 reaches the server."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()
        self.creates = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if not _is_create(request):
            return self.inner.handle_request(request)
        self.creates += 1
        if self.creates == 1:
            error = UnavailableError("host lease is lost; not starting new work")
            return httpx.Response(503, json={"error": error.to_wire()}, request=request)
        if self.creates == 2:
            error = ConflictError("process svit://acme/claimed already exists")
            return httpx.Response(409, json={"error": error.to_wire()}, request=request)
        return self.inner.handle_request(request)


def test_a_retried_create_whose_conflict_was_its_own_unfinished_claim_creates(
        gateway: str) -> None:
    """A retried create is never answered ``unknown process``: when its 409 came
    from an earlier attempt's claim that never created the process (the SDK's
    check of that 409 finds nothing), the create is sent again."""
    client = SvitClient(gateway, ADMIN, max_wait_s=0.05)
    transport = ClaimedButNotCreated()
    client._http = httpx.Client(transport=transport, timeout=5)
    with client:
        got = client.create_process("svit://acme/claimed", memory={"n": 0},
                                    scripts={"inc": SCRIPT})
        assert transport.creates == 3
        assert got["version"] == 0 and "recovered" not in got, got
        assert client.state("svit://acme/claimed", "/memory/n") == (0, 0)
