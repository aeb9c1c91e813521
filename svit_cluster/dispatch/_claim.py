"""Who reads which source stream: a hash ring of live workers plus per-stream claims.

A *stream claim* is the dispatcher's own mutual exclusion over one outbox stream
(a Redis key with a TTL and a fencing counter). It is not the etcd host lease of
:mod:`svit_cluster.ownership`, and not Redis's ``XCLAIM``/``XAUTOCLAIM`` of pending
entries (``claim_idle_s``). Its Redis keys keep their names from before the
rename (``<stream>:lease``, ``<stream>:lease-token``; see ``_keys``), so workers of
the old and the new version exclude each other during a rolling upgrade.

* **Membership.** Each worker heartbeats into the sorted set
  ``<prefix>:{dispatch}:workers`` (score = expiry in ms on the Redis clock, so
  hosts' clocks do not matter). Members past their expiry are dropped.
* **Placement.** Rendezvous (highest-random-weight) hashing maps each stream to
  one live worker. Adding a worker moves only the streams it now wins.
* **Mutual exclusion.** A worker reads a stream only while it holds the
  stream's claim ``<stream>:lease`` (``SET NX PX`` with its name). It renews its
  claims every heartbeat and treats a claim as lost locally once
  ``0.8 x claim_ttl_s`` have passed since the last successful renewal was sent,
  before Redis can expire it. The hash ring only says which claims a worker
  *tries* to take; the claim is what is checked before every delivery attempt.
* **Fencing.** Every acquire of a claim increments the stream's counter
  ``<stream>:lease-token`` and hands the new value to the holder: its fencing
  token. Every write a worker makes after a network call (the ``XACK`` of a
  delivered entry; the settle of a dead letter) runs in one Lua script that
  first compares the worker's token with the counter and refuses when a newer
  holder exists, the way producer epochs fence zombie producers. A dead letter
  is settled only while its entry is still pending, so an entry another
  worker already acknowledged (delivered) is never turned into a dead letter.

States of a claim, seen by its worker:
    HELD -- renewed within ``0.8 x ttl``: may read, deliver and ack.
    LOST -- renewal failed or too old: must stop reading and delivering.

What fencing does *not* give (no token reaches the sinks): a worker paused
longer than the TTL may still *send* one in-flight attempt after another
worker took over. That is a duplicate with the same idempotency key, never a
loss; the Svit inbox sink stores it once. Whatever that attempt's answer, the
paused worker's writes are refused: it cannot acknowledge, dead-letter or
otherwise change the status of an entry it no longer owns.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Iterable
from typing import Any

from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster

from svit_cluster.dispatch._keys import DispatchKeys
from svit_cluster.dispatch._redisutil import text
from svit_cluster.store import AsyncRedisClient

__all__ = ["FenceResult", "StreamClaims", "shard_of"]

#: Outcome of a fenced write: ``ok``; ``fenced`` (a newer claim holder exists,
#: nothing written); ``settled`` (the entry is no longer pending, nothing written).
FenceResult = str

# KEYS: claim, claim token.  ARGV: worker, ttl ms.  Take a free claim (a new
# fencing token) or renew our own (the same token); returns the token, 0 if not held.
_CLAIM = """
local v = redis.call('GET', KEYS[1])
if not v then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return redis.call('INCR', KEYS[2])
end
if v == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  local t = redis.call('GET', KEYS[2])
  if not t then
    return redis.call('INCR', KEYS[2])
  end
  return tonumber(t)
end
return 0
"""

# The fence of every write after a network call. KEYS[2]: claim token; ARGV[1]: token.
_FENCE = """
local current = redis.call('GET', KEYS[2]) or '0'
if tonumber(current) ~= tonumber(ARGV[1]) then
  return {'fenced', current}
end
"""

# KEYS: stream, claim token.  ARGV: token, group, entry id.
_ACK = _FENCE + """
return {'ok', redis.call('XACK', KEYS[1], ARGV[2], ARGV[3])}
"""

# KEYS: stream, claim token, dead-settled.  ARGV: token, group, entry id, dead-letter id.
# Refuses ('settled') an entry that is no longer pending: it was acknowledged
# (delivered, or dead-lettered) already, and that outcome stands.
_SETTLE_DEAD = _FENCE + """
local p = redis.call('XPENDING', KEYS[1], ARGV[2], ARGV[3], ARGV[3], 1)
if #p == 0 then
  return {'settled'}
