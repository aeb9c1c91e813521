"""The console's static layer and its admin summary, against the in-process gateway.

``ConsoleMiddleware`` serves ``/ui/`` before authentication with a strict
content security policy and revalidating cache headers; the files it serves
keep the rules the page relies on (no inline script or style, only relative
URLs, no ``localStorage``). The browser side runs in
``test_console_cluster.py``.
"""

from __future__ import annotations

import re
import uuid
from html.parser import HTMLParser
from typing import Any

import pytest
from starlette.testclient import TestClient

from svit_cluster.gateway import (
    CONSOLE_CSP,
    ConsoleMiddleware,
    Principal,
    TokenStore,
    create_app,
)
from svit_cluster.gateway._console import console_files
from svit_cluster.inprocess import InProcessRouter
from svit_cluster.local import RedisServer

ADMIN = "admin-token-0123456789"
ACME = "acme-token-0123456789"


def _client(**kwargs: object) -> TestClient:
    tokens = TokenStore()
    tokens.add(ADMIN, Principal(tenant=None, admin=True))
    tokens.add(ACME, Principal(tenant="acme"))
    return TestClient(create_app(InProcessRouter(), tokens, **kwargs))  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def client() -> TestClient:
    return _client()


@pytest.mark.parametrize("path", ["/ui/", "/ui/index.html", "/ui/console.js",
                                  "/ui/console.css", "/ui/favicon.svg"])
def test_files_are_served_without_a_token_with_strict_headers(client: TestClient,
                                                              path: str) -> None:
    r = client.get(path)
    assert r.status_code == 200
    h = r.headers
    assert h["content-security-policy"] == CONSOLE_CSP
    assert "unsafe-inline" not in CONSOLE_CSP and "unsafe-eval" not in CONSOLE_CSP
    assert "script-src 'self'" in CONSOLE_CSP and "form-action 'none'" in CONSOLE_CSP
    assert h["cache-control"] == "no-cache" and h["etag"].startswith('"')
    assert h["x-content-type-options"] == "nosniff"
    assert h["referrer-policy"] == "no-referrer"
    assert h["x-frame-options"] == "DENY"
    again = client.get(path, headers={"If-None-Match": h["etag"]})
    assert again.status_code == 304 and again.content == b""
    assert client.head(path).headers["content-length"] == str(len(r.content))


def test_types(client: TestClient) -> None:
    assert client.get("/ui/").headers["content-type"] == "text/html; charset=utf-8"
    assert client.get("/ui/console.js").headers["content-type"].startswith("text/javascript")
    assert client.get("/ui/console.css").headers["content-type"].startswith("text/css")


def test_the_bare_path_redirects_relatively_to_keep_a_proxy_sub_path(
        client: TestClient) -> None:
    r = client.get("/ui", follow_redirects=False)
    assert r.status_code == 308 and r.headers["location"] == "ui/"


def test_anything_else_under_ui_is_a_typed_error(client: TestClient) -> None:
    for path in ("/ui/nope.js", "/ui/%2e%2e/v1/processes", "/ui/sub/index.html"):
        r = client.get(path)
        assert (r.status_code, r.json()["error"]["code"]) == (404, "not_found"), path
    r = client.post("/ui/", json={})
    assert r.status_code == 405 and r.headers["allow"] == "GET, HEAD"
    assert r.json()["error"]["code"] == "invalid_value"


def test_other_paths_still_need_a_token(client: TestClient) -> None:
    assert client.get("/ui2").status_code == 401
    assert client.get("/v1/processes").status_code == 401


def test_the_console_can_be_turned_off() -> None:
    assert _client(console=False).get("/ui/").status_code == 401


def test_the_layer_needs_a_page() -> None:
    with pytest.raises(ValueError, match=r"index\.html"):
        ConsoleMiddleware(lambda *a: None, {"console.js": b""})  # type: ignore[arg-type]


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.script_text = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        if self.tags and self.tags[-1][0] == "script":
            self.script_text += data.strip()


def test_the_page_has_no_inline_code_and_only_relative_urls() -> None:
    files = console_files()
    parser = _Tags()
    parser.feed(files["index.html"].decode())
    scripts = [a for t, a in parser.tags if t == "script"]
    assert scripts and all(a.get("src") for a in scripts) and parser.script_text == ""
    for tag, attrs in parser.tags:
        assert "style" not in attrs, tag
        assert not [a for a in attrs if a.startswith("on")], (tag, attrs)
        for name in ("src", "href", "action"):
            url = attrs.get(name)
            if url is not None:
                assert not re.match(r"^(/|[a-z]+:)", url), (tag, name, url)
        if tag == "input":  # a field with a name would be sent by a form
            assert "name" not in attrs, attrs
    assert ("label", {"for": "token"}) in parser.tags


