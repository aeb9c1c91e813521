"""svit-transaction@1 records: one per commit, strict decode, replay without guest code."""

from __future__ import annotations

import dataclasses
import json
import random
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from svit_cluster.errors import CorruptData, ErrorCode, InvalidInput, SvitError
from svit_cluster.lisp import Program
from svit_cluster.process import (
    GENESIS_HASH,
    TRANSACTION_FORMAT,
    Mutation,
    Process,
    Script,
    Transaction,
)
from tests._host import Host

from .strategies import PROPS, dumps, flip_json, nested_json, state, values


def sample_history() -> tuple[bytes, Process, list[Transaction]]:
    p = Process.create("svit://t", memory={"a": {"b": 1}})
    base = p.snapshot()
    host = Host(p)  # the records come from the real commit path
    host.write("/memory/x", [1, 2.0, "three"])
    host.write("/lib/tool", Script("(defn main (input) input)", "echo"))
    host.remove("/memory/a/b")
    host.inbox_append({"from": "svit://peer", "n": 1})
    host.inbox_ack(p.inbox_head_hash())  # type: ignore[arg-type]
    return base, p, host.records


def test_every_commit_yields_one_record_with_the_design_fields() -> None:
    _, p, log = sample_history()
    assert len(log) == p.version == 5
    assert [r.source for r in log] == ["host.write", "host.write", "host.remove",
                                       "inbox.append", "inbox.ack"]
    assert [[m.op for m in r.mutations] for r in log] == [
        ["set"], ["set"], ["remove"], ["append"], ["remove_front"]]
    prev = GENESIS_HASH
    for i, r in enumerate(log, start=1):
        doc = json.loads(r.encode())
        assert set(doc) == {"format", "address", "position", "previous_hash",
                            "process_version_before", "process_version_after", "mutations",
                            "touched_paths", "source", "resulting_root_hash", "event_hash"}
        assert doc["format"] == TRANSACTION_FORMAT == "svit-cluster-transaction@1"
        assert r.address == "svit://t" and r.position == i
        assert r.process_version_before == i - 1 and r.process_version_after == i
        assert r.previous_hash == prev
        assert r.touched_paths == tuple(sorted({m.path for m in r.mutations}))
        prev = r.event_hash
    assert log[-1].event_hash == p.chain_head and log[-1].resulting_root_hash == p.root_hash
    assert json.loads(log[0].encode())["mutations"] == [
        {"op": "set", "path": "/memory/x", "value": {"type": "array", "value": [
            {"type": "integer", "value": 1}, {"type": "number", "value": 2.0},
            {"type": "string", "value": "three"}]}}]
    assert json.loads(log[4].encode())["mutations"] == [{"op": "remove_front", "path": "/inbox"}]


def test_records_decode_to_equal_records_and_encode_canonically() -> None:
    _, _, log = sample_history()
    for r in log:
        raw = r.encode()
        again = Transaction.decode(raw)
        assert again == r and again.encode() == raw
        assert Transaction.decode(raw.decode() + " \n") == r  # trailing whitespace is fine


def test_replay_from_the_base_recreates_the_exact_state_without_guest_code(
        monkeypatch: pytest.MonkeyPatch) -> None:
    base, live, log = sample_history()
    # an activation record: the script source is not valid Lisp, and replay never runs it
    wc = live.working_copy()
    wc.write("/memory/out", {"by": "activation"})
    wc.append("/system/outbox", {"id": "svit://t:6:0", "to": "svit://peer", "body": 1})
    sealed = live.seal(wc, "activation")
    live.commit(sealed)
    log = [*log, Transaction.decode(sealed.record.encode())]
    assert log[-1].source == "activation"

    def no_guest_code(*_: object) -> None:
        raise AssertionError("replay ran guest code")

    monkeypatch.setattr(Program, "run_main", no_guest_code)
    restored = Process.restore(base)
    assert restored.replay(log) == 6
    assert restored.root_hash == live.root_hash and restored.version == live.version == 6
    assert restored.chain_head == live.chain_head and restored.position == 6
    assert restored.snapshot() == live.snapshot()


