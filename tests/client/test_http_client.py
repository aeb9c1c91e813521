"""The SDK sends every call through a user-supplied httpx client
(``http_client=``), leaves it open, and sends ``traceparent`` from its hook.

Pure client wiring: an ``httpx.MockTransport`` records what the SDK sends (the
real-gateway path is in tests/gateway/test_tracing.py).
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from svit_cluster import tracing
from svit_cluster.client import AsyncSvitClient, SvitClient

TP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
URL = "http://gw.invalid"


class Recorder:
    def __init__(self) -> None:
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if request.url.path == "/v1/initialize":
            return httpx.Response(200, json={"protocol": "svit-control@1"})
        return httpx.Response(200, json={"process_id": "svit://t/p", "path": "/memory",
                                         "version": 3, "value": {"type": "null"}})


def test_sync_client_uses_the_given_http_client_and_leaves_it_open() -> None:
    rec = Recorder()
    http = httpx.Client(transport=httpx.MockTransport(rec), headers={"X-Mine": "1"})
    with SvitClient(URL, "tok", http_client=http) as client:
        client.initialize()
        client.state("svit://t/p")
        with tracing.use_traceparent(TP, "vendor=x"):
            client.state("svit://t/p", timeout_s=3)
    assert not http.is_closed  # ours to close, not the SDK's
    assert [r.url.path for r in rec.requests] == [
        "/v1/initialize", "/v1/processes/state", "/v1/processes/state"]
    for r in rec.requests:
        assert r.headers["Authorization"] == "Bearer tok"
        assert r.headers["X-Mine"] == "1"  # the user's client configuration applies
    assert "traceparent" not in rec.requests[0].headers
    assert rec.requests[2].headers["traceparent"] == TP
    assert rec.requests[2].headers["tracestate"] == "vendor=x"
    assert rec.requests[2].extensions["timeout"]["read"] == 3
    http.close()


def test_sync_client_owns_and_closes_its_default_client() -> None:
    client = SvitClient(URL, "tok")
    http = client._http
    client.close()
    assert http.is_closed


def test_traceparent_hook_and_opt_out() -> None:
    rec = Recorder()
    http = httpx.Client(transport=httpx.MockTransport(rec))
    SvitClient(URL, "tok", http_client=http, traceparent=lambda: TP).state("svit://t/p")
    with tracing.use_traceparent(TP):
        SvitClient(URL, "tok", http_client=http, traceparent=None).state("svit://t/p")
    assert rec.requests[0].headers["traceparent"] == TP
    assert "traceparent" not in rec.requests[1].headers
    http.close()


def test_sdk_sends_the_current_opentelemetry_span() -> None:
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.trace import TracerProvider

    rec = Recorder()
    http = httpx.Client(transport=httpx.MockTransport(rec))
    tracer = TracerProvider().get_tracer("app")
    with tracer.start_as_current_span("app-request") as span:
        SvitClient(URL, "tok", http_client=http).state("svit://t/p")
        sc = span.get_span_context()
    sent = rec.requests[0].headers["traceparent"]
    assert sent == f"00-{sc.trace_id:032x}-{sc.span_id:016x}-{int(sc.trace_flags):02x}"
    http.close()


async def test_async_client_uses_the_given_http_client_and_leaves_it_open() -> None:
    rec = Recorder()
    http = httpx.AsyncClient(transport=httpx.MockTransport(rec))
    async with AsyncSvitClient(URL, "tok", http_client=http) as client:
        await client.initialize()
        with tracing.use_traceparent(TP):
            await client.state("svit://t/p")
    assert not http.is_closed
    assert [r.url.path for r in rec.requests] == ["/v1/initialize", "/v1/processes/state"]
    assert "traceparent" not in rec.requests[0].headers
    assert rec.requests[1].headers["traceparent"] == TP
    await http.aclose()
    own = AsyncSvitClient(URL, "tok")
    inner: Any = own._http
    await own.aclose()
    assert inner.is_closed
