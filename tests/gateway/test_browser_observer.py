"""End to end: a web page in headless Chromium observes a process.

The system Chromium (Debian package ``chromium``; ``.ci/setup`` installs it)
is driven by Playwright with ``executable_path`` (no ``playwright install``).
The gateway is served by uvicorn on a loopback port; its processes commit
through the real fenced Redis commit log (``RedisBackend``, the Lua commit
script) and its SSE endpoint reads the real Redis signal stream. The page is
served from another origin (another port), so the gateway's CORS setting is
exercised too.

1. The page opens ``new EventSource(<gateway>/v1/processes/events?process_id=…
   &observe_token=…)`` with a token minted through the SDK; a commit made with
   the SDK appears in the page's DOM.
2. The gateway is stopped (its open stream is cut) and a commit happens while
   it is down; a new gateway starts on the same port. Chromium reconnects by
   itself, sending ``Last-Event-ID``, and the page shows the missed commit and
   the next one: exactly the store's signals, no duplicate, no gap.
3. The same token for another process is refused: the browser's
   ``EventSource`` closes for good, and a ``fetch`` from the page reads the
   typed ``403 forbidden`` answer.
"""

from __future__ import annotations

import asyncio
import itertools
import shutil
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.responses import HTMLResponse
from starlette.routing import Route

from svit_cluster.client import SvitClient
from svit_cluster.control import ProcessController
from svit_cluster.events import RedisSignalSource, SignalSource
from svit_cluster.gateway import TokenStore, create_app
from svit_cluster.inprocess import InProcessRouter
from svit_cluster.local import RedisServer, free_port
from svit_cluster.process import Process
from svit_cluster.store import ProcessKeys, RedisBackend, StoreConfig, connect
from tests.events._server import serve

pytestmark = pytest.mark.servers

ADMIN = "admin-token-0123456789"
ACME = "acme-token-0123456789"
_n = itertools.count(1)

PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>svit observer</title></head>
<body>
<p>status: <span id="status">connecting</span></p>
<p>ready cursors: <span id="ready"></span></p>
<ol id="log"></ol>
<script>
const q = new URLSearchParams(location.search);
const gateway = q.get("gateway");
function eventsUrl(pid, token) {
  return gateway + "/v1/processes/events?process_id=" + encodeURIComponent(pid) +
         "&observe_token=" + encodeURIComponent(token);
}
const readies = [];
const es = new EventSource(eventsUrl(q.get("pid"), q.get("token")));
es.addEventListener("ready", (e) => {
  readies.push(JSON.parse(e.data).cursor);
  document.getElementById("ready").textContent = readies.join(" ");
  document.getElementById("status").textContent = "open";
});
es.addEventListener("committed", (e) => {
  const signal = JSON.parse(e.data);
  const li = document.createElement("li");
  li.dataset.id = e.lastEventId;
  li.textContent = "v" + signal.data.version + " " + signal.data.paths.join(",");
  document.getElementById("log").appendChild(li);
});
es.onerror = () => {
  document.getElementById("status").textContent =
    es.readyState === EventSource.CLOSED ? "closed" : "reconnecting";
};
// Another stream with the same token, for another process: "open" or "refused".
window.tryObserve = (pid, token) => new Promise((resolve) => {
  const other = new EventSource(eventsUrl(pid, token));
  other.onopen = () => { other.close(); resolve("open"); };
  other.onerror = () => {
    const closed = other.readyState === EventSource.CLOSED;
    other.close();
    resolve(closed ? "refused" : "retrying");
  };
});
window.fetchStatus = async (pid, token) => {
  const r = await fetch(eventsUrl(pid, token));
  return {status: r.status, body: await r.json()};
};
</script>
</body></html>
"""


class RedisLogRouter(InProcessRouter):
    """The in-process router, but every process commits through the real fenced
    Redis commit log (``RedisBackend``: claim, then one Lua script per commit,
    which also appends the signal), and observers read the Redis signal stream.

    One :class:`RedisSignalSource` per event loop: each uvicorn server (and so
    each gateway instance in this test) runs its own loop.
    """

    def __init__(self, redis_url: str, prefix: str) -> None:
        super().__init__()
        self.redis_url = redis_url
        self.prefix = prefix
        self.rclient = connect(redis_url, timeout_s=5)
        self._sources: dict[int, RedisSignalSource] = {}

    def _controller(self, proc: Process) -> ProcessController:
        backend = RedisBackend(self.rclient, proc.id, 1, StoreConfig(prefix=self.prefix))
        backend.claim()
        backend.create(proc)
        return ProcessController(proc, backend, token=1)

    def signal_source(self) -> SignalSource:
        loop = id(asyncio.get_running_loop())
        if loop not in self._sources:
            self._sources[loop] = RedisSignalSource.from_url(self.redis_url, self.prefix)
        return self._sources[loop]


def chromium_path() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.fail("Chromium is not installed: this test drives the system Chromium "
                    "(Debian: apt-get install -y chromium; .ci/setup installs it)")
    return path


def sync_playwright() -> Any:
    try:
        from playwright.sync_api import sync_playwright as start
    except ImportError:
        pytest.fail("playwright is not installed: pip install -e '.[dev]' "
                    "(the Python package only; the browser is the system Chromium)")
    return start()


@pytest.fixture
def router(redis_server: RedisServer) -> Iterator[RedisLogRouter]:
    r = RedisLogRouter(redis_server.url, f"browser{next(_n)}")
    try:
        yield r
    finally:
        r.rclient.close()


@contextmanager
def gateway(router: RedisLogRouter, tokens: TokenStore, port: int,
            origin: str) -> Iterator[str]:
    """One gateway instance on ``port``; on exit its open streams are cut after 0.3 s."""
    app = create_app(router, tokens, cors_origins=[origin])
    with serve(app, port=port, timeout_graceful_shutdown=0.3) as base:
        yield base


def signal_ids(router: RedisLogRouter, pid: str) -> list[str]:
    key = ProcessKeys(pid, router.prefix).signals
    return [eid.decode() for eid, _ in router.rclient.xrange(key)]


def test_a_page_observes_commits_and_resumes_after_a_reconnect(
        router: RedisLogRouter) -> None:
    tokens = TokenStore.from_document({"tokens": [
        {"token": ADMIN, "admin": True}, {"token": ACME, "tenant": "acme"}]})
    pid, other_pid = "svit://acme/chat-view", "svit://acme/not-yours"
    page_app = Starlette(routes=[Route("/", lambda _: HTMLResponse(PAGE))])
    port = free_port()
    browser_path = chromium_path()
    with serve(page_app) as page_origin, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=browser_path, headless=True)
        try:
            page = browser.new_page()
            with gateway(router, tokens, port, page_origin) as base, \
                    SvitClient(base, ACME) as sdk:
                sdk.create_process(pid, memory={})
                sdk.create_process(other_pid, memory={})
                minted = sdk.observe_token(pid, ttl_s=120)
                token = minted["token"]
                page.goto(f"{page_origin}/?gateway={base}&pid={pid}&token={token}")
                page.wait_for_function(
                    "document.getElementById('status').textContent === 'open'", timeout=10_000)

                # 1. a commit through the SDK shows up in the page
                sdk.inbox(pid, "hello")
                page.wait_for_function("document.querySelectorAll('#log li').length === 1",
                                       timeout=10_000)
                assert page.locator("#log li").all_text_contents() == ["v1 /inbox"]

                # 3. the same token for another process is refused in the browser
                assert page.evaluate("([p, t]) => tryObserve(p, t)", [other_pid, token]) \
                    == "refused"
                refused = page.evaluate("([p, t]) => fetchStatus(p, t)", [other_pid, token])
                assert refused["status"] == 403
                assert refused["body"]["error"]["code"] == "forbidden"
                assert page.evaluate("([p, t]) => tryObserve(p, t)", [pid, token]) == "open"

            # 2. the gateway is gone: the stream was cut; commit while it is down
            page.wait_for_function(
                "document.getElementById('status').textContent === 'reconnecting'",
                timeout=10_000)
            # (in a thread: Playwright's sync API runs a loop in this one)
            with ThreadPoolExecutor(1) as pool:
                missed = pool.submit(asyncio.run, router.inbox(
                    pid, "while the gateway was down", None)).result(timeout=10)
            assert missed == {"appended": True, "version": 2}
            with gateway(router, tokens, port, page_origin) as base, \
                    SvitClient(base, ACME) as sdk:
                # Chromium reconnects on its own (retry: 1000) with Last-Event-ID
                page.wait_for_function(
                    "document.querySelectorAll('#log li').length === 2", timeout=15_000)
                sdk.inbox(pid, "after the reconnect")
                page.wait_for_function(
                    "document.querySelectorAll('#log li').length === 3", timeout=10_000)
                page.wait_for_timeout(300)  # a duplicate would arrive within this
                items = page.locator("#log li")
                texts = items.all_text_contents()
                ids = [items.nth(i).get_attribute("data-id") for i in range(items.count())]
                readies = page.locator("#ready").text_content()
            assert texts == ["v1 /inbox", "v2 /inbox", "v3 /inbox"]
            # exactly the store's signals, in order: no duplicate, no gap
            assert ids == signal_ids(router, pid)
            # the second connection resumed from the last event id the page had seen
            first_cursor, resumed_from = (readies or "").split()
            assert resumed_from == ids[0] and first_cursor != resumed_from
        finally:
            browser.close()
