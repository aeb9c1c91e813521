"""Where the namespace meets the mounts: ``/mounts/<name>/...`` paths and their records.

``/mounts`` itself, and each ``/mounts/<name>`` descriptor, are committed
process state. A path with a mount name resolves through the process's
:class:`~svit_cluster.mounts.MountRegistry` (reads, listings, facts), and a
write below it is recorded as a ``mount_write``/``mount_remove`` mutation that
the owner applies after the commit (:func:`mount_ops`).
"""

from __future__ import annotations

from svit_cluster.mounts import (
    MOUNT_OPS,
    MountDescriptor,
    MountOp,
    MountPath,
    check_mounts_value,
    split_mount_path,
)
from svit_cluster.process._transaction import Transaction
from svit_cluster.process._tree import Node, get_node, value_from_node
from svit_cluster.values import parse_path

__all__ = ["committed_mounts", "mount_ops", "mount_target"]

_PREFIX = "/mounts/"


def mount_target(path: str) -> tuple[str, MountPath] | None:
    """``(name, path below the mount)`` when ``path`` names a mount or a node
    inside one, None for any other path (``/mounts`` itself included).

    Raises:
        InvalidInput: (``invalid_path``) a malformed path (``..`` included) or
            segment below the mount.
        InvalidMount: (``invalid_mount``) a malformed mount name.
    """
    if not (isinstance(path, str) and path.startswith(_PREFIX)):
        return None
    return split_mount_path(parse_path(path))


def committed_mounts(root: Node) -> dict[str, MountDescriptor]:
    """The descriptors ``root`` holds under ``/mounts``, by name."""
    node = get_node(root, ("mounts",))
    return {} if node is None else check_mounts_value(value_from_node(node))


def mount_ops(record: Transaction) -> list[MountOp]:
    """The mount writes a committed record carries, in record order."""
    out: list[MountOp] = []
    for mut in record.mutations:
        if mut.op in MOUNT_OPS:
            name, rel = split_mount_path(parse_path(mut.path))
            out.append(MountOp(mut.op, name, rel, mut.value))
    return out
