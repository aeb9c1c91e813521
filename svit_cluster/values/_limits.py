"""Process and guest limits: one frozen object with defaults and hard maxima."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from svit_cluster.errors import ErrorCode, InvalidInput

__all__ = ["HARD_MAXIMA", "MAX_DELAY_MS", "Limits"]

_KIB = 1024
_MIB = 1024 * 1024

#: Largest ``delay_ms`` of a delayed ``send!`` (365 days, in milliseconds). A
#: fixed bound, not a per-process limit: the dispatcher that holds a timer and
#: every host that replays one agree on it.
MAX_DELAY_MS = 31_536_000_000


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds applied to every value, tree and activation of one process.

    Defaults and hard maxima follow the upstream reference (``limits``), plus
    ``max_fuel``, ``max_tree_nodes`` and ``max_tree_text_bytes``. A snapshot carries
    its limits; :meth:`validate` refuses any limit above :data:`HARD_MAXIMA` so an
    untrusted snapshot can never enlarge the host's safety envelope.

    Units are in the names: ``*_millis`` (milliseconds), ``*_bytes`` (UTF-8
    bytes), ``*_bits`` (bits); the rest are counts. ``max_fuel`` is in *fuel
    units*: one unit per evaluated form (each symbol lookup, literal, special
    form and function application costs 1), plus 1 per 64 elements or bytes a
    builtin touches. The same program on the same input always spends the same
    fuel, on every host. The default (400 000 units, about 30-60 ms of guest
    work on these machines) is set so that fuel, not the 100 ms wall clock,
    stops a runaway script: then it stops at the same step everywhere.

    ``max_namespace_entries`` bounds the guest's global namespace of one script
    run (each nested ``exec`` starts a fresh one): it starts with the 47 names the
    runtime provides (``*svit-version*``, ``input`` and the 45 runtime helpers,
    ``svit_cluster.lisp._builtins.GUEST_SCOPE``) and each new name a script
    ``define``s adds one, as in the reference's Ketos scope; so the default 256
    leaves 209 script definitions.
    """

    max_execution_millis: int = 100
    max_fuel: int = 400_000
    max_guest_memory: int = 8 * _MIB
    max_call_stack: int = 64
    max_value_stack: int = 4096
    max_namespace_entries: int = 256
    max_exec_depth: int = 16
    max_syntax_depth: int = 64
    max_integer_bits: int = 64
    max_value_depth: int = 32
    max_value_entries: int = 10_000
    max_text_bytes: int = 1 * _MIB
    max_script_bytes: int = 64 * _KIB
    max_logs: int = 128
    max_messages: int = 128
    max_staged_scripts: int = 32
    max_tree_nodes: int = 100_000
    max_tree_text_bytes: int = 16 * _MIB

    def validate(self) -> Limits:
        """Check every field is an int in ``0..hard maximum``.

        Returns:
            ``self``, for chaining.

        Raises:
            InvalidInput: (code ``resource_limit_exceeded``) a field is not an
                integer, is negative, or exceeds its hard maximum.
        """
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if type(value) is not int or value < 0:
                raise InvalidInput(
                    f"limit {field.name} must be a non-negative integer",
                    code=ErrorCode.RESOURCE_LIMIT_EXCEEDED,
                )
            if value > HARD_MAXIMA[field.name]:
                raise InvalidInput(
                    f"limit {field.name}={value} exceeds hard maximum "
                    f"{HARD_MAXIMA[field.name]}",
                    code=ErrorCode.RESOURCE_LIMIT_EXCEEDED,
                )
        return self

    def to_dict(self) -> dict[str, int]:
        """Plain ``{name: int}`` mapping, in field order."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    @classmethod
    def from_dict(cls, data: Any) -> Limits:
        """Build and validate limits from an untrusted mapping.

        Raises:
            InvalidInput: ``data`` is not a mapping, has unknown or missing
                fields, or violates :meth:`validate`.
        """
        if not isinstance(data, dict):
            raise InvalidInput("limits must be an object", code=ErrorCode.INVALID_VALUE)
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - names
        if unknown:
            raise InvalidInput(
                f"unknown limit {sorted(unknown)[0]!r}", code=ErrorCode.INVALID_VALUE
            )
        missing = names - set(data)
        if missing:
            raise InvalidInput(
                f"missing limit {sorted(missing)[0]!r}", code=ErrorCode.INVALID_VALUE
            )
        limits = cls.__new__(cls)
        for name in names:
            object.__setattr__(limits, name, data[name])
        return limits.validate()


#: Hard maxima: no configuration or snapshot may exceed these.
HARD_MAXIMA: dict[str, int] = {
    "max_execution_millis": 60_000,
    "max_fuel": 1_000_000_000,
    "max_guest_memory": 64 * _MIB,
    "max_call_stack": 4096,
    "max_value_stack": 1_000_000,
    "max_namespace_entries": 10_000,
    "max_exec_depth": 64,
    "max_syntax_depth": 1024,
    "max_integer_bits": 4096,
    "max_value_depth": 128,
    "max_value_entries": 1_000_000,
    "max_text_bytes": 64 * _MIB,
    "max_script_bytes": 1 * _MIB,
    "max_logs": 10_000,
    "max_messages": 10_000,
    "max_staged_scripts": 10_000,
    "max_tree_nodes": 10_000_000,
    "max_tree_text_bytes": 512 * _MIB,
}
