"""The mounts attached to one process, and how ``/mounts/<name>/...`` resolves against them.

Two sources answer a mount path (reference: ``MountView``): the committed
descriptors in the root say *what is mounted here*; the attached providers say
*what is there now*. A descriptor without an attached provider reads as
``attached: false`` at the mount root and fails closed below it
(``mount_unavailable``).

Writes never precede the commit. A guest's write below a writable mount is
checked when it is made (:meth:`MountRegistry.check_write`), recorded in the
activation's transaction as a ``mount_write`` or ``mount_remove`` mutation,
and applied by :meth:`MountRegistry.apply` only after the transaction is
committed, in commit order, under the owner's fencing token where the mount
has a fence. A failed activation, or a commit the fence refused, applies
nothing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from svit_cluster.errors import (
    ErrorCode,
    InvalidInput,
    InvalidSnapshot,
    MountDenied,
    MountUnavailable,
    SvitError,
)
from svit_cluster.mounts._model import (
    MAX_MOUNTS,
    MountDescriptor,
    MountFence,
    MountNode,
    MountPath,
    MountProvider,
    validate_mount_name,
)
from svit_cluster.values import Limits, Value

__all__ = ["MOUNT_OPS", "MountOp", "MountRegistry", "check_mounts_value", "split_mount_path"]

log = logging.getLogger("svit_cluster.mounts")

#: Mutation ops that carry a mount write in a transaction record; they leave the
#: process root unchanged and are applied to the mount after the commit.
MOUNT_OPS = frozenset({"mount_write", "mount_remove"})


@dataclass(frozen=True, slots=True)
class MountOp:
    """One committed mount write: ``op`` (``mount_write``/``mount_remove``) of
    ``value`` at ``path`` below mount ``name``."""

    op: str
    name: str
    path: MountPath
    value: Value = None


def split_mount_path(segments: tuple[str, ...]) -> tuple[str, MountPath]:
    """``("mounts", name, *rest)`` -> ``(name, MountPath(rest))``.

    Raises:
        InvalidMount: (``invalid_mount``) a bad mount name.
        InvalidInput: (``invalid_path``) a bad segment below it.
    """
    return validate_mount_name(segments[1]), MountPath.of(segments[2:])


def check_mounts_value(value: Value) -> dict[str, MountDescriptor]:
    """Parse a committed ``/mounts`` map into descriptors (restore validation).

    Raises:
        InvalidSnapshot: (``invalid_snapshot``) not a map, more than
            :data:`MAX_MOUNTS` entries, a bad name or a bad descriptor.
    """
    if not isinstance(value, dict):
        raise InvalidSnapshot("/mounts is not a map")
    if len(value) > MAX_MOUNTS:
        raise InvalidSnapshot(f"/mounts holds more than {MAX_MOUNTS} mounts")
    out: dict[str, MountDescriptor] = {}
    for name, record in value.items():
        try:
            out[validate_mount_name(name)] = MountDescriptor.from_value(record)
        except SvitError as exc:
            raise InvalidSnapshot(f"/mounts/{name[:64]}: {exc.message}") from None
    return out


def _node_record(name: str, descriptor: MountDescriptor, path: MountPath,
                 node: MountNode | None) -> dict[str, Value]:
    return {
        "access": descriptor.access,
        "attached": True,
        "facts": dict(node.facts) if node is not None else {},
        "kind": node.kind if node is not None else "missing",
        "locality": descriptor.locality,
        "mount": name,
        "path": path.display(),
        "source": descriptor.source,
    }


def _detached_record(name: str, descriptor: MountDescriptor) -> dict[str, Value]:
    return {
        "access": descriptor.access,
        "attached": False,
        "facts": {},
        "kind": descriptor.kind,
        "locality": descriptor.locality,
        "mount": name,
        "path": "/",
        "source": descriptor.source,
    }


def _detached(name: str) -> MountUnavailable:
    return MountUnavailable(f"mount provider is not attached: {name}; this host retries "
                            "the attach when the mount is next used (its log says why "
                            "it failed)")


@dataclass(slots=True)
class _Attachment:
    provider: MountProvider
    fence: MountFence | None = None
    token: int = 0


class MountRegistry:
    """The providers attached to one process (runtime state: never in a snapshot).

    Every method that takes ``committed`` resolves against the descriptors the
    process root holds (``/mounts`` parsed by :func:`check_mounts_value`).
    """

    __slots__ = ("_attached", "_clock", "_deferred", "_pending")

    #: Seconds between two attempts of a deferred attach (:meth:`attach_later`).
    RETRY_S = 1.0
    #: A fenced mount's watermark advances at least every this many committed
    #: versions, writes or not, while nothing is pending: the watermark then
    #: stays within the log tail a new owner reads (the store keeps at least
    #: its trim margin, 16 entries, below the newest snapshot), so a takeover
    #: never mistakes versions trimmed long after they were applied for a gap.
    WATERMARK_EVERY = 16

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._attached: dict[str, _Attachment] = {}
        self._clock = clock
        #: Attaches that failed, retried when the mount is next used:
        #: name -> (attempt, monotonic time of the next try).
        self._deferred: dict[str, tuple[Callable[[], None], float]] = {}
        #: Committed mount writes whose apply failed: ``(version, ops)``, retried
        #: in order by :meth:`flush` before the next transaction.
        self._pending: list[tuple[int, list[MountOp], Limits]] = []

    # -- attachments ----------------------------------------------------------------

    def attach(self, name: str, provider: MountProvider, *, process_id: str = "",
               token: int | None = None, head_version: int = 0,
               history: Callable[[int], Iterable[tuple[int, list[MountOp]]]] | None = None,
               limits: Limits | None = None) -> None:
        """Attach ``provider`` as mount ``name``.

        With a ``token`` (an owner in the cluster) and a provider that has a
        fence for ``process_id``, the owner first takes the fence, then
        re-applies every committed write the previous owner left unapplied:
        ``history(watermark)`` yields ``(version, ops)`` of the committed
        records above the watermark, up to ``head_version``.

        Raises:
            MountUnavailable: a newer owner holds the fence, or the fence or a
                re-applied write failed (the mount stays detached).
        """
        fence = provider.fence(process_id) if token is not None else None
        if fence is not None and token is not None:
            watermark = fence.begin(token)
            if watermark < head_version:
                self._catch_up(name, provider, fence, token, watermark, head_version, history,
                               limits or Limits())
        self._attached[name] = _Attachment(provider, fence, token or 0)

    def _catch_up(self, name: str, provider: MountProvider, fence: MountFence, token: int,
                  watermark: int, head_version: int,
                  history: Callable[[int], Iterable[tuple[int, list[MountOp]]]] | None,
                  limits: Limits) -> None:
        seen = watermark
        for version, ops in (history(watermark) if history is not None else ()):
            mine = [op for op in ops if op.name == name]
            # -1: no owner ever applied a write of this process here (the
            # fence is new), so nothing earlier can be missing.
            if version > watermark + 1 and seen == watermark >= 0:
                # The records between the watermark and the oldest one kept
                # were trimmed: any write they held is not re-applied.
                log.error("mount %s is behind the log: versions %d..%d were trimmed before "
                          "they were applied; their writes, if any, are not re-applied",
                          name, watermark + 1, version - 1)
            seen = version
            if mine and not fence.apply(token, version, _steps(provider, mine, limits)):
                raise MountUnavailable(f"mount {name} is fenced by a newer owner")
        if not fence.apply(token, head_version, lambda: None):
            raise MountUnavailable(f"mount {name} is fenced by a newer owner")

    def attach_later(self, name: str, attempt: Callable[[], None]) -> None:
        """Retry a failed attach when mount ``name`` is next used (at most once
        per :attr:`RETRY_S`): ``attempt`` calls :meth:`attach` (through
        ``Process.attach_mount``) and raises while it still fails."""
        self._deferred[name] = (attempt, self._clock())

    def _ensure(self, name: str) -> None:
        deferred = self._deferred.get(name)
        if deferred is None or name in self._attached or self._clock() < deferred[1]:
            return
        attempt = deferred[0]
        try:
            attempt()
        except SvitError as exc:
            self._deferred[name] = (attempt, self._clock() + self.RETRY_S)
            log.warning("mount %s still not attached: %s", name, exc)
            return
        self._deferred.pop(name, None)

    def attached(self, name: str) -> bool:
        return name in self._attached

    def names(self) -> list[str]:
        return sorted(self._attached)

    def providers(self) -> dict[str, MountProvider]:
        """The attached providers by name (a fork shares them, without fences)."""
        return {n: a.provider for n, a in self._attached.items()}

    def descriptors(self) -> dict[str, MountDescriptor]:
        return {n: a.provider.descriptor() for n, a in self._attached.items()}

    # -- reads ------------------------------------------------------------------------

    def _descriptor(self, committed: dict[str, MountDescriptor], name: str) -> MountDescriptor:
        self._ensure(name)
        try:
            return committed[name]
        except KeyError:
            raise InvalidInput(f"/mounts/{name} is not mounted",
                               code=ErrorCode.INVALID_PATH) from None

    def _provider(self, name: str) -> MountProvider:
        att = self._attached.get(name)
        if att is None:
            raise _detached(name)
        return att.provider

    def read(self, committed: dict[str, MountDescriptor], name: str, path: MountPath,
             limits: Limits) -> Value:
        """The content of a leaf, the node record of a directory or of the mount
        root, or None when nothing is there.

        Raises:
            InvalidInput: (``invalid_path``) ``name`` is not mounted.
            MountUnavailable: no provider attached (the mount root still reads
                as its ``attached: false`` record).
            MountDenied: the mount is write-only, or the path crosses a link.
            LimitExceeded: a leaf over ``max_text_bytes``.
        """
        descriptor = self._descriptor(committed, name)
        if name not in self._attached:
            if path.is_root:
                return _detached_record(name, descriptor)
            raise _detached(name)
        provider = self._provider(name)
        if path.is_root:
            return _node_record(name, descriptor, path, provider.stat(path, limits))
        if not descriptor.readable:
            raise MountDenied(f"/mounts/{name} is write-only")
        content = provider.read(path, limits)
        if content is not None:
            return content
        node = provider.stat(path, limits)
        return None if node is None else _node_record(name, descriptor, path, node)

    def stat(self, committed: dict[str, MountDescriptor], name: str, path: MountPath,
             limits: Limits) -> Value:
        """The node record at ``path`` (None when nothing is there); raises like :meth:`read`."""
        descriptor = self._descriptor(committed, name)
        if name not in self._attached:
            if path.is_root:
                return _detached_record(name, descriptor)
            raise _detached(name)
        node = self._provider(name).stat(path, limits)
        if node is None and not path.is_root:
            return None
        return _node_record(name, descriptor, path, node)

    def discover(self, committed: dict[str, MountDescriptor], name: str, path: MountPath,
                 limits: Limits) -> list[str]:
        """Sorted child names of a mount directory; raises like :meth:`read`, and
        ``invalid_path`` for a leaf or nothing."""
        descriptor = self._descriptor(committed, name)
        if not descriptor.readable:
            raise MountDenied(f"/mounts/{name} is write-only")
        return self._provider(name).list(path, limits)

    # -- writes -----------------------------------------------------------------------

    def check_write(self, committed: dict[str, MountDescriptor], name: str, path: MountPath,
                    value: Value | None, limits: Limits) -> None:
        """Check a write (``value``) or removal (None) before it is recorded.

        Raises:
            InvalidInput: (``invalid_path``) ``name`` is not mounted, or the
                path is the mount root; (``invalid_value``) a bad value.
            MountDenied: the mount is read-only.
            MountUnavailable: no provider attached.
            LimitExceeded: a value over the bounds.
        """
        descriptor = self._descriptor(committed, name)
        if not descriptor.writable:
            raise MountDenied(f"/mounts/{name} is read-only")
        provider = self._provider(name)
        if path.is_root:
            raise InvalidInput(f"cannot replace the root of mount {name}",
                               code=ErrorCode.INVALID_PATH)
        provider.check_write(path, value, limits)

    def flush(self) -> None:
        """Re-apply committed writes whose apply failed, in order, before anything else commits.

        Raises:
            MountUnavailable: one still fails (nothing new may commit on top of
                a mount that is behind its log).
        """
        while self._pending:
            version, ops, limits = self._pending[0]
            try:
                self._apply_ops(version, ops, limits)
            except MountUnavailable:
                raise
            except SvitError as exc:
                log.error("committed mount writes of version %d cannot be applied, left "
                          "behind the log: %s", version, exc)
            self._pending.pop(0)

    def apply(self, version: int, ops: list[MountOp], limits: Limits) -> None:
        """Apply the mount writes of the committed ``version``, in record order
        (called for every committed version: one without writes may advance
        the watermarks, see :attr:`WATERMARK_EVERY`).

        Never raises: an apply that failed for a transient reason
        (``mount_unavailable``: the volume, the lock) is logged and kept for
        :meth:`flush`; one that cannot succeed (its target's directory removed
        from outside) is logged and dropped; a write the fence refuses (a newer
        owner exists) is logged and dropped.
        """
        if not ops:
            if not self._pending and version % self.WATERMARK_EVERY == 0:
                self._advance(version)
            return
        if self._pending:
            self._pending.append((version, ops, limits))
            return
        try:
            self._apply_ops(version, ops, limits)
        except MountUnavailable as exc:
            log.error("committed mount writes of version %d not applied yet: %s", version, exc)
            self._pending.append((version, ops, limits))
        except SvitError as exc:
            # Not transient (the target's directory was removed from outside,
            # a link was planted there): retrying cannot succeed, and holding
            # it would block every later commit. The folder stays behind the
            # log for this write; the error names it.
            log.error("committed mount writes of version %d cannot be applied, left "
                      "behind the log: %s", version, exc)

    def _advance(self, version: int) -> None:
        """Move every fenced mount's watermark to ``version`` (nothing to write)."""
        for name, att in self._attached.items():
            if att.fence is None:
                continue
            try:
                att.fence.apply(att.token, version, lambda: None)
            except SvitError as exc:
                log.warning("mount %s: watermark not advanced to %d: %s", name, version, exc)

    def _apply_ops(self, version: int, ops: list[MountOp], limits: Limits) -> None:
        by_name: dict[str, list[MountOp]] = {}
        for op in ops:
            by_name.setdefault(op.name, []).append(op)
        for name, mine in by_name.items():
            att = self._attached.get(name)
            if att is None:
                raise _detached(name)
            step = _steps(att.provider, mine, limits)
            try:
                if att.fence is None:
                    step()
                elif not att.fence.apply(att.token, version, step):
                    log.warning("mount %s: writes of version %d refused by the fence "
                                "(a newer owner holds it); nothing applied", name, version)
            except SvitError:
                raise
            except OSError as exc:
                raise MountUnavailable(f"mount {name}: write failed ({type(exc).__name__})"
                                       ) from exc


def _steps(provider: MountProvider, ops: list[MountOp], limits: Limits) -> Callable[[], None]:
    def run() -> None:
        for op in ops:
            if op.op == "mount_write":
                provider.write(op.path, op.value, limits)
            else:
                provider.remove(op.path, limits)
    return run
