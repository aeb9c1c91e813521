"""One round trip to Redis per activation (real Redis, single and cluster).

The owner loads its receipts when it claims and answers duplicates from memory;
the receipt write stays inside the commit script. Round trips are counted on
the client's connections (every packed send is one request/response exchange;
a pipeline is one send), health-check ``PING``\\s excluded.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import redis.connection

from svit_cluster.control import ProcessController, decode_request
from svit_cluster.control._wire import ControlResponse
from svit_cluster.errors import FencedError
from svit_cluster.process import Process
from svit_cluster.store import RedisBackend, StoreConfig
from svit_cluster.store._redis import RedisClient
from tests.control._support import COUNTER, dumps, request

pytestmark = pytest.mark.servers


class _Sends:
    """Counts the commands each packed send carries (one send = one round trip)."""

    def __init__(self) -> None:
        self.sends: list[list[str]] = []


@contextmanager
def counting(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Sends]:
    """Record every round trip any redis-py connection makes inside the block."""
    seen = _Sends()
    original = redis.connection.AbstractConnection.send_packed_command

    def send(self: Any, command: Any, check_health: bool = True) -> None:
        raw = command if isinstance(command, bytes) else b"".join(
            bytes(part) for part in command)
        names = [line.decode(errors="replace").upper() for line in raw.split(b"\r\n")
                 if line.upper() in {b"EVALSHA", b"EVAL", b"HGET", b"HGETALL", b"GET",
                                     b"WAIT", b"XADD", b"XRANGE", b"MULTI", b"PING",
                                     b"SCRIPT", b"XREVRANGE", b"LRANGE"}]
        if names != ["PING"]:
            seen.sends.append(names)
        original(self, command, check_health)

    monkeypatch.setattr(redis.connection.AbstractConnection, "send_packed_command", send)
    try:
        yield seen
    finally:
        monkeypatch.setattr(redis.connection.AbstractConnection, "send_packed_command",
                            original)


def _owner(client: RedisClient, pid: str, token: int, config: StoreConfig, *,
           create: bool = False) -> ProcessController:
    backend = RedisBackend(client, pid, token, config)
    backend.claim()
    if create:
        proc = Process.create(pid, memory={"count": 0}, scripts={"counter": COUNTER})
        backend.create(proc)
    else:
        restored = backend.restore()
        assert restored is not None
        proc = restored
    return ProcessController(proc, backend, token=token)


def _activate(ctrl: ProcessController, pid: str, rid: str, version: int,
              by: int = 1) -> ControlResponse:
    req = decode_request(dumps(request(rid=rid, version=version, pid=pid, by=by)))
    return ctrl.execute(req, tenant="tenant-a")


def test_activation_is_one_round_trip_and_a_duplicate_none(
        rclient: RedisClient, config: StoreConfig, pid: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    ctrl = _owner(rclient, pid, 1, config, create=True)
    # Load the scripts first (the first EVALSHA of each answers NOSCRIPT).
    assert _activate(ctrl, pid, "warm", 0).outcome.status == "committed"
    assert _activate(ctrl, pid, "warm-conflict", 0).outcome.status == "conflict"
    with counting(monkeypatch) as seen:
        fresh = _activate(ctrl, pid, "r1", 1)
    assert fresh.outcome.status == "committed"
    assert seen.sends == [["EVALSHA"]], seen.sends  # the commit script, nothing else
    with counting(monkeypatch) as seen:
        again = _activate(ctrl, pid, "r1", 1)
    assert again.replayed and again.outcome == fresh.outcome
    assert seen.sends == []  # answered from the receipts in memory
    with counting(monkeypatch) as seen:
        stale = _activate(ctrl, pid, "r2", 0)
    assert stale.outcome.status == "conflict"
    assert seen.sends == [["EVALSHA"]], seen.sends  # the conflict receipt's script only


def test_duplicate_after_restart_is_answered_from_the_receipt_loaded_on_claim(
        rclient: RedisClient, config: StoreConfig, pid: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    first = _owner(rclient, pid, 1, config, create=True)
    committed = _activate(first, pid, "r1", 0)
    conflicted = _activate(first, pid, "r2", 7)
    assert (committed.outcome.status, conflicted.outcome.status) == ("committed", "conflict")

    restarted = _owner(rclient, pid, 2, config)  # a new owner: claim loads the receipts
    with counting(monkeypatch) as seen:
        replay1 = _activate(restarted, pid, "r1", 0)
        replay2 = _activate(restarted, pid, "r2", 7)
    assert seen.sends == []
    assert replay1.replayed and replay1.outcome == committed.outcome
    assert replay2.replayed and replay2.outcome == conflicted.outcome
    # A different request under a used id is still refused from memory.
    reused = _activate(restarted, pid, "r1", 0, by=5)
    assert reused.outcome.status == "rejected"
    assert reused.outcome.failure.code == "request_id_reused"
    assert restarted.process.version == 1


def test_receipts_in_memory_follow_fifo_eviction_like_redis(
        rclient: RedisClient, pid: str) -> None:
    config = StoreConfig(prefix=f"t-evict-{pid.rsplit('/', 1)[-1]}", max_receipts=2)
    ctrl = _owner(rclient, pid, 1, config, create=True)
    for version, rid in enumerate(["a", "b", "c"]):
        assert _activate(ctrl, pid, rid, version).outcome.status == "committed"
    backend = ctrl.backend
    assert isinstance(backend, RedisBackend)
    in_memory = [backend.get_receipt("tenant-a", "agent-a", rid) is not None
                 for rid in ["a", "b", "c"]]
    reloaded = RedisBackend(rclient, pid, 1, config)
    reloaded.claim()
    in_redis = [reloaded.get_receipt("tenant-a", "agent-a", rid) is not None
                for rid in ["a", "b", "c"]]
    assert in_memory == in_redis == [False, True, True]


def test_stale_owner_with_receipts_in_memory_can_neither_commit_nor_answer(
        rclient: RedisClient, config: StoreConfig, pid: str) -> None:
    old = _owner(rclient, pid, 1, config, create=True)
    mine = _activate(old, pid, "r1", 0)
    assert mine.outcome.status == "committed"

    new = _owner(rclient, pid, 2, config)  # fences the old owner out
    theirs = _activate(new, pid, "r2", 1)
    assert theirs.outcome.status == "committed"

    # The old owner never saw r2: it may not evaluate it as fresh (its commit is fenced).
    with pytest.raises(FencedError):
        _activate(old, pid, "r2", 1)
    # Once fenced, it answers nothing from memory, not even its own receipt.
    with pytest.raises(FencedError):
        _activate(old, pid, "r1", 0)
    with pytest.raises(FencedError):
        _activate(old, pid, "r3", 1)
    assert new.process.version == 2
    assert _activate(new, pid, "r1", 0).replayed  # the new owner loaded r1 on its claim
