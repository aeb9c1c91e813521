"""End to end: the browser console at ``GATEWAY/ui/`` in headless Chromium, on a real cluster.

One local cluster (etcd, Redis, Ray head + 2 hosts, the gateway process) and
one Chromium for the module; each test opens its own browser context (its own
session storage). The system Chromium is driven by Playwright with
``executable_path``, as in ``test_browser_observer.py``.

* An admin token shows every host and a created process within 15 s; after
  the process is opened and the SDK commits to it, ``version N`` appears
  within 5 s without a reload. An inbox message sent from the page (after its
  confirmation) shows up in the stream; the dead-letter queue loads. No
  bearer token is in any URL the page requests, observe tokens only on the
  event stream, nothing in ``localStorage``, and neither kind of token in the
  gateway's log.
* A tenant token lists its own tenant's processes only, and no host figures.
* An unknown token gets a clear error and no console.
* Behind a proxy that serves the gateway under a sub-path (what an Ingress
  with a rewrite does), the same page works: every URL it builds is relative.
"""

from __future__ import annotations

import shutil
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

from svit_cluster.client import SvitClient
from svit_cluster.local import ClusterSpec, LocalCluster
from tests.events._server import serve

pytestmark = [pytest.mark.servers, pytest.mark.cluster]

COUNTER = """(define (main input)
  (let ((count (+ (read "/memory/count") (value-get input "/by"))))
    (do (write "/memory/count" count) (value-map "count" count))))"""


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    # a short path: Ray's socket paths must stay under the 107-byte AF_UNIX limit
    state = Path(tempfile.mkdtemp(prefix="svcon-"))
    lc = LocalCluster.up(ClusterSpec(state_dir=state, hosts=2, lease_ttl_s=3,
                                     passivate_after_s=300.0, dispatchers=0))
    try:
        yield lc
    finally:
        lc.down()
        shutil.rmtree(state, ignore_errors=True)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("playwright is not installed: pip install -e '.[dev]'")
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.fail("Chromium is not installed (Debian: apt-get install -y chromium; "
                    ".ci/setup installs it)")
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=path, headless=True)
        try:
            yield b
        finally:
            b.close()


def gateway(cluster: LocalCluster) -> str:
    return str(cluster.doc["gateway"]["url"])


def tokens(cluster: LocalCluster) -> dict[str, str]:
    return dict(cluster.doc["tokens"])


def host_names(cluster: LocalCluster) -> list[str]:
    doc = httpx.get(gateway(cluster) + "/v1/admin/hosts", timeout=10,
                    headers={"Authorization": f"Bearer {tokens(cluster)['admin']}"}).json()
    names = [h["host"] for h in doc["hosts"]]
    assert names, doc
    return names


class Console:
    """One browser context on the console page, recording every URL it requests."""

    def __init__(self, browser: Any, url: str) -> None:
        self.context = browser.new_context()
        self.page = self.context.new_page()
        self.urls: list[str] = []
        self.page.on("request", lambda r: self.urls.append(r.url))
        self.page.goto(url)

    def login(self, token: str) -> None:
        self.page.get_by_label("Token").fill(token)
        self.page.get_by_role("button", name="Open").click()

    def wait_text(self, selector: str, text: str, timeout_s: float) -> None:
        self.page.wait_for_function(
            "([s, t]) => { const n = document.querySelector(s);"
            " return n !== null && n.textContent.includes(t); }",
            arg=[selector, text], timeout=timeout_s * 1000)

    def close(self) -> None:
        self.context.close()


def test_admin_sees_hosts_and_a_process_then_its_new_version_live(
        cluster: LocalCluster, browser: Any) -> None:
    base, admin = gateway(cluster), tokens(cluster)["admin"]
    pid = f"svit://local/console-{uuid.uuid4().hex[:8]}"
    with SvitClient(base, admin) as sdk:
        sdk.create_process(pid, memory={"count": 0}, scripts={"counter": COUNTER})
        console = Console(browser, base + "/ui/")
        try:
            started = time.monotonic()
            console.login(admin)
            for host in host_names(cluster):
                console.wait_text("#hosts tbody", host, 15)
            console.wait_text("#processes tbody", pid, 15)
            assert time.monotonic() - started < 15
            # this cluster runs no dispatcher worker: the summary says so
            console.wait_text("#dispatcher-line", "NO LIVE WORKER", 10)
            console.page.evaluate("window.notReloaded = true")

            console.page.get_by_role("button", name=pid).click()
            console.wait_text("#p-version", "version 0", 10)
            console.wait_text("#p-stream", "live", 10)
            committed = sdk.activate_until_committed(pid, "counter", {"by": 1})
            version = committed.outcome.activation.version
            console.wait_text("#p-version", f"version {version}", 5)
            console.wait_text("#p-signals", f"v{version} committed under token", 5)
            assert console.page.evaluate("window.notReloaded") is True
            # the tree and the log are read again after the commit
            console.wait_text("#p-tree", '"count": 1', 5)
            console.wait_text("#p-log", f"v{version} token", 5)
            console.wait_text("#p-outbox", "none pending", 5)  # the counter sends nothing

            # an action asks first; accepted, it commits and the stream shows it
            asked: list[str] = []

            def accept(dialog: Any) -> None:
                asked.append(dialog.message)
                dialog.accept()

            console.page.on("dialog", accept)
            console.page.get_by_label("inbox message").fill("hello from the console")
            console.page.get_by_role("button", name="Send").click()
            console.wait_text("#p-action", "appended=true", 5)
            console.wait_text("#p-signals", "/inbox", 5)
            assert asked and "hello from the console" in asked[0]
            console.page.get_by_role("button", name="Load dead letters").click()
            console.wait_text("#dl-count", "0 in the queue", 5)

            urls = list(console.urls)
            page_storage = console.page.evaluate(
                "[localStorage.length, sessionStorage.getItem('svit.console.token')]")
        finally:
            console.close()
    assert not [u for u in urls if admin in u], "the bearer token was put in a URL"
    streams = [u for u in urls if "observe_token=" in u]
    assert streams, "the page opened no event stream"
    assert all(httpx.URL(u).path == "/v1/processes/events" for u in streams), streams
    assert page_storage == [0, admin]  # this tab's session storage only
    log = (cluster.spec.state_dir / "logs" / "gateway.log").read_text(errors="replace")
    assert admin not in log
    assert "svo1." not in log  # observe tokens are redacted from access lines