def _forge(r: Transaction, **changes: Any) -> Transaction:
    """Re-seal ``r`` with changed fields, so its event_hash is valid again."""
    fields: dict[str, Any] = {
        "address": r.address, "position": r.position, "previous_hash": r.previous_hash,
        "version_before": r.process_version_before, "mutations": r.mutations,
        "touched_paths": r.touched_paths, "source": r.source,
        "resulting_root_hash": r.resulting_root_hash,
    }
    fields.update(changes)
    return Transaction.seal(**fields)


@pytest.mark.parametrize(
    ("index", "forge", "needle"),
    [
        (1, lambda r: _forge(r, previous_hash="a" * 64), "hash chain"),
        (1, lambda r: _forge(r, version_before=r.process_version_before + 1), "version step"),
        (1, lambda r: dataclasses.replace(r, process_version_after=r.process_version_after + 1),
         "version step"),
        (1, lambda r: _forge(r, resulting_root_hash="b" * 64), "root hash"),
        (1, lambda r: _forge(r, position=r.position + 1), "position"),
        (1, lambda r: _forge(r, address="svit://other"), "another process"),
        (1, lambda r: dataclasses.replace(r, event_hash="c" * 64), "event_hash"),
        (1, lambda r: _forge(r, touched_paths=()), "touched_paths"),
        (2, lambda r: _forge(r, mutations=(Mutation("remove", "/memory/nope"),),
                             touched_paths=("/memory/nope",)), "does not apply"),
        (0, lambda r: _forge(r, mutations=(Mutation("set", "/system/identity/address", "x"),),
                             touched_paths=("/system/identity/address",)), "not writable"),
        (0, lambda r: _forge(r, mutations=(Mutation("set", "/lib", Script("x")),),
                             touched_paths=("/lib",)), "not writable"),
        (3, lambda r: _forge(r, mutations=(Mutation("append", "/memory", 1),),
                             touched_paths=("/memory",)), "array"),
    ],
)
def test_replay_rejects_a_broken_log_and_leaves_the_process_unchanged(
    index: int, forge: Any, needle: str
) -> None:
    base, _, log = sample_history()
    bad = list(log)
    bad[index] = forge(log[index])
    p = Process.restore(base)
    before = state(p)
    with pytest.raises(CorruptData) as info:
        p.replay(bad)
    assert info.value.code == ErrorCode.CORRUPT_LOG
    assert needle in info.value.message and "svit://t" in info.value.message
    assert len(info.value.message.encode()) <= 1024
    assert state(p) == before  # all or nothing, even when earlier records were fine


def test_replay_rejects_non_records() -> None:
    base, _, log = sample_history()
    p = Process.restore(base)
    before = state(p)
    for junk in ([log[0], log[1].encode()], [None], [log[0].to_json()]):
        with pytest.raises(CorruptData):
            p.replay(junk)  # type: ignore[arg-type]
        assert state(p) == before
    assert p.replay([]) == 0 and state(p) == before


def test_replay_continues_from_a_later_snapshot() -> None:
    p = Process.create("svit://t")
    host = Host(p)
    host.write("/memory/a", 1)
    host.write("/memory/b", 2)
    mid = p.snapshot()
    host.write("/memory/c", 3)
    host.remove("/memory/a")
    log = host.records
    q = Process.restore(mid, position=2, chain_head=log[1].event_hash)
    assert q.replay(log[2:]) == 2 and q.root_hash == p.root_hash and q.version == 4
    r = Process.restore(mid, position=2, chain_head=log[1].event_hash)
    with pytest.raises(CorruptData):
        r.replay(log[1:])  # a record already contained in the snapshot
    with pytest.raises(CorruptData):
        Process.restore(mid).replay(log[2:])  # wrong chain position


# -- strict decode -------------------------------------------------------------------------


def _record_doc() -> dict[str, Any]:
    _, _, log = sample_history()
    return json.loads(log[0].encode())  # type: ignore[no-any-return]


def _reseal_doc(doc: dict[str, Any]) -> bytes:
    import hashlib

    from svit_cluster.process import canonical_json

    body = {k: v for k, v in doc.items() if k != "event_hash"}
    doc = {**body, "event_hash": hashlib.sha256(canonical_json(body)).hexdigest()}
    return dumps(doc)


