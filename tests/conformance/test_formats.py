"""Our record format and hash encoding carry their own names.

The reference's ``svit-transaction@1`` record and its structural value hash
differ from ours (field names, ``append`` payload, ``remove_front``, chain
start, hash tags and length prefixes). Without the reference's code we cannot
build its golden vectors, so ours are named ``svit-cluster-transaction@1`` and
``svit-cluster-hash@1`` (README "Formats", docs/conformance.md). Golden vectors
below pin both, so an accidental change fails here. Records this project wrote
before the rename (``svit-transaction@1``, fixture from commit c0cb931) are
still read, verified and replayed.
"""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

import pytest

from svit_cluster.errors import ErrorCode, InvalidInput
from svit_cluster.process import (
    GENESIS_HASH,
    HASH_SCHEME,
    LEGACY_TRANSACTION_FORMAT,
    TRANSACTION_FORMAT,
    Mutation,
    Process,
    Script,
    Transaction,
)
from svit_cluster.process._tree import ScriptNode, node_from_value
from tests._host import Host

FIXTURES = Path(__file__).parent / "fixtures"

#: value -> svit-cluster-hash@1 hex digest (computed once, pinned).
HASH_VECTORS: list[tuple[str, object, str]] = [
    ("null", None, "1b16b1df538ba12dc3f97edbb85caa7050d46c148134290feba80f8236c83db9"),
    ("true", True, "0ffaac099f9b22205f96928a311ab077b5b9a4fdecc11660663ddf04b19493d5"),
    ("false", False, "1e57b933b0a78203e21d41cc4b16d731b255b04058d48a4ac2731f0089312129"),
    ("integer 7", 7, "c6fdf99115f899812d0a79aab2c54fb7c9ffd8d9133276f9adcd411a78e74699"),
    ("integer min", -(2**63), "04a0d2ad4df0a681a9aa7a191d5d4e1e2e20b788c512ef7978012b608020bf06"),
    ("number 1.5", 1.5, "a96d01ba75a32a1a4602ce3c8727baa494f148bf0522a36be00de6d672eb35f6"),
    ("string", "hé", "ba7b6df659ba0acd1ba80b926ef96f22ca7f5fde2aad12adb34b0d1128e85e6c"),
    ("array", [1, "a", None], "7de3fd10bdb9124ce62e6965d4e701d80e54b0febe56b9596386c329362ba3e6"),
    ("map", {"b": [None], "a": 1},
     "8f3c956aad4710f626d6957e8ddb3a6ad8b8e316a27317530fb92af23d87dc67"),
    ("empty map", {}, "66eb46c543d88b4e404a2d476efa7c430f11c956bee9d298db861efa12f3517f"),
    ("empty array", [], "8de8cd75798aab2cec56bcc45f463021a916a8accad171eecdf06718ef09eefb"),
    ("40-key map (trie branch)", {f"k{i:02d}": i for i in range(40)},
     "1e768611ee6b44fdf79dd1f2b763569f6b411b723e13617a5474f89b61c5086a"),
]
SCRIPT_VECTORS = [
    (Script("(define (main input) input)"),
     "97bfbd0007326d61675d3ef596ea6fb46ef078d8f29b45d8e73d8e8c0b7463a5"),
    (Script("(define (main input) input)", "echo"),
     "3930ca3666329f4a1ffd35badc5b8d378136583f741c5aabcda792de6421f436"),
]

#: A record sealed by this version (fixed inputs -> fixed bytes and event_hash).
NEW_RECORD = (
    '{"address":"svit://golden/new","event_hash":'
    '"e0723091c0157c5f1865b33fad1a998c949ee2f30585cb759ec1ab81a7361d90",'
    '"format":"svit-cluster-transaction@1","mutations":[{"op":"set","path":"/lib/hello",'
    '"value":{"type":"script","value":{"source":"(define (main input) input)"}}},'
    '{"op":"remove","path":"/memory/old"},{"op":"append","path":"/inbox","value":'
    '{"type":"map","value":{"content":{"type":"string","value":"hi"}}}},'
    '{"op":"remove_front","path":"/inbox"},{"op":"append","path":"/system/outbox","value":'
    '{"type":"map","value":{"body":{"type":"integer","value":1},"message_id":'
    '{"type":"string","value":"svit://golden/new:1:0"},"to":{"type":"string","value":'
    '"svit://golden/peer"}}}}],"position":1,"previous_hash":'
    '"0000000000000000000000000000000000000000000000000000000000000000",'
    '"process_version_after":1,"process_version_before":0,"resulting_root_hash":'
    '"cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd",'
    '"source":"activation","touched_paths":["/inbox","/lib/hello","/memory/old",'
    '"/system/outbox"]}'
)

