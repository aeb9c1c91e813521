"""``_router._unless``: a call abandoned when its route moves, bounded by a deadline,
run in the caller's task (no task of its own on the request path)."""

from __future__ import annotations

import asyncio
import warnings

import pytest

from svit_cluster.cluster._router import RouteMoved, _unless


async def test_an_answer_before_the_move_is_returned() -> None:
    abandon: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def call() -> int:
        await asyncio.sleep(0.01)
        return 7

    assert await _unless(call(), abandon, 5, "x") == 7
    abandon.set_result(None)  # a move after the answer changes nothing later on
    await asyncio.sleep(0.01)
    assert await _unless_free_sleep() == "slept"


async def _unless_free_sleep() -> str:
    await asyncio.sleep(0.01)
    return "slept"


async def test_a_move_while_the_call_waits_cancels_it_and_raises_route_moved() -> None:
    loop = asyncio.get_running_loop()
    abandon: asyncio.Future[None] = loop.create_future()
    cancelled = asyncio.Event()

    async def call() -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    loop.call_later(0.05, abandon.set_result, None)
    started = loop.time()
    with pytest.raises(RouteMoved) as err:
        await _unless(call(), abandon, 5, "svit:a:p.control")
    assert loop.time() - started < 1.0
    assert cancelled.is_set()
    assert "svit:a:p.control abandoned" in str(err.value)
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0  # the caller's task is not left cancelled
    await asyncio.sleep(0.01)


async def test_a_route_already_moved_never_starts_the_call() -> None:
    abandon: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    abandon.set_result(None)
    started = []

    async def call() -> None:
        started.append(1)

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "coroutine was never awaited"
        with pytest.raises(RouteMoved):
            await _unless(call(), abandon, 5, "x")
    assert started == []


async def test_a_move_in_the_step_the_answer_came_does_not_cancel_the_caller_later() -> None:
    """The abandon callback runs a loop step after the future is set: if the
    call ended in between, the caller keeps its answer and is not cancelled at
    its next await."""
    loop = asyncio.get_running_loop()
    abandon: asyncio.Future[None] = loop.create_future()
    answer: asyncio.Future[int] = loop.create_future()

    def both() -> None:
        answer.set_result(3)
        abandon.set_result(None)

    loop.call_soon(both)
    assert await _unless(answer, abandon, 5, "x") == 3
    await asyncio.sleep(0.02)  # would raise CancelledError if a stale cancel were pending


async def test_a_silent_call_times_out_and_an_outside_cancel_stays_a_cancel() -> None:
    loop = asyncio.get_running_loop()
    abandon: asyncio.Future[None] = loop.create_future()
    with pytest.raises(TimeoutError, match=r"x did not answer within 0\.05 s"):
        await _unless(asyncio.sleep(30), abandon, 0.05, "x")

    outer = asyncio.ensure_future(_unless(asyncio.sleep(30), abandon, 5, "y"))
    await asyncio.sleep(0.01)
    outer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await outer
    abandon.set_result(None)  # a move after the cancel finds nothing to cancel
    await asyncio.sleep(0.01)


async def test_a_call_that_swallows_the_cancel_keeps_its_answer_and_leaves_no_cancel() -> None:
    loop = asyncio.get_running_loop()
    abandon: asyncio.Future[None] = loop.create_future()

    async def stubborn() -> str:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            return "answered anyway"  # as wait_for does when its inner call completes
        return "slept"

    loop.call_later(0.02, abandon.set_result, None)
    assert await _unless(stubborn(), abandon, 5, "x") == "answered anyway"
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0
    await asyncio.sleep(0.01)  # no cancel pending


async def test_the_calls_own_timeout_error_passes_through_unchanged() -> None:
    abandon: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    class RemoteTimeout(TimeoutError):
        pass

    async def call() -> None:
        await asyncio.sleep(0)
        raise RemoteTimeout("the actor's own deadline")

    with pytest.raises(RemoteTimeout, match="the actor's own deadline"):
        await _unless(call(), abandon, 5, "x")
