"""Observe tokens and CORS over HTTP (uvicorn on loopback).

Observe tokens are short-lived, read-only, scoped to one process, accepted only
on the SSE endpoint (query parameter or cookie), refused with the typed error
wire format everywhere else, and never logged. CORS is off unless origins are
configured. The browser side is tests/gateway/test_browser_observer.py.
"""

from __future__ import annotations

import base64
import io
import json
import logging
import time
from collections.abc import Iterator

import httpx
import pytest

from svit_cluster.client import AsyncSvitClient, SvitClient
from svit_cluster.errors import ConfigurationError, DecodeError, Forbidden, NotFound
from svit_cluster.gateway import ObserveTokens, Principal, TokenStore, create_app, parse_origins
from svit_cluster.inprocess import InProcessRouter
from svit_cluster.settings import GatewaySettings
from tests.events._server import serve

ADMIN = "admin-token-0123456789"
ACME = "acme-token-0123456789"
OTHER = "other-token-0123456789"
PID = "svit://acme/observed"
PID2 = "svit://acme/neighbour"
FOREIGN = "svit://other/theirs"
ORIGIN = "http://page.example:8000"
EVENTS = "/v1/processes/events"


def _tokens() -> TokenStore:
    return TokenStore.from_document({"tokens": [
        {"token": ADMIN, "admin": True}, {"token": ACME, "tenant": "acme"},
        {"token": OTHER, "tenant": "other"}]})


@pytest.fixture(scope="module")
def gateway() -> Iterator[tuple[str, TokenStore, InProcessRouter]]:
    tokens = _tokens()
    router = InProcessRouter()
    with serve(create_app(router, tokens, cors_origins=[ORIGIN])) as base:
        for pid, token in ((PID, ACME), (PID2, ACME), (FOREIGN, OTHER)):
            httpx.post(base + "/v1/processes", json={"process_id": pid, "memory": {}},
                       headers={"Authorization": f"Bearer {token}"}).raise_for_status()
        yield base, tokens, router


@pytest.fixture
def url(gateway: tuple[str, TokenStore, InProcessRouter]) -> str:
    return gateway[0]


def mint(url: str, pid: str = PID, ttl_s: int = 60, bearer: str = ACME) -> httpx.Response:
    return httpx.post(url + "/v1/processes/observe-token",
                      json={"process_id": pid, "ttl_s": ttl_s},
                      headers={"Authorization": f"Bearer {bearer}"})


def sse_first(url: str, params: dict[str, str], headers: dict[str, str] | None = None,
              cookies: dict[str, str] | None = None) -> tuple[int, str]:
    """Status and the first SSE event name (or the error code) of one events request."""
    with httpx.Client(cookies=cookies) as h, h.stream(
            "GET", url + EVENTS, params=params, headers=headers or {},
            timeout=10) as resp:
        if resp.status_code != 200:
            resp.read()
            return resp.status_code, resp.json()["error"]["code"]
        for line in resp.iter_lines():
            if line.startswith("event: "):
                return 200, line[len("event: "):]
    raise AssertionError("stream ended without an event")


def error(resp: httpx.Response) -> tuple[int, str, str]:
    body = resp.json()["error"]
    return resp.status_code, body["code"], body["message"]


def test_mint_then_subscribe_with_the_query_parameter(url: str) -> None:
    resp = mint(url, ttl_s=120)
    assert resp.status_code == 200, resp.text
    doc = resp.json()
    assert doc["process_id"] == PID and doc["ttl_s"] == 120
    assert abs(doc["expires_at"] - (time.time() + 120)) < 5
    assert resp.headers["cache-control"] == "no-store"
    # no Authorization header: the observe token alone opens the stream
    assert sse_first(url, {"process_id": PID, "observe_token": doc["token"]}) == (200, "ready")
    # without any credential the same request is refused (positive control above)
    assert sse_first(url, {"process_id": PID}) == (401, "unauthenticated")


