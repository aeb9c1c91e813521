"""Error answers that do not come from the gateway: a proxy's page, a rate limiter, a newer gateway.

Scenario from a public bug report in another system that sits behind a router
(foundation-model-stack/fms-guardrails-orchestrator#143): an error returned in an
unexpected form, "a 503 error page with html formatting from the router", failed
to decode and reached the caller as a 500 instead of the status that triggered it.
Here the SDK talks over real HTTP (uvicorn on a loopback port) to the real gateway
app, behind an ASGI layer that plays the proxy: for the next requests it answers
in the proxy's own form, then lets requests through. What must hold:

* a proxy's 502/503/504 page (HTML, no JSON) is ``unavailable``: retryable, and
  the retry succeeds once the proxy lets requests through;
* a rate limiter's 429 (an ingress in front of the gateway) is ``unavailable``
  too, and its ``Retry-After`` is honoured;
* an error code this SDK does not know (a newer gateway's) is classified by its
  HTTP status, and the code received is kept in ``fields["wire_code"]``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from svit_cluster import errors as E
from svit_cluster.client import SvitClient
from svit_cluster.gateway import Principal, TokenStore, create_app
from svit_cluster.inprocess import InProcessRouter
from tests.events._server import serve

ACME = "acme-token-0123456789"
_PAGE = b"<html><head><title>503 Service Temporarily Unavailable</title></head></html>"


@dataclass
class Answer:
    """One canned answer of the proxy: status, body, content type and extra headers."""

    status: int
    body: bytes = _PAGE
    content_type: bytes = b"text/html"
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)


class Proxy:
    """ASGI layer in front of the gateway app: answers ``queued`` first, then forwards."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.queued: list[Answer] = []
        self.answered = 0

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not self.queued:
            await self.app(scope, receive, send)
            return
        answer = self.queued.pop(0)
        self.answered += 1
        await send({"type": "http.response.start", "status": answer.status,
                    "headers": [(b"content-type", answer.content_type), *answer.headers]})
        await send({"type": "http.response.body", "body": answer.body})


@pytest.fixture(scope="module")
def proxied() -> Iterator[tuple[str, Proxy]]:
    tokens = TokenStore()
    tokens.add(ACME, Principal(tenant="acme"))
    proxy = Proxy(create_app(InProcessRouter(), tokens))
    with serve(proxy) as url:
        with SvitClient(url, ACME, attempts=1) as client:
            client.create_process("svit://acme/p", memory={"n": 1})
        yield url, proxy


@pytest.fixture
def proxy(proxied: tuple[str, Proxy]) -> Iterator[Proxy]:
    proxied[1].queued.clear()
    proxied[1].answered = 0
    yield proxied[1]
    proxied[1].queued.clear()


@pytest.mark.parametrize("status", [502, 503, 504])
def test_a_proxy_error_page_is_unavailable_not_internal(
        proxied: tuple[str, Proxy], proxy: Proxy, status: int) -> None:
    proxy.queued.append(Answer(status))
    with SvitClient(proxied[0], ACME, attempts=1) as client, \
            pytest.raises(E.UnavailableError) as info:
        client.state("svit://acme/p")
    assert info.value.fields["status"] == status
    assert "wire_code" not in info.value.fields
    assert info.value.message.startswith(f"HTTP {status}: <html>")


def test_the_sdk_retries_through_a_proxy_error_page(
        proxied: tuple[str, Proxy], proxy: Proxy) -> None:
    proxy.queued += [Answer(502), Answer(503)]
    with SvitClient(proxied[0], ACME, attempts=3, max_wait_s=0.05) as client:
        assert client.state("svit://acme/p") == ({"n": 1}, 0)
    assert proxy.answered == 2 and not proxy.queued


def test_a_rate_limiters_429_is_retried_after_its_retry_after(
        proxied: tuple[str, Proxy], proxy: Proxy) -> None:
    proxy.queued.append(Answer(429, b"Too Many Requests", b"text/plain",
                               [(b"retry-after", b"1")]))
    with SvitClient(proxied[0], ACME, attempts=1) as client, \
            pytest.raises(E.UnavailableError) as info:
        client.state("svit://acme/p")
    assert info.value.fields["status"] == 429 and info.value.fields["retry_after_s"] == 1.0
    proxy.queued.append(Answer(429, b"Too Many Requests", b"text/plain",
                               [(b"retry-after", b"1")]))
    with SvitClient(proxied[0], ACME, attempts=3, max_wait_s=5.0) as client:
        start = time.monotonic()
        assert client.state("svit://acme/p") == ({"n": 1}, 0)
        elapsed = time.monotonic() - start
    assert proxy.answered == 2
    assert 0.95 <= elapsed < 3.0, elapsed


@pytest.mark.parametrize(("status", "cls"), [(503, E.UnavailableError), (409, E.ConflictError),
                                              (400, E.InternalError)])
def test_a_newer_gateways_unknown_code_keeps_its_code(
        proxied: tuple[str, Proxy], proxy: Proxy, status: int, cls: type[E.SvitError]) -> None:
    body = (b'{"error": {"code": "quota_exhausted", "message": "tenant quota used up",'
            b' "fields": {"quota": 10}}}')
    proxy.queued.append(Answer(status, body, b"application/json"))
    with SvitClient(proxied[0], ACME, attempts=1) as client, pytest.raises(cls) as info:
        client.state("svit://acme/p")
    assert type(info.value) is cls
    assert info.value.message == "tenant quota used up"
    assert info.value.fields["wire_code"] == "quota_exhausted"
    assert info.value.fields["quota"] == 10 and info.value.fields["status"] == status
