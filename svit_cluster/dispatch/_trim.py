"""Trimming of source streams: drop an entry once every consumer group acknowledged it.

Without it an outbox stream (``<prefix>:{P}:outbox``) and the re-drive stream
grow by one entry per committed intent forever. The dispatcher trims after
each batch it acknowledged (``DispatchConfig.trim_acked``, on by default).

The rule, computed and applied in **one Lua script on one key** (the stream;
one Redis Cluster slot, no multi-slot command), so no read or ack interleaves:

* for every consumer group G of the stream: ``floor(G)`` = G's oldest pending
  entry id (``XPENDING`` summary) if G has pending entries, else G's
  last-delivered id. Every entry below ``floor(G)`` was delivered to G and is
  not pending in G, i.e. G acknowledged it;
* ``XTRIM <stream> MINID <min over groups of floor(G)>``: removes only entries
  strictly below that id. The entry at the floor itself (the newest
  acknowledged one when nothing is pending) is kept, so a stream that was ever
  read keeps at least one entry (the status API reads the retained window's
  first version from it);
* a stream without any consumer group is never trimmed (nobody has
  acknowledged anything yet).

Safety: last-delivered ids only move forward and new pending entries are only
ever above the last-delivered id (``XREADGROUP >``) or move between consumers
(``XCLAIM``/``XAUTOCLAIM``, same id), so an entry below the floor can never
become needed again by an existing group. The script needs no lease or
fencing token: whoever runs it (also a paused, stale worker) can only remove
what every group already acknowledged. Not covered: a consumer group created
*later* (``XGROUP CREATE … 0``) or moved back with ``XGROUP SETID`` does not
see trimmed entries (the dispatcher creates its group when it discovers the
stream, before its first read).

Counting after trimming: the stream's own ``entries-added`` counter
(``XINFO STREAM``, kept across trims, in RDB and in AOF rewrites) is the number
of intents ever committed; see :func:`svit_cluster.dispatch.outbox_summary`.
"""

from __future__ import annotations

from typing import Any

from svit_cluster.store import RedisClient

__all__ = ["TRIM_ACKED_SCRIPT", "parse_trim_reply", "trim_acked"]

# KEYS: a source stream.  Returns {entries removed, the MINID used ('' = none)}.
TRIM_ACKED_SCRIPT = """
local ok, groups = pcall(redis.call, 'XINFO', 'GROUPS', KEYS[1])
if not ok or #groups == 0 then
  return {0, ''}
end
local function less(a, b)
  local am, as = string.match(a, '^(%d+)-(%d+)$')
  local bm, bs = string.match(b, '^(%d+)-(%d+)$')
  if #am ~= #bm then return #am < #bm end
  if am ~= bm then return am < bm end
  if #as ~= #bs then return #as < #bs end
  return as < bs
end
local floor = nil
for _, g in ipairs(groups) do
  local f = {}
  for i = 1, #g, 2 do f[g[i]] = g[i + 1] end
  local mine = f['last-delivered-id']
  if tonumber(f['pending']) > 0 then
    local summary = redis.call('XPENDING', KEYS[1], f['name'])
    if less(summary[2], mine) then mine = summary[2] end
  end
  if floor == nil or less(mine, floor) then floor = mine end
end
if floor == '0-0' then
  return {0, floor}
end
return {redis.call('XTRIM', KEYS[1], 'MINID', floor), floor}
"""


def parse_trim_reply(reply: Any) -> tuple[int, str]:
    """``(removed, minid)`` from the script's reply."""
    raw = reply[1]
    return int(reply[0]), raw.decode() if isinstance(raw, bytes) else str(raw)


def trim_acked(client: RedisClient, stream: str) -> tuple[int, str]:
    """Trim ``stream`` below what every consumer group acknowledged (one script).

    Args:
        client: a redis-py client (single server or cluster).
        stream: a source stream key (outbox or re-drive stream).

    Returns:
        ``(removed, minid)``: entries removed and the ``MINID`` used (``""``
        when the stream does not exist or has no consumer group).

    Raises:
        redis.exceptions.RedisError: Redis failed (nothing or the whole trim ran).
    """
    script: Any = client.register_script(TRIM_ACKED_SCRIPT)
    return parse_trim_reply(script(keys=[stream]))

