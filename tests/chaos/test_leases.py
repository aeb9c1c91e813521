"""Host lease losses: recorded from etcd by the observer, judged against the fault windows.

The judging rules run on hand-made histories (each case names the rule it pins);
the negative control runs for real: hosts that hold real etcd leases through
their own TCP proxies, a real load-host window, and one host cut off from etcd
without any recorded fault -- the observer must see the lease go and the
checker must fail the run. Cut off as a recorded ``cut-etcd`` fault, the same
loss is explained and the run passes; without a cut nothing is lost.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from svit_chaos.checker import check
from svit_chaos.faults import NemesisContext
from svit_chaos.history import HistoryWriter
from svit_chaos.leases import lease_loss_reasons, lease_losses, leases_report
from svit_chaos.load import HostLoad, start_load, stop_all_loads
from svit_chaos.logs import StoredLogs
from svit_chaos.observer import StoreObserver
from svit_chaos.proxy import LinkMode, ProxyHub
from svit_chaos.report import write_markdown
from svit_chaos.runner import NemesisRunner
from svit_chaos.spec import NemesisSpec, Schedule, Window

from svit_cluster.cluster import LEASE_LOST_LOG
from svit_cluster.local import EtcdServer
from svit_cluster.ownership import host_key
from tests._support import unique

# -- the rules, on hand-made histories ------------------------------------------------------


def make(*events: tuple[float, str, dict[str, Any]], ttl: int = 3,
         recorded: bool = True) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"line": 1, "t": 0.0, "kind": "meta", "lease_ttl_s": ttl,
                                  "host_leases": recorded}]
    for t, kind, fields in events:
        out.append({"line": len(out) + 1, "t": t, "kind": kind, **fields})
    return out


def held(t: float, host: str, lease: int | None, previous: int | None = None,
         since: float | None = None) -> tuple[float, str, dict[str, Any]]:
    return (t, "host_lease", {"host": host, "lease": lease, "incarnation": 1,
                              "previous": previous, "since": since})


def fault(t: float, window: int, phase: str, kind: str,
          **spec: Any) -> tuple[float, str, dict[str, Any]]:
    detail = spec.pop("detail", {})
    return (t, "nemesis", {"phase": phase, "nemesis": kind, "window": window, "spec": spec,
                           "detail": detail})


START = (held(0.5, "h1", 11), held(0.5, "h2", 21), held(0.5, "h3", 31))
LOAD = (fault(5.0, 0, "inject", "load-host", host="h1", cpu=2, memory_mib=256),
        fault(25.0, 0, "heal", "load-host", host="h1", cpu=2, memory_mib=256))


def verdict_and_anomalies(history: list[dict[str, Any]]) -> tuple[str, list[str]]:
    result = check(history, StoredLogs())
    return result.verdict, [a.message for a in result.anomalies if a.invariant == "leases"]


def test_a_loss_in_a_load_window_that_no_fault_explains_fails_the_run() -> None:
    history = make(*START, *LOAD, held(10.2, "h2", None, 21, 10.0), held(11.0, "h2", 22))
    verdict, anomalies = verdict_and_anomalies(history)
    assert verdict == "fail"
    [message] = anomalies
    assert "host h2 lost its etcd lease 21 in (10.0, 10.2 s]" in message
    assert "load-host h1 (window 0)" in message
    report = leases_report(history)
    assert report["hosts"]["h2"] == {"leases": [21, 22], "lost": 1, "lost_in_load_windows": 1,
                                     "unexplained_in_load_windows": 1,
                                     "unexplained_outside_load_windows": 0}
    assert report["hosts"]["h1"]["lost"] == 0 and report["flags"] == []


def test_a_lease_replaced_between_two_reads_is_a_loss_too() -> None:
    history = make(*START, *LOAD, held(12.0, "h1", 12, 11, 11.8))
    [loss] = lease_losses(history)
    assert (loss.host, loss.lease, loss.replaced_by, loss.counts) == ("h1", 11, 12, True)


@pytest.mark.parametrize(("fault_events", "explained"), [
    # the faulted host's own lease keeping: expected to cost it the lease
    ((fault(8.0, 1, "inject", "cut-etcd", host="h2", mode="drop"),
      fault(15.0, 1, "heal", "cut-etcd", host="h2", mode="drop")), "cut-etcd h2 drop (window 1)"),
    ((fault(8.0, 1, "inject", "kill-host", host="h2"),
      fault(9.0, 1, "heal", "kill-host", host="h2")), "kill-host h2 (window 1)"),
    # a pause-owner names its host in the inject detail
    ((fault(8.0, 1, "inject", "pause-owner", detail={"host": "h2"}),
      fault(9.0, 1, "heal", "pause-owner")), "pause-owner h2 (window 1)"),
    ((fault(8.0, 1, "inject", "slow-link", host="h2", service="etcd"),
      fault(9.0, 1, "heal", "slow-link", host="h2", service="etcd")),
     "slow-link h2 etcd (window 1)"),
    # etcd restarted: every host's lease keeping
    ((fault(8.0, 1, "inject", "kill-etcd"), fault(9.0, 1, "heal", "kill-etcd")),
     "kill-etcd (window 1)"),
    # a heal 5 s (TTL 3 + 2) before the loss still explains it ...
    ((fault(3.0, 1, "inject", "pause-host", host="h2"),
      fault(5.0, 1, "heal", "pause-host", host="h2")), "pause-host h2 (window 1)"),
    # ... not a fault on another host, a Redis fault, or a slow Redis link
    ((fault(8.0, 1, "inject", "kill-host", host="h1"),
      fault(9.0, 1, "heal", "kill-host", host="h1")), None),
    ((fault(8.0, 1, "inject", "kill-redis"), fault(9.0, 1, "heal", "kill-redis")), None),
    ((fault(8.0, 1, "inject", "slow-link", host="h2", service="redis"),
      fault(9.0, 1, "heal", "slow-link", host="h2", service="redis")), None),
    # ... nor a pause healed more than TTL + 2 s before the loss's interval began
    ((fault(2.0, 1, "inject", "pause-host", host="h2"),
      fault(4.9, 1, "heal", "pause-host", host="h2")), None),
])
def test_which_faults_explain_a_loss(fault_events: tuple[Any, ...],
                                     explained: str | None) -> None:
    history = make(*START, *LOAD, *fault_events, held(10.2, "h2", None, 21, 10.0))
    [loss] = lease_losses(history)
    assert loss.explained_by == ((explained,) if explained else ())
    verdict, anomalies = verdict_and_anomalies(history)
    assert (verdict, len(anomalies)) == (("pass", 0) if explained else ("fail", 1))


def test_a_loss_soon_after_the_load_ended_counts_one_later_is_only_flagged() -> None:
    # heal at 25 s, TTL 3: the load window reaches to 30 s
    late = make(*START, *LOAD, held(29.5, "h3", None, 31, 29.3))
    assert verdict_and_anomalies(late)[0] == "fail"
    after = make(*START, *LOAD, held(31.0, "h3", None, 31, 30.5), held(32.0, "h3", 32))
    assert verdict_and_anomalies(after) == ("pass", [])
    report = leases_report(after)
    assert report["unexplained_outside_load_windows"] == 1
    assert report["hosts"]["h3"]["unexplained_outside_load_windows"] == 1
    [flag] = report["flags"]
    assert flag.startswith("h3 lost lease 31 in (30.5, 31.0 s] outside every load window")


def test_a_registration_back_under_the_same_lease_and_first_sightings_are_no_loss() -> None:
    history = make(*START, *LOAD, held(10.2, "h2", None, 21, 10.0), held(10.4, "h2", 21),
                   held(12.0, "h4", 41))
    assert lease_losses(history) == []
    assert verdict_and_anomalies(history) == ("pass", [])


def test_a_run_with_a_load_window_but_no_lease_read_is_inconclusive() -> None:
    assert check(make(*LOAD), StoredLogs()).verdict == "inconclusive"
    # a cluster that registers no hosts in etcd (the mini cluster): nothing to judge
    assert check(make(*LOAD, recorded=False), StoredLogs()).verdict == "pass"
    assert leases_report(make(*LOAD, recorded=False))["recorded"] is False


def test_the_report_shows_every_loss_with_its_window_and_the_agents_reason(
        tmp_path: Path) -> None:
    history = make(*START, *LOAD, held(10.2, "h2", None, 21, 10.0), held(11.0, "h2", 22),
                   held(40.0, "h1", 13, 11, 39.8),
                   (41.0, "lease_reasons", {"reasons": {"21": "local deadline passed"}}))
    section = leases_report(history)
    assert [(x["host"], x["counts"], x["flagged"], x["reason"]) for x in section["losses"]] == [
        ("h2", True, False, "local deadline passed"), ("h1", False, True, None)]
    write_markdown(tmp_path / "report.md", {"verdict": "fail", "host_leases": section})
    text = (tmp_path / "report.md").read_text()
    assert "host leases lost 2 (in load windows 1, unexplained there 1)" in text
    assert "| h2 | 2 | 1 | 1 | 1 | 0 |" in text
    assert "| h2 | 21 | (10.0, 10.2] | - | load-host h1 (window 0) | - | local deadline passed |" \
        in text
    assert "- FLAG: h1 lost lease 11 in (39.8, 40.0 s] outside every load window" in text


def test_the_agents_reason_is_read_from_its_log_line(tmp_path: Path) -> None:
    log = tmp_path / "ray" / "session" / "logs" / "worker-1.err"
    log.parent.mkdir(parents=True)
    reason = ("lease 7587: local deadline passed 0.01 s ago, 4.01 s after the last "
              "keepalive was sent")
    log.write_text("x WARNING " + LEASE_LOST_LOG % ("h2", reason, 3) + "\n")
    assert lease_loss_reasons(tmp_path) == {
        "7587": "local deadline passed 0.01 s ago, 4.01 s after the last keepalive was sent"}


# -- the negative control, on real etcd leases -------------------------------------------------

TTL_S = 2  # etcd's shortest lease


def _post(endpoint: str, path: str, body: dict[str, Any], timeout_s: float = 1.0
          ) -> dict[str, Any]:
    req = urllib.request.Request(f"http://{endpoint}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout_s) as resp:
        doc: dict[str, Any] = json.load(resp)
        return doc


class LeaseHolder:
    """A host's lease keeping over etcd's JSON API, through the host's own etcd proxy:
    grant a lease, register the host under it, keep it alive every TTL/4; once etcd
    says the lease is gone, register again under a new one (as an agent rejoins)."""

    def __init__(self, endpoint: str, cluster: str, host: str) -> None:
        self.endpoint, self.cluster, self.host = endpoint, cluster, host
        self.lease: str | None = None
        self.incarnation = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"lease-{host}")

    def start(self) -> LeaseHolder:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _join(self) -> None:
        lease = str(_post(self.endpoint, "/v3/lease/grant", {"TTL": TTL_S})["ID"])
        value = json.dumps({"host": self.host, "incarnation": self.incarnation + 1}).encode()
        _post(self.endpoint, "/v3/kv/put", {
            "key": base64.b64encode(host_key(self.cluster, self.host)).decode(),
            "value": base64.b64encode(value).decode(), "lease": lease})
        self.lease, self.incarnation = lease, self.incarnation + 1

    def _run(self) -> None:
        while not self._stop.wait(TTL_S / 4):
            with contextlib.suppress(OSError, ValueError, KeyError):  # cut off: try again
                if self.lease is None:
                    self._join()
                elif not _post(self.endpoint, "/v3/lease/keepalive",
                               {"ID": self.lease})["result"].get("TTL"):
                    self.lease = None  # expired at etcd: rejoin under a new lease


class Target:
    """Load-host (real loads) and cut-etcd (the hosts' real proxies); with ``hidden``
    the load-host inject also cuts h2 off from etcd -- a loss no fault records."""

    lease_ttl_s = float(TTL_S)

    def __init__(self, hub: ProxyHub, hidden: bool) -> None:
        self.hub, self.hidden = hub, hidden

    def hosts(self) -> list[str]:
        return ["h1", "h2"]

    def link(self, host: str, service: str) -> Any:
        return self.hub.link(host, service)

    def start_load(self, host: str, *, cpu: int, memory_mib: int) -> HostLoad:
        load = start_load(host, cpu=cpu, memory_mib=memory_mib)
        if self.hidden:
            self.hub.link("h2", "etcd").set_mode(LinkMode.DROP)
            stop = load.stop

            def stop_and_reconnect(*, timeout_s: float = 10.0) -> dict[str, Any]:
                self.hub.link("h2", "etcd").set_mode(LinkMode.PASS)
                return stop(timeout_s=timeout_s)

            load.stop = stop_and_reconnect  # type: ignore[method-assign]
        return load


@pytest.fixture
def hub() -> Iterator[ProxyHub]:
    with ProxyHub() as h:
        yield h
    stop_all_loads()


@pytest.mark.servers
@pytest.mark.parametrize("cut", ["hidden", "recorded", "none"])
async def test_a_host_cut_off_from_etcd_in_a_load_window_is_seen_and_fails_the_run(
        etcd_server: EtcdServer, hub: ProxyHub, cut: str) -> None:
    cluster = unique("leases")
    make_proxies = hub.factory()
    holders = [LeaseHolder(make_proxies(h, etcd_server.endpoint, "redis://127.0.0.1:1/0")[0],
                           cluster, h).start() for h in ("h1", "h2")]
    history = HistoryWriter()
    history.record("meta", lease_ttl_s=TTL_S, host_leases=True, hosts=["h1", "h2"])
    observer = StoreObserver(redis.Redis(port=1), [], history, interval_s=0.05,
                             etcd_endpoint=etcd_server.endpoint, cluster=cluster,
                             owners_every=2)
    windows = [Window(1.0, 6.0, NemesisSpec("load-host", host="h1", cpu=1, memory_mib=16))]
    if cut == "recorded":
        windows.append(Window(1.5, 5.0, NemesisSpec("cut-etcd", host="h2", mode="drop")))
    runner = NemesisRunner(Schedule("t", 0, tuple(windows), 10.0),
                           NemesisContext(Target(hub, hidden=cut == "hidden"), history, []))
    try:
        deadline = time.monotonic() + 10
        while not all(h.lease for h in holders):  # both registered before the run starts
            assert time.monotonic() < deadline
            time.sleep(0.05)
        observer.start()
        await runner.run(asyncio.Event())
        assert not runner.errors, runner.errors
        # after the heal h2 registers again; wait until the observer has read it
        deadline = time.monotonic() + 15
        while cut != "none" and not [e for e in history.events if e["kind"] == "host_lease"
                                     and e["host"] == "h2" and e["incarnation"] == 2]:
            assert time.monotonic() < deadline, history.events
            await asyncio.sleep(0.1)
    finally:
        observer.stop()
        for h in holders:
            h.stop()
    events = history.events
    result = check(events, StoredLogs())
    losses = lease_losses(events)
    if cut == "none":
        assert losses == [] and result.verdict == "pass"
        return
    [loss] = losses  # h1, the loaded host, kept its lease; h2 lost exactly one
    assert loss.host == "h2" and loss.load_windows == ("load-host h1 (window 0)",)
    if cut == "hidden":  # nothing explains it: the run fails, naming the host and the lease
        assert result.verdict == "fail"
        [anomaly] = result.anomalies
        assert anomaly.invariant == "leases" and f"host h2 lost its etcd lease {loss.lease}" \
            in anomaly.message
        assert leases_report(events)["hosts"]["h2"]["unexplained_in_load_windows"] == 1
    else:  # a deliberate cut explains it
        assert loss.explained_by == ("cut-etcd h2 drop (window 1)",)
        assert result.verdict == "pass"
    # the loss was seen within the cut, about a TTL after it began
    inject = next(e["t"] for e in events if e["kind"] == "nemesis" and e["phase"] == "inject")
    assert inject < loss.t < inject + 6.0 + TTL_S + 2
