"""A commit whose reply is lost (real redis-server, fault proxy).

The entry is written (durable head 1) but the client sees ``unavailable``.
The owner must re-synchronise from the durable head before it decides anything
from memory: the retry replays "committed v1", the next request with
``expected_version=1`` commits v2, and no stored receipt names version 0.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from svit_cluster.control import ProcessController
from svit_cluster.errors import UnavailableError
from svit_cluster.local import RedisServer
from svit_cluster.store import StoreConfig, connect
from tests._support import unique
from tests.faults._proxy import Fault, FaultProxy
from tests.faults._support import activate, is_commit, load_commit_script, new_controller

pytestmark = pytest.mark.servers


@pytest.fixture
def proxy(redis_server: RedisServer) -> Iterator[FaultProxy]:
    p = FaultProxy(redis_server.port)
    try:
        yield p
    finally:
        p.close()


@pytest.fixture
def via_proxy(proxy: FaultProxy) -> Iterator[redis.Redis]:
    client = connect(proxy.url, timeout_s=0.5)
    try:
        yield client
    finally:
        client.close()


def _lost_reply(proxy: FaultProxy, ctrl: ProcessController, pid: str, fault: Fault) -> None:
    load_commit_script(ctrl)  # so the lost reply is the script's, not a NOSCRIPT
    proxy.arm(fault, is_commit)
    with pytest.raises(UnavailableError) as info:
        activate(ctrl, pid, "r1", 0)
    assert info.value.fields.get("outcome") == "unknown"
    assert proxy.fired == [(fault, b"EVALSHA")]


@pytest.mark.parametrize("fault", [Fault.DROP_REPLY, Fault.STALL_REPLY])
def test_commit_with_lost_reply_is_resynchronised_before_anything_else(
    proxy: FaultProxy, via_proxy: redis.Redis, rclient: redis.Redis, fault: Fault
) -> None:
    pid, config = f"svit://test/{unique('lost')}", StoreConfig(prefix=unique("f"))
    ctrl = new_controller(via_proxy, pid, 1, config, create=True)
    _lost_reply(proxy, ctrl, pid, fault)
    head = new_controller(rclient, pid, 1, config, create=False).process
    assert head.version == 1  # the entry was written: the outcome was "committed"

    # A read after the unknown outcome already sees the durable head.
    assert ctrl.read_versioned("/memory/count") == (1, 1)

    retry = activate(ctrl, pid, "r1", 0)  # same request id: replays the receipt
    assert retry.replayed and retry.outcome.status == "committed"
    assert retry.outcome.activation.version == 1

    nxt = activate(ctrl, pid, "r2", 1)
    assert nxt.outcome.status == "committed", nxt.outcome
    assert nxt.outcome.activation.version == 2
    assert ctrl.observe()[0] == 2

    stale = activate(ctrl, pid, "r3", 0)  # a conflict names the real version
    assert stale.outcome.status == "conflict"
    assert stale.outcome.actual_version == 2


def test_conflict_after_lost_reply_names_the_durable_version(
    proxy: FaultProxy, via_proxy: redis.Redis, rclient: redis.Redis
) -> None:
    """The first decision after the unknown outcome is a conflict: it must not be
    decided (and stored as a receipt) against the stale in-memory version 0."""
    pid, config = f"svit://test/{unique('lost')}", StoreConfig(prefix=unique("f"))
    ctrl = new_controller(via_proxy, pid, 1, config, create=True)
    _lost_reply(proxy, ctrl, pid, Fault.DROP_REPLY)
    stale = activate(ctrl, pid, "r9", 5, client="c2")
    assert stale.outcome.status == "conflict"
    assert stale.outcome.actual_version == 1
    again = activate(ctrl, pid, "r9", 5, client="c2")
    assert again.replayed and again.outcome == stale.outcome


def test_own_write_that_lands_late_is_resynchronised_not_fenced(
    rclient: redis.Redis,
) -> None:
    """A commit of this owner that lands after its caller gave up (a delayed
    request; here written through a second backend with the same token) moves
    the durable head under the controller. Its next commit must re-synchronise
    and evaluate again (committing the next version), not fence the owner."""
    pid, config = f"svit://test/{unique('late')}", StoreConfig(prefix=unique("f"))
    ctrl = new_controller(rclient, pid, 7, config, create=True)
    twin = new_controller(rclient, pid, 7, config, create=False)  # same owner, same token
    landed = activate(twin, pid, "r1", 0)
    assert landed.outcome.status == "committed"
    # The controller still holds v0: r2 evaluates at v0, its commit finds the
    # head at v1, and after re-synchronising r2 is a conflict at the real v1.
    raced = activate(ctrl, pid, "r2", 0, client="c2")
    assert raced.outcome.status == "conflict", raced.outcome
    assert raced.outcome.actual_version == 1
    nxt = activate(ctrl, pid, "r3", 1)
    assert nxt.outcome.status == "committed", nxt.outcome
    assert nxt.outcome.activation.version == 2
    retry = activate(ctrl, pid, "r1", 0)
    assert retry.replayed and retry.outcome == landed.outcome
    assert ctrl.observe()[0] == 2
