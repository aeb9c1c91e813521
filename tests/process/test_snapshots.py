"""Snapshots: strict JSON, restore checks, fork semantics."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from svit_cluster.errors import CorruptData, ErrorCode, InvalidInput
from svit_cluster.process import (
    HARD_MAXIMA,
    MAX_SNAPSHOT_BYTES,
    SNAPSHOT_FORMAT,
    Limits,
    Process,
    Script,
    canonical_json,
)
from tests._host import Host

from .strategies import PROPS, digests, dumps, flip_json, nested_json, state


def sample() -> Process:
    p = Process.create("svit://s", memory={"a": {"b": [1, 2.5, "x", None, True]}},
                       scripts={"count": Script("(defn main (input) 1)", "doc")},
                       limits=Limits(max_fuel=12345))
    p.write("/memory/c", {"d": -1})
    p.inbox_append({"hello": "world"})
    return p


def doc_of(p: Process) -> dict[str, Any]:
    return json.loads(p.snapshot())  # type: ignore[no-any-return]


def restore_doc(doc: Any) -> Process:
    return Process.restore(dumps(doc))


def test_snapshot_is_strict_canonical_json_with_exactly_the_design_fields() -> None:
    p = sample()
    raw = p.snapshot()
    doc = json.loads(raw)
    assert set(doc) == {"format", "id", "version", "root", "root_hash", "limits"}
    assert doc["format"] == SNAPSHOT_FORMAT and doc["id"] == "svit://s" and doc["version"] == 2
    assert doc["root_hash"] == p.root_hash and doc["limits"] == p.limits.to_dict()
    assert doc["root"]["type"] == "map"
    assert canonical_json(doc) == raw and p.snapshot() == raw  # deterministic bytes


def test_restore_recreates_the_same_process() -> None:
    p = sample()
    q = Process.restore(p.snapshot())
    assert (q.id, q.version, q.root_hash, q.limits) == (p.id, p.version, p.root_hash, p.limits)
    assert q.snapshot() == p.snapshot()
    assert digests(q.root) == digests(p.root)
    assert q.scripts() == p.scripts() and q.read("/inbox") == p.read("/inbox")
    q.write("/memory/z", 1)  # a restored process keeps working
    assert q.version == 3 and p.version == 2


def test_restore_accepts_bytes_like_input_and_surrounding_whitespace() -> None:
    raw = sample().snapshot()
    for data in (bytearray(raw), memoryview(raw), b"  " + raw + b"\n"):
        assert Process.restore(data).root_hash == sample().root_hash  # type: ignore[arg-type]


def _spoil_root(doc: dict[str, Any], fn: Any) -> dict[str, Any]:
    doc = json.loads(json.dumps(doc))
    fn(doc["root"]["value"])
    return doc


REJECTS = [
    ("unknown format", lambda d: {**d, "format": "svit-snapshot@2"}),
    ("format type", lambda d: {**d, "format": 1}),
    ("missing field", lambda d: {k: v for k, v in d.items() if k != "limits"}),
    ("extra field", lambda d: {**d, "position": 1}),
    ("version negative", lambda d: {**d, "version": -1}),
    ("version bool", lambda d: {**d, "version": True}),
    ("version float", lambda d: {**d, "version": 2.0}),
    ("id invalid", lambda d: {**d, "id": "svit://"}),
    ("id other", lambda d: {**d, "id": "svit://other"}),
    ("limits above hard maximum", lambda d: {**d, "limits": {
        **d["limits"], "max_value_depth": HARD_MAXIMA["max_value_depth"] + 1}}),
    ("limits negative", lambda d: {**d, "limits": {**d["limits"], "max_fuel": -1}}),
    ("limits unknown", lambda d: {**d, "limits": {**d["limits"], "max_magic": 1}}),
    ("limits missing", lambda d: {**d, "limits": {k: v for k, v in d["limits"].items()
                                                  if k != "max_fuel"}}),
    ("limits differ from /system/limits",
     lambda d: {**d, "limits": {**d["limits"], "max_fuel": 1}}),
    ("root hash mismatch", lambda d: {**d, "root_hash": "0" * 64}),
    ("root hash type", lambda d: {**d, "root_hash": None}),
    ("root not a map", lambda d: {**d, "root": {"type": "array", "value": []}}),
    ("root untagged", lambda d: {**d, "root": {}}),
    ("root key missing", lambda d: _spoil_root(d, lambda r: r.pop("thread"))),
    ("root key extra",
     lambda d: _spoil_root(d, lambda r: r.update(extra={"type": "map", "value": {}}))),
    ("memory not a map", lambda d: _spoil_root(d, lambda r: r.update(memory={"type": "null"}))),
    ("inbox not an array",
     lambda d: _spoil_root(d, lambda r: r.update(inbox={"type": "map", "value": {}}))),
    ("script under memory", lambda d: _spoil_root(d, lambda r: r["memory"]["value"].update(
        s={"type": "script", "value": {"source": "x", "documentation": None}}))),
    ("lib entry not a script", lambda d: _spoil_root(d, lambda r: r["lib"]["value"].update(
        t={"type": "integer", "value": 1}))),
    ("lib bad name", lambda d: _spoil_root(d, lambda r: r["lib"]["value"].update(
        {"a b": {"type": "script", "value": {"source": "x", "documentation": None}}}))),
    ("lib wrapper extra key", lambda d: _spoil_root(d, lambda r: r["lib"].update(extra=1))),
    ("address mismatch", lambda d: _spoil_root(
        d, lambda r: r["system"]["value"]["identity"]["value"].update(
            address={"type": "string", "value": "svit://x"}))),
    ("outbox not an array", lambda d: _spoil_root(d, lambda r: r["system"]["value"].update(
        outbox={"type": "null"}))),
    ("malformed value", lambda d: _spoil_root(d, lambda r: r["memory"]["value"].update(
        x={"type": "integer", "value": 1.5}))),
    ("integer out of range", lambda d: _spoil_root(d, lambda r: r["memory"]["value"].update(
        x={"type": "integer", "value": 2**63}))),
]


@pytest.mark.parametrize(("name", "spoil"), REJECTS, ids=[n for n, _ in REJECTS])
def test_restore_rejects(name: str, spoil: Any) -> None:
    with pytest.raises(InvalidInput) as info:
        restore_doc(spoil(doc_of(sample())))
    assert info.value.code == ErrorCode.INVALID_SNAPSHOT
    assert len(info.value.message.encode()) <= 1024


def test_invalid_root_is_reported_before_the_hash() -> None:
    doc = _spoil_root(doc_of(sample()), lambda r: r.pop("thread"))
    doc["root_hash"] = "0" * 64  # both wrong: the structural error wins
    with pytest.raises(InvalidInput) as info:
        restore_doc(doc)
    assert "invalid root" in info.value.message and "hash" not in info.value.message


def test_tampered_root_with_a_valid_shape_fails_the_hash() -> None:
    doc = _spoil_root(doc_of(sample()), lambda r: r["memory"]["value"]["c"]["value"].update(
        d={"type": "integer", "value": 0}))
    with pytest.raises(InvalidInput) as info:
        restore_doc(doc)
    assert "root hash mismatch" in info.value.message


def test_restore_rejects_trailing_bytes_and_duplicates() -> None:
    raw = sample().snapshot()
    for bad in (raw + b"x", raw + b"{}", raw + raw, b"\x00" + raw,
                raw[:-1] + b',"format":"svit-snapshot@1"}'):
        with pytest.raises(InvalidInput) as info:
            Process.restore(bad)
        assert info.value.code == ErrorCode.INVALID_SNAPSHOT


def test_restore_rejects_oversized_input_before_parsing() -> None:
    raw = sample().snapshot()
    assert Process.restore(raw, max_bytes=len(raw)).version == 2
    with pytest.raises(InvalidInput) as info:
        Process.restore(raw, max_bytes=len(raw) - 1)
    assert info.value.code == ErrorCode.INVALID_SNAPSHOT
    assert MAX_SNAPSHOT_BYTES == 128 * 1024 * 1024
    huge = b" " * (MAX_SNAPSHOT_BYTES + 1)
    with pytest.raises(InvalidInput) as info:
        Process.restore(huge)
    assert "larger than" in info.value.message


@pytest.mark.parametrize(
    "raw",
    [b"", b"{", b"null", b"[]", b"\xff", b"NaN", nested_json(100_000).encode(),
     nested_json(100_000, "{}").encode(), None, "text", 5],
    ids=["empty", "truncated", "null", "array", "bad utf8", "nan", "deep arrays", "deep objects",
         "None", "str", "int"],
)
def test_restore_rejects_malformed_input(raw: Any) -> None:
    with pytest.raises(InvalidInput) as info:
        Process.restore(raw)
    assert info.value.code == ErrorCode.INVALID_SNAPSHOT


def test_deeply_nested_root_values_are_typed_errors() -> None:
    doc = doc_of(sample())
    for depth in (40, 300, 100_000):
        deep = '{"type":"array","value":[' * depth + '{"type":"null"}' + "]}" * depth
        anchor = '"c":{"type":"map"'
        text = dumps(doc).decode().replace(anchor, '"deep":' + deep + "," + anchor)
        assert text != dumps(doc).decode()
        with pytest.raises(InvalidInput) as info:
            Process.restore(text.encode())
        assert info.value.code == ErrorCode.INVALID_SNAPSHOT


def test_every_live_process_snapshot_restores_even_at_the_depth_limit() -> None:
    lim = Limits(max_value_depth=6)
    p = Process.create("svit://s", limits=lim)
    p.write("/memory/a", {"b": {"c": {"d": {"e": 1}}}})  # leaf at depth 5 below /memory
    p.write("/memory/a/b/c/d/e", {"f": 1})  # leaf at depth 6: the limit
    with pytest.raises(Exception) as info:
        p.write("/memory/a/b/c/d/e/f", {"g": 1})  # depth 7
    assert info.value.code == ErrorCode.INVALID_VALUE  # type: ignore[attr-defined]
    assert Process.restore(p.snapshot()).root_hash == p.root_hash


# -- fork ------------------------------------------------------------------------------------


def with_outbox(p: Process) -> Process:
    wc = p.working_copy()
    wc.append("/system/outbox", {"id": f"{p.id}:{p.version + 1}:0", "to": "svit://peer", "body": 1})
    p.commit(p.seal(wc, "activation"))
    return p


def test_fork_keeps_the_version_and_state_with_a_new_identity_and_empty_outbox() -> None:
    parent = with_outbox(sample())
    assert parent.read("/system/outbox") != []
    child = parent.fork("svit://s/child")
    assert child.id == "svit://s/child" and child.version == parent.version == 3
    assert child.read("/system/identity") == {"address": "svit://s/child", "authenticated": False}
    assert child.read("/system/lineage") == {"parent": "svit://s"}
    assert child.read("/system/outbox") == []
    assert child.read("/memory") == parent.read("/memory")
    assert child.read("/inbox") == parent.read("/inbox")
    assert child.scripts() == parent.scripts() and child.limits == parent.limits
    assert child.position == 0 and child.chain_head != parent.chain_head
    assert Process.restore(child.snapshot()).root_hash == child.root_hash


def test_fork_shares_no_future_mutations_with_its_parent() -> None:
    parent = sample()
    before_parent = state(parent)
    child = parent.fork("svit://s/child")
    host = Host(child)
    host.write("/memory/a/b/0", "child")
    host.remove("/memory/c")
    host.inbox_ack(child.inbox_head_hash())  # type: ignore[arg-type]
    child_records = host.records
    assert state(parent) == before_parent
    assert parent.read("/memory/a/b/0") == 1 and parent.read("/memory/c") == {"d": -1}
    parent.write("/memory/c", "parent")
    assert child.read("/memory/c") is None
    grandchild = child.fork("svit://s/child/grand")
    assert grandchild.read("/system/lineage/parent") == "svit://s/child"
    # the child's records chain from genesis and replay onto a restored fork point
    assert [r.position for r in child_records] == [1, 2, 3]
    with pytest.raises(CorruptData):
        parent.replay([child_records[0]])


# -- properties --------------------------------------------------------------------------------


@PROPS
@given(st.data())
def test_any_single_flipped_field_of_a_snapshot_is_rejected(data: st.DataObject) -> None:
    p = sample()
    host = Host(p)
    snap = p.snapshot()
    host.write("/memory/tail", 1)  # a tail after the snapshot
    log = host.records
    doc = json.loads(snap)
    field = data.draw(st.sampled_from(sorted(doc)))
    rnd = data.draw(st.randoms(use_true_random=False))
    if field == "root":
        # flip one leaf somewhere in the tree
        leaves: list[dict[str, Any]] = []

        def walk(node: dict[str, Any]) -> None:
            if node["type"] in ("map",):
                for child in node["value"].values():
                    walk(child)
            elif node["type"] == "array":
                for child in node["value"]:
                    walk(child)
            elif node["type"] != "script":
                leaves.append(node)

        walk(doc["root"])
        leaf = data.draw(st.sampled_from(leaves))
        if leaf["type"] == "null":
            leaf["type"], leaf["value"] = "bool", True
        else:
            leaf["value"] = flip_json(leaf["value"], rnd)
    else:
        doc[field] = flip_json(doc[field], rnd)
    flipped = dumps(doc)
    assert flipped != snap
    try:
        q = Process.restore(flipped)
    except InvalidInput as exc:
        assert exc.code == ErrorCode.INVALID_SNAPSHOT
        return
    # only a version flip to another valid integer parses; the log tail catches it
    assert field == "version"
    with pytest.raises(CorruptData):
        q.replay(log)
