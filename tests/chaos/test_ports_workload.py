"""The port-calling workload end to end on the Ray-free mini cluster (real Redis and etcd).

Every activation calls the ``http`` port against the harness's recording test
server; paused owners and a host kill make owners fail over, and an owner
paused between a port call and its commit (see :func:`pausing_launcher`)
commits after it resumed, with its old token, and is fenced. With a
deduplicating server the run passes and every repetition is harmless; with
deduplication off (the negative control) the ``ports`` invariant reports the
double effects.
"""

from __future__ import annotations

import functools
import itertools
import json
import threading
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from svit_chaos.checker import build_context
from svit_chaos.cluster import LaunchSpec
from svit_chaos.ports import PortServer, check_ports, owner_log_lines, ports_figures
from svit_chaos.run import RunConfig, run
from svit_chaos.spec import NemesisSpec, Schedule, Window

from svit_cluster.ports import idempotency_key
from tests.chaos._mini import MiniCluster, mini_launcher

pytestmark = pytest.mark.servers

SCHEDULE = Schedule("ports", 0, (
    Window(4.0, 2.0, NemesisSpec("kill-host", host="h2")),
    Window(7.0, 2.0, NemesisSpec("pause-host", host="h3")),  # longer than the 1 s TTL
), 10.0)


def _config(tmp_path: Path, *, dedup: bool, clients: int = 3, processes: int = 2
            ) -> RunConfig:
    return RunConfig(scenario="none", seed=5, hosts=3, clients=clients, processes=processes,
                     out_dir=tmp_path / ("dedup" if dedup else "no-dedup"), lease_ttl_s=1,
                     snapshot_every=8, negative_control=False, loss_control=False,
                     request_timeout_s=1.0, op_deadline_s=6.0, drain_s=3.0,
                     final_timeout_s=15.0, heal_timeout_s=20.0, schedule=SCHEDULE,
                     workload="ports", port_dedup=dedup)


#: The port calls (counted across hosts) after which the calling host is paused.
PAUSE_AT_CALLS = (10, 25)


def pausing_launcher(spec: LaunchSpec) -> MiniCluster:
    """The mini cluster, plus a fault placed exactly between a port call and its commit.

    A real SIGSTOP lands there by chance; here the calling host is paused right
    after its 10th and 25th port call returned (for 2.5 s, longer than the 1 s
    TTL), so every run has an owner whose call reached the server, whose
    client retries on a new owner, and whose own commit is then fenced.
    """
    cluster = mini_launcher(spec)
    calls = itertools.count(1)

    def on_call(call: Any, host: str) -> None:
        if next(calls) in PAUSE_AT_CALLS and call.ok:
            cluster.target.pause_host(host)
            timer = threading.Timer(2.5, cluster.target.resume_host, (host,))
            timer.daemon = True
            timer.start()
        cluster.hosts[host].running.wait()  # a paused host stops here, before the commit

    for name, registry in cluster.router.ports.items():
        registry.on_call = functools.partial(on_call, host=name)
    return cluster


def _consistent(ports: dict[str, Any], requests: list[dict[str, Any]]) -> None:
    keys = {r["key"] for r in requests}
    assert ports["port_calls"] == len(requests) == ports["keys"] + ports["repeat_calls"]
    assert ports["keys"] == len(keys)
    assert ports["repeats_harmless"] + ports["repeats_harmful"] == ports["repeated_keys"]
    assert ports["repeated_keys"] <= ports["repeat_calls"]
    assert ports["effects_applied"] == sum(r["applied"] for r in requests)
    assert ports["committed_matching"] <= ports["committed"]
    assert ports["superseded_calls_logged"] <= ports["calls_by_superseded_owner"]


