"""Plain Python values, the tagged wire codec, and plain-JSON conversion.

The value kinds (as in the reference) map to Python like this:

==========  ======================  ==========================================
kind        Python                  wire
==========  ======================  ==========================================
null        ``None``                ``{"type":"null"}``
bool        ``bool``                ``{"type":"bool","value":true}``
integer     ``int`` (signed 64-bit) ``{"type":"integer","value":4}``
number      ``float`` (finite)      ``{"type":"number","value":1.5}``
string      ``str``                 ``{"type":"string","value":"x"}``
array       ``list``                ``{"type":"array","value":[...]}``
map         ``dict[str, Value]``    ``{"type":"map","value":{...}}`` (keys sorted)
script      :class:`Script`         ``{"type":"script","value":{"source":..,"documentation":..}}``
                                    (``documentation`` omitted when absent)
==========  ======================  ==========================================

Integer ``1`` and number ``1.0`` are different values: use :func:`values_equal`,
never ``==``, to compare values (Python's ``1 == 1.0 == True``).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, TypeAlias

from svit_cluster.errors import ErrorCode, InvalidInput, LimitExceeded

__all__ = [
    "I64_MAX",
    "I64_MIN",
    "MAX_WALK_DEPTH",
    "JsonValue",
    "Script",
    "Value",
    "canonical_json",
    "decode_value",
    "encode_value",
    "from_plain_json",
    "kind_of",
    "script_json",
    "strict_json_loads",
    "to_plain_json",
    "utf8_len",
    "values_equal",
]

I64_MIN = -(2**63)
I64_MAX = 2**63 - 1


@dataclass(frozen=True, slots=True)
class Script:
    """A stored script record, allowed only directly under ``/lib/<name>``.

    Attributes:
        source: Svit Lisp source text (at most ``max_script_bytes`` UTF-8 bytes).
        documentation: optional free text describing the script.
    """

    source: str
    documentation: str | None = None

    def __post_init__(self) -> None:
        if type(self.source) is not str or (
            self.documentation is not None and type(self.documentation) is not str
        ):
            raise InvalidInput(
                "a script needs a string source and optional string documentation",
                code=ErrorCode.INVALID_VALUE,
            )


Value: TypeAlias = bool | int | float | str | list["Value"] | dict[str, "Value"] | Script | None

#: A JSON document as :func:`json.loads` builds it (no script, unlike :data:`Value`):
#: the shape of settings documents and of error fields on the wire.
JsonValue: TypeAlias = (
    bool | int | float | str | list["JsonValue"] | dict[str, "JsonValue"] | None
)


def kind_of(value: object) -> str:
    """Return the wire kind name of a plain value.

    Raises:
        InvalidInput: (``invalid_value``) ``value`` is not one of the value kinds.
    """
    if value is None:
        return "null"
    t = type(value)
    if t is bool:
        return "bool"
    if t is int:
        return "integer"
    if t is float:
        return "number"
    if t is str:
        return "string"
    if t is list:
        return "array"
    if t is dict:
        return "map"
    if t is Script:
        return "script"
    raise InvalidInput(f"not a storable value: {t.__name__}", code=ErrorCode.INVALID_VALUE)


def values_equal(a: Value, b: Value) -> bool:
    """Type-strict structural equality: ``values_equal(1, 1.0)`` is ``False``.

    ``values_equal(-0.0, 0.0)`` is ``True``: the reference treats the two zeros
    as one number (and decoders here store ``-0.0`` as ``0.0``).

    Raises:
        LimitExceeded: the values nest deeper than :data:`MAX_WALK_DEPTH`.
    """
    return _equal(a, b, 0)


def _equal(a: Value, b: Value, depth: int) -> bool:
    ta, tb = type(a), type(b)
    if ta is not tb:
        return False
    if ta is list or ta is dict:
        if depth >= MAX_WALK_DEPTH:
            raise _too_deep()
    if ta is list:
        assert isinstance(a, list) and isinstance(b, list)
        return len(a) == len(b) and all(
            _equal(x, y, depth + 1) for x, y in zip(a, b, strict=True)
        )
    if ta is dict:
        assert isinstance(a, dict) and isinstance(b, dict)
        return a.keys() == b.keys() and all(_equal(a[k], b[k], depth + 1) for k in a)
    return a == b  # floats: -0.0 == 0.0, one value as in the reference (value.rs)


def utf8_len(s: str) -> int:
    """UTF-8 byte length of ``s``.

    Raises:
        InvalidInput: (``invalid_value``) ``s`` holds a lone surrogate, which is
            not a Unicode scalar value and cannot be encoded as UTF-8.
    """
    if s.isascii():
        return len(s)
    try:
        return len(s.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidInput(
            "text is not valid Unicode (lone surrogate)", code=ErrorCode.INVALID_VALUE
        ) from None


def _check_keys(m: dict[Any, Any]) -> None:
    for k in m:
        if type(k) is not str:
            raise InvalidInput("map keys must be strings", code=ErrorCode.INVALID_VALUE)


#: Bound on recursion in the helpers that walk a plain value without limits
#: (:func:`encode_value`, :func:`to_plain_json`, :func:`values_equal`). Values
#: held by a process nest at most ``max_value_depth`` (hard maximum 128) below
#: their section, so this only stops cycles and hostile inputs.
MAX_WALK_DEPTH = 256


def _too_deep() -> LimitExceeded:
    return LimitExceeded("value is nested too deeply")


def _check_int(v: int) -> int:
    if v < I64_MIN or v > I64_MAX:
        raise InvalidInput("integer out of signed 64-bit range", code=ErrorCode.INVALID_VALUE)
    return v


def _check_float(v: float) -> float:
    if not math.isfinite(v):
        raise InvalidInput("number must be finite", code=ErrorCode.INVALID_VALUE)
    return v + 0.0  # canonical zero: -0.0 + 0.0 == +0.0


class _Budget:
    """Counts entries and text bytes while walking one value."""

    __slots__ = ("entries", "max_depth", "max_entries", "max_text", "text")

    def __init__(self, max_depth: int, max_entries: int, max_text: int) -> None:
        self.max_depth = max_depth
        self.max_entries = max_entries
        self.max_text = max_text
        self.entries = 0
        self.text = 0

    def entry(self, depth: int) -> None:
        self.entries += 1
        if self.entries > self.max_entries:
            raise InvalidInput("value has too many entries (max_value_entries)",
                               code=ErrorCode.INVALID_VALUE)
        if depth > self.max_depth:
            raise InvalidInput("value is nested too deeply (max_value_depth)",
                               code=ErrorCode.INVALID_VALUE)

    def add_text(self, s: str) -> None:
        self.text += utf8_len(s)
        if self.text > self.max_text:
            raise InvalidInput("value has too much text (max_text_bytes)",
                               code=ErrorCode.INVALID_VALUE)


_DEFAULT_DEPTH = 128
_DEFAULT_ENTRIES = 1_000_000
_DEFAULT_TEXT = 64 * 1024 * 1024


def script_json(script: Script, *, null_documentation: bool = False) -> dict[str, Any]:
    """``{source, documentation}`` of a script; ``documentation`` is omitted when absent.

    ``null_documentation=True`` writes an absent documentation as ``null``
    instead: the encoding of legacy ``svit-transaction@1`` records, which
    hash it that way.
    """
    if script.documentation is None and not null_documentation:
        return {"source": script.source}
    return {"source": script.source, "documentation": script.documentation}


def encode_value(value: Value, *, null_documentation: bool = False) -> dict[str, Any]:
    """Encode a plain value to its tagged wire form (a JSON-ready ``dict``).

    Map keys are emitted in sorted order. A script without documentation is
    ``{"source": ...}`` (``documentation`` omitted, never ``null``) unless
    ``null_documentation`` (see :func:`script_json`).

    Raises:
        InvalidInput: (``invalid_value``) a non-value, a non-finite float, an
            integer outside i64, or a non-string map key is found.
        LimitExceeded: the value nests deeper than :data:`MAX_WALK_DEPTH` (or is cyclic).
    """
    return _encode(value, 0, null_documentation)


def _encode(value: Value, depth: int, null_doc: bool = False) -> dict[str, Any]:
    if value is None:
        return {"type": "null"}
    t = type(value)
    if t is bool:
        return {"type": "bool", "value": value}
    if t is int:
        assert isinstance(value, int)
        return {"type": "integer", "value": _check_int(value)}
    if t is float:
        assert isinstance(value, float)
        return {"type": "number", "value": _check_float(value)}
    if t is str:
        return {"type": "string", "value": value}
    if (t is list or t is dict) and depth >= MAX_WALK_DEPTH:
        raise _too_deep()
    if t is list:
        assert isinstance(value, list)
        return {"type": "array", "value": [_encode(v, depth + 1, null_doc) for v in value]}
    if t is dict:
        assert isinstance(value, dict)
        _check_keys(value)
        out: dict[str, Any] = {}
        for k in sorted(value):
            out[k] = _encode(value[k], depth + 1, null_doc)
        return {"type": "map", "value": out}
    if t is Script:
        assert isinstance(value, Script)
        return {"type": "script", "value": script_json(value, null_documentation=null_doc)}
    raise InvalidInput(f"not a storable value: {t.__name__}", code=ErrorCode.INVALID_VALUE)


def decode_value(
    data: Any,
    *,
    max_depth: int = _DEFAULT_DEPTH,
    max_entries: int = _DEFAULT_ENTRIES,
    max_text_bytes: int = _DEFAULT_TEXT,
) -> Value:
    """Decode a tagged wire value (already parsed from JSON) into a plain value.

    Decoding is strict: every node must be an object with a known ``type``; the
    ``value`` key must be present (absent for ``null``) with the right JSON type.
    Extra keys inside a value node are rejected. Integers must fit in i64; a
    JSON integer given as ``number`` becomes a float.

    Args:
        data: the parsed JSON (``dict``/``list``/scalars).
        max_depth: nesting bound (counts containers), default 128.
        max_entries: bound on the number of nodes, default 1 000 000.
        max_text_bytes: bound on UTF-8 bytes across keys and strings.

    Raises:
        InvalidInput: (``invalid_value``) on any malformed node.
        InvalidInput: (``invalid_value``) a depth, entry or text bound was exceeded.
    """
    return _decode(data, 0, _Budget(max_depth, max_entries, max_text_bytes))


def _decode(data: Any, depth: int, budget: _Budget) -> Value:
    budget.entry(depth)
    if type(data) is not dict:
        raise InvalidInput("a tagged value must be an object", code=ErrorCode.INVALID_VALUE)
    tag = data.get("type")
    if tag == "null":
        if len(data) != 1:
            raise InvalidInput("null takes no value", code=ErrorCode.INVALID_VALUE)
        return None
    if len(data) != 2 or "value" not in data:
        raise InvalidInput(
            f"tagged value {str(tag)[:32]!r} needs exactly type and value",
            code=ErrorCode.INVALID_VALUE,
        )
    v = data["value"]
    tv = type(v)
    if tag == "bool" and tv is bool:
        return bool(v)
    if tag == "integer" and tv is int:
        return _check_int(v)
    if tag == "number" and (tv is float or tv is int):
        if tv is int and abs(v) > 2**53:
            raise InvalidInput("number is not exactly representable", code=ErrorCode.INVALID_VALUE)
        return _check_float(float(v))
    if tag == "string" and tv is str:
        budget.add_text(v)
        return str(v)
    if tag == "array" and tv is list:
        return [_decode(item, depth + 1, budget) for item in v]
    if tag == "map" and tv is dict:
        _check_keys(v)
        out: dict[str, Value] = {}
        for k in sorted(v):
            budget.add_text(k)
            out[k] = _decode(v[k], depth + 1, budget)
        return out
    if tag == "script" and tv is dict:
        src = v.get("source")
        doc = v.get("documentation")
        if type(src) is not str or (doc is not None and type(doc) is not str) or (
            set(v) - {"source", "documentation"}
        ):
            raise InvalidInput(
                "script needs a string source and optional documentation",
                code=ErrorCode.INVALID_VALUE,
            )
        budget.add_text(src)
        if doc is not None:
            budget.add_text(doc)
        return Script(src, doc)
    raise InvalidInput(f"bad tagged value of type {str(tag)[:32]!r}", code=ErrorCode.INVALID_VALUE)


def from_plain_json(
    data: Any,
    *,
    max_depth: int = _DEFAULT_DEPTH,
    max_entries: int = _DEFAULT_ENTRIES,
    max_text_bytes: int = _DEFAULT_TEXT,
) -> Value:
    """Convert untagged JSON (as parsed by :mod:`json`) into a plain value.

    A number that fits in i64 becomes an integer; any other number becomes a
    float (and must be finite). Objects become maps, lists become arrays.
    Scripts cannot be expressed in plain JSON.

    Raises:
        InvalidInput: (``invalid_value``) non-finite numbers or non-JSON types.
        InvalidInput: (``invalid_value``) a depth, entry or text bound was exceeded.
    """
    return _plain(data, 0, _Budget(max_depth, max_entries, max_text_bytes))


def _plain(data: Any, depth: int, budget: _Budget) -> Value:
    budget.entry(depth)
    t = type(data)
    if data is None or t is bool:
        return data  # type: ignore[no-any-return]
    if t is int:
        if I64_MIN <= data <= I64_MAX:
            return int(data)
        try:
            return _check_float(float(data))
        except OverflowError:
            raise InvalidInput("number is too large", code=ErrorCode.INVALID_VALUE) from None
    if t is float:
        return _check_float(data)
    if t is str:
        budget.add_text(data)
        return str(data)
    if t is list:
        return [_plain(x, depth + 1, budget) for x in data]
    if t is dict:
        _check_keys(data)
        out: dict[str, Value] = {}
        for k in sorted(data):
            budget.add_text(k)
            out[k] = _plain(data[k], depth + 1, budget)
        return out
    raise InvalidInput(f"not a JSON value: {t.__name__}", code=ErrorCode.INVALID_VALUE)


def to_plain_json(value: Value) -> Any:
    """Convert a plain value to untagged JSON; a script becomes :func:`script_json`.

    This loses the integer/number distinction for integral floats only in JSON
    text produced by other tools; Python's :mod:`json` keeps ``1.0`` as ``1.0``.

    Raises:
        InvalidInput: (``invalid_value``) a non-string map key.
        LimitExceeded: the value nests deeper than :data:`MAX_WALK_DEPTH` (or is cyclic).
    """
    return _to_plain(value, 0)


def _to_plain(value: Value, depth: int) -> Any:
    t = type(value)
    if (t is list or t is dict) and depth >= MAX_WALK_DEPTH:
        raise _too_deep()
    if t is list:
        assert isinstance(value, list)
        return [_to_plain(v, depth + 1) for v in value]
    if t is dict:
        assert isinstance(value, dict)
        _check_keys(value)
        return {k: _to_plain(value[k], depth + 1) for k in sorted(value)}
    if t is Script:
        assert isinstance(value, Script)
        return script_json(value)
    return value


def canonical_json(obj: Any) -> bytes:
    """Canonical JSON bytes: sorted keys, no spaces, UTF-8, NaN refused.

    Used for every hash over a JSON document (transaction ``event_hash``,
    request fingerprints) so that the bytes are identical on every host.

    Raises:
        InvalidInput: (``invalid_value``) ``obj`` holds a non-finite float or a
            non-JSON type.
    """
    try:
        return json.dumps(
            obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        ).encode("utf-8")
    except RecursionError:
        raise InvalidInput(
            "not canonical JSON: nested too deeply", code=ErrorCode.INVALID_VALUE
        ) from None
    except (TypeError, ValueError) as exc:
        raise InvalidInput(
            f"not canonical JSON: {str(exc)[:200]}", code=ErrorCode.INVALID_VALUE
        ) from exc


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"duplicate key {k[:64]!r}")
        out[k] = v
    return out


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def strict_json_loads(
    data: bytes | str, *, what: str = "document", last_duplicate_wins: bool = False
) -> Any:
    """Parse one strict JSON document.

    Rejects duplicate object keys, ``NaN``/``Infinity`` constants, invalid
    UTF-8, and anything but whitespace after the document (trailing bytes).
    With ``last_duplicate_wins`` a repeated key keeps its last value instead
    of failing (serde_json's rule for maps; ``json-parse`` uses it).

    Raises:
        InvalidInput: (``decode_error``) on any of the above; the message names
            ``what`` and the parser's reason, capped.
    """
    try:
        text = data.decode("utf-8") if isinstance(data, bytes | bytearray) else data
        hook = dict if last_duplicate_wins else _no_duplicates
        return json.loads(text, object_pairs_hook=hook, parse_constant=_no_constants)
    except (ValueError, RecursionError, UnicodeDecodeError) as exc:
        reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)[:200]
        raise InvalidInput(
            f"{what} is not valid JSON: {reason}", code=ErrorCode.DECODE_ERROR
        ) from None
