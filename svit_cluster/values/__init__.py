"""The vocabulary the process core and the Lisp share: values, paths, limits.

Pure Python, no I/O; depends only on :mod:`svit_cluster.errors`. It sits below both
:mod:`svit_cluster.lisp` (which computes on values under limits) and
:mod:`svit_cluster.process` (which stores them at paths and compiles ``/lib``
scripts with the Lisp), so neither needs the other's internals.

* Values: :data:`Value`, :class:`Script`, :func:`encode_value`, :func:`decode_value`,
  :func:`from_plain_json`, :func:`to_plain_json`, :func:`canonical_json`,
  :func:`values_equal`, :func:`kind_of`, :func:`utf8_len`; integers are 64-bit
  (:data:`I64_MIN` .. :data:`I64_MAX`). :data:`JsonValue`: a JSON document.
* Paths and ids: :data:`Path`, :data:`ROOT_KEYS`, :func:`parse_path`,
  :func:`format_path`, :func:`validate_process_id`, :func:`validate_address`,
  :func:`validate_script_name`, :func:`is_guest_writable`.
* Limits: :class:`Limits` and its :data:`HARD_MAXIMA`; :data:`MAX_DELAY_MS`, the
  largest delay of a delayed ``send!``.
"""

from svit_cluster.values._limits import HARD_MAXIMA, MAX_DELAY_MS, Limits
from svit_cluster.values._paths import (
    ROOT_KEYS,
    Path,
    format_path,
    is_guest_writable,
    parse_path,
    validate_address,
    validate_process_id,
    validate_script_name,
)
from svit_cluster.values._values import (
    I64_MAX,
    I64_MIN,
    JsonValue,
    Script,
    Value,
    canonical_json,
    decode_value,
    encode_value,
    from_plain_json,
    kind_of,
    script_json,
    strict_json_loads,
    to_plain_json,
    utf8_len,
    values_equal,
)

__all__ = [
    "HARD_MAXIMA",
    "I64_MAX",
    "I64_MIN",
    "MAX_DELAY_MS",
    "ROOT_KEYS",
    "JsonValue",
    "Limits",
    "Path",
    "Script",
    "Value",
    "canonical_json",
    "decode_value",
    "encode_value",
    "format_path",
    "from_plain_json",
    "is_guest_writable",
    "kind_of",
    "parse_path",
    "script_json",
    "strict_json_loads",
    "to_plain_json",
    "utf8_len",
    "validate_address",
    "validate_process_id",
    "validate_script_name",
    "values_equal",
]