def test_the_script_builds_relative_urls_and_never_uses_local_storage() -> None:
    js = console_files()["console.js"].decode()
    js = re.sub(r"^\s*//.*$", "", js, flags=re.MULTILINE)  # the code, not its comments
    assert 'new URL("../", document.baseURI)' in js
    assert not re.search(r"""["'`]/v1""", js), "an absolute API path"
    assert not re.search(r"""["'`]https?:""", js), "an absolute URL"
    assert not re.search(r"localStorage\s*[.\[]", js)
    assert "sessionStorage.setItem" in js
    assert "console.log" not in js  # nothing (a token included) goes to the browser log
    assert "innerHTML" not in js and "insertAdjacentHTML" not in js  # text only, no markup


def test_summary_is_admin_only_and_counts_outcomes() -> None:
    client = _client()
    auth = {"Authorization": f"Bearer {ADMIN}"}
    client.post("/v1/processes", headers=auth, json={
        "process_id": "svit://acme/p", "memory": {"n": 0},
        "scripts": {"inc": '(define (main input) (write "/memory/n" 1))'}})
    r = client.post("/v1/control", headers=auth, json={
        "protocol": "svit-control@1", "client_id": "c", "request_id": "r1",
        "process_id": "svit://acme/p", "expected_version": 0,
        "command": {"operation": "activate", "script": "inc",
                    "input": {"type": "map", "value": {}}}})
    assert r.json()["outcome"]["status"] == "committed", r.text
    doc = client.get("/v1/admin/summary", headers=auth).json()
    assert doc["counters"] == {"committed": 1, "conflict": 0, "rejected": 0, "fenced": 0,
                               "unavailable": 0, "failovers": 0}
    assert doc["gateway"]["ok"] is True and doc["gateway"]["version"]
    assert [h["host"] for h in doc["hosts"]] == ["inprocess"]
    assert doc["owner_changes"] == []  # one owner, in this Python process
    denied = client.get("/v1/admin/summary", headers={"Authorization": f"Bearer {ACME}"})
    assert (denied.status_code, denied.json()["error"]["code"]) == (403, "forbidden")


def test_listing_names_each_owner_token() -> None:
    client = _client()
    auth = {"Authorization": f"Bearer {ADMIN}"}
    client.post("/v1/processes", headers=auth, json={"process_id": "svit://acme/q"})
    [entry] = client.get("/v1/processes", headers=auth).json()["processes"]
    assert entry == {"process_id": "svit://acme/q", "version": 0, "active": True,
                     "host": "inprocess", "token": 0, "last_commit_at": None}
    # without a Redis URL the summary has no dispatcher figures and the outbox is 503
    auth_doc = client.get("/v1/admin/summary", headers=auth).json()
    assert auth_doc["dispatcher"] is None
    r = client.get("/v1/processes/outbox", headers=auth, params={"process_id": "svit://acme/q"})
    assert (r.status_code, r.json()["error"]["code"]) == (503, "unavailable")


def _redis_app(redis_server: RedisServer, prefix: str) -> tuple[Any, TestClient]:
    """A gateway over the real fenced commit log at ``prefix`` (admin and acme tokens)."""
    from tests.gateway.test_browser_observer import RedisLogRouter

    router = RedisLogRouter(redis_server.url, prefix)
    tokens = TokenStore()
    tokens.add(ADMIN, Principal(tenant=None, admin=True))
    tokens.add(ACME, Principal(tenant="acme"))
    return router, TestClient(create_app(router, tokens, redis_url=redis_server.url,
                                         store_prefix=router.prefix))


