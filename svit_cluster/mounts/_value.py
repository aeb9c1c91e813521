"""The ``value`` mount: a static value the operator configured, with ``cache`` locality."""

from __future__ import annotations

from svit_cluster.errors import ErrorCode, InvalidInput, LimitExceeded, MountDenied
from svit_cluster.mounts._model import MountDescriptor, MountFence, MountNode, MountPath
from svit_cluster.values import Limits, Value, from_plain_json

__all__ = ["ValueMount", "check_plain", "value_at", "value_node"]


def check_plain(value: Value, limits: Limits) -> Value:
    """Return ``value`` (a plain value) checked against the process's value bounds.

    Raises:
        InvalidInput: (``invalid_value``) not a plain value, or deeper than
            ``max_value_depth``, with more than ``max_value_entries`` entries
            or more than ``max_text_bytes`` of text.
    """
    return from_plain_json(value, max_depth=limits.max_value_depth,
                           max_entries=limits.max_value_entries,
                           max_text_bytes=limits.max_text_bytes)


def value_at(root: Value, path: MountPath) -> tuple[bool, Value]:
    """``(found, value)`` of the node at ``path`` inside ``root`` (maps by key,
    arrays by decimal index)."""
    current = root
    for seg in path.segments:
        if isinstance(current, dict) and seg in current:
            current = current[seg]
        elif isinstance(current, list) and seg.isdecimal() and int(seg) < len(current):
            current = current[int(seg)]
        else:
            return False, None
    return True, current


def value_node(value: Value) -> MountNode:
    """The node facts of one materialized value (the reference's value-mount facts)."""
    if isinstance(value, dict):
        return MountNode("directory", {"content": "object", "entries": len(value)})
    if isinstance(value, list):
        return MountNode("directory", {"content": "array", "entries": len(value)})
    if isinstance(value, str):
        return MountNode("leaf", {"bytes": len(value.encode("utf-8")), "content": "text/plain"})
    return MountNode("leaf", {"content": "scalar"})


class ValueMount:
    """A read-only, already materialized value (``kind`` and ``source`` as given).

    Args:
        kind: the descriptor kind (``value``; ``sql-query`` reuses this class
            for its materialized rows).
        source: the label disclosed to guests.
        value: a plain value, checked against ``limits``.
        limits: bounds the value must fit (``max_value_depth``,
            ``max_value_entries``, ``max_text_bytes``).

    Raises:
        InvalidInput: (``invalid_value``) ``value`` is not a plain value.
        LimitExceeded: it exceeds ``limits``.
    """

    def __init__(self, kind: str, source: str, value: Value, limits: Limits) -> None:
        check_plain(value, limits)
        self._descriptor = MountDescriptor(kind, source, "cache", "read")
        self._value = value

    def descriptor(self) -> MountDescriptor:
        return self._descriptor

    def stat(self, path: MountPath, limits: Limits) -> MountNode | None:
        found, value = value_at(self._value, path)
        return value_node(value) if found else None

    def list(self, path: MountPath, limits: Limits) -> list[str]:
        found, value = value_at(self._value, path)
        if isinstance(value, dict):
            names = sorted(value)
        elif isinstance(value, list):
            names = [str(i) for i in range(len(value))]
        else:
            what = "nothing" if not found else "a leaf"
            raise InvalidInput(f"cannot discover {path.display()[:200]}: {what} is there",
                               code=ErrorCode.INVALID_PATH)
        if len(names) > limits.max_value_entries:
            raise LimitExceeded("mount entries exceed max_value_entries", limit="mount entries")
        return names

    def read(self, path: MountPath, limits: Limits) -> Value:
        found, value = value_at(self._value, path)
        if not found:
            return None
        check_plain(value, limits)
        return value

    def check_write(self, path: MountPath, value: Value | None, limits: Limits) -> None:
        raise MountDenied(f"mount {self._descriptor.source[:120]!r} is read-only")

    def write(self, path: MountPath, value: Value, limits: Limits) -> None:
        raise MountDenied(f"mount {self._descriptor.source[:120]!r} is read-only")

    def remove(self, path: MountPath, limits: Limits) -> None:
        raise MountDenied(f"mount {self._descriptor.source[:120]!r} is read-only")

    def fence(self, process_id: str) -> MountFence | None:
        return None
