"""The paused-owner scenario end to end (etcd + Redis), and its negative control.

A owns P and commits; A is paused (no keepalives) until its lease expires; B
acquires P (a larger token), claims the fence and restores. A resumes, not
knowing, and tries to commit what it had prepared. The Redis fence must refuse
it. With fencing switched off (the test-only switch), the same scenario lets
the stale owner commit -- proving that this test can fail.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import redis

from svit_cluster.errors import (
    ConflictError,
    FencedError,
    SvitError,
    UnavailableError,
)
from svit_cluster.ownership import LeaseState, Owners, Ownership
from svit_cluster.process import Process, Transition
from svit_cluster.store import LogEntry, RedisBackend, StoreConfig
from svit_cluster.store.testing import disable_fencing_for_negative_control
from tests._commit_log import commit_write, receipt, seal_write

pytestmark = pytest.mark.servers


@dataclass
class Outcome:
    token_a: int
    token_b: int
    a_result: SvitError | None
    b_result: SvitError | None
    entry_v2: LogEntry
    fence: int
    guard_a: Callable[[], None]


def _try(call: Callable[[], Any]) -> SvitError | None:
    try:
        call()
    except SvitError as exc:
        return exc
    return None


async def _acquire_when_free(owners: Owners, pid: str, timeout_s: float) -> Ownership:
    """Acquire ``pid`` once its old owner's record is gone. The subject here is
    the fence, not lease timing: a 2-s test lease SUSPENDED for a moment (a
    keepalive answered late; a CI run) is waited out like a conflict."""
    end = time.monotonic() + timeout_s
    while True:
        try:
            return await owners.acquire(pid)
        except ConflictError:
            if time.monotonic() > end:
                raise
            await asyncio.sleep(0.1)
        except UnavailableError as exc:
            if exc.fields.get("lease_state") != "suspended" or time.monotonic() > end:
                raise
            await owners.lease.wait_for(LeaseState.HELD, timeout_s=0.5)


async def _paused_owner(make_lease: Callable[..., Any], rclient: redis.Redis, pid: str,
                        cluster: str, *, fencing: bool) -> Outcome:
    config = StoreConfig(prefix=f"fence-{cluster}")
    lease_a = await make_lease()
    # The subject is the fence, not lease timing: start from HELD (a CI run found
    # this 2-s lease SUSPENDED right after its grant, its first keepalive late).
    assert await lease_a.wait_for(LeaseState.HELD, timeout_s=5)
    host_a = Owners(lease_a, cluster=cluster, host="a")
    own_a = await _acquire_when_free(host_a, pid, timeout_s=8)
    # A's data path does not consult its lease: a zombie never knows it is one.
    log_a = RedisBackend(rclient, pid, own_a.token, config)
    if not fencing:
        disable_fencing_for_negative_control(log_a)
    log_a.claim()
    proc_a = Process.create(pid, memory={"count": 0})
    log_a.create(proc_a)
    commit_write(log_a, proc_a, "a-1")
    pending: Transition = seal_write(proc_a, "a-2")  # prepared, then A is paused

    lease_a.stop_keepalive()
    host_b = Owners(await make_lease(), cluster=cluster, host="b")
    own_b = await _acquire_when_free(host_b, pid, timeout_s=8)
    log_b = RedisBackend(rclient, pid, own_b.token, config, guard=host_b.lease.ensure_held)
    log_b.claim()
    proc_b = log_b.restore()
    assert proc_b is not None and proc_b.version == 1

    a_result = _try(lambda: log_a.commit(pending, receipt("a-req")))  # A resumes
    b_result = _try(lambda: commit_write(log_b, proc_b, "b-2", request_id="b-req"))
    [entry] = [e for e in log_b.entries() if e.version == 2]
    return Outcome(own_a.token, own_b.token, a_result, b_result, entry, log_b.fence(),
                   lease_a.ensure_held)


async def test_paused_owner_is_fenced_out(make_lease: Callable[..., Any],
                                          rclient: redis.Redis, pid: str,
                                          cluster: str) -> None:
    out = await _paused_owner(make_lease, rclient, pid, cluster, fencing=True)
    assert out.token_b > out.token_a
    assert isinstance(out.a_result, FencedError)
    assert out.a_result.fields["token"] == out.token_a
    assert out.a_result.fields["fence"] == out.token_b
    assert out.b_result is None
    assert out.entry_v2.token == out.token_b  # the stream holds only B's entry at v2
    assert b'"a-2"' not in out.entry_v2.record
    with pytest.raises(UnavailableError):  # and A's own guard would refuse too (LOST)
        out.guard_a()


async def test_negative_control_without_fencing_the_stale_owner_commits(
    make_lease: Callable[..., Any], rclient: redis.Redis, pid: str, cluster: str
) -> None:
    out = await _paused_owner(make_lease, rclient, pid, cluster, fencing=False)
    assert out.a_result is None  # the stale owner committed ...
    assert isinstance(out.b_result, ConflictError)  # ... and the real owner lost
    assert out.entry_v2.token == out.token_a < out.fence  # committed below a claimed token
    assert b'"a-2"' in out.entry_v2.record
