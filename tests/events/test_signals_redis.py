"""Signals on Redis: committed with every commit, completion with its ack, fenced events."""

from __future__ import annotations

import pytest
import redis

import svit_cluster.events as events
from svit_cluster.control import ProcessController
from svit_cluster.errors import ConflictError, ErrorCode, FencedError, InvalidInput
from svit_cluster.events import RedisEventLog, SignalKind, fork_events, project_message
from svit_cluster.process import Process, Transition, WorkingCopy, to_plain_json
from svit_cluster.store import RedisBackend, StoreConfig

pytestmark = pytest.mark.servers


def new_log(client: redis.Redis, pid: str, prefix: str, token: int = 1,
            **kw: int) -> tuple[RedisBackend, Process]:
    backend = RedisBackend(client, pid, token, StoreConfig(prefix=prefix, **kw))
    backend.claim()
    proc = Process.create(pid, memory={"count": 0, "gone": 1})
    backend.create(proc)
    return backend, proc


def host_commit(backend: RedisBackend, proc: Process, stage: str, **completion: object) -> None:
    wc = proc.working_copy()
    if stage == "write":
        wc.write("/memory/count", proc.version + 1)
    elif stage == "remove":
        wc.remove("/memory/gone")
    elif stage == "append":
        wc.append("/inbox", "hi")
    elif stage == "ack":
        wc.remove_front("/inbox")
    t = proc.seal(wc, "host." + stage)
    backend.commit(t, completion=dict(completion) if completion else None)
    proc.commit(t)


def test_public_surface_is_pinned() -> None:
    assert sorted(events.__all__) == sorted([
        "DEFAULT_MAX_EVENTS", "DEFAULT_SIGNAL_RETENTION", "EVENT_FORMAT", "MAX_RECENT",
        "ORIGIN", "BoundedFeed", "EventRecord", "Lagged",
        "ReadResult", "RedisEventLog", "RedisSignalSource", "Signal", "SignalKind",
        "SignalHub", "SignalSource", "Window", "change_payload", "cursor_key",
        "fork_events",
        "observe", "parse_cursor", "project_message", "resolve_cursor", "session_for",
        "validate_limit"])
    assert [k.value for k in SignalKind] == [
        "committed", "canonical_event", "message", "completion", "failed"]


def test_every_commit_publishes_one_committed_change_without_values(
    rclient: redis.Redis, pid: str, prefix: str
) -> None:
    backend, proc = new_log(rclient, pid, prefix)
    host_commit(backend, proc, "write")
    host_commit(backend, proc, "remove")
    log = RedisEventLog(rclient, pid, 1, prefix=prefix)
    sigs = log.signals()
    assert [s.kind for s in sigs] == ["committed", "committed"]
    write, remove = (s.data for s in sigs)
    assert write["version"] == 1 and write["paths"] == ["/memory/count"]
    # hashes for the changed path and every ancestor up to the root
    assert set(write["hashes"]) == {"/memory/count", "/memory", "/"}
    assert remove["paths"] == ["/memory/gone"] and remove["hashes"]["/memory/gone"] is None
    assert all(s.token == 1 for s in sigs)
    assert set(write) == {"version", "paths", "hashes"}  # no values: an invalidation


def test_root_hash_in_committed_matches_the_head(rclient: redis.Redis, pid: str,
                                                 prefix: str) -> None:
    backend, proc = new_log(rclient, pid, prefix)
    host_commit(backend, proc, "write")
    (sig,) = RedisEventLog(rclient, pid, 1, prefix=prefix).signals()
    head = backend.head()
    assert head is not None and sig.data["hashes"]["/"] == head.root_hash == proc.root_hash


def test_a_fenced_commit_publishes_nothing(rclient: redis.Redis, pid: str, prefix: str) -> None:
    backend, proc = new_log(rclient, pid, prefix)
    RedisBackend(rclient, pid, 2, StoreConfig(prefix=prefix)).claim()
    with pytest.raises(FencedError):
        host_commit(backend, proc, "write")
    assert RedisEventLog(rclient, pid, 2, prefix=prefix).signals() == []


def test_completion_follows_its_acknowledge_in_the_same_step(
    rclient: redis.Redis, pid: str, prefix: str
) -> None:
    backend, proc = new_log(rclient, pid, prefix)
    host_commit(backend, proc, "append")
    host_commit(backend, proc, "ack", turn=1, response={"role": "assistant", "content": "x"})
    sigs = RedisEventLog(rclient, pid, 1, prefix=prefix).signals()
    assert [s.kind for s in sigs] == ["committed", "committed", "completion"]
    assert sigs[1].data["version"] == 2 and sigs[2].data["turn"] == 1


