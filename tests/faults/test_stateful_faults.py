"""Stateful fault injection: a controller over real Redis and etcd.

A Hypothesis :class:`RuleBasedStateMachine` drives one counter process
(``+1`` per activation, recording the request id in ``/memory/last``) through
a fault-injecting proxy (``tests/faults/_proxy.py``) in front of a dedicated
redis-server (``appendfsync always``), with ownership claimed on a real etcd.
Rules: activate (a client retries a request whose outcome was unknown with the
same request id, else sends a new one at the version it knows), activate under
one injected fault (drop request, drop reply, stall reply until the client
times out, delay -- 0.8 s is past the client's 0.5 s timeout, so the request
lands after its caller gave up --, error reply; on the commit script or on whatever command
comes next), read, reset every connection, owner change (release, the other
host acquires a higher token, restores; the old controller must be fenced),
redis-server kill -9 and restart (data kept), and receipt eviction (another
client's commits past ``max_receipts``).

Checked after every step against a simple model and the log itself (read
directly from Redis, not through the proxy):

* no acknowledged commit is lost (the durable head is at least the highest
  acknowledged version, and each acknowledged version holds its request id);
* no request id is committed at two versions, and the counter equals the
  version (each version applied exactly one ``+1``);
* no stale read: a read or conflict after an acknowledged commit never names
  an older version;
* every stored receipt agrees with the log (a committed receipt's version holds
  its request id and root hash; a conflict receipt names a version that existed
  with that root hash).

The negative controls switch the case-1 re-synchronisation off
(``ProcessController._resync`` becomes a no-op) and show that the checks fail:
once on a fixed rule sequence, once by letting Hypothesis search.
"""

from __future__ import annotations

import asyncio
import functools
import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, cast

import hypothesis.strategies as st
import pytest
import redis
from hypothesis import HealthCheck, Phase, settings
from hypothesis.errors import Flaky
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from svit_cluster.control import ControlResponse, ProcessController, decode_request
from svit_cluster.errors import FencedError, UnavailableError
from svit_cluster.local import EtcdServer, RedisServer
from svit_cluster.ownership import HostLease, Owners, Ownership, open_client
from svit_cluster.process import Process, Transaction, encode_value
from svit_cluster.store import RedisBackend, StoreConfig, connect
from tests._support import unique
from tests.conftest import running
from tests.faults._proxy import Fault, FaultProxy
from tests.faults._support import any_command, is_commit

pytestmark = pytest.mark.servers

T = TypeVar("T")

RECORDING_COUNTER = """(define (main input)
  (let ((count (+ (read "/memory/count") 1)))
    (do
      (write "/memory/count" count)
      (write "/memory/last" (value-get input "/rid"))
      (value-map "count" count))))
"""
MAX_RECEIPTS = 4
CLIENT_TIMEOUT_S = 0.5
#: Every model violation, in the order found (Hypothesis re-runs a failing
#: example to report it; the negative control reads the first one from here).
VIOLATIONS: list[str] = []
F = TypeVar("F", bound=Callable[..., None])


def recorded(fn: F) -> F:
    """Record an ``AssertionError`` raised by a rule or invariant in :data:`VIOLATIONS`."""
    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> None:
        try:
            fn(*args, **kwargs)
        except AssertionError as exc:
            VIOLATIONS.append(str(exc).splitlines()[0] if str(exc) else fn.__name__)
            raise

    return cast(F, run)


#: What the runs exercised (rule names, faults fired, outcomes); checked for coverage.
STATS: Counter[str] = Counter()
FAULTS = [Fault.DROP_REQUEST, Fault.DROP_REPLY, Fault.STALL_REPLY, Fault.DELAY,
          Fault.ERROR_REPLY]


class _Loop:
    """An asyncio loop in a thread, for the etcd client and host leases."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=30)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()


@dataclass
class World:
    """Servers, proxy, clients and host leases shared by every example of one test."""

    redis_server: RedisServer
    proxy: FaultProxy
    via_proxy: redis.Redis
    direct: redis.Redis
    loop: _Loop
    hosts: list[Owners] = field(default_factory=list)


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A dedicated redis-server (``appendfsync always``) this test kills and restarts.

    Started without the die-with-parent hook: that hook runs Python in the
    forked child, and a fork taken while the etcd client's gRPC threads run
    sometimes killed the restarted server before it served a request. Without
    it the child is spawned without running Python code. Stopped by its PID at
    teardown, like every server fixture.
    """
    server = RedisServer(tmp_path / "redis-sm", appendfsync="always", die_with_parent=False)
    with running(server):
        yield server


