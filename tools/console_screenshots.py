"""Regenerate the console's screenshots in ``docs/console/``, and measure its idle cost.

Usage::

    python tools/console_screenshots.py [--state-dir DIR] [--out docs/console]
                                        [--idle-s 60]

With ``--state-dir`` it uses that running local cluster (``svit-cluster up``);
without it, it starts one of its own (2 hosts, in a temporary folder) and stops
it by PID at the end. It creates a few processes under ``svit://demo/...``,
drives the system Chromium (Playwright with ``executable_path``, as the tests
do) through the console at ``GATEWAY/ui/`` with the admin token and writes one
PNG per view: ``login.png`` (a refused token), ``overview.png`` (cluster,
ownership changes -- one passivation and re-activation is made for it -- and
processes), ``process.png`` (a process after live commits), ``tenant.png`` (a
tenant token's view).

With ``--idle-s N`` (> 0) it then measures the gateway process's CPU (user +
system, from ``psutil``) for N seconds with no console open, then N seconds
with one tab open on a process (polling and one event stream), and prints both
as JSON, in percent of one core. Run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from svit_cluster.client import SvitClient  # noqa: E402
from svit_cluster.errors import ConflictError  # noqa: E402
from svit_cluster.local import ClusterSpec, LocalCluster  # noqa: E402

COUNTER = """(define (main input)
  (let ((count (+ (read "/memory/count") (value-get input "/by"))))
    (do (write "/memory/count" count) (value-map "count" count))))"""
DEMO = ["svit://demo/orders", "svit://demo/billing", "svit://demo/agent-7",
        "svit://local/counter", "svit://acme/inventory"]


def cpu_s(pid: int) -> float:
    t = psutil.Process(pid).cpu_times()
    return float(t.user + t.system)


def measure(pid: int, seconds: float, wait: Callable[[float], Any] = time.sleep) -> float:
    """Percent of one core the process ``pid`` used while ``wait(seconds)`` ran."""
    c0, w0 = cpu_s(pid), time.monotonic()
    wait(seconds)
    return round(100.0 * (cpu_s(pid) - c0) / (time.monotonic() - w0), 2)


def seed(url: str, admin: str) -> None:
    with SvitClient(url, admin) as sdk:
        for pid in DEMO:
            try:
                sdk.create_process(pid, memory={"count": 0}, scripts={"counter": COUNTER})
            except ConflictError:
                pass  # created by an earlier run
        for pid in DEMO[:3]:
            sdk.activate_until_committed(pid, "counter", {"by": 1})
        # one ownership change to show: a passivation, then a new owner
        moved = DEMO[2]
        sdk.set_passivation(moved, 1.0)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            page = sdk.list_processes(limit=100)
            if any(p.process_id == moved and not p.active for p in page.processes):
                break
            time.sleep(0.5)
        sdk.set_passivation(moved, None)
        sdk.activate_until_committed(moved, "counter", {"by": 1})


def wait_text(page: Any, selector: str, text: str, timeout_s: float = 15) -> None:
    page.wait_for_function(
        "([s, t]) => { const n = document.querySelector(s);"
        " return n !== null && n.textContent.includes(t); }",
        arg=[selector, text], timeout=timeout_s * 1000)


def tour(lc: LocalCluster, out: Path, idle_s: float) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    url, tokens = lc.doc["gateway"]["url"], lc.doc["tokens"]
    gateway_pid = int(lc.doc["gateway"]["pid"])
    seed(url, tokens["admin"])
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("Chromium is not installed (Debian: apt-get install -y chromium)")
    out.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"screenshots": []}

    def shot(page: Any, name: str) -> None:
        page.screenshot(path=str(out / name), full_page=True)
        result["screenshots"].append(str(out / name))

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, headless=True)
        try:
            size = {"width": 1280, "height": 860}
            page = browser.new_context(viewport=size).new_page()
            page.goto(url + "/ui/")
            page.get_by_label("Token").fill("not-a-token-of-this-gateway")
            page.get_by_role("button", name="Open").click()
            wait_text(page, "#login-error", "Token refused")
            shot(page, "login.png")

            page.get_by_label("Token").fill(tokens["admin"])
            page.get_by_role("button", name="Open").click()
            for pid in DEMO:
                wait_text(page, "#processes tbody", pid)
            page.wait_for_timeout(5500)  # a second summary: the rates are shown
            shot(page, "overview.png")

            pid = DEMO[0]
            page.get_by_role("button", name=pid).click()
            wait_text(page, "#p-stream", "live")
            with SvitClient(url, tokens["admin"]) as sdk:
                for by in (1, 2, 3):
                    sdk.activate_until_committed(pid, "counter", {"by": by})
            wait_text(page, "#p-signals", "committed under token")
            page.wait_for_timeout(2500)  # the tree is read again after the commits
            shot(page, "process.png")

            tenant = browser.new_context(viewport=size).new_page()
            tenant.goto(url + "/ui/")
            tenant.get_by_label("Token").fill(tokens["local"])
            tenant.get_by_role("button", name="Open").click()
            wait_text(tenant, "#processes tbody", "svit://local/counter")
            shot(tenant, "tenant.png")
            tenant.context.close()

            if idle_s > 0:
                page.context.close()
                result["gateway_cpu_percent_no_tab"] = measure(gateway_pid, idle_s)
                page = browser.new_context(viewport=size).new_page()
                page.goto(url + "/ui/")
                page.get_by_label("Token").fill(tokens["admin"])
                page.get_by_role("button", name="Open").click()
                wait_text(page, "#processes tbody", pid)
                page.get_by_role("button", name=pid).click()
                wait_text(page, "#p-stream", "live")
                fetched = "performance.getEntriesByType('resource').length"
                before = page.evaluate(fetched)
                # the page's own timers run in Chromium; waiting through Playwright
                # keeps its event pipe drained meanwhile
                result["gateway_cpu_percent_one_tab"] = measure(
                    gateway_pid, idle_s, lambda s: page.wait_for_timeout(s * 1000))
                result["idle_s"] = idle_s
                result["requests_per_minute_one_tab"] = round(
                    (page.evaluate(fetched) - before) * 60 / idle_s, 1)
        finally:
            browser.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--state-dir", type=Path, help="a running local cluster's state dir")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "console")
    parser.add_argument("--idle-s", type=float, default=0.0,
                        help="also measure the gateway's idle CPU for this many seconds")
    args = parser.parse_args()
    if args.state_dir is not None:
        print(json.dumps(tour(LocalCluster.load(args.state_dir), args.out, args.idle_s)))
        return
    state = Path(tempfile.mkdtemp(prefix="svshot-"))
    lc = LocalCluster.up(ClusterSpec(state_dir=state, hosts=2, lease_ttl_s=3,
                                     passivate_after_s=300.0, dispatchers=0))
    try:
        print(json.dumps(tour(lc, args.out, args.idle_s)))
    finally:
        lc.down()
        shutil.rmtree(state, ignore_errors=True)


if __name__ == "__main__":
    main()