def test_a_turn_completes_through_the_controller_in_one_fenced_commit(
    rclient: redis.Redis, pid: str, prefix: str
) -> None:
    """The reasoning loop's end of turn is ``ProcessController.complete_turn``
    (one committer): the inbox acknowledge, the host's staged write and
    the completion land together; a wrong head or a fenced owner leaves neither."""
    backend, proc = new_log(rclient, pid, prefix)
    ctrl = ProcessController(proc, backend, token=1)
    ctrl.append_inbox("first")
    ctrl.append_inbox("second")
    head = ctrl.process.inbox_head_hash()
    assert head is not None

    def stage(wc: WorkingCopy) -> None:
        wc.host_set("/thread/session", {"turns": 1})

    def completion(transition: Transition) -> dict[str, object]:
        return {"turn": 1, "version": transition.record.process_version_after}

    with pytest.raises(ConflictError) as wrong:
        ctrl.complete_turn("0" * 64, stage=stage, completion=completion)
    assert wrong.value.code == ErrorCode.INBOX_CONFLICT
    change = ctrl.complete_turn(head, stage=stage, completion=completion)
    assert change.version == ctrl.process.version == 3
    assert to_plain_json(ctrl.process.read("/inbox")) == ["second"]
    assert to_plain_json(ctrl.process.read("/thread/session")) == {"turns": 1}
    sigs = RedisEventLog(rclient, pid, 1, prefix=prefix).signals()
    assert [s.kind for s in sigs] == ["committed"] * 3 + ["completion"]
    assert sigs[-1].data == {"turn": 1, "version": 3}

    RedisBackend(rclient, pid, 2, StoreConfig(prefix=prefix)).claim()  # a newer owner
    with pytest.raises(FencedError):
        ctrl.complete_turn(ctrl.process.inbox_head_hash() or "", stage=stage,
                           completion=completion)
    assert RedisEventLog(rclient, pid, 1, prefix=prefix).signals() == sigs  # none added
    durable = backend.head()
    assert durable is not None and durable.version == 3  # nothing landed


def test_a_new_session_makes_the_previous_sessions_log_expire(
    rclient: redis.Redis, pid: str, prefix: str
) -> None:
    """The event logs a process keeps stay bounded over many sessions: the first
    append of a new session sets a TTL (one day) on the previous session's log;
    the current session's log never expires, even when a session comes back."""
    from svit_cluster.events._model import OLD_SESSION_TTL_S

    new_log(rclient, pid, prefix)
    log = RedisEventLog(rclient, pid, 1, prefix=prefix)
    ev = {"kind": "user", "turn": 1, "session": "s-1", "data": {"content": "hi"}}
    log.append("s-1", [(ev, project_message(ev))])
    assert rclient.ttl(log.keys.events("s-1")) == -1  # the current session: no expiry
    log.append("s-2", [(ev, project_message(ev))])
    assert 0 < rclient.ttl(log.keys.events("s-1")) <= OLD_SESSION_TTL_S
    assert rclient.ttl(log.keys.events("s-2")) == -1
    log.append("s-1", [(ev, project_message(ev))])  # s-1 comes back: current again
    assert rclient.ttl(log.keys.events("s-1")) == -1
    assert 0 < rclient.ttl(log.keys.events("s-2")) <= OLD_SESSION_TTL_S
    assert [r.seq for r in log.recent("s-1", 10)] == [1, 2]  # nothing lost meanwhile


def test_canonical_events_are_fenced_numbered_and_followed_by_their_message(
    rclient: redis.Redis, pid: str, prefix: str
) -> None:
    new_log(rclient, pid, prefix)
    log = RedisEventLog(rclient, pid, 1, prefix=prefix)
    ev = {"kind": "user", "turn": 1, "session": "s-1", "data": {"content": "hi"}}
    assert log.append("s-1", [(ev, project_message(ev))]) == (1, 1)
    assert log.append("s-1", [(ev, project_message(ev))] * 2) == (2, 3)
    sigs = log.signals()
    assert [s.kind for s in sigs] == ["canonical_event", "message"] * 3
    assert [s.data["seq"] for s in sigs] == [1, 1, 2, 2, 3, 3]
    assert sigs[1].data["message"] == project_message(ev)
    # a newer owner claims: the stale token appends nothing
    RedisBackend(rclient, pid, 5, StoreConfig(prefix=prefix)).claim()
    with pytest.raises(FencedError):
        log.append("s-1", [(ev, project_message(ev))])
    with pytest.raises(FencedError):
        log.failed({"code": "x", "message": "y"})
    assert len(log.signals()) == 6 and log.last_seq("s-1") == 3
    newer = RedisEventLog(rclient, pid, 5, prefix=prefix)
    assert newer.append("s-1", [(ev, project_message(ev))]) == (4, 4)
    assert [r.token for r in newer.recent("s-1", 10)] == [1, 1, 1, 5]


