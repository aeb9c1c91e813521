"""Inbox re-drive rules (pure logic; the cluster test is test_inbox_redrive.py)."""

from __future__ import annotations

import asyncio

import pytest

from svit_cluster.cluster._redrive import InboxRedrive, RedriveBackoff
from svit_cluster.store import QueuedPage


def test_a_process_is_re_driven_only_after_being_owner_less_for_the_grace() -> None:
    b = RedriveBackoff(grace_s=3.0, base_s=10.0, max_s=40.0)
    assert not b.observe("p", owned=False, now=100.0)  # first seen owner-less
    assert not b.observe("p", owned=False, now=102.9)
    assert b.observe("p", owned=False, now=103.0)


def test_an_owner_seen_in_between_restarts_the_grace() -> None:
    b = RedriveBackoff(grace_s=3.0, base_s=10.0, max_s=40.0)
    assert not b.observe("p", owned=False, now=100.0)
    assert not b.observe("p", owned=True, now=102.0)  # e.g. a request activated it
    assert not b.observe("p", owned=False, now=104.0)
    assert b.observe("p", owned=False, now=107.0)


def test_an_owned_process_is_never_re_driven() -> None:
    b = RedriveBackoff(grace_s=0.0, base_s=1.0, max_s=1.0)
    assert not any(b.observe("p", owned=True, now=float(t)) for t in range(100))


def test_re_drives_of_one_process_back_off_doubling_up_to_the_cap() -> None:
    b = RedriveBackoff(grace_s=0.0, base_s=10.0, max_s=40.0)
    driven = [t / 10 for t in range(0, 3000) if b.observe("p", owned=False, now=t / 10)]
    assert driven == [0.0, 10.0, 30.0, 70.0, 110.0, 150.0, 190.0, 230.0, 270.0]


def test_a_pass_that_no_longer_lists_a_process_forgets_its_back_off() -> None:
    b = RedriveBackoff(grace_s=0.0, base_s=10.0, max_s=40.0)
    assert b.observe("p", owned=False, now=0.0)
    assert not b.observe("p", owned=False, now=5.0)
    b.end_pass()  # p was listed in this pass: kept
    assert len(b) == 1
    b.end_pass()  # not listed: drained or deleted
    assert len(b) == 0
    assert b.observe("p", owned=False, now=6.0)  # queued again later: a fresh start


def test_at_most_max_tracked_processes_are_remembered() -> None:
    b = RedriveBackoff(grace_s=0.0, base_s=1.0, max_s=1.0, max_tracked=2)
    assert b.observe("a", owned=False, now=0.0)
    assert b.observe("b", owned=False, now=0.0)
    assert not b.observe("c", owned=False, now=0.0)
    assert len(b) == 2


@pytest.mark.parametrize("kw", [{"grace_s": -1.0}, {"base_s": 0.0}, {"max_s": 0.5},
                                {"max_tracked": 0}])
def test_bounds_are_checked(kw: dict[str, float]) -> None:
    args = {"grace_s": 0.0, "base_s": 1.0, "max_s": 2.0, "max_tracked": 10} | kw
    with pytest.raises(ValueError):
        RedriveBackoff(**args)  # type: ignore[arg-type]


async def test_the_sweep_walks_pages_and_re_drives_only_owner_less_processes() -> None:
    pages = {None: QueuedPage(["a", "b"], "0:7"), "0:7": QueuedPage(["c"], None)}
    cursors: list[str | None] = []
    driven: list[str] = []

    async def page(cursor: str | None) -> QueuedPage:
        cursors.append(cursor)
        return pages[cursor]

    sweep = InboxRedrive(page, lambda pid: pid == "b", driven.append,
                         RedriveBackoff(grace_s=0.0, base_s=60.0, max_s=60.0))
    assert await sweep.sweep_once() == 1
    assert await sweep.sweep_once() == 1
    assert await sweep.sweep_once() == 0  # back-off: a and c were just re-driven
    assert cursors == [None, "0:7", None]
    assert driven == ["a", "c"]


async def test_the_sweep_loop_survives_a_failing_page() -> None:
    calls = 0
    driven: list[str] = []

    async def page(cursor: str | None) -> QueuedPage:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise ConnectionError("redis down")
        return QueuedPage(["a"], None)

    sweep = InboxRedrive(page, lambda pid: False, driven.append,
                         RedriveBackoff(grace_s=0.0, base_s=60.0, max_s=60.0),
                         period_s=0.05).start()
    try:
        for _ in range(100):
            if driven:
                break
            await asyncio.sleep(0.02)
    finally:
        await sweep.close()
    assert driven == ["a"] and sweep.errors == 1
