"""Mounts: external data below ``/mounts/<name>``, granted by the operator, never by a guest.

The committed root holds each mount's descriptor; the serving host attaches
the providers (:class:`MountProvider`) its operator granted on every
activation of the process, on any host. Writes to a writable mount are
recorded in the activation's transaction and applied after the fenced commit
(:class:`MountRegistry`). Reference semantics: ``crates/svit/src/mounts.rs``
and ``crates/svit/tests/mounts.rs``; ours and the differences:
docs/conformance.md, "Mounts".
"""

from typing import Any

from svit_cluster.mounts._fence import FolderFence
from svit_cluster.mounts._folder import FolderMount
from svit_cluster.mounts._model import (
    ACCESS_MODES,
    LOCALITIES,
    MAX_MOUNTS,
    MountDescriptor,
    MountFence,
    MountNode,
    MountPath,
    MountProvider,
    validate_mount_name,
)
from svit_cluster.mounts._registry import (
    MOUNT_OPS,
    MountOp,
    MountRegistry,
    check_mounts_value,
    split_mount_path,
)
from svit_cluster.mounts._sql import SqlQueryMount
from svit_cluster.mounts._value import ValueMount

__all__ = [
    "ACCESS_MODES",
    "LOCALITIES",
    "MAX_MOUNTS",
    "MOUNT_OPS",
    "FolderFence",
    "FolderMount",
    "MountDescriptor",
    "MountFence",
    "MountGrant",
    "MountNode",
    "MountOp",
    "MountPath",
    "MountProvider",
    "MountRegistry",
    "MountsConfig",
    "SqlQueryMount",
    "ValueMount",
    "check_mounts_value",
    "split_mount_path",
    "validate_mount_name",
]


def __getattr__(name: str) -> Any:
    """Import the grants (pydantic) on first use (PEP 562):
    the process core imports this package for the registry alone.

    Raises:
        AttributeError: ``name`` is not a public name of this package.
    """
    if name in ("MountGrant", "MountsConfig"):
        from svit_cluster.mounts import _config

        return getattr(_config, name)
    raise AttributeError(f"module 'svit_cluster.mounts' has no attribute {name!r}")
