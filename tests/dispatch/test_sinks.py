"""Sinks one by one: allowlists, size caps, idempotency keys, retryable vs permanent."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import redis

from svit_cluster.dispatch import (
    Intent,
    PermanentDeliveryError,
    RedisStreamSink,
    RetryableDeliveryError,
    SinkRegistry,
    SvitInboxSink,
    WebhookSink,
)
from svit_cluster.dispatch._redisutil import async_client
from svit_cluster.gateway import Principal, TokenStore, create_app
from svit_cluster.inprocess import InProcessRouter
from tests.conftest import RedisTarget
from tests.dispatch._support import WebhookStub

ADMIN = "admin-token-0123456789"


def intent(to: str, body: Any = None, iid: str = "svit://t/a:1:0") -> Intent:
    return Intent(id=iid, to=to, body=body, source="svit://t/a", version=1, stream="s",
                  entry_id="1-0", origin_entry_id="1-0", committed_ms=1, raw=b"")


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=2.0, trust_env=False) as client:
        yield client


def registry(http: httpx.AsyncClient, hosts: tuple[str, ...], **kw: Any) -> SinkRegistry:
    hook = WebhookSink(hosts, http=http)
    return SinkRegistry({"http": hook, "https": hook}, **kw)


async def test_allowlist_by_host_or_host_port(http: httpx.AsyncClient) -> None:
    reg = registry(http, ("api.example.org", "127.0.0.1:8080"))
    for ok in ("https://api.example.org/x", "http://API.example.org:9/x",
               "http://127.0.0.1:8080/hook"):
        sink, _ = reg.resolve(intent(ok))
        assert sink.name == "webhook"
    for bad in ("http://127.0.0.1:8081/hook", "https://evil.example.org/",
                "http://api.example.org.evil.com/", "http://user@127.0.0.2:8080/"):
        with pytest.raises(PermanentDeliveryError) as err:
            reg.resolve(intent(bad))
        assert err.value.fields["reason"] == "host_not_allowed"


async def test_unknown_scheme_and_oversized_body_are_permanent(http: httpx.AsyncClient) -> None:
    reg = registry(http, ("h",), max_body_bytes=10)
    for to, reason in (("ftp://h/x", "unknown_scheme"), ("no-scheme", "unknown_scheme"),
                       ("http://h/", "body_too_large")):
        with pytest.raises(PermanentDeliveryError) as err:
            reg.resolve(intent(to, body="x" * 20))
        assert err.value.fields["reason"] == reason


async def test_per_sink_concurrency_key(http: httpx.AsyncClient) -> None:
    reg = registry(http, ("a", "b"))
    _, s1 = reg.resolve(intent("http://a/1"))
    _, s2 = reg.resolve(intent("http://a/2"))
    _, s3 = reg.resolve(intent("http://b/1"))
    assert s1 is s2 and s1 is not s3


async def test_webhook_statuses(http: httpx.AsyncClient, stub: WebhookStub) -> None:
    sink = WebhookSink((f"127.0.0.1:{stub.port}",), http=http)
    await sink.deliver(intent(f"{stub.base}/ok", {"k": 1}, iid="svit://t/a:9:0"))
    hit = stub.hits_for("/ok")[-1]
    assert hit.key == "svit://t/a:9:0"
    assert hit.body == {"id": "svit://t/a:9:0", "from": "svit://t/a", "to": f"{stub.base}/ok",
                        "version": 1, "body": {"k": 1}}
    with pytest.raises(RetryableDeliveryError):
        await sink.deliver(intent(f"{stub.base}/fail"))
    with pytest.raises(PermanentDeliveryError):
        await sink.deliver(intent(f"{stub.base}/reject"))
    with pytest.raises(PermanentDeliveryError) as err:
        await sink.deliver(intent(f"{stub.base}/redirect"))
    assert err.value.fields["reason"] == "redirect"
    await sink.deliver(intent(f"{stub.base}/garbage"))  # any 2xx confirms a webhook


async def test_svit_sink_stores_one_copy_per_key() -> None:
    tokens = TokenStore()
    tokens.add(ADMIN, Principal(tenant=None, admin=True))
    app = create_app(InProcessRouter(), tokens)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as http:
        auth = {"Authorization": f"Bearer {ADMIN}"}
        r = await http.post("/v1/processes", json={"process_id": "svit://t/dest"}, headers=auth)
        assert r.status_code == 201
        sink = SvitInboxSink("http://gw", ADMIN, http=http)
        message = intent("svit://t/dest", {"n": 1.0, "list": [1, None]})
        for _ in range(3):
            await sink.deliver(message)
        r = await http.get("/v1/processes/state", params={"process_id": "svit://t/dest",
                                                          "path": "/inbox"}, headers=auth)
        inbox = r.json()["value"]["value"]
        assert len(inbox) == 1
        item = inbox[0]["value"]
        assert item["id"]["value"] == message.id and item["from"]["value"] == "svit://t/a"
        assert item["body"]["value"]["n"] == {"type": "number", "value": 1.0}
        assert item["content"]["value"] == '{"list":[1,null],"n":1.0}'
        with pytest.raises(RetryableDeliveryError):  # unknown process: may appear later
            await sink.deliver(intent("svit://t/missing"))
        bad = SvitInboxSink("http://gw", "wrong-token-0123456789", http=http)
        with pytest.raises(PermanentDeliveryError):
            await bad.deliver(message)
    with pytest.raises(PermanentDeliveryError) as err:
        SvitInboxSink("http://gw", ADMIN, http=http).check(intent("svit://other/dest"))
    assert err.value.fields["reason"] == "cross_tenant"
    SvitInboxSink("http://gw", ADMIN, http=http, cross_tenant=True).check(
        intent("svit://other/dest"))
    with pytest.raises(PermanentDeliveryError):
        SvitInboxSink(None, None, http=http).check(message)
    with pytest.raises(PermanentDeliveryError):
        SvitInboxSink("http://gw", ADMIN, http=http).check(intent("svit://"))


async def test_svit_sink_garbage_answer_is_retryable(http: httpx.AsyncClient,
                                                     stub: WebhookStub) -> None:
    sink = SvitInboxSink(stub.base, ADMIN, http=http)
    with pytest.raises(RetryableDeliveryError) as err:
        await sink.deliver(intent("svit://t/x"))
    assert err.value.fields["reason"] == "garbage"
    with pytest.raises(RetryableDeliveryError) as err:
        await SvitInboxSink("http://127.0.0.1:9", ADMIN, http=http).deliver(intent("svit://t/x"))
    assert err.value.fields["reason"] == "transport"


async def test_redis_stream_sink_dedups_and_refuses_store_keys(
        redis_target: RedisTarget, rclient: redis.Redis) -> None:
    client = async_client(redis_target.url)
    try:
        sink = RedisStreamSink(client, allowed_prefixes=("integrations:",),
                               store_prefix="svit")
        message = intent("redis-stream://integrations:once", [1, 2])
        for _ in range(3):
            await sink.deliver(message)
        entries = rclient.xrange("integrations:once")
        assert len(entries) == 1 and entries[0][1][b"id"] == message.id.encode()
        for bad in ("redis-stream://svit:{svit://t/a}:outbox", "redis-stream://other:x",
                    "redis-stream://svit:integrations:x", "redis-stream://"):
            with pytest.raises(PermanentDeliveryError):
                sink.check(intent(bad))
    finally:
        rclient.delete("integrations:once", "integrations:once:svit-dedup",
                       "{integrations:once}:svit-dedup")
        await client.aclose()
