"""Who reads which source stream: a hash ring of live workers plus per-stream leases.

* **Membership.** Each worker heartbeats into the sorted set
  ``<prefix>:{dispatch}:workers`` (score = expiry in ms on the Redis clock, so
  hosts' clocks do not matter). Members past their expiry are dropped.
* **Placement.** Rendezvous (highest-random-weight) hashing maps each stream to
  one live worker. Adding a worker moves only the streams it now wins.
* **Mutual exclusion.** A worker reads a stream only while it holds the
  stream's lease ``<stream>:lease`` (``SET NX PX`` with its name). It renews its
  leases every heartbeat and treats a lease as lost locally once
  ``0.8 x lease_ttl_s`` have passed since the last successful renewal was sent,
  before Redis can expire it. The hash ring only says which leases a worker
  *tries* to take; the lease is what is checked before every delivery attempt.

States of a lease, seen by its worker:
    HELD -- renewed within ``0.8 x ttl``: may read, deliver and ack.
    LOST -- renewal failed or too old: must stop reading and delivering; may
        still ack an entry whose delivery the sink already confirmed.

What the lease does *not* give (no fencing token reaches the sinks): a worker
paused longer than the TTL may finish one in-flight attempt after another
worker took over. That is a duplicate with the same idempotency key, never a
loss; the Svit inbox sink stores it once.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

import redis.asyncio as aioredis

from svit_cluster.dispatch._keys import DispatchKeys
from svit_cluster.dispatch._redisutil import text

__all__ = ["LeaseTable", "owner_of"]

# KEYS: lease.  ARGV: worker, ttl ms.  Take a free lease or renew our own.
_CLAIM = """
local v = redis.call('GET', KEYS[1])
if not v then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
if v == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
"""

# KEYS: lease.  ARGV: worker.
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""

# KEYS: workers zset.  ARGV: worker, ttl ms ('' = leave).  Returns live members.
_HEARTBEAT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if ARGV[2] == '' then
  redis.call('ZREM', KEYS[1], ARGV[1])
else
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
end
return redis.call('ZRANGE', KEYS[1], 0, -1)
"""


def owner_of(stream: str, workers: Iterable[str]) -> str | None:
    """The worker that should read ``stream`` (rendezvous hashing); None if no worker."""
    best: tuple[bytes, str] | None = None
    for worker in workers:
        weight = hashlib.blake2b(f"{worker}\x00{stream}".encode(), digest_size=8).digest()
        if best is None or (weight, worker) > best:
            best = (weight, worker)
    return best[1] if best else None


class LeaseTable:
    """Lease and membership operations of one worker (all async, all one round trip).

    Args:
        client: the worker's async Redis client.
        keys: the dispatcher's key names.
        worker: this worker's name (its consumer name too).
        lease_ttl_s: lease TTL in seconds.
        worker_ttl_s: membership TTL in seconds.
    """

    def __init__(self, client: aioredis.Redis, keys: DispatchKeys, worker: str, *,
                 lease_ttl_s: float, worker_ttl_s: float) -> None:
        self._client = client
        self._keys = keys
        self.worker = worker
        self._lease_ms = int(lease_ttl_s * 1000)
        self._worker_ms = int(worker_ttl_s * 1000)
        self._claim = client.register_script(_CLAIM)
        self._release = client.register_script(_RELEASE)
        self._heartbeat = client.register_script(_HEARTBEAT)

    async def heartbeat(self) -> list[str]:
        """Refresh this worker's membership; return every live worker (sorted)."""
        reply = await self._heartbeat(keys=[self._keys.workers],
                                      args=[self.worker, self._worker_ms])
        return sorted(text(m) for m in reply)

    async def leave(self) -> None:
        """Drop this worker from the membership set (clean shutdown)."""
        await self._heartbeat(keys=[self._keys.workers], args=[self.worker, ""])

    async def claim(self, streams: list[str]) -> dict[str, bool]:
        """Take or renew the leases of ``streams`` (one pipeline); True where held now."""
        if not streams:
            return {}
        pipe = self._client.pipeline(transaction=False)
        for stream in streams:
            await self._claim(keys=[DispatchKeys.lease(stream)],
                              args=[self.worker, self._lease_ms], client=pipe)
        replies = await pipe.execute(raise_on_error=False)
        return {s: r == 1 for s, r in zip(streams, replies, strict=True)}

    async def release(self, stream: str) -> bool:
        """Give up ``stream``'s lease if this worker still holds it."""
        return bool(await self._release(keys=[DispatchKeys.lease(stream)], args=[self.worker]))

    async def holder(self, stream: str) -> str | None:
        """The worker holding ``stream``'s lease, or None."""
        raw = await self._client.get(DispatchKeys.lease(stream))
        return text(raw) if raw is not None else None