def test_cookie_is_accepted_on_the_events_endpoint(url: str) -> None:
    token = mint(url).json()["token"]
    assert sse_first(url, {"process_id": PID},
                     cookies={"svit_observe_token": token}) == (200, "ready")
    assert sse_first(url, {"process_id": PID2},
                     cookies={"svit_observe_token": token}) == (403, "forbidden")


def test_a_token_for_another_process_is_forbidden(url: str) -> None:
    token = mint(url).json()["token"]
    # same tenant, other process: the token is scoped to one process, not a tenant
    for pid in (PID2, FOREIGN):
        assert sse_first(url, {"process_id": pid, "observe_token": token}) == \
            (403, "forbidden")


def test_tampered_malformed_and_expired_tokens_are_unauthenticated(
        gateway: tuple[str, TokenStore, InProcessRouter]) -> None:
    url, tokens, _ = gateway
    token = mint(url).json()["token"]
    prefix, body, mac = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    claims["pid"] = PID2  # re-point a genuine token at another process
    forged_body = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    flipped = mac[:-2] + ("AA" if mac[-2:] != "AA" else "BB")
    # right key, but minted "an hour ago" with a 60 s lifetime: expired
    expired, _ = ObserveTokens(tokens.observe_key(),
                               clock=lambda: time.time() - 3600).mint(PID, 60)
    # a token signed with another gateway's key (another admin token)
    alien, _ = ObserveTokens(_other_key()).mint(PID, 60)
    for bad in (f"{prefix}.{forged_body}.{mac}", f"{prefix}.{body}.{flipped}", "svo1.x.y",
                "garbage", "", expired, alien):
        resp = httpx.get(url + EVENTS, params={"process_id": PID, "observe_token": bad})
        status, code, message = error(resp)
        assert (status, code) == (401, "unauthenticated"), bad
        assert resp.headers["www-authenticate"].startswith("Bearer")
        assert ("expired" in message) == (bad == expired)
        if bad:
            assert bad not in resp.text  # the answer never echoes the token


def _other_key() -> bytes:
    other = TokenStore()
    other.add("another-admin-0123456789", Principal(tenant=None, admin=True))
    return other.observe_key()


def test_refused_on_every_other_endpoint(url: str) -> None:
    token = mint(url).json()["token"]
    q = {"observe_token": token}
    calls = [
        ("GET", "/v1/processes/state", {"process_id": PID, "path": "/"}, None),
        ("GET", "/v1/processes/events/recent", {"process_id": PID}, None),
        ("GET", "/v1/processes/messages/recent", {"process_id": PID}, None),
        ("GET", "/v1/processes/requests",
         {"process_id": PID, "client_id": "c", "request_id": "r"}, None),
        ("POST", "/v1/processes/inbox", {}, {"process_id": PID, "message": "x"}),
        ("POST", "/v1/processes/observe-token", {}, {"process_id": PID}),
        ("POST", "/v1/processes/snapshot", {}, {"process_id": PID}),
        ("GET", "/v1/admin/dead-letters", {}, None),
        ("POST", EVENTS, {"process_id": PID}, None),  # the events path, but not GET
    ]
    for method, path, params, body in calls:
        for cookie in (False, True):
            resp = httpx.request(
                method, url + path, params=params if cookie else {**params, **q}, json=body,
                cookies={"svit_observe_token": token} if cookie else None)
            assert error(resp)[:2] == (401, "unauthenticated"), (method, path, cookie)
            assert "observe tokens are accepted only on GET" in error(resp)[2]
    # the inbox is unchanged: the observe token wrote nothing
    r = httpx.get(url + "/v1/processes/state", params={"process_id": PID, "path": "/inbox"},
                  headers={"Authorization": f"Bearer {ACME}"})
    assert r.json()["version"] == 0