BAD_DOCS = [
    ("unknown field", lambda d: {**d, "extra": 1}),
    ("missing field", lambda d: {k: v for k, v in d.items() if k != "source"}),
    ("format", lambda d: {**d, "format": "svit-transaction@2"}),
    ("position type", lambda d: {**d, "position": "1"}),
    ("position negative", lambda d: {**d, "position": -1}),
    ("position bool", lambda d: {**d, "position": True}),
    ("version step +2", lambda d: {**d, "process_version_after": d["process_version_before"] + 2}),
    ("version step 0", lambda d: {**d, "process_version_after": d["process_version_before"]}),
    ("version float", lambda d: {**d, "process_version_before": 0.0}),
    ("hash upper", lambda d: {**d, "previous_hash": "A" * 64}),
    ("hash short", lambda d: {**d, "resulting_root_hash": "a" * 63}),
    ("source empty", lambda d: {**d, "source": ""}),
    ("source oversized", lambda d: {**d, "source": "s" * 4097}),
    ("source list", lambda d: {**d, "source": ["host.write"]}),
    ("address", lambda d: {**d, "address": "http://x"}),
    ("address type", lambda d: {**d, "address": 5}),
    ("mutations type", lambda d: {**d, "mutations": {}}),
    ("op unknown", lambda d: {**d, "mutations": [{"op": "move", "path": "/memory/x"}]}),
    ("op list", lambda d: {**d, "mutations": [{"op": ["set"], "path": "/memory/x"}]}),
    ("op missing value", lambda d: {**d, "mutations": [{"op": "set", "path": "/memory/x"}]}),
    ("remove with value", lambda d: {**d, "mutations": [
        {"op": "remove", "path": "/memory/x", "value": {"type": "null"}}]}),
    ("bad path", lambda d: {**d, "mutations": [{"op": "remove", "path": "memory/x"}],
                            "touched_paths": ["memory/x"]}),
    ("bad value", lambda d: {**d, "mutations": [
        {"op": "set", "path": "/memory/x", "value": {"type": "integer", "value": 1.5}}]}),
    ("touched unsorted", lambda d: {**d, "touched_paths": ["/memory/x", "/memory/a"]}),
    ("touched mismatch", lambda d: {**d, "touched_paths": ["/memory/y"]}),
    ("touched type", lambda d: {**d, "touched_paths": "/memory/x"}),
    ("not an object", lambda d: [d]),
]


@pytest.mark.parametrize(("name", "spoil"), BAD_DOCS, ids=[n for n, _ in BAD_DOCS])
@pytest.mark.parametrize("resealed", [False, True], ids=["raw", "resealed"])
def test_decode_is_strict(name: str, spoil: Any, resealed: bool) -> None:
    doc = _record_doc()
    bad = spoil(doc)
    reseal = resealed and isinstance(bad, dict) and "event_hash" in bad
    raw = _reseal_doc(bad) if reseal else dumps(bad)
    with pytest.raises(InvalidInput) as info:
        Transaction.decode(raw)
    assert info.value.code == ErrorCode.INVALID_TRANSACTION


@pytest.mark.parametrize(
    "raw",
    [b"", b"{", b"null", b"[]", b"\xff\xfe", b'{"a":1,"a":2}', b"NaN",
     nested_json(100_000).encode(), nested_json(100_000, "{}").encode()],
    ids=["empty", "truncated", "null", "array", "bad utf8", "duplicate key", "nan",
         "deep arrays", "deep objects"],
)
def test_decode_rejects_malformed_bytes(raw: bytes) -> None:
    with pytest.raises(InvalidInput) as info:
        Transaction.decode(raw)
    assert info.value.code == ErrorCode.INVALID_TRANSACTION


def test_decode_rejects_trailing_bytes_and_duplicate_fields() -> None:
    raw = sample_history()[2][0].encode()
    for bad in (raw + b"x", raw + b"{}", raw + raw, raw[:-1] + b',"format":"svit-transaction@1"}'):
        with pytest.raises(InvalidInput) as info:
            Transaction.decode(bad)
        assert info.value.code == ErrorCode.INVALID_TRANSACTION


