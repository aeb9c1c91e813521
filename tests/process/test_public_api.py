"""The public surface of svit_cluster.process is pinned."""

from __future__ import annotations

import svit_cluster.process as process

# grouped as the package docstring groups them; order within a group is free
EXPECTED = [
    # the process and its limits
    "Process", "Limits", "HARD_MAXIMA", "MAX_DELAY_MS", "MAX_PENDING_TIMERS",
    "MAX_SNAPSHOT_BYTES", "OUTBOX_WINDOW",
    # values
    "Value", "Script", "canonical_json", "decode_value", "encode_value", "from_plain_json",
    "to_plain_json", "strict_json_loads", "values_equal", "script_from_value",
    # commits
    "Change", "Transition", "Transaction", "Mutation", "WorkingCopy", "GENESIS_HASH",
    "TRANSACTION_FORMAT", "LEGACY_TRANSACTION_FORMAT", "SNAPSHOT_FORMAT", "stat_record",
    # paths, ids and the namespace
    "parse_path", "format_path", "validate_process_id", "validate_address",
    "validate_script_name", "ROOT_KEYS", "LANGUAGE", "PROTOCOL", "PORT_DESCRIPTOR_FIELDS",
    "check_script",
    # the hashed tree
    "HASH_SCHEME", "Node", "ArrayNode", "MapNode", "ScriptNode", "get_node", "lookup_node",
    "node_from_value", "value_from_node", "mount_ops",
    # the inbox
    "CLOSED_PATH", "DEDUP_WINDOW", "dedup_slot", "inbox_closed", "prepare_inbox_ack",
    "prepare_inbox_append", "prepare_inbox_close", "prepare_inbox_drop",
]


def test_all_is_pinned() -> None:
    assert sorted(process.__all__) == sorted(EXPECTED)
    assert len(process.__all__) == len(set(process.__all__))
    assert len(EXPECTED) == len(set(EXPECTED))


def test_every_exported_name_exists_and_nothing_private_leaks() -> None:
    for name in process.__all__:
        assert hasattr(process, name), name
        assert not name.startswith("_")