async def test_ports_workload_under_failover(tmp_path: Path) -> None:
    good = await run(_config(tmp_path, dedup=True), launcher=pausing_launcher)
    leg = good.legs["main"]
    assert leg.result.verdict == "pass", json.dumps(leg.result.to_json())[:3000]
    ports = good.report["ports"]
    event = next(e for e in leg.history if e["kind"] == "ports")
    _consistent(ports, event["requests"])
    assert ports["dedup"] is True and ports["port_calls"] > 20
    # every committed activation's port result is the server's first answer
    assert ports["committed"] >= good.report["acked_commits"] > 10
    assert ports["committed_matching"] == ports["committed"]
    # each committed answer was made for its own request (the key covers the input)
    assert ports["committed_other_request_answer"] == 0
    assert ports["committed_without_request"] == 0
    # the paused owners ran their blocked calls after failover. A retry of the same
    # request at the same version repeats the key (harmless at the deduplicating
    # server); whether the retry lands at that version depends on timing (another
    # client may commit it first), so the count is not fixed. A repeated key is
    # always the same request's call again: the key covers the call's input.
    assert ports["repeats_harmful"] == 0 and ports["repeats_harmless"] == ports["repeated_keys"]
    assert ports["repeats_other_body"] == 0, ports
    assert ports["effects_applied"] == ports["keys"]
    assert ports["calls_by_superseded_owner"] >= 1
    # ... and each such owner logged its uncommitted calls with its token
    assert ports["owner_log_lines"].get("fenced", 0) >= 1
    assert "Port calls" in (good.directory / "report.md").read_text()

    # The negative control must not depend on a lucky interleaving: with one client
    # on one process nobody else can commit the paused call's version, so the
    # client's retry of that request recomputes the same version and makes the same
    # call -- the same key -- and the server without dedup applies it twice.
    bad = await run(_config(tmp_path, dedup=False, clients=1, processes=1),
                    launcher=pausing_launcher)
    result = bad.legs["main"].result
    ports_bad = bad.report["ports"]
    _consistent(ports_bad, next(e for e in bad.legs["main"].history
                                if e["kind"] == "ports")["requests"])
    assert ports_bad["dedup"] is False and ports_bad["repeats_harmful"] >= 1
    assert result.verdict == "fail" and bad.exit_code == 1
    doubles = [a for a in result.anomalies if a.invariant == "ports"]
    assert doubles and any("double effect" in a.message for a in doubles)
    assert {a.invariant for a in result.anomalies} == {"ports"}  # nothing else broke


def _logs_with(proc: Any, port: str, rid: str | None) -> Any:
    """Stored logs holding one entry (version 1, token 2) that committed ``port``."""
    from svit_chaos.logs import ProcessLog, StoredEntry, StoredLogs

    wc = proc.working_copy()
    wc.write("/memory/port", port)
    if rid is not None:
        wc.write("/memory/last", rid)
    record = proc.seal(wc, "activation").record.encode()
    return StoredLogs({proc.id: ProcessLog(proc.id, entries={1: StoredEntry(
        proc.id, 1, 2, record)})})


def _key(proc_id: str, rid: str) -> str:
    """The key the workload's call at version 1 sends for request ``rid``."""
    return idempotency_key(proc_id, 1, 0, "http", {"url": "http://127.0.0.1/effect",
                                                   "method": "POST", "body": rid})


