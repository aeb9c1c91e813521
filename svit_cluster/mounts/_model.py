"""Mount identity, node facts, mount-relative paths and the provider contract.

A mount makes external data visible below ``/mounts/<name>``. The committed
process root stores only the mount's :class:`MountDescriptor` (``{access,
kind, locality, source}``); content and node facts come from a host-attached
:class:`MountProvider` when a path is read, listed, stated or written
(reference: ``crates/svit/src/mounts.rs``; docs/conformance.md, "Mounts").
Providers are authority and never serialized, so a restored snapshot keeps
the identity and loses the authority until the serving host attaches again.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, Protocol

from svit_cluster.errors import ErrorCode, InvalidInput, InvalidMount, MountDenied
from svit_cluster.values import Limits, Value

__all__ = [
    "ACCESS_MODES",
    "LOCALITIES",
    "MAX_MOUNTS",
    "MountDescriptor",
    "MountFence",
    "MountNode",
    "MountPath",
    "MountProvider",
    "validate_mount_name",
]

#: Granted operations, as the reference spells them.
ACCESS_MODES = ("read", "write", "read-write")
#: Where a mount's data lives: ``cache`` (materialized in the host's memory),
#: ``local`` (a file system the host reaches), ``remote`` (across a network).
LOCALITIES = ("cache", "local", "remote")
#: Mounts one process may hold.
MAX_MOUNTS = 64

Access = Literal["read", "write", "read-write"]
Locality = Literal["cache", "local", "remote"]

_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_KIND = re.compile(r"[a-z0-9-]{1,64}")
_MAX_SEGMENTS = 64
_MAX_SEGMENT_BYTES = 255
_DESCRIPTOR_FIELDS = frozenset({"access", "kind", "locality", "source"})


def validate_mount_name(name: object) -> str:
    """Return ``name`` when it is a mount name: 1-64 of ``A-Z a-z 0-9 _ -``.

    Raises:
        InvalidMount: (``invalid_mount``) anything else (reference:
            ``validate_mount_name``).
    """
    if type(name) is not str or not _NAME.fullmatch(name):
        raise InvalidMount(f"invalid mount name: {str(name)[:80]!r}")
    return name


@dataclass(frozen=True, slots=True)
class MountDescriptor:
    """The committed identity of one mount: the value at ``/mounts/<name>`` in the root.

    Attributes:
        kind: the provider kind (``folder``, ``sql-query``, ``value``): 1-64 of
            ``a-z 0-9 -``.
        source: the origin the operator discloses to guests (a folder path, a
            query's label); never a credential.
        locality: one of :data:`LOCALITIES`.
        access: one of :data:`ACCESS_MODES`.
    """

    kind: str
    source: str
    locality: Locality = "local"
    access: Access = "read"

    @property
    def readable(self) -> bool:
        return self.access in ("read", "read-write")

    @property
    def writable(self) -> bool:
        return self.access in ("write", "read-write")

    def to_value(self) -> dict[str, Value]:
        """``{access, kind, locality, source}``, the committed record."""
        return {"access": self.access, "kind": self.kind, "locality": self.locality,
                "source": self.source}

    @classmethod
    def from_value(cls, value: Value) -> MountDescriptor:
        """Parse a committed record.

        Raises:
            InvalidMount: (``invalid_mount``) not a map of exactly the four
                text fields, or a bad kind, locality or access.
        """
        if not isinstance(value, dict) or set(value) != _DESCRIPTOR_FIELDS:
            raise InvalidMount("mount record must hold exactly access, kind, locality "
                               "and source")
        if not all(isinstance(value[k], str) for k in _DESCRIPTOR_FIELDS):
            raise InvalidMount("mount record fields must be text")
        kind, source = str(value["kind"]), str(value["source"])
        locality, access = str(value["locality"]), str(value["access"])
        if not _KIND.fullmatch(kind):
            raise InvalidMount(f"invalid mount kind: {kind[:80]!r}")
        if locality not in LOCALITIES:
            raise InvalidMount(f"unknown mount locality: {locality[:40]!r}")
        if access not in ACCESS_MODES:
            raise InvalidMount(f"unknown mount access: {access[:40]!r}")
        return cls(kind, source, locality, access)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class MountNode:
    """Facts about one node inside a mount: ``kind`` and provider ``facts``.

    Attributes:
        kind: ``"directory"`` (listable with ``discover``) or ``"leaf"``
            (readable as one value).
        facts: plain values, e.g. ``{"content": "text/plain", "bytes": 12}``.
    """

    kind: Literal["directory", "leaf"]
    facts: dict[str, Value] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class MountPath:
    """A path relative to one mount's root: validated segments, never ``.`` or ``..``.

    Attributes:
        segments: the segments below the mount root (empty: the root itself).
    """

    segments: tuple[str, ...] = ()

    @classmethod
    def of(cls, segments: tuple[str, ...]) -> MountPath:
        """Validate segments already split from a namespace path.

        Raises:
            InvalidInput: (``invalid_path``) more than 64 segments, or one that
                is empty, ``.``, ``..``, over 255 UTF-8 bytes, or holds ``\\``
                or NUL (reference: ``MountPath::parse``). Nothing reaches a
                provider before this check.
        """
        if len(segments) > _MAX_SEGMENTS:
            raise InvalidInput("mount path is too deep", code=ErrorCode.INVALID_PATH)
        for seg in segments:
            if (seg in ("", ".", "..") or "\\" in seg or "\0" in seg
                    or len(seg.encode("utf-8", "surrogatepass")) > _MAX_SEGMENT_BYTES
                    or any("\ud800" <= ch <= "\udfff" for ch in seg)):
                raise InvalidInput(f"invalid mount path segment: {seg[:80]!r}",
                                   code=ErrorCode.INVALID_PATH)
        return cls(tuple(segments))

    @property
    def is_root(self) -> bool:
        return not self.segments

    def display(self) -> str:
        """The mount-relative form, always starting with ``/``."""
        return "/" + "/".join(self.segments)


class MountFence(Protocol):
    """Orders the writes of successive owners of one process on one shared mount.

    A writable mount that outlives its owner (a folder every host reaches)
    fences it like the commit log: every apply carries the owner's fencing
    token, and a token lower than one the mount has already seen applies
    nothing. It also keeps the highest version applied (the watermark), so a
    new owner re-applies exactly the committed writes the last one left.
    """

    def begin(self, token: int) -> int:
        """Record ``token`` as the mount's owner and return the watermark (-1: none).

        Raises:
            MountUnavailable: a higher token already holds the fence (this
                owner is stale), or the fence state cannot be read or written.
        """
        ...

    def apply(self, token: int, version: int, step: Callable[[], None]) -> bool:
        """Run ``step`` (the writes of ``version``) unless fenced or already applied.

        Returns:
            False when a higher token holds the fence (nothing ran); True when
            ``step`` ran or ``version`` was already applied.

        Raises:
            whatever ``step`` raises (the watermark is then not advanced).
        """
        ...


class MountProvider(Protocol):
    """A host-owned resolver for one mount (trusted code; receives validated paths).

    ``limits`` are the process's: ``max_text_bytes`` bounds one leaf (the
    reference's "mount leaf bytes"), ``max_value_entries`` one listing or
    result ("mount entries").
    """

    def descriptor(self) -> MountDescriptor:
        """The identity committed under ``/mounts/<name>``."""
        ...

    def stat(self, path: MountPath, limits: Limits) -> MountNode | None:
        """Facts about the node at ``path``, None when nothing is there.

        Raises:
            MountDenied: a symbolic link or special file on the path.
            MountUnavailable: the source cannot be reached.
        """
        ...

    def list(self, path: MountPath, limits: Limits) -> list[str]:
        """Sorted child names of the directory at ``path``.

        Raises:
            InvalidInput: (``invalid_path``) nothing, or a leaf, at ``path``.
            LimitExceeded: more than ``max_value_entries`` children.
        """
        ...

    def read(self, path: MountPath, limits: Limits) -> Value | None:
        """The content of the leaf at ``path``; None for a directory or nothing.

        Raises:
            LimitExceeded: (``resource_limit_exceeded``, "mount leaf bytes")
                content over ``max_text_bytes``.
        """
        ...

    def check_write(self, path: MountPath, value: Value | None, limits: Limits) -> None:
        """Check that writing ``value`` (None: removing) at ``path`` would apply,
        without changing anything (the activation buffers the write and applies
        it after the commit).

        Raises:
            MountDenied: the mount grants no writes.
            InvalidInput: (``invalid_path``/``invalid_value``) a bad target or value.
            LimitExceeded: a value over the bounds.
        """
        ...

    def write(self, path: MountPath, value: Value, limits: Limits) -> None:
        """Replace the leaf at ``path`` with ``value`` (idempotent)."""
        ...

    def remove(self, path: MountPath, limits: Limits) -> None:
        """Remove the leaf at ``path``; removing what is absent does nothing
        (so a re-applied committed removal converges)."""
        ...

    def fence(self, process_id: str) -> MountFence | None:
        """The fence of ``process_id`` on this mount (None: writes need no fence,
        e.g. a read-only mount)."""
        ...


def deny_writes(descriptor: MountDescriptor) -> None:
    """Raise :class:`MountDenied` unless ``descriptor`` grants writes."""
    if not descriptor.writable:
        raise MountDenied(f"mount {descriptor.kind} {descriptor.source[:120]!r} is read-only")
