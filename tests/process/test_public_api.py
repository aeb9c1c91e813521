"""The public surface of svit_cluster.process is pinned."""

from __future__ import annotations

import svit_cluster.process as process

EXPECTED = [
    "CLOSED_PATH",
    "DEDUP_WINDOW",
    "GENESIS_HASH",
    "HARD_MAXIMA",
    "HASH_SCHEME",
    "LANGUAGE",
    "LEGACY_TRANSACTION_FORMAT",
    "MAX_DELAY_MS",
    "MAX_PENDING_TIMERS",
    "MAX_SNAPSHOT_BYTES",
    "OUTBOX_WINDOW",
    "PORT_DESCRIPTOR_FIELDS",
    "PROTOCOL",
    "ROOT_KEYS",
    "SNAPSHOT_FORMAT",
    "TRANSACTION_FORMAT",
    "ArrayNode",
    "Change",
    "Limits",
    "MapNode",
    "Mutation",
    "Node",
    "Process",
    "Script",
    "ScriptNode",
    "Transaction",
    "Transition",
    "Value",
    "WorkingCopy",
    "canonical_json",
    "check_script",
    "decode_value",
    "dedup_slot",
    "encode_value",
    "format_path",
    "from_plain_json",
    "get_node",
    "inbox_closed",
    "lookup_node",
    "node_from_value",
    "parse_path",
    "prepare_inbox_ack",
    "prepare_inbox_append",
    "prepare_inbox_close",
    "prepare_inbox_drop",
    "script_from_value",
    "stat_record",
    "strict_json_loads",
    "to_plain_json",
    "validate_address",
    "validate_process_id",
    "validate_script_name",
    "value_from_node",
    "values_equal",
]


def test_all_is_pinned() -> None:
    assert sorted(process.__all__) == sorted(EXPECTED)
    assert len(process.__all__) == len(set(process.__all__))


def test_every_exported_name_exists_and_nothing_private_leaks() -> None:
    for name in process.__all__:
        assert hasattr(process, name), name
        assert not name.startswith("_")
