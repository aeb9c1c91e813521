"""The workload against an in-process gateway (InProcessRouter), with and without a faulty link."""

from __future__ import annotations

import asyncio
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator

import pytest
from svit_chaos.history import Event, HistoryWriter
from svit_chaos.proxy import LinkMode, ProxyHub
from svit_chaos.workload import Workload, WorkloadConfig

from svit_cluster.gateway import create_app
from svit_cluster.inprocess import InProcessRouter
from tests.chaos._gateway import ADMIN, serve, tokens


@pytest.fixture
def gateway() -> Iterator[str]:
    with serve(create_app(InProcessRouter(), tokens())) as url:
        yield url


def completions(events: list[Event]) -> dict[str, list[Event]]:
    done: dict[str, list[Event]] = defaultdict(list)
    for e in events:
        if e["kind"] in ("ok", "fail", "info"):
            done[e["rid"]].append(e)
    return done


async def until(condition: Callable[[], bool], what: str, *, timeout_s: float = 20.0,
                check: bool = True) -> bool:
    """Wait (the event loop keeps running) until ``condition()``; after ``timeout_s``
    seconds fail with ``what`` (``check``) or return False."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():
        if asyncio.get_running_loop().time() >= deadline:
            assert not check, what
            return False
        await asyncio.sleep(0.01)
    return True


async def run_for(workload: Workload, seconds: float) -> None:
    stop = asyncio.Event()
    task = asyncio.ensure_future(workload.run(stop))
    await asyncio.sleep(seconds)
    stop.set()
    await asyncio.wait_for(task, 30)


async def test_clients_record_every_operation_and_recompute_on_conflict(gateway: str) -> None:
    history = HistoryWriter()
    config = WorkloadConfig(run_id="wl1", clients=3, processes=2, seed=4)
    workload = Workload(gateway, ADMIN, history, config)
    await workload.setup()
    await workload.setup()  # creating again is fine (already exists)
    await run_for(workload, 1.5)
    final = await workload.read_final()
    events = history.events
    invokes = [e for e in events if e["kind"] == "invoke"]
    done = completions(events)
    assert invokes and all(len(done[e["rid"]]) == 1 for e in invokes)
    assert len({e["rid"] for e in invokes}) == len(invokes)
    kinds = Counter(done[e["rid"]][0]["kind"] for e in invokes)
    assert kinds["ok"] > 10 and kinds["info"] == 0
    assert kinds["fail"] > 0  # 3 clients on 2 processes conflict, then recompute
    for pid in config.process_ids():
        oks = [e for e in events if e["kind"] == "ok" and e["process"] == pid]
        versions = sorted(e["version"] for e in oks)
        version, memory = final[pid]
        assert versions == list(range(1, version + 1))  # one ack per version, no gaps
        assert memory["count"] == version and len(memory["ops"]) == min(32, version)
        assert memory["last"] == next(e["rid"] for e in oks if e["version"] == version)
    fails = [e for e in events if e["kind"] == "fail"]
    assert all(e["outcome"] == "conflict" and e["actual"] >= e["expected"] for e in fails)
    assert sum(1 for e in events if e["kind"] == "final") == 2


async def test_transport_faults_are_retried_with_the_same_request_id(gateway: str) -> None:
    history = HistoryWriter()
    config = WorkloadConfig(run_id="wl2", clients=3, processes=2, seed=5, request_timeout_s=0.3,
                            op_deadline_s=1.0, drain_s=2.0, backoff_s=(0.02, 0.2))
    with ProxyHub() as hub:
        _, port = gateway.rsplit(":", 1)
        link = hub.proxy("gateway", "127.0.0.1", int(port))
        workload = Workload(f"http://{link.address}", ADMIN, history, config)
        await workload.setup()
        stop = asyncio.Event()
        task = asyncio.ensure_future(workload.run(stop))
        # Conditions, not sleeps: each phase lasts until what it is for has happened.
        stats = workload.stats
        await until(lambda: stats.ok >= 3, "no commit before the faults")

        def retried_commit() -> bool:
            return any(e["kind"] == "ok" and e["attempts"] > 1 for e in history.events)

        # short drops, healed a few transport errors in (well inside the op deadline, so
        # retries succeed), until a retried request committed (a retry can also meet a
        # conflict, an unknown outcome then): bounded, not timed
        for _ in range(50):
            target = stats.transient_errors + 3
            await asyncio.to_thread(link.set_mode, LinkMode.DROP)
            await until(lambda: stats.transient_errors >= target,  # noqa: B023 (awaited here)
                        "the dropped link caused no error")
            await asyncio.to_thread(link.set_mode, LinkMode.PASS)
            if await until(retried_commit, "", timeout_s=2.0, check=False):
                break
        assert retried_commit(), "no retried request committed after 50 short drops"
        await asyncio.to_thread(link.set_mode, LinkMode.STALL)
        # stalled past the op deadline: an outcome stays unknown
        await until(lambda: stats.info > 0, "nothing timed out during the stall")
        await asyncio.to_thread(link.set_mode, LinkMode.PASS)
        healed_ok = stats.ok
        await until(lambda: stats.ok > healed_ok, "no commit after healing")
        stop.set()
        await asyncio.wait_for(task, 30)
        final = await workload.read_final()
    events = history.events
    done = completions(events)
    invokes = [e for e in events if e["kind"] == "invoke"]
    assert all(len(done[e["rid"]]) == 1 for e in invokes)
    ends = [done[e["rid"]][0] for e in invokes]
    assert any(e["kind"] == "info" for e in ends)
    assert any(e["kind"] == "ok" and e["attempts"] > 1 for e in ends)  # retried, same rid
    assert workload.stats.transient_errors > 0
    for pid in config.process_ids():
        acked = sum(1 for e in ends if e["process"] == pid and e["kind"] == "ok")
        unknown = sum(1 for e in ends if e["process"] == pid and e["kind"] == "info")
        count = final[pid][1]["count"]
        assert acked <= count <= acked + unknown


async def test_timers_are_armed_and_cancelled_and_recorded_in_ok_events(gateway: str) -> None:
    """``timer_every=2``: a timer on every even count, a cancel of the last one on
    counts 5, 9, ... (count % 4 == 1); each acknowledged activation's ``ok`` event
    names the timer it armed (with the host's ``due_ms``) and the cancel it staged."""
    import time

    history = HistoryWriter()
    config = WorkloadConfig(run_id="wlt", clients=1, processes=1, seed=1, timer_every=2,
                            timer_delay_ms=600_000)
    assert config.sink == "svit://chaos/wlt-sink"
    workload = Workload(gateway, ADMIN, history, config)
    await workload.setup()
    before_ms = int(time.time() * 1000)
    await run_for(workload, 1.5)
    after_ms = int(time.time() * 1000)
    oks = {e["version"]: e for e in history.events if e["kind"] == "ok"}
    assert len(oks) >= 9 and sorted(oks) == list(range(1, len(oks) + 1))
    armed: dict[int, str] = {}
    for count, ev in sorted(oks.items()):
        if count % 2 == 0:
            [timer] = ev["timers"]
            assert timer["id"].startswith(config.process_ids()[0] + f":{count}:")
            assert before_ms + 600_000 <= timer["due_ms"] <= after_ms + 600_000
            armed[count] = timer["id"]
        else:
            assert "timers" not in ev
        if count % 4 == 1 and count > 1:
            assert ev["cancels"] == [armed[count - 1]]  # pending for ten minutes: staged
        else:
            assert "cancels" not in ev
    final = await workload.read_final()
    _, memory = final[config.process_ids()[0]]
    assert memory["timer"] == armed[max(armed)]
