"""History writer and reader: JSONL, monotonic injectable timestamps, crash tolerance."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from svit_chaos.clock import ManualClock, wait_until
from svit_chaos.errors import HistoryError
from svit_chaos.history import HistoryWriter, read_history, write_history


async def test_lines_times_and_file_match(tmp_path: Path) -> None:
    clock = ManualClock(100.0)
    path = tmp_path / "h" / "history.jsonl"
    with HistoryWriter(path, clock=clock) as h:
        h.record("meta", scenario="x")
        await clock.advance(1.25)
        h.record("invoke", client="c0", process="svit://t/p", rid="r1", expected=0)
        await clock.advance(0.5)
        ev = h.record("ok", client="c0", process="svit://t/p", rid="r1", version=1)
    assert ev["line"] == 3 and ev["t"] == 1.75
    events = read_history(path)
    assert [(e["line"], e["t"], e["kind"]) for e in events] == [
        (1, 0.0, "meta"), (2, 1.25, "invoke"), (3, 1.75, "ok")]
    assert events == h.events  # the file holds exactly what memory holds


def test_bad_records_are_refused() -> None:
    h = HistoryWriter(clock=ManualClock())
    with pytest.raises(ValueError, match="unknown history kind"):
        h.record("oops")
    with pytest.raises(ValueError, match="set by the writer"):
        h.record("note", line=3)


def test_concurrent_writers_keep_lines_unique_and_ordered(tmp_path: Path) -> None:
    h = HistoryWriter(tmp_path / "history.jsonl")

    def write(n: int) -> None:
        for i in range(200):
            h.record("note", message=f"{n}-{i}")

    threads = [threading.Thread(target=write, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    h.close()
    events = read_history(tmp_path / "history.jsonl")
    assert [e["line"] for e in events] == list(range(1, 801))
    times = [e["t"] for e in events]
    assert times == sorted(times)


def test_a_line_cut_short_by_a_crash_is_ignored_but_garbage_is_not(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    good = json.dumps({"line": 1, "t": 0.1, "kind": "note", "message": "x"})
    path.write_text(good + "\n" + '{"line": 2, "t": 0.2, "ki')
    assert len(read_history(path)) == 1
    path.write_text('{"line": 1, "t": 0.1, "kind": "note"}\nnot json\n' + good + "\n")
    with pytest.raises(HistoryError, match=r"history.jsonl:2"):
        read_history(path)
    path.write_text('{"line": 1, "kind": "note"}\n')
    with pytest.raises(HistoryError, match="no time"):
        read_history(path)


def test_write_history_renumbers(tmp_path: Path) -> None:
    h = HistoryWriter(clock=ManualClock())
    for i in range(3):
        h.record("note", message=str(i))
    write_history(tmp_path / "x.jsonl", h.events[1:])
    assert [e["line"] for e in read_history(tmp_path / "x.jsonl")] == [1, 2]


async def test_wait_until_polls_a_condition_on_the_clock() -> None:
    clock = ManualClock()
    state = {"n": 0}

    def ready() -> bool:
        state["n"] += 1
        return state["n"] >= 3

    import asyncio

    task = asyncio.ensure_future(wait_until(ready, timeout_s=5, clock=clock, interval_s=1))
    await clock.advance(3, step=0.5)
    assert await task is True
    task = asyncio.ensure_future(wait_until(lambda: False, timeout_s=2, clock=clock))
    await clock.advance(3, step=0.5)
    assert await task is False