def test_minting_is_authorized_and_bounded(url: str) -> None:
    assert error(mint(url, FOREIGN))[:2] == (403, "forbidden")
    assert error(mint(url, "svit://acme/nobody"))[:2] == (404, "not_found")
    for ttl in (0, 3601):
        assert error(mint(url, ttl_s=ttl))[:2] == (400, "decode_error")
    assert mint(url, FOREIGN, bearer=ADMIN).status_code == 200
    resp = httpx.post(url + "/v1/processes/observe-token", json={"process_id": PID})
    assert error(resp)[:2] == (401, "unauthenticated")


def test_sdk_mints_with_both_clients(url: str) -> None:
    import asyncio

    with SvitClient(url, ACME, attempts=1) as c:
        doc = c.observe_token(PID, ttl_s=30)
        assert doc["process_id"] == PID and doc["ttl_s"] == 30
        with pytest.raises(Forbidden):
            c.observe_token(FOREIGN)
        with pytest.raises(NotFound):
            c.observe_token("svit://acme/nobody")
        with pytest.raises(DecodeError):
            c.observe_token(PID, ttl_s=0)
    assert sse_first(url, {"process_id": PID, "observe_token": doc["token"]}) == (200, "ready")

    async def run() -> str:
        async with AsyncSvitClient(url, ACME, attempts=1) as a:
            with pytest.raises(Forbidden):
                await a.observe_token(FOREIGN)
            return str((await a.observe_token(PID))["token"])

    token = asyncio.run(run())
    assert sse_first(url, {"process_id": PID, "observe_token": token}) == (200, "ready")


def test_an_open_stream_ends_when_its_token_expires(url: str) -> None:
    # TTL 3 s, not 1 s: on a loaded machine the stream sometimes opened after a
    # 1-s token had already expired (401 instead of 200).
    ttl_s = 3
    minted = time.monotonic()
    token = mint(url, PID2, ttl_s=ttl_s).json()["token"]
    events: list[str] = []
    with httpx.stream("GET", url + EVENTS, params={"process_id": PID2, "observe_token": token},
                      timeout=10) as resp:
        assert resp.status_code == 200
        lines = resp.iter_lines()
        for line in lines:
            if line.startswith("event: "):
                events.append(line[len("event: "):])
                break
        time.sleep(max(0.0, minted + ttl_s + 0.2 - time.monotonic()))
        # a commit after the expiry: the stream ends instead of delivering it
        httpx.post(url + "/v1/processes/inbox", json={"process_id": PID2, "message": "late"},
                   headers={"Authorization": f"Bearer {ACME}"}).raise_for_status()
        for line in lines:
            if line.startswith("event: "):
                events.append(line[len("event: "):])
    assert events == ["ready", "expired"]


def test_tokens_verify_across_replicas_sharing_the_tokens_document() -> None:
    """Two gateways loading the same tokens document accept each other's observe
    tokens (the key is derived from the admin tokens); another admin token, or an
    explicit observe_key, gives another key."""
    a, b = _tokens(), _tokens()
    token, _ = ObserveTokens(a.observe_key()).mint(PID, 60)
    assert ObserveTokens(b.observe_key()).verify(token).process_id == PID
    assert a.observe_key() != _other_key()
    tenant_only = TokenStore.from_document({"tokens": [{"token": ACME, "tenant": "acme"}]})
    again = TokenStore.from_document({"tokens": [{"token": ACME, "tenant": "acme"}]})
    # no admin token: a random per-gateway key, never one a tenant could compute
    assert tenant_only.observe_key() != again.observe_key()
    explicit = {"tokens": [{"token": ADMIN, "admin": True}], "observe_key": "k" * 32}
    assert TokenStore.from_document(explicit).observe_key() == \
        TokenStore.from_document(explicit).observe_key() != a.observe_key()
    with pytest.raises(ConfigurationError):
        TokenStore.from_document({"tokens": [], "observe_key": "short"})