end
redis.call('XACK', KEYS[1], ARGV[2], ARGV[3])
redis.call('HSET', KEYS[3], ARGV[3], ARGV[4])
return {'ok'}
"""

# KEYS: claim.  ARGV: worker.
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


def shard_of(stream: str, workers: Iterable[str]) -> str | None:
    """The worker that should read ``stream`` (rendezvous hashing); None if no worker."""
    best: tuple[bytes, str] | None = None
    for worker in workers:
        weight = hashlib.blake2b(f"{worker}\x00{stream}".encode(), digest_size=8).digest()
        if best is None or (weight, worker) > best:
            best = (weight, worker)
    return best[1] if best else None


class StreamClaims:
    """Claim and membership operations of one worker (all async, all one round trip).

    Args:
        client: the worker's async Redis client.
        keys: the dispatcher's key names.
        worker: this worker's name (its consumer name too).
        claim_ttl_s: claim TTL in seconds.
        worker_ttl_s: membership TTL in seconds.
    """

    def __init__(self, client: AsyncRedisClient, keys: DispatchKeys, worker: str, *,
                 claim_ttl_s: float, worker_ttl_s: float) -> None:
        self._client = client
        self._keys = keys
        self.worker = worker
        self._claim_ms = int(claim_ttl_s * 1000)
        self._worker_ms = int(worker_ttl_s * 1000)
        self._claim = client.register_script(_CLAIM)
        self._release = client.register_script(_RELEASE)
        self._heartbeat = client.register_script(_HEARTBEAT)
        self._ack = client.register_script(_ACK)
        self._settle_dead = client.register_script(_SETTLE_DEAD)

    async def heartbeat(self) -> list[str]:
        """Refresh this worker's membership; return every live worker (sorted)."""
        reply = await self._heartbeat(keys=[self._keys.workers],
                                      args=[self.worker, self._worker_ms])
        return sorted(text(m) for m in reply)

    async def leave(self) -> None:
        """Drop this worker from the membership set (clean shutdown)."""
        await self._heartbeat(keys=[self._keys.workers], args=[self.worker, ""])

    async def claim(self, streams: list[str]) -> dict[str, int]:
        """Take or renew the claims of ``streams`` (one pipeline).

        Returns:
            stream -> fencing token of the claim held now (>= 1), or 0 where
            another worker holds it. A renewal returns the same token; a claim
            that expired and was taken again gets a new one (a newer holder may
            have been in between).
        """
        if not streams:
            return {}
        replies: list[Any]
        if isinstance(self._client, AsyncRedisCluster):
            # redis-py refuses scripts in a cluster pipeline (the streams are in
            # different slots anyway): one concurrent script call per stream.
            replies = list(await asyncio.gather(
                *(self._claim(keys=[DispatchKeys.claim(s), DispatchKeys.claim_token(s)],
                              args=[self.worker, self._claim_ms]) for s in streams),
                return_exceptions=True))
        else:
            pipe = self._client.pipeline(transaction=False)
            for stream in streams:
                await self._claim(
                    keys=[DispatchKeys.claim(stream), DispatchKeys.claim_token(stream)],
                    args=[self.worker, self._claim_ms], client=pipe)
            replies = await pipe.execute(raise_on_error=False)
        return {s: r if type(r) is int and r > 0 else 0
                for s, r in zip(streams, replies, strict=True)}

    async def ack(self, stream: str, group: str, entry_id: str, token: int) -> FenceResult:
        """``XACK`` one entry, fenced by ``token`` (one script).

        Returns:
            ``ok`` (acknowledged) or ``fenced`` (a newer claim holder exists;
            nothing written).

        Raises:
            redis.exceptions.RedisError: Redis failed (outcome unknown).
        """
        reply = await self._ack(keys=[stream, DispatchKeys.claim_token(stream)],
                                args=[token, group, entry_id])
        return text(reply[0])

    async def settle_dead(self, stream: str, group: str, entry_id: str, token: int,
                          dead_id: str) -> FenceResult:
        """Make a written dead letter the entry's outcome: ``XACK`` it and record
        ``entry -> dead_id`` in ``<stream>:dead-settled``, fenced by ``token``
        and only while the entry is pending (one script).

        Returns:
            ``ok``; ``fenced`` (a newer claim holder exists) or ``settled`` (the
            entry was acknowledged already, e.g. delivered): nothing written.

        Raises:
            redis.exceptions.RedisError: Redis failed (outcome unknown).
        """
        reply = await self._settle_dead(
            keys=[stream, DispatchKeys.claim_token(stream), DispatchKeys.dead_settled(stream)],
            args=[token, group, entry_id, dead_id])
        return text(reply[0])

    async def release(self, stream: str) -> bool:
        """Give up ``stream``'s claim if this worker still holds it."""
        return bool(await self._release(keys=[DispatchKeys.claim(stream)], args=[self.worker]))

    async def holder(self, stream: str) -> str | None:
        """The worker holding ``stream``'s claim, or None."""
        raw = await self._client.get(DispatchKeys.claim(stream))
        return text(raw) if raw is not None else None
