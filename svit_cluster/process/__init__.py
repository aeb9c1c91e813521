"""The Svit process core: values, namespace, versions, hashes, transactions, snapshots.

Pure Python, no I/O. See ``docs/architecture.md``, "A Svit process". Values,
paths and limits live in :mod:`svit_cluster.values` (re-exported here); running a
script is :mod:`svit_cluster.activation`. Public names, by importance:

* :class:`Process` -- one versioned, hashed state machine.
* :class:`Limits` -- frozen bounds with hard maxima.
* Values: :data:`Value`, :class:`Script`, :func:`encode_value`, :func:`decode_value`,
  :func:`from_plain_json`, :func:`to_plain_json`, :func:`values_equal`.
* Commits: :class:`Change`, :class:`Transition`, :class:`Transaction`,
  :class:`Mutation`, :class:`WorkingCopy`.
* Paths and ids: :func:`parse_path`, :func:`validate_process_id`,
  :func:`validate_address`, :func:`validate_script_name`.
"""

from svit_cluster.process._inbox import (
    CLOSED_PATH,
    DEDUP_WINDOW,
    dedup_slot,
    inbox_closed,
    prepare_inbox_ack,
    prepare_inbox_append,
    prepare_inbox_close,
    prepare_inbox_drop,
)
from svit_cluster.process._mounted import mount_ops
from svit_cluster.process._namespace import (
    LANGUAGE,
    MAX_PENDING_TIMERS,
    OUTBOX_WINDOW,
    PORT_DESCRIPTOR_FIELDS,
    PROTOCOL,
    SNAPSHOT_FORMAT,
    check_script,
)
from svit_cluster.process._process import MAX_SNAPSHOT_BYTES, Process
from svit_cluster.process._stat import stat_record
from svit_cluster.process._transaction import (
    GENESIS_HASH,
    LEGACY_TRANSACTION_FORMAT,
    TRANSACTION_FORMAT,
    Mutation,
    Transaction,
)
from svit_cluster.process._tree import (
    HASH_SCHEME,
    ArrayNode,
    MapNode,
    Node,
    ScriptNode,
    get_node,
    lookup_node,
    node_from_value,
    value_from_node,
)
from svit_cluster.process._working import Change, Transition, WorkingCopy, script_from_value
from svit_cluster.values import (
    HARD_MAXIMA,
    MAX_DELAY_MS,
    ROOT_KEYS,
    Limits,
    Script,
    Value,
    canonical_json,
    decode_value,
    encode_value,
    format_path,
    from_plain_json,
    parse_path,
    strict_json_loads,
    to_plain_json,
    validate_address,
    validate_process_id,
    validate_script_name,
    values_equal,
)

__all__ = [
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
    "mount_ops",
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
