"""The fences of every process in one Redis, for ownership (claim) and operators (scan).

:class:`RedisFences` is what :meth:`svit_cluster.ownership.Owners.claim` checks
tokens against, and what ``svit-cluster etcd-restored`` scans for the highest
fence. It runs the same claim script as :meth:`RedisBackend.claim` (atomic max;
refused when the fence is higher) on a worker thread, so the event loop that
keeps the host lease alive never blocks on Redis.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

from svit_cluster.store._keys import DEFAULT_PREFIX, ProcessKeys
from svit_cluster.store._log import RedisBackend
from svit_cluster.store._log_config import StoreConfig
from svit_cluster.store._redis import RedisClient, redis_boundary

__all__ = ["RedisFences"]


class RedisFences:
    """Claim and read the fences of any process under one key prefix.

    Args:
        client: a redis-py client (see :func:`svit_cluster.store.connect`).
        prefix: the store's key prefix (default ``"svit"``).

    Raises:
        InvalidInput: bad prefix (on first use, from :class:`ProcessKeys`).
    """

    def __init__(self, client: RedisClient, *, prefix: str = DEFAULT_PREFIX) -> None:
        self.client = client
        self.config = StoreConfig(prefix=prefix)

    def claim_sync(self, process_id: str, token: int) -> int:
        """Raise the fence of ``process_id`` to ``token`` (atomic max).

        Returns:
            The fence after the claim (``token``).

        Raises:
            FencedError: the fence is already higher (fields ``token``, ``fence``).
            UnavailableError: Redis failed (retrying is safe).
            InvalidInput: bad process id or token.
        """
        return RedisBackend(self.client, process_id, token, self.config).claim(
            load_receipts=False)

    def fence_sync(self, process_id: str) -> int:
        """The fence of ``process_id`` (0 when never claimed). Raises UnavailableError."""
        keys = ProcessKeys(process_id, self.config.prefix)
        with redis_boundary("fence", process_id):
            raw = self.client.get(keys.fence)
        return 0 if raw is None else int(raw)

    async def claim(self, process_id: str, token: int) -> int:
        """:meth:`claim_sync` on a worker thread (same result and errors)."""
        return await asyncio.to_thread(self.claim_sync, process_id, token)

    async def fence(self, process_id: str) -> int:
        """:meth:`fence_sync` on a worker thread (same result and errors)."""
        return await asyncio.to_thread(self.fence_sync, process_id)

    def scan(self, *, count: int = 1000) -> Iterator[tuple[str, int]]:
        """Every ``(process_id, fence)`` under the prefix (``SCAN``, ``count`` keys a step).

        Values that are not decimal integers are skipped (they cannot be a fence
        any script wrote).

        Raises:
            UnavailableError: Redis failed.
        """
        head = f"{self.config.prefix}:{{"
        tail = "}:fence"
        with redis_boundary("scan_fences", "*"):
            for raw_key in self.client.scan_iter(match=f"{head}*{tail}", count=count):
                key = raw_key.decode() if isinstance(raw_key, bytes) else str(raw_key)
                if not (key.startswith(head) and key.endswith(tail)):
                    continue
                value = self.client.get(raw_key)
                if value is None or not value.isdigit():
                    continue
                yield key[len(head):-len(tail)], int(value)
