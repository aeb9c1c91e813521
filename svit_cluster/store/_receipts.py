"""The owner's in-memory copy of one process's stored receipts (no I/O).

While an owner's token is the fence, that owner is the only writer of the
receipts (every receipt write is a fenced script of a token >= the fence), so
the copy its claim loaded plus every receipt it stored since is exactly what
Redis holds, with the same FIFO eviction (``store_receipt`` in ``_scripts``).
Rules this cache keeps:

* it is empty (not loaded) until :meth:`ReceiptCache.install`, and again after
  :meth:`ReceiptCache.forget` (a write's outcome is unknown, or the head moved
  unexpectedly): the owner reloads it, fenced, before it answers;
* once :meth:`ReceiptCache.fence` recorded a fence above the token it is
  discarded for good and never installed again (fences only rise);
* it is thread-safe (one lock around every read and change).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Sequence

__all__ = ["ReceiptCache"]


class ReceiptCache:
    """Receipt field -> stored value, and the eviction order (mirrors ``receipts:order``).

    Args:
        max_receipts: the bound the scripts evict at (``StoreConfig.max_receipts``).
    """

    def __init__(self, max_receipts: int) -> None:
        self._max = max_receipts
        self._lock = threading.Lock()
        self._receipts: dict[bytes, bytes] | None = None
        self._order: deque[bytes] = deque()
        #: The fence a script reported above the owner's token (then sticky).
        self.fenced_by: int | None = None

    @property
    def loaded(self) -> bool:
        """Whether a copy is installed (False before a load and after a discard)."""
        with self._lock:
            return self._receipts is not None

    def get(self, field: bytes) -> bytes | None:
        """The stored value of ``field``, or None (not stored, evicted, or not loaded)."""
        with self._lock:
            return None if self._receipts is None else self._receipts.get(field)

    def install(self, order: Sequence[bytes], flat: Sequence[bytes]) -> None:
        """Install the copy a claim script returned: ``order`` (oldest first) and
        ``flat`` (``HGETALL``: field, value, field, value...). Ignored once fenced.

        The hash and the order list are mirrored as they are (the scripts keep
        them consistent; should they not be, memory still evicts exactly what
        ``store_receipt`` would).
        """
        stored = {flat[i]: flat[i + 1] for i in range(0, len(flat), 2)}
        with self._lock:
            if self.fenced_by is None:
                self._receipts = stored
                self._order = deque(order)

    def remember(self, field: bytes, value: bytes) -> None:
        """Apply one stored receipt exactly as ``store_receipt`` did in Redis
        (a new field is appended and the oldest beyond ``max_receipts`` evicted).
        Nothing when the copy is not loaded."""
        with self._lock:
            receipts = self._receipts
            if receipts is None:
                return
            if field not in receipts:
                self._order.append(field)
                while len(self._order) > self._max:
                    receipts.pop(self._order.popleft(), None)
            receipts[field] = value

    def forget(self) -> None:
        """Discard the copy (a write's outcome is unknown); the owner reloads it
        (fenced) before its next answer."""
        with self._lock:
            self._receipts = None
            self._order.clear()

    def fence(self, fence: int) -> None:
        """Record ``fence`` (above the owner's token) and discard the copy for good."""
        with self._lock:
            self.fenced_by = fence
            self._receipts = None
            self._order.clear()
