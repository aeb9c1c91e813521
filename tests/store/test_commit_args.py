"""``CommitArgs`` puts each named argument where the ``COMMIT`` script reads it.

Pure (no Redis): the positions below are the ``ARGV[n]`` the script's source
reads, so a field moved in ``as_args`` or in the script fails here first.
"""

from __future__ import annotations

import re

from svit_cluster.process import Process
from svit_cluster.store import ProcessKeys
from svit_cluster.store._commit_args import CommitArgs, commit_keys
from svit_cluster.store._keys import receipt_field
from svit_cluster.store._records import encode_receipt
from svit_cluster.store._scripts import COMMIT
from tests._commit_log import receipt, seal_write

#: field -> the ARGV index (1-based) the script reads it at.
ARGV = {
    "token": 1, "base_version": 2, "base_hash": 3, "record": 4, "event_hash": 5,
    "root_hash": 6, "position": 7, "receipt_field": 8, "receipt_value": 9,
    "max_receipts": 10, "new_version": 11, "signal_retention": 12, "change": 13,
    "completion": 14, "traceparent": 15, "queued": 16,
}


def test_every_named_argument_sits_at_the_index_the_script_reads() -> None:
    proc = Process.create("svit://test/args", memory={"count": 0})
    t = seal_write(proc, 1)
    r = receipt("req-1")
    intents = [{"message_id": "m1", "to": "svit://test/b", "body": 1},
               {"message_id": "m2", "to": "svit://test/c", "body": 2}]
    args = CommitArgs.of(t, r, intents, {"turn": 1}, token=7, max_receipts=16,
                         signal_retention=100)
    flat = args.as_args()
    for name, index in ARGV.items():
        assert flat[index - 1] == getattr(args, name), name
    assert flat[len(ARGV):] == list(args.intents) and len(args.intents) == 2
    assert "for i = 17, #ARGV do" in COMMIT  # intents start right after the named ones
    assert max(int(n) for n in re.findall(r"ARGV\[(\d+)\]", COMMIT)) == len(ARGV)
    rec = t.record
    assert (args.token, args.base_version, args.new_version) == (
        7, rec.process_version_before, rec.process_version_after)
    assert args.record == rec.encode() and args.traceparent == b"" and args.queued == b"0"
    assert args.receipt_field == receipt_field(r.tenant, r.client_id, r.request_id)
    assert args.receipt_value == encode_receipt(r)


def test_no_receipt_and_no_completion_are_empty_strings() -> None:
    proc = Process.create("svit://test/args2", memory={"count": 0})
    args = CommitArgs.of(seal_write(proc, 1), None, (), None, token=1, max_receipts=16,
                         signal_retention=100)
    assert (args.receipt_field, args.receipt_value, args.completion, args.intents) == (
        b"", b"", b"", ())


def test_the_keys_are_in_the_scripts_order() -> None:
    keys = ProcessKeys("svit://test/keys", "p")
    assert commit_keys(keys) == (keys.stream, keys.head, keys.fence, keys.receipts,
                                 keys.receipts_order, keys.outbox, keys.signals, keys.queued)
