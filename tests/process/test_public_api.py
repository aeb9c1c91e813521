"""The public surface of svit_cluster.process is pinned."""

from __future__ import annotations

import svit_cluster.process as process

EXPECTED = [
    "GENESIS_HASH",
    "HARD_MAXIMA",
    "HASH_SCHEME",
    "LANGUAGE",
    "LEGACY_TRANSACTION_FORMAT",
    "MAX_SNAPSHOT_BYTES",
    "PROTOCOL",
    "ROOT_KEYS",
    "SNAPSHOT_FORMAT",
    "TRANSACTION_FORMAT",
    "Change",
    "Committer",
    "Limits",
    "Mutation",
    "Process",
    "Script",
    "Transaction",
    "Transition",
    "Value",
    "WorkingCopy",
    "canonical_json",
    "decode_value",
    "encode_value",
    "format_path",
    "from_plain_json",
    "parse_path",
    "script_from_value",
    "strict_json_loads",
    "to_plain_json",
    "validate_address",
    "validate_process_id",
    "validate_script_name",
    "values_equal",
]


def test_all_is_pinned() -> None:
    assert sorted(process.__all__) == sorted(EXPECTED)
    assert len(process.__all__) == len(set(process.__all__))


def test_every_exported_name_exists_and_nothing_private_leaks() -> None:
    for name in process.__all__:
        assert hasattr(process, name), name
        assert not name.startswith("_")