def test_observe_tokens_are_not_logged() -> None:
    """uvicorn's access log (INFO) and httpx's request log carry the full URL;
    both are redacted. The captured lines must contain the request path, so the
    check cannot pass by capturing nothing."""
    tokens = _tokens()
    router = InProcessRouter()
    buf = io.StringIO()
    handler = logging.StreamHandler(buf)
    watched = [logging.getLogger("uvicorn.access"), logging.getLogger("httpx")]
    with serve(create_app(router, tokens), log_level="info", access_log=True) as base:
        for lg in watched:
            lg.addHandler(handler)
        old_level = logging.getLogger("httpx").level
        logging.getLogger("httpx").setLevel(logging.INFO)
        try:
            httpx.post(base + "/v1/processes", json={"process_id": PID},
                       headers={"Authorization": f"Bearer {ACME}"}).raise_for_status()
            token = mint(base).json()["token"]
            assert sse_first(base, {"process_id": PID, "observe_token": token}) == \
                (200, "ready")
            assert sse_first(base, {"process_id": PID2, "observe_token": token})[0] == 403
            httpx.get(base + "/v1/processes/state", params={"process_id": PID,
                                                            "observe_token": token})
            deadline = time.monotonic() + 5
            while buf.getvalue().count(EVENTS) < 4 and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            logging.getLogger("httpx").setLevel(old_level)
            for lg in watched:
                lg.removeHandler(handler)
    text = buf.getvalue()
    assert text.count(EVENTS) >= 4, text  # two access lines + two httpx lines
    assert "/v1/processes/state" in text
    assert token not in text and token.split(".")[2] not in text
    assert "observe_token=[redacted]" in text


def test_cors_is_off_by_default_and_allows_only_configured_origins(url: str) -> None:
    pre = {"Origin": ORIGIN, "Access-Control-Request-Method": "GET",
           "Access-Control-Request-Headers": "last-event-id"}
    resp = httpx.options(url + EVENTS, headers=pre)
    assert resp.status_code == 200
    assert resp.headers["access-control-allow-origin"] == ORIGIN
    assert "last-event-id" in resp.headers["access-control-allow-headers"].lower()
    resp = httpx.options(url + EVENTS, headers={**pre, "Origin": "http://evil.example"})
    assert resp.status_code == 400 and "access-control-allow-origin" not in resp.headers
    token = mint(url).json()["token"]
    # an actual cross-origin request: allowed origin gets the header, even on errors
    ok = httpx.get(url + "/v1/processes/state", params={"process_id": PID},
                   headers={"Origin": ORIGIN, "Authorization": f"Bearer {ACME}"})
    assert ok.headers["access-control-allow-origin"] == ORIGIN
    refused = httpx.get(url + EVENTS, params={"process_id": PID2, "observe_token": token},
                        headers={"Origin": ORIGIN})
    assert refused.status_code == 403
    assert refused.headers["access-control-allow-origin"] == ORIGIN
    with serve(create_app(InProcessRouter(), _tokens())) as plain:
        resp = httpx.options(plain + EVENTS, headers=pre)
        assert "access-control-allow-origin" not in resp.headers
        resp = httpx.get(plain + "/healthz", headers={"Origin": ORIGIN})
        assert "access-control-allow-origin" not in resp.headers


def test_cors_origins_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SVIT_CORS_ORIGINS", " https://app.example ,http://127.0.0.1:3000,")
    origins = GatewaySettings().cors_origins
    assert parse_origins(origins) == ("https://app.example", "http://127.0.0.1:3000")
    monkeypatch.delenv("SVIT_CORS_ORIGINS")
    assert GatewaySettings().cors_origins == ()
    for bad in ("https://app.example/", "app.example", "https://app.example/path"):
        with pytest.raises(ConfigurationError):
            parse_origins(bad)
        with pytest.raises(ConfigurationError):
            create_app(InProcessRouter(), _tokens(), cors_origins=[bad])