@pytest.fixture
def world(own_redis: RedisServer, etcd_server: EtcdServer) -> Iterator[World]:
    fresh_redis = own_redis
    proxy = FaultProxy(fresh_redis.port)
    via_proxy = connect(proxy.url, timeout_s=CLIENT_TIMEOUT_S)
    direct = connect(fresh_redis.url, timeout_s=10)
    loop = _Loop()
    leases: list[HostLease] = []
    clients: list[Any] = []

    async def grant(name: str, cluster: str) -> Owners:
        client = open_client(etcd_server.endpoint, request_timeout_s=2.0)
        clients.append(client)
        lease = HostLease(client, ttl_s=30, safety_margin_s=1.0)
        leases.append(lease)
        await lease.grant()
        return Owners(lease, cluster=cluster, host=name)

    cluster = unique("faults")
    w = World(fresh_redis, proxy, via_proxy, direct, loop)
    try:
        w.hosts = [loop.run(grant("a", cluster)), loop.run(grant("b", cluster))]
        yield w
    finally:
        async def close_all() -> None:
            for lease in leases:
                await lease.close()
            for client in clients:
                await client.close()

        try:
            loop.run(close_all())
        finally:
            loop.close()
            via_proxy.close()
            direct.close()
            proxy.close()


def _tagged(rid: str) -> dict[str, Any]:
    return encode_value({"rid": rid})


