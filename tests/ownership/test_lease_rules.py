"""The lease's pure rules: state by the local clock, and how long it is certain."""

from __future__ import annotations

import pytest

from svit_cluster.ownership._lease import LeaseState, certain_until, judge_state


def test_certain_until_counts_from_the_last_answered_keepalive() -> None:
    # last_ok + ttl_s - safety_margin_s, while that is before the deadline
    assert certain_until(deadline=20.0, last_ok=10.0, ttl_s=5.0, safety_margin_s=1.0) == 14.0


def test_certain_until_is_never_after_the_deadline() -> None:
    assert certain_until(deadline=12.0, last_ok=10.0, ttl_s=5.0, safety_margin_s=1.0) == 12.0


@pytest.mark.parametrize(("now", "stopped", "expected"), [
    (10.5, False, LeaseState.HELD),
    (10.5, True, LeaseState.SUSPENDED),       # keepalives stopped by the host itself
    (12.0, False, LeaseState.SUSPENDED),      # none answered for two intervals
    (14.0, False, LeaseState.LOST),           # at the deadline
])
def test_judge_state(now: float, stopped: bool, expected: LeaseState) -> None:
    assert judge_state(now, deadline=14.0, last_ok=10.0, stopped=stopped,
                       interval_s=1.0) is expected
