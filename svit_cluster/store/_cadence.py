"""When the owner's next snapshot is due: commits and record bytes since the last one.

:class:`SnapshotCadence` counts what the stream holds above the latest snapshot,
as far as this owner knows it: a create or a stored snapshot resets it, a
commit or a re-synchronisation adds to it, a restore sets it to the tail it
read. A snapshot is due once the count reaches ``snapshot_every`` or the bytes
reach ``snapshot_max_tail_bytes``. It also remembers the process's
:class:`~svit_cluster.process.Limits` (needed to build the state to snapshot).
Thread-safe: one lock around every read and change.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from svit_cluster.process import Limits

__all__ = ["SnapshotCadence"]


class SnapshotCadence:
    """Commits and record bytes since the latest snapshot, and the process's limits.

    Args:
        every: commits after which a snapshot is due (``StoreConfig.snapshot_every``).
        max_tail_bytes: record bytes after which one is due earlier
            (``StoreConfig.snapshot_max_tail_bytes``).
    """

    def __init__(self, every: int, max_tail_bytes: int) -> None:
        self._every = every
        self._max_tail_bytes = max_tail_bytes
        self._lock = threading.Lock()
        self._limits: Limits | None = None
        self._since_snapshot = 0
        self._tail_bytes = 0

    def reset(self, limits: Limits | None = None) -> None:
        """A snapshot (or a create) was stored: nothing above it. ``limits``, when
        given, replaces the remembered limits."""
        with self._lock:
            if limits is not None:
                self._limits = limits
            self._since_snapshot = 0
            self._tail_bytes = 0

    def restored(self, limits: Limits, entries: int, record_bytes: int) -> None:
        """A restore read ``entries`` tail entries (``record_bytes`` in all) above the snapshot."""
        with self._lock:
            self._limits = limits
            self._since_snapshot = entries
            self._tail_bytes = record_bytes

    def add(self, entries: int, record_bytes: int) -> None:
        """``entries`` more (``record_bytes`` in all) were committed above the snapshot."""
        with self._lock:
            self._since_snapshot += entries
            self._tail_bytes += record_bytes

    def committed(self, record_bytes: int, limits_of: Callable[[], Limits]) -> Limits | None:
        """Count one commit of ``record_bytes``. When a snapshot is now due, the
        limits to build it with (``limits_of()`` is called, and remembered, only
        when none are known yet; what it raises propagates); else None."""
        with self._lock:
            self._since_snapshot += 1
            self._tail_bytes += record_bytes
            due = (self._since_snapshot >= self._every
                   or self._tail_bytes >= self._max_tail_bytes)
            if not due:
                return None
            if self._limits is None:
                self._limits = limits_of()
            return self._limits