class FaultMachine(RuleBasedStateMachine):
    """See the module docstring. ``world`` is set by the test before running."""

    world: World

    def __init__(self) -> None:
        super().__init__()
        self.pid = f"svit://test/{unique('sm')}"
        self.config = StoreConfig(prefix=unique("sm"), max_receipts=MAX_RECEIPTS,
                                  snapshot_every=5, trim_margin=10_000)
        self.host = 0
        self.ownership: Ownership | None = None
        self.ctrl: ProcessController | None = None
        self.rids = 0
        # the model
        self.acked = 0  # highest version of an acknowledged commit
        self.known = 0  # highest version the client has been told about
        self.committed: dict[str, int] = {}  # acknowledged request id -> version
        #: (request id, expected version, version known when first sent) of the
        #: request whose outcome is unknown; the client retries it first.
        self.pending: tuple[str, int, int] | None = None

    # -- plumbing --------------------------------------------------------------------

    def _claim(self, *, create: bool) -> None:
        w = self.world
        owners = w.hosts[self.host]
        self.ownership = w.loop.run(owners.acquire(self.pid))
        backend = RedisBackend(w.via_proxy, self.pid, self.ownership.token, self.config)
        for attempt in range(20):  # ordinary retries of a safe, read-only start-up
            try:
                backend.claim()
                if create:
                    backend.create(Process.create(
                        self.pid, memory={"count": 0, "last": ""},
                        scripts={"counter": RECORDING_COUNTER}))
                    proc: Process | None = backend.restore()
                else:
                    proc = backend.restore()
                break
            except UnavailableError as exc:
                if attempt == 19:
                    raise AssertionError(  # the harness broke, not the controller
                        f"cannot claim through the proxy: redis running="
                        f"{w.redis_server.running}, upstream connect failures "
                        f"{w.proxy.upstream_failures}, redis log tail "
                        f"{w.redis_server.log_path.read_text()[-600:]!r}") from exc
                time.sleep(0.05)
        assert proc is not None
        self.ctrl = ProcessController(proc, backend)

    def _request(self, ctrl: ProcessController, rid: str, expected: int,
                 client: str = "c1") -> ControlResponse:
        return ctrl.execute(decode_request({
            "protocol": "svit-control@1", "client_id": client, "request_id": rid,
            "process_id": self.pid, "expected_version": expected,
            "command": {"operation": "activate", "script": "counter",
                        "input": _tagged(rid)}}))

    def _activate(self, client: str = "c1") -> None:
        assert self.ctrl is not None
        if client == "c1" and self.pending is not None:
            rid, expected, known_then = self.pending
        else:
            self.rids += 1
            rid, expected, known_then = f"{client}-r{self.rids}", self.known, self.known
        try:
            resp = self._request(self.ctrl, rid, expected, client)
        except UnavailableError:
            STATS["unknown outcome"] += 1
            if client == "c1":
                self.pending = (rid, expected, known_then)
                return
            raise
        if client == "c1":
            self.pending = None
        self._observe(rid, expected, known_then, resp)

    def _observe(self, rid: str, expected: int, known_then: int, resp: ControlResponse
                 ) -> None:
        out = resp.outcome
        STATS[f"{out.status}{' (replayed)' if resp.replayed else ''}"] += 1
        if out.status == "committed":
            version = out.activation.version
            assert version == expected + 1, f"{rid} committed v{version} from v{expected}"
            if not resp.replayed:
                assert version > self.known, (
                    f"fresh commit of {rid} at v{version}, but v{self.known} was already known")
            assert self.committed.get(rid, version) == version, f"{rid} committed twice"
            assert version not in self.committed.values() or self.committed.get(rid) == version, (
                f"v{version} acknowledged for two requests")
            self.committed[rid] = version
            self.acked = max(self.acked, version)
            self.known = max(self.known, version)
        elif out.status == "conflict":
            # decided no earlier than the first send of the request
            floor = known_then if resp.replayed else self.known
            assert out.actual_version >= floor, (
                f"stale conflict for {rid}: actual v{out.actual_version} < known v{floor}")
            assert out.actual_version != out.expected_version
            self.known = max(self.known, out.actual_version)
        else:
            raise AssertionError(f"unexpected outcome {out}")

    # -- rules -------------------------------------------------------------------------

    @initialize()
    def start(self) -> None:
        self._claim(create=True)

    @rule()
    @recorded
    def activate(self) -> None:
        self._activate()

    @rule(fault=st.sampled_from(FAULTS), on_commit=st.sampled_from([True, True, False]),
          delay_s=st.sampled_from([0.02, 0.1, 0.8]))
    @recorded
    def activate_with_fault(self, fault: Fault, on_commit: bool, delay_s: float) -> None:
        w = self.world
        w.proxy.arm(fault, is_commit if on_commit else any_command, delay_s=delay_s)
        try:
            self._activate()
        finally:
            if not w.proxy.disarm():
                STATS[f"fired {fault.value}{' on commit' if on_commit else ''}"] += 1

    @rule()
    @recorded
    def read(self) -> None:
        assert self.ctrl is not None
        try:
            count, version = self.ctrl.read_versioned("/memory/count")
        except UnavailableError:
            return
        assert version >= self.known, f"stale read: v{version} after v{self.known} was known"
        assert count == version
        self.known = max(self.known, version)

    @rule()
    def reset_connections(self) -> None:
        STATS["reset connections"] += 1
        self.world.proxy.reset_all()

    @rule()
    def restart_redis(self) -> None:
        STATS["redis restart"] += 1
        self.world.redis_server.kill9()  # appendfsync always: acknowledged writes survive
        self.world.redis_server.start()

    @rule()
    @recorded
    def evict_receipts(self) -> None:
        STATS["receipt eviction"] += 1
        for _ in range(MAX_RECEIPTS):
            self._activate(client="c2")

    @rule()
    @recorded
    def owner_change(self) -> None:
        w = self.world
        old_ctrl, old = self.ctrl, self.ownership
        assert old_ctrl is not None and old is not None
        assert w.loop.run(w.hosts[self.host].release(old))
        self.host = 1 - self.host
        self._claim(create=False)
        assert self.ownership is not None and self.ownership.token > old.token
        STATS["owner change"] += 1
        self.rids += 1
        with pytest.raises(FencedError):  # the old owner can no longer commit
            for _ in range(5):
                try:
                    self._request(old_ctrl, f"zombie-r{self.rids}", self.known, "zombie")
                except UnavailableError:
                    continue

    # -- invariants (read directly from Redis) --------------------------------------------

    @invariant()
    @recorded
    def log_agrees_with_model(self) -> None:
        if self.ctrl is None:
            return
        # Read receipts, then entries, then the restored head: a write landing
        # meanwhile (a delayed request) only adds to what was read before.
        backend = RedisBackend(self.world.direct, self.pid, 1, self.config)
        receipts = [json.loads(cast(bytes, raw).partition(b"\n")[2])  # "<fingerprint>\n<json>"
                    for raw in self.world.direct.hvals(backend.keys.receipts)]
        entries = backend.entries()
        proc = backend.restore()  # verifies snapshot, chain and head
        assert proc is not None
        head = proc.version
        assert head >= self.acked, f"acknowledged v{self.acked} lost (head v{head})"
        assert proc.read("/memory/count") == head, "a version applied other than one +1"
        rid_at: dict[int, str] = {}
        root_at: dict[int, str] = {}
        for entry in entries:
            record = Transaction.decode(entry.record)
            rid_at[entry.version] = next(str(m.value) for m in record.mutations
                                         if m.path == "/memory/last")
            root_at[entry.version] = record.resulting_root_hash
        seen: dict[str, int] = {}
        for version, rid in rid_at.items():
            assert rid not in seen, f"{rid} committed at v{seen[rid]} and v{version}"
            seen[rid] = version
        for rid, version in self.committed.items():
            assert rid_at.get(version) == rid, f"acknowledged {rid}@v{version} not in the log"
        for doc in receipts:
            self._receipt_agrees(doc, rid_at, root_at, max(head, max(rid_at, default=0)))

    @staticmethod
    def _receipt_agrees(doc: dict[str, Any], rid_at: dict[int, str], root_at: dict[int, str],
                        head: int) -> None:
        out = doc.get("outcome", {})
        if out.get("status") == "committed":
            version = out["activation"]["version"]
            assert rid_at.get(version) == doc["request_id"], (
                f"receipt says {doc['request_id']}@v{version}, log has {rid_at.get(version)}")
            assert root_at[version] == out["activation"]["root_hash"]
        elif out.get("status") == "conflict":
            actual = out["actual_version"]
            assert actual <= head, f"conflict receipt names v{actual} beyond the head"
            if root_at.get(actual):
                assert root_at[actual] == out["root_hash"], f"conflict receipt v{actual} root"

    def teardown(self) -> None:
        w = self.world
        w.proxy.disarm()
        if self.ownership is not None:
            try:
                w.loop.run(w.hosts[self.host].release(self.ownership))
            except Exception:
                pass