#: A record exactly as svit_cluster wrote it at c0cb931 (legacy name, null documentation).
LEGACY_RECORD = (
    '{"address":"svit://golden/legacy","event_hash":'
    '"cf8e6ec0ef67bb1c6dec87b50141c3608028b7a253a992aa51ec7f0e72715ca7",'
    '"format":"svit-transaction@1","mutations":[{"op":"set","path":"/lib/hello","value":'
    '{"type":"script","value":{"documentation":null,"source":"(define (main input) input)"}}},'
    '{"op":"set","path":"/memory/n","value":{"type":"number","value":2.5}},{"op":"append",'
    '"path":"/system/outbox","value":{"type":"map","value":{"body":{"type":"array","value":'
    '[{"type":"integer","value":1},{"type":"string","value":"x"}]},"id":{"type":"string",'
    '"value":"svit://golden/legacy:3:0"},"to":{"type":"string","value":"svit://golden/peer"}}}}],'
    '"position":3,"previous_hash":'
    '"1f1f1f1f1f1f1f1f1f1f1f1f1f1f1f1f1f1f1f1f1f1f1f1f1f1f1f1f1f1f1f1f",'
    '"process_version_after":3,"process_version_before":2,"resulting_root_hash":'
    '"abababababababababababababababababababababababababababababababab","source":"activation",'
    '"touched_paths":["/lib/hello","/memory/n","/system/outbox"]}'
)


def _seal(source: str = "activation") -> Transaction:
    return Transaction.seal(
        address="svit://golden/new", position=1, previous_hash=GENESIS_HASH, version_before=0,
        mutations=(
            Mutation("set", "/lib/hello", Script("(define (main input) input)")),
            Mutation("remove", "/memory/old"),
            Mutation("append", "/inbox", {"content": "hi"}),
            Mutation("remove_front", "/inbox"),
            Mutation("append", "/system/outbox", {"message_id": "svit://golden/new:1:0",
                                                  "to": "svit://golden/peer", "body": 1}),
        ),
        touched_paths=("/inbox", "/lib/hello", "/memory/old", "/system/outbox"),
        source=source, resulting_root_hash="cd" * 32)


# -- point 6: the structural hash -------------------------------------------------------


@pytest.mark.parametrize(("value", "digest"), [(v, d) for _, v, d in HASH_VECTORS],
                         ids=[n for n, _, _ in HASH_VECTORS])
def test_the_hash_scheme_is_named_and_pinned_by_golden_vectors(value: object,
                                                               digest: str) -> None:
    assert HASH_SCHEME == "svit-cluster-hash@1"
    assert node_from_value(value).hex == digest  # type: ignore[arg-type]


def test_script_hashes_are_pinned() -> None:
    assert HASH_SCHEME == "svit-cluster-hash@1"
    for script, digest in SCRIPT_VECTORS:
        assert ScriptNode(script).hex == digest


def test_the_hash_scheme_is_the_documented_encoding() -> None:
    """Recompute a few digests from the encoding written in ``process/_tree.py``."""
    sha = lambda b: hashlib.sha256(b).digest()  # noqa: E731
    u32 = struct.Struct(">I").pack
    assert HASH_SCHEME == "svit-cluster-hash@1"
    null, one, a = sha(b"n"), sha(b"i" + struct.pack(">q", 1)), sha(b"s" + b"a")
    assert node_from_value(None).digest == null
    assert node_from_value(1.5).digest == sha(b"f" + struct.pack(">d", 1.5))
    array = sha(b"a" + u32(3) + one + a + null)
    assert node_from_value([1, "a", None]).digest == array
    leaf = sha(b"L" + u32(1) + b"a" + one + u32(1) + b"b" + sha(b"a" + u32(1) + null))
    assert node_from_value({"b": [None], "a": 1}).digest == sha(b"m" + u32(2) + leaf)
    src = b"(define (main input) input)"
    assert ScriptNode(Script(src.decode())).digest == sha(b"S" + u32(len(src)) + src + b"\x00")
    assert ScriptNode(Script(src.decode(), "echo")).digest == \
        sha(b"S" + u32(len(src)) + src + b"\x01" + b"echo")