def test_recent_is_a_bounded_newest_window(rclient: redis.Redis, pid: str, prefix: str) -> None:
    new_log(rclient, pid, prefix)
    log = RedisEventLog(rclient, pid, 1, prefix=prefix)
    for i in range(10):
        ev = {"kind": "user", "turn": i, "data": {"content": str(i)}}
        log.append("s-1", [(ev, project_message(ev))])
    assert [r.seq for r in log.recent("s-1", 3)] == [8, 9, 10]
    for bad in (0, 4097, "3"):
        with pytest.raises(InvalidInput):
            log.recent("s-1", bad)  # type: ignore[arg-type]


def test_signal_retention_caps_the_stream(rclient: redis.Redis, pid: str, prefix: str) -> None:
    backend, proc = new_log(rclient, pid, prefix, signal_retention=16)
    for _ in range(300):
        host_commit(backend, proc, "write")
    kept = RedisEventLog(rclient, pid, 1, prefix=prefix).signals()
    assert 16 <= len(kept) < 300 and kept[-1].data["version"] == 300
    with pytest.raises(InvalidInput):
        StoreConfig(signal_retention=3)


def test_max_events_caps_each_sessions_event_log(
        rclient: redis.Redis, pid: str, prefix: str) -> None:
    """``MAXLEN ~ max_events``: Redis keeps at most one stream node (100 entries)
    more than the bound; the newest events are the ones kept."""
    new_log(rclient, pid, prefix)
    log = RedisEventLog(rclient, pid, 1, prefix=prefix, max_events=16)
    for batch in range(40):
        items = []
        for i in range(10):
            ev = {"kind": "user", "turn": batch * 10 + i, "data": {"content": "x"}}
            items.append((ev, project_message(ev)))
        log.append("s-1", items)
    kept = rclient.xlen(log.keys.events("s-1"))
    assert 16 <= kept <= 16 + 100 and kept < 400
    assert log.last_seq("s-1") == 400 and log.recent("s-1", 1)[0].seq == 400


def test_store_level_fork_shares_the_immutable_prefix(
    rclient: redis.Redis, pid: str, prefix: str
) -> None:
    new_log(rclient, pid, prefix)
    parent = RedisEventLog(rclient, pid, 1, prefix=prefix)
    for i in range(4):
        ev = {"kind": "user", "turn": i, "data": {"content": str(i)}}
        parent.append("s-parent", [(ev, project_message(ev))])
    child_id = pid + "-child"
    assert fork_events(rclient, pid, child_id, prefix=prefix, upto_seq=3) == 3
    child_session = events.session_for(child_id)
    child = RedisEventLog(rclient, child_id, 7, prefix=prefix)
    assert [r.event for r in child.recent(child_session, 10)] == \
        [r.event for r in parent.recent("s-parent", 10)][:3]
    ev = {"kind": "user", "turn": 9, "data": {"content": "child"}}
    assert child.append(child_session, [(ev, project_message(ev))]) == (4, 4)
    # the parent's history is unchanged; re-running the fork is refused now
    assert parent.last_seq("s-parent") == 4
    with pytest.raises(ConflictError):
        fork_events(rclient, pid, child_id, prefix=prefix, upto_seq=3)


def test_a_forked_history_expires_unless_its_child_is_created(
    rclient: redis.Redis, pid: str, prefix: str
) -> None:
    """A fork that copied the parent's events and then failed, never retried,
    leaves them for at most ``OLD_SESSION_TTL_S``; the child's create keeps them."""
    from svit_cluster.events._model import OLD_SESSION_TTL_S

    new_log(rclient, pid, prefix)
    parent = RedisEventLog(rclient, pid, 1, prefix=prefix)
    ev = {"kind": "user", "turn": 1, "data": {"content": "hi"}}
    parent.append("s-parent", [(ev, project_message(ev))])
    orphan, child_id = pid + "-orphan", pid + "-child"
    for name in (orphan, child_id):
        assert fork_events(rclient, pid, name, prefix=prefix) == 1
    keys = {name: RedisEventLog(rclient, name, 1, prefix=prefix).keys for name in
            (orphan, child_id)}
    for name, k in keys.items():
        session = events.session_for(name)
        for key in (k.session, k.events(session)):
            assert 0 < rclient.ttl(key) <= OLD_SESSION_TTL_S
    backend = RedisBackend(rclient, child_id, 2, StoreConfig(prefix=prefix))
    backend.claim()
    backend.create(Process.create(child_id))
    child = keys[child_id]
    assert rclient.ttl(child.session) == -1
    assert rclient.ttl(child.events(events.session_for(child_id))) == -1
    assert 0 < rclient.ttl(keys[orphan].events(events.session_for(orphan))) \
        <= OLD_SESSION_TTL_S