def test_deeply_nested_mutation_value_is_a_typed_error() -> None:
    doc = _record_doc()
    for depth in (200, 100_000):
        deep = '{"type":"array","value":[' * depth + '{"type":"null"}' + "]}" * depth
        text = dumps(doc).decode().replace(
            json.dumps(doc["mutations"][0]["value"], sort_keys=True, separators=(",", ":")), deep)
        with pytest.raises(InvalidInput) as info:
            Transaction.decode(text)
        assert info.value.code == ErrorCode.INVALID_TRANSACTION


# -- properties ---------------------------------------------------------------------------------

KEYS = ["a", "b", "c", "a/x", "arr"]


@st.composite
def operations(draw: st.DrawFn) -> list[tuple[str, Any]]:
    op = st.one_of(
        st.tuples(st.just("write"), st.sampled_from(KEYS), values),
        st.tuples(st.just("remove"), st.sampled_from(KEYS), st.none()),
        st.tuples(st.just("append"), st.none(), values),
        st.tuples(st.just("ack"), st.booleans(), st.none()),
        st.tuples(st.just("bad"), st.sampled_from(["/system/x", "/memory", "/lib/a b",
                                                   "/memory//x"]), st.none()),
        st.tuples(st.just("write_float"), st.sampled_from(KEYS), st.just(float("nan"))),
    )
    return draw(st.lists(op, max_size=25))


@PROPS
@given(operations())
def test_replaying_the_log_of_random_host_operations_reproduces_the_live_state(
    ops: list[tuple[str, Any, Any]],
) -> None:
    p = Process.create("svit://prop", memory={"arr": []})
    base = p.snapshot()
    host = Host(p)
    for kind, arg, value in ops:
        version = p.version
        ok = True
        try:
            if kind in ("write", "write_float"):
                host.write(f"/memory/{arg}", value)
            elif kind == "remove":
                host.remove(f"/memory/{arg}")
            elif kind == "append":
                host.inbox_append(value)
            elif kind == "ack":
                host.inbox_ack(p.inbox_head_hash() if arg else "f" * 64)  # type: ignore[arg-type]
            else:
                host.write(arg, 1)
        except SvitError:
            ok = False
        assert p.version == version + (1 if ok else 0)
        assert len(host.records) == p.version  # failed operations produce no record
    log = host.records
    q = Process.restore(base)
    assert q.replay(Transaction.decode(r.encode()) for r in log) == len(log)
    assert (q.root_hash, q.version, q.chain_head, q.position) == (
        p.root_hash, p.version, p.chain_head, p.position)


@PROPS
@given(st.data())
def test_any_single_flipped_field_of_a_record_is_rejected(data: st.DataObject) -> None:
    base, _, log = sample_history()
    index = data.draw(st.integers(0, len(log) - 1))
    doc = json.loads(log[index].encode())
    field = data.draw(st.sampled_from(sorted(doc)))
    rnd = data.draw(st.randoms(use_true_random=False))
    flipped = {**doc, field: flip_json(doc[field], rnd)}
    assert flipped != doc
    # 1. as stored: the event hash no longer matches (or the record is malformed)
    with pytest.raises(InvalidInput) as info:
        Transaction.decode(dumps(flipped))
    assert info.value.code == ErrorCode.INVALID_TRANSACTION
    # 2. forged with a matching event hash: decode or replay still refuses it
    if field in ("event_hash", "source"):
        return  # event_hash is covered above; source is descriptive metadata only
    p = Process.restore(base)
    before = state(p)
    with pytest.raises(SvitError) as err:
        records = list(log)
        records[index] = Transaction.decode(_reseal_doc(flipped))
        p.replay(records)
    assert err.value.code in (ErrorCode.INVALID_TRANSACTION, ErrorCode.CORRUPT_LOG)
    assert state(p) == before


def test_flip_helper_really_changes_every_field() -> None:
    doc = _record_doc()
    rnd = random.Random(1)
    for field, value in doc.items():
        assert flip_json(value, rnd) != value, field