@pytest.mark.servers
def test_the_log_route_reads_the_newest_entries_from_redis(redis_server: RedisServer) -> None:
    """``GET /v1/processes/log`` reads the real fenced commit log (``RedisBackend``):
    newest first, each entry's token, source, paths and committing request."""
    router, client = _redis_app(redis_server, "consolelog")
    auth = {"Authorization": f"Bearer {ACME}"}
    pid = f"svit://acme/log-{uuid.uuid4().hex[:8]}"
    try:
        assert client.post("/v1/processes", headers=auth, json={
            "process_id": pid, "memory": {"n": 0},
            "scripts": {"inc": '(define (main input) (write "/memory/n" 1))'}}).status_code == 201
        assert client.post("/v1/processes/inbox", headers=auth,
                           json={"process_id": pid, "message": "hi"}).status_code == 200
        r = client.post("/v1/control", headers=auth, json={
            "protocol": "svit-control@1", "client_id": "cli", "request_id": "req-1",
            "process_id": pid, "expected_version": 1,
            "command": {"operation": "activate", "script": "inc",
                        "input": {"type": "map", "value": {}}}})
        assert r.json()["outcome"]["status"] == "committed", r.text
        doc = client.get("/v1/processes/log", headers=auth,
                         params={"process_id": pid, "limit": 5}).json()
        newest, inbox = doc["entries"][:2]
        assert (newest["version"], newest["client_id"], newest["request_id"]) == (
            2, "cli", "req-1")
        assert newest["paths"] == ["/memory/n"] and newest["token"] == 1
        assert (inbox["version"], inbox["paths"], inbox["request_id"]) == (1, ["/inbox"], None)
        assert inbox["source"] and newest["source"]
        one = client.get("/v1/processes/log", headers=auth, params={"process_id": pid,
                                                                     "limit": 1}).json()
        assert [e["version"] for e in one["entries"]] == [2]
        gone = client.get("/v1/processes/log", headers=auth,
                          params={"process_id": "svit://acme/never-made"})
        assert (gone.status_code, gone.json()["error"]["code"]) == (404, "not_found")
    finally:
        router.rclient.close()


@pytest.mark.servers
def test_commit_times_outbox_and_dispatcher_health_come_from_redis(
        redis_server: RedisServer) -> None:
    """The listing's ``last_commit_at`` (the ``committed`` signal's Redis time), a
    process's undelivered outbox intents and the dispatcher workers' heartbeats."""
    import time

    from svit_cluster.dispatch import DispatchKeys
    router, client = _redis_app(redis_server, "consoleobs")
    auth = {"Authorization": f"Bearer {ACME}"}
    admin = {"Authorization": f"Bearer {ADMIN}"}
    pid = f"svit://acme/obs-{uuid.uuid4().hex[:8]}"
    try:
        assert client.post("/v1/processes", headers=auth, json={
            "process_id": pid, "memory": {"n": 0},
            "scripts": {"send": '(define (main input) (do (send! "https://example.invalid/h" '
                                '1) (write "/memory/n" 1)))'}}).status_code == 201
        [fresh] = client.get("/v1/processes", headers=auth).json()["processes"]
        assert fresh["last_commit_at"] is None  # created, never committed
        r = client.post("/v1/control", headers=auth, json={
            "protocol": "svit-control@1", "client_id": "cli", "request_id": "req-1",
            "process_id": pid, "expected_version": 0,
            "command": {"operation": "activate", "script": "send",
                        "input": {"type": "map", "value": {}}}})
        assert r.json()["outcome"]["status"] == "committed", r.text
        [entry] = client.get("/v1/processes", headers=auth).json()["processes"]
        assert abs(entry["last_commit_at"] - time.time()) < 30, entry

        doc = client.get("/v1/processes/outbox", headers=auth,
                         params={"process_id": pid}).json()
        assert (doc["process_id"], doc["committed"], doc["group"], doc["more"]) == (
            pid, 1, False, False)
        [intent] = doc["intents"]
        assert (intent["to"], intent["version"], intent["state"]) == (
            "https://example.invalid/h", 1, "queued")
        none = client.get("/v1/processes/outbox", headers=auth,
                          params={"process_id": "svit://acme/never-made"}).json()
        assert (none["committed"], none["intents"]) == (0, [])
        bad = client.get("/v1/processes/outbox", headers=auth,
                         params={"process_id": pid, "limit": 0})
        assert bad.status_code == 400

        summary = client.get("/v1/admin/summary", headers=admin).json()
        assert summary["dispatcher"] == {"ok": False, "live": 0, "expired": 0, "workers": []}
        seconds, _ = router.rclient.time()
        router.rclient.zadd(DispatchKeys(router.prefix).workers,
                            {"w1": (int(seconds) + 60) * 1000})
        d = client.get("/v1/admin/summary", headers=admin).json()["dispatcher"]
        assert (d["ok"], d["live"], [w["worker"] for w in d["workers"]]) == (True, 1, ["w1"])
    finally:
        router.rclient.close()