def test_a_tenant_token_sees_only_its_own_tenant(cluster: LocalCluster, browser: Any) -> None:
    base, t = gateway(cluster), tokens(cluster)
    run = uuid.uuid4().hex[:8]
    mine, theirs = f"svit://local/mine-{run}", f"svit://other/theirs-{run}"
    with SvitClient(base, t["admin"]) as sdk:
        sdk.create_process(mine, memory={})
        sdk.create_process(theirs, memory={})
    console = Console(browser, base + "/ui/")
    try:
        console.login(t["local"])
        console.wait_text("#processes tbody", mine, 15)
        listed = console.page.locator("#processes tbody").text_content() or ""
        assert theirs not in listed and "svit://other/" not in listed
        assert console.page.locator("#cluster-admin-only").is_visible()
        assert not console.page.locator("#hosts").is_visible()
        assert console.page.locator("#whoami").text_content() == "tenant token"
        urls = list(console.urls)
    finally:
        console.close()
    assert not [u for u in urls if t["local"] in u]


def test_a_wrong_token_gets_a_clear_error(cluster: LocalCluster, browser: Any) -> None:
    console = Console(browser, gateway(cluster) + "/ui/")
    try:
        console.login("not-a-token-of-this-gateway")
        console.wait_text("#login-error", "Token refused", 10)
        assert "401 unauthenticated" in (console.page.locator("#login-error").text_content()
                                         or "")
        assert not console.page.locator("#app").is_visible()
        assert console.page.evaluate(
            "sessionStorage.length + localStorage.length") == 0
    finally:
        console.close()


def prefix_proxy(target: str, prefix: str) -> Starlette:
    """A reverse proxy serving ``target`` under ``prefix`` (``/svit/x`` -> ``/x``), as
    an Ingress with a rewrite does; responses, event streams included, are streamed."""
    client = httpx.AsyncClient(base_url=target, timeout=httpx.Timeout(10, read=None))
    hop = {"host", "connection", "content-length", "transfer-encoding", "keep-alive"}

    async def forward(request: Request) -> StreamingResponse:
        path = request.url.path[len(prefix):] or "/"
        headers = {k: v for k, v in request.headers.items() if k.lower() not in hop}
        upstream = await client.send(client.build_request(
            request.method, path, params=request.url.query, headers=headers,
            content=await request.body()), stream=True)

        async def body() -> AsyncIterator[bytes]:
            async for chunk in upstream.aiter_raw():
                yield chunk

        out = {k: v for k, v in upstream.headers.items() if k.lower() not in hop}
        return StreamingResponse(body(), status_code=upstream.status_code, headers=out,
                                 background=BackgroundTask(upstream.aclose))

    return Starlette(routes=[Route(prefix + "/{rest:path}", forward,
                                   methods=["GET", "HEAD", "POST"])])


def test_the_console_works_under_a_sub_path(cluster: LocalCluster, browser: Any) -> None:
    base, admin = gateway(cluster), tokens(cluster)["admin"]
    pid = f"svit://local/sub-{uuid.uuid4().hex[:8]}"
    with serve(prefix_proxy(base, "/svit"), timeout_graceful_shutdown=0.3) as proxy, \
            SvitClient(base, admin) as sdk:
        sdk.create_process(pid, memory={"count": 0}, scripts={"counter": COUNTER})
        # /svit/ui (no slash) redirects relatively, so the sub-path is kept
        console = Console(browser, proxy + "/svit/ui")
        try:
            assert console.page.url == proxy + "/svit/ui/"
            console.login(admin)
            console.wait_text("#processes tbody", pid, 15)
            console.page.get_by_role("button", name=pid).click()
            console.wait_text("#p-stream", "live", 10)
            sdk.activate_until_committed(pid, "counter", {"by": 2})
            console.wait_text("#p-version", "version 1", 5)
            urls = list(console.urls)
        finally:
            console.close()
    outside = [u for u in urls if u.startswith(proxy) and not u.startswith(proxy + "/svit/")]
    assert not outside, f"requests outside the sub-path: {outside}"