# -- point 5: the transaction record ----------------------------------------------------


def test_new_records_say_svit_cluster_transaction_and_match_the_golden_vector() -> None:
    assert TRANSACTION_FORMAT == "svit-cluster-transaction@1"
    record = _seal()
    assert record.encode().decode() == NEW_RECORD
    assert record.event_hash == "e0723091c0157c5f1865b33fad1a998c949ee2f30585cb759ec1ab81a7361d90"
    assert Transaction.decode(NEW_RECORD) == record


def test_a_fresh_process_names_our_transaction_format() -> None:
    proc = Process.create("svit://golden/fresh")
    runtime = proc.read("/system/runtime")
    assert isinstance(runtime, dict)
    assert runtime["transaction_format"] == "svit-cluster-transaction@1"
    proc.write("/memory/x", 1)
    # every record this version writes carries the new name
    host = Host(proc)
    host.write("/memory/y", 2)
    written = host.records
    assert json.loads(written[0].encode())["format"] == "svit-cluster-transaction@1"


def test_a_legacy_record_is_read_verified_and_reencoded_byte_for_byte() -> None:
    record = Transaction.decode(LEGACY_RECORD)
    assert record.format == LEGACY_TRANSACTION_FORMAT == "svit-transaction@1"
    assert record.encode().decode() == LEGACY_RECORD
    assert record.verify() is record
    # a legacy record with one changed byte still fails verification
    with pytest.raises(InvalidInput) as info:
        Transaction.decode(LEGACY_RECORD.replace('"value":2.5', '"value":2.25'))
    assert info.value.code == ErrorCode.INVALID_TRANSACTION


def test_a_log_written_by_the_old_code_replays_and_continues_with_the_new_format() -> None:
    doc = json.loads((FIXTURES / "legacy-log-c0cb931.json").read_text())
    proc = Process.restore(doc["snapshot"].encode())
    records = [Transaction.decode(raw) for raw in doc["records"]]
    assert {r.format for r in records} == {"svit-transaction@1"}
    assert proc.replay(records) == len(records)
    assert (proc.version, proc.root_hash, proc.chain_head) == (
        doc["final_version"], doc["final_root_hash"], doc["final_chain_head"])
    # the legacy outbox entry (``id``) is still there, untouched
    outbox = proc.read("/system/outbox")
    assert isinstance(outbox, list) and outbox[0]["id"] == "svit://golden/legacy:4:0"
    host = Host(proc)
    host.write("/memory/after", True)
    written = host.records
    (new,) = written
    assert new.format == TRANSACTION_FORMAT
    assert new.previous_hash == doc["final_chain_head"]
    again = Process.restore(doc["snapshot"].encode())
    assert again.replay([*records, Transaction.decode(new.encode())]) == len(records) + 1
    assert again.root_hash == proc.root_hash


@pytest.mark.parametrize("source", ["host.custom", "ünïcode source", "s" * 4096,
                                    "é" * 2048])
def test_source_is_any_non_empty_string_up_to_4096_bytes(source: str) -> None:
    record = _seal(source)
    assert Transaction.decode(record.encode()).source == source


@pytest.mark.parametrize("source", ["", "s" * 4097, "é" * 2049])
def test_an_empty_or_oversized_source_is_refused(source: str) -> None:
    with pytest.raises(InvalidInput) as info:
        _seal(source)
    assert info.value.code == ErrorCode.INVALID_TRANSACTION
    doc = json.loads(NEW_RECORD)
    doc["source"] = source
    with pytest.raises(InvalidInput) as info:
        Transaction.decode(json.dumps(doc))
    assert info.value.code == ErrorCode.INVALID_TRANSACTION
