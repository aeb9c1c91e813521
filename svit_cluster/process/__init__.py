"""The Svit process core: values, namespace, versions, hashes, transactions, snapshots.

Pure Python, no I/O. See ``DESIGN.md`` §1. Public names, by importance:

* :class:`Process` -- one versioned, hashed state machine.
* :class:`Limits` -- frozen bounds with hard maxima.
* Values: :data:`Value`, :class:`Script`, :func:`encode_value`, :func:`decode_value`,
  :func:`from_plain_json`, :func:`to_plain_json`, :func:`values_equal`.
* Commits: :class:`Change`, :class:`Transition`, :class:`Transaction`,
  :class:`Mutation`, :class:`WorkingCopy`.
* Paths and ids: :func:`parse_path`, :func:`validate_process_id`,
  :func:`validate_address`, :func:`validate_script_name`.
"""

from svit_cluster.process._limits import HARD_MAXIMA, Limits
from svit_cluster.process._namespace import LANGUAGE, PROTOCOL, SNAPSHOT_FORMAT
from svit_cluster.process._paths import (
    ROOT_KEYS,
    format_path,
    parse_path,
    validate_address,
    validate_process_id,
    validate_script_name,
)
from svit_cluster.process._process import MAX_SNAPSHOT_BYTES, Committer, Process
from svit_cluster.process._transaction import (
    GENESIS_HASH,
    LEGACY_TRANSACTION_FORMAT,
    TRANSACTION_FORMAT,
    Mutation,
    Transaction,
)
from svit_cluster.process._tree import HASH_SCHEME
from svit_cluster.process._values import (
    Script,
    Value,
    canonical_json,
    decode_value,
    encode_value,
    from_plain_json,
    strict_json_loads,
    to_plain_json,
    values_equal,
)
from svit_cluster.process._working import Change, Transition, WorkingCopy, script_from_value

__all__ = [
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