def test_check_ports_compares_with_the_first_answer() -> None:
    """Pure check: a committed result that is not the first answer, and a double effect."""
    from svit_cluster.process import Process

    server = PortServer(dedup=False)
    proc = Process.create("svit://chaos/t-p0", memory={"port": "", "last": ""})
    key = _key(proc.id, "rid-a")
    at = {"process": quote(proc.id, safe="/:"), "version": "1", "call_index": "0"}
    first = server.handle(key, "1", "rid-a", **at)
    second = server.handle(key, "2", "rid-a", **at)
    assert first != second
    assert server.requests[0]["process"] == proc.id and server.requests[0]["version"] == 1
    logs = _logs_with(proc, second, "rid-a")
    history = [{"line": 1, "t": 0.0, "kind": "ports", **server.event()}]
    found = list(check_ports(build_context(history, logs)))
    assert [a.invariant for a in found] == ["ports", "ports"]
    assert "not the server's first answer" in found[0].message
    assert "double effect" in found[1].message
    figures = ports_figures(build_context(history, logs))
    assert figures is not None and figures["repeats_harmful"] == 1
    assert figures["calls_by_superseded_owner"] == 1  # the token-1 call did not commit
    assert (figures["committed"], figures["committed_matching"]) == (1, 0)
    # a deduplicating server answers the repetition with the first answer: nothing to report
    server = PortServer(dedup=True)
    first = server.handle(key, "1", "rid-a", **at)
    assert server.handle(key, "2", "rid-a", **at) == first
    logs = _logs_with(proc, first, "rid-a")
    history = [{"line": 1, "t": 0.0, "kind": "ports", **server.event()}]
    assert list(check_ports(build_context(history, logs))) == []
    figures = ports_figures(build_context(history, logs))
    assert figures is not None
    assert (figures["committed"], figures["committed_matching"],
            figures["committed_other_request_answer"], figures["repeats_harmless"]) == (
        1, 1, 0, 1)
    # a committed result whose request never reached the server at that version
    logs = _logs_with(proc, first, "rid-z")
    history = [{"line": 1, "t": 0.0, "kind": "ports", **server.event()}]
    found = list(check_ports(build_context(history, logs)))
    assert len(found) == 1 and "never answered for its request (rid-z)" in found[0].message


def test_check_ports_finds_a_commit_holding_another_requests_answer() -> None:
    """Pure check (the defect chaos found): request rid-a's attempt at version 1
    called the port and was fenced; request rid-b then computed version 1. With a
    key naming only (process, version, call index) both send ONE key, the
    deduplicating server answers rid-b with rid-a's answer, and rid-b commits it
    -- its own effect never applied. The checker reports it; with the key
    covering the input (as the http port now sends) each gets its own answer."""
    from svit_cluster.process import Process

    proc = Process.create("svit://chaos/t-p1", memory={"port": "", "last": ""})
    at = {"process": proc.id, "version": "1", "call_index": "0"}
    shared = "svit-" + "0" * 64  # the old key: one per (process, version, call index)
    server = PortServer(dedup=True)
    answer_a = server.handle(shared, "1", "rid-a", **at)
    answer_b = server.handle(shared, "2", "rid-b", **at)
    assert answer_b == answer_a
    logs = _logs_with(proc, answer_b, "rid-b")
    history = [{"line": 1, "t": 0.0, "kind": "ports", **server.event()}]
    found = list(check_ports(build_context(history, logs)))
    assert len(found) == 1 and "made for another request (rid-a)" in found[0].message
    figures = ports_figures(build_context(history, logs))
    assert figures is not None
    assert (figures["committed_other_request_answer"], figures["repeats_other_body"]) == (1, 1)
    # the key as the http port computes it now: rid-b gets (and commits) its own answer
    assert _key(proc.id, "rid-a") != _key(proc.id, "rid-b")
    server = PortServer(dedup=True)
    server.handle(_key(proc.id, "rid-a"), "1", "rid-a", **at)
    answer_b = server.handle(_key(proc.id, "rid-b"), "2", "rid-b", **at)
    assert answer_b.endswith(":rid-b")
    logs = _logs_with(proc, answer_b, "rid-b")
    history = [{"line": 1, "t": 0.0, "kind": "ports", **server.event()}]
    assert list(check_ports(build_context(history, logs))) == []
    figures = ports_figures(build_context(history, logs))
    assert figures is not None
    assert (figures["committed_matching"], figures["committed_other_request_answer"],
            figures["repeated_keys"], figures["calls_by_superseded_owner"]) == (1, 0, 0, 1)


def test_owner_log_lines_parses_the_warning(tmp_path: Path) -> None:
    (tmp_path / "w.err").write_text(
        "x\nport calls not committed (fenced): process=svit://c/p version=4 token=7 "
        "keys=svit-ab,svit-cd\n")
    assert owner_log_lines(tmp_path) == [{"cause": "fenced", "process": "svit://c/p",
                                          "version": 4, "token": 7,
                                          "keys": ["svit-ab", "svit-cd"]}]