SETTINGS = settings(
    max_examples=20,
    stateful_step_count=25,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)


def test_controller_survives_injected_faults(world: World) -> None:
    FaultMachine.world = world
    STATS.clear()
    VIOLATIONS.clear()
    try:
        run_state_machine_as_test(FaultMachine, settings=SETTINGS)
    except BaseException:
        print("first violation:", VIOLATIONS[:1])
        raise
    print("stateful fault run:", dict(sorted(STATS.items())))
    # not vacuous: outcomes were lost and retried, owners changed, Redis restarted
    for needed in ("fired drop_reply on commit", "fired stall_reply on commit",
                   "unknown outcome", "committed (replayed)", "owner change", "redis restart",
                   "receipt eviction"):
        assert STATS[needed] > 0, f"the run never exercised {needed!r}: {dict(STATS)}"


def _no_resync(self: ProcessController) -> None:
    """The case-1 fix switched off: the stale in-memory process is served as is."""


def test_negative_control_fixed_sequence_catches_missing_resync(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    FaultMachine.world = world
    machine = FaultMachine()
    try:
        machine.start()
        machine.activate_with_fault(Fault.DROP_REPLY, True, 0.0)  # v1 written, reply lost
        machine.log_agrees_with_model()
        machine.activate()  # the retry replays "committed v1"
        machine.log_agrees_with_model()
        monkeypatch.setattr(ProcessController, "_resync", _no_resync)
        other = FaultMachine()  # the same sequence with the fix switched off
        try:
            other.start()
            other.activate_with_fault(Fault.DROP_REPLY, True, 0.0)
            other.activate()
            with pytest.raises(AssertionError, match="stale conflict"):
                other.activate()  # expected_version 1: decided against v0 in memory
        finally:
            other.teardown()
        monkeypatch.undo()
        machine.activate()  # with the fix: commits v2
        machine.log_agrees_with_model()
        assert machine.acked == 2
    finally:
        machine.teardown()


def test_negative_control_search_finds_missing_resync(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ProcessController, "_resync", _no_resync)
    FaultMachine.world = world
    search = settings(SETTINGS, phases=[Phase.explicit, Phase.generate])  # no shrinking
    VIOLATIONS.clear()
    # A failure is reported as AssertionError, or as Flaky when the re-run for the
    # report (timeouts, late landings) takes another path: the violation is what counts.
    with pytest.raises((AssertionError, Flaky)):
        run_state_machine_as_test(FaultMachine, settings=search)
    assert VIOLATIONS, "the search found no violation with the re-synchronisation off"
    print("negative control found:", VIOLATIONS[0])
    assert any("stale" in v or "lost" in v or "committed twice" in v for v in VIOLATIONS)

