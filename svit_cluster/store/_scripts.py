"""The Lua scripts of the fenced commit log (each one runs atomically in Redis).

Every script checks first and writes last: the first write happens only after
every check has passed, and the only write that can fail on bad data (the
``XADD`` with an explicit id) is the first one, run under ``redis.pcall``. So a
script either applies all of its writes or none (Redis does not roll back a
script that errors half-way; this ordering is what makes it all-or-nothing).

Tokens and versions travel as decimal strings and are compared with
``tonumber`` (exact up to 2**53). Replies are arrays whose first element is a
status string: ``ok``, ``fenced`` (with the stored fence), ``conflict`` (with
the head version and chain head), ``missing`` (no such process), ``exists``,
``stale`` (a snapshot at least as new exists), ``not_head`` or ``corrupt``.
"""

from __future__ import annotations

from dataclasses import dataclass

from redis.commands.core import Script

from svit_cluster.store._redis import RedisClient

__all__ = ["ADD_SIGNAL", "CLAIM", "CLAIM_LOAD", "COMMIT", "CREATE", "DELETE", "GET_RECEIPT_SYNCED",
           "PUT_RECEIPT", "SET_RESIDENCY", "SNAPSHOT", "Scripts", "commit_source"]

# Shared helpers, prepended to the scripts that need them.
_FENCE = """
local function fence_check(fence_key, token_arg)
  local raw = redis.call('GET', fence_key) or '0'
  if tonumber(token_arg) < tonumber(raw) then
    return raw, false
  end
  return raw, true
end
local function raise_fence(fence_key, raw, token_arg)
  if tonumber(token_arg) > tonumber(raw) then
    redis.call('SET', fence_key, token_arg)
  end
end
"""

_RECEIPT = """
local function store_receipt(hash_key, order_key, field, value, max)
  if redis.call('HSET', hash_key, field, value) == 1 then
    local n = redis.call('RPUSH', order_key, field)
    for _ = 1, n - tonumber(max) do
      redis.call('HDEL', hash_key, redis.call('LPOP', order_key))
    end
  end
end
"""

# Appends one signal to a process's signal stream (``MAXLEN ~ retention``). Every
# signal carries ``prev``: the id of the signal before it ('0-0' for the first one).
# Retention trims from the head only, so the ``prev`` of the oldest retained signal
# is the newest trimmed id: an observer whose cursor is at least that id has lost
# nothing (svit_cluster.events.observe), even when the trim was exactly at its cursor.
ADD_SIGNAL = """
local function add_signal(key, retention, ...)
  local last = redis.call('XREVRANGE', key, '+', '-', 'COUNT', 1)
  local prev = '0-0'
  if #last > 0 then
    prev = last[1][1]
  end
  return redis.call('XADD', key, 'MAXLEN', '~', retention, '*', 'prev', prev, ...)
end
"""

# KEYS: stream, head, fence, receipts, receipts_order, outbox, signals, queued
# ARGV: token, base_version, base_hash, record, event_hash, root_hash, position,
#       receipt_field ('' = none), receipt_value, max_receipts, new_version,
#       signal_retention, change_json, completion_json ('' = none), traceparent
#       ('' = none), queued ('1': the new state's /inbox is non-empty, '0':
#       empty), intents...
# ``queued`` (KEYS[8]) mirrors the committed inbox: SET to the new version
# when it is non-empty, deleted when empty, in the same script as the commit
# (the last write), so the re-drive index never disagrees with the log.
# The stream entry also names the committing request (field ``request`` = the
# receipt field ``tenant\0client_id\0request_id``; empty for host operations),
# so the owner can answer "did request r commit?" while the entry is retained,
# after its receipt was evicted (``RedisBackend.find_request``), and the W3C
# ``traceparent`` of the commit span (field ``trace``; absent when untraced).
# The ``committed`` signal (and, for an inbox acknowledge, the ``completion``
# signal right after it) is appended with the transaction, so observers see
# exactly the committed versions, in commit order (svit_cluster.events).
_COMMIT_BODY = """
local token = ARGV[1]
local fence_raw, fence_ok = fence_check(KEYS[3], token)
if not fence_ok then
  return {'fenced', fence_raw}
end
local head = redis.call('HMGET', KEYS[2], 'version', 'chain_head')
if not head[1] then
  return {'missing'}
end
if head[1] ~= ARGV[2] or head[2] ~= ARGV[3] then
  return {'conflict', head[1], head[2]}
end
local signals_type = redis.call('TYPE', KEYS[7]).ok
if signals_type ~= 'none' and signals_type ~= 'stream' then
  return {'corrupt', 'signals key is a ' .. signals_type}
end
local new_version = ARGV[11]
local added
if ARGV[15] == '' then
  added = redis.pcall('XADD', KEYS[1], new_version .. '-0',
    'record', ARGV[4], 'token', token, 'version', new_version, 'request', ARGV[8])
else
  added = redis.pcall('XADD', KEYS[1], new_version .. '-0',
    'record', ARGV[4], 'token', token, 'version', new_version, 'trace', ARGV[15],
    'request', ARGV[8])
end
if type(added) == 'table' and added.err then
  return {'corrupt', added.err}
end
raise_fence(KEYS[3], fence_raw, token)
if ARGV[8] ~= '' then
  store_receipt(KEYS[4], KEYS[5], ARGV[8], ARGV[9], ARGV[10])
end
for i = 17, #ARGV do
  redis.call('XADD', KEYS[6], '*', 'intent', ARGV[i], 'version', new_version)
end
redis.call('HSET', KEYS[2], 'version', new_version, 'chain_head', ARGV[5],
  'root_hash', ARGV[6], 'position', ARGV[7], 'token', token)
add_signal(KEYS[7], ARGV[12], 'kind', 'committed', 'token', token, 'data', ARGV[13])
if ARGV[14] ~= '' then
  add_signal(KEYS[7], ARGV[12], 'kind', 'completion', 'token', token, 'data', ARGV[14])
end
if ARGV[16] == '1' then
  redis.call('SET', KEYS[8], new_version)
else
  redis.call('DEL', KEYS[8])
end
return {'ok', new_version}
"""

# The negative-control variant has no fence check at all (see ``testing``).
_UNFENCED_CHECK = """
local function fence_check(fence_key, token_arg)
  return redis.call('GET', fence_key) or '0', true
end
"""


def commit_source(*, fenced: bool = True) -> str:
    """The commit script's Lua source; ``fenced=False`` only for the negative control."""
    if fenced:
        return _FENCE + _RECEIPT + ADD_SIGNAL + _COMMIT_BODY
    return _FENCE + _UNFENCED_CHECK + _RECEIPT + ADD_SIGNAL + _COMMIT_BODY


COMMIT = commit_source()

# KEYS: fence, receipts, receipts_order
# ARGV: token, field, value, max_receipts
PUT_RECEIPT = _FENCE + _RECEIPT + """
local fence_raw, fence_ok = fence_check(KEYS[1], ARGV[1])
if not fence_ok then
  return {'fenced', fence_raw}
end
raise_fence(KEYS[1], fence_raw, ARGV[1])
store_receipt(KEYS[2], KEYS[3], ARGV[2], ARGV[3], ARGV[4])
return {'ok'}
"""

# A receipt read that is also a replicated write, so that ``WAIT`` after it
# counts the replicas that have every write before it (replication is ordered),
# the commit that stored the receipt included: the fence is set to its own value
# (a no-op for the data; a propagated ``SET`` for replication).
# KEYS: fence, receipts.  ARGV: field
GET_RECEIPT_SYNCED = """
local fence = redis.call('GET', KEYS[1])
if fence then
  redis.call('SET', KEYS[1], fence)
end
return {'ok', redis.call('HGET', KEYS[2], ARGV[1])}
"""

# KEYS: fence
# ARGV: token
CLAIM = """
local raw = redis.call('GET', KEYS[1]) or '0'
if tonumber(raw) > tonumber(ARGV[1]) then
  return {'fenced', raw}
end
if tonumber(raw) < tonumber(ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[1])
end
return {'ok', ARGV[1]}
"""

# The owner's claim that also loads its receipts, so that it can answer
# duplicates from memory afterwards (it is their only writer while its token is
# the fence; ``RedisBackend``). With ``claim`` = '1' the fence is raised to the
# token (atomic max, as ``CLAIM``); with '0' it is only checked (a reload after
# an unknown commit outcome). With ``sync`` = '1' the fence is always written
# (to its own value when unchanged): a replicated write, so that the ``WAIT``
# after the script counts replicas that have every write before it, every
# loaded receipt's commit included (as ``GET_RECEIPT_SYNCED``).
# KEYS: fence, receipts, receipts_order
# ARGV: token, claim ('1'/'0'), sync ('1'/'0')
# Reply: {'ok', fence, order (list of fields), receipts (flat field/value list)}
CLAIM_LOAD = """
local raw = redis.call('GET', KEYS[1]) or '0'
if tonumber(raw) > tonumber(ARGV[1]) then
  return {'fenced', raw}
end
if ARGV[2] == '1' and tonumber(raw) < tonumber(ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[1])
  raw = ARGV[1]
elseif ARGV[3] == '1' and redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('SET', KEYS[1], raw)
end
return {'ok', raw, redis.call('LRANGE', KEYS[3], 0, -1), redis.call('HGETALL', KEYS[2])}
"""

# KEYS: fence, head, snapshot, queued[, session, events of that session]
# ARGV: token, version, position, chain_head, root_hash, data, queued ('1': the
#       created state's /inbox is non-empty, e.g. a fork of a process with
#       queued messages; '0': empty)
# A history fork copies the parent's events into the child's session before the
# child exists, with a TTL so a copy whose create never comes expires; the
# create makes them the child's for good (PERSIST of KEYS[5], KEYS[6]).
CREATE = _FENCE + """
local fence_raw, fence_ok = fence_check(KEYS[1], ARGV[1])
if not fence_ok then
  return {'fenced', fence_raw}
end
if redis.call('EXISTS', KEYS[2]) == 1 or redis.call('EXISTS', KEYS[3]) == 1 then
  return {'exists'}
end
raise_fence(KEYS[1], fence_raw, ARGV[1])
redis.call('HSET', KEYS[2], 'version', ARGV[2], 'chain_head', ARGV[4],
  'root_hash', ARGV[5], 'position', ARGV[3], 'token', ARGV[1])
redis.call('HSET', KEYS[3], 'data', ARGV[6], 'version', ARGV[2], 'position', ARGV[3],
  'chain_head', ARGV[4], 'root_hash', ARGV[5], 'token', ARGV[1])
for i = 5, #KEYS do
  redis.call('PERSIST', KEYS[i])
end
if ARGV[7] == '1' then
  redis.call('SET', KEYS[4], ARGV[2])
end
return {'ok'}
"""

# Only a snapshot of the current head is accepted, so every entry after it was
# committed after it was written, under a token >= the snapshot's token.
# The trim keeps every entry above a tail reader's hold (KEYS[5], the version it
# has copied), but never more than down to hold_floor.
# KEYS: fence, snapshot, head, stream, hold
# ARGV: token, version, position, chain_head, root_hash, data, trim_minid ('' = none),
#       hold_floor
SNAPSHOT = _FENCE + """
local fence_raw, fence_ok = fence_check(KEYS[1], ARGV[1])
if not fence_ok then
  return {'fenced', fence_raw}
end
local current = redis.call('HGET', KEYS[2], 'version')
if current and tonumber(current) >= tonumber(ARGV[2]) then
  return {'stale', current}
end
local head = redis.call('HMGET', KEYS[3], 'version', 'chain_head')
if not head[1] then
  return {'missing'}
end
if ARGV[2] ~= head[1] or ARGV[4] ~= head[2] then
  return {'not_head', head[1]}
end
raise_fence(KEYS[1], fence_raw, ARGV[1])
redis.call('HSET', KEYS[2], 'data', ARGV[6], 'version', ARGV[2], 'position', ARGV[3],
  'chain_head', ARGV[4], 'root_hash', ARGV[5], 'token', ARGV[1])
if ARGV[7] ~= '' then
  local minid = tonumber(ARGV[7])
  local hold = tonumber(redis.call('GET', KEYS[5]) or '')
  if hold and hold + 1 < minid then
    minid = math.max(hold + 1, tonumber(ARGV[8]))
  end
  if minid > 1 then
    redis.call('XTRIM', KEYS[4], 'MINID', string.format('%.0f-0', minid))
  end
end
return {'ok'}
"""


# Deletes a process under the fence, like a commit: a token below the fence is
# refused and nothing changes. The fence key is kept (raised to this token) as
# the tombstone: a stale owner's later commit, claim-then-create or receipt is
# still refused by the fence (and a commit also by the missing head), so a
# delete cannot be undone by an owner that lost the process. A later create by
# a newer owner (higher token) works as for any new process.
# KEYS: fence, head, snapshot, then every other key to remove (stream, receipts,
#       receipts_order, outbox, signals, session, queued, the session's events
#       stream, ...)
# ARGV: token
# KEYS: fence, head, residency settings. ARGV: token, field, value ('' removes it).
# Fenced like a commit: only the current owner changes a setting; the process
# must exist (a head).
SET_RESIDENCY = _FENCE + """
local fence_raw, fence_ok = fence_check(KEYS[1], ARGV[1])
if not fence_ok then
  return {'fenced', fence_raw}
end
if redis.call('EXISTS', KEYS[2]) == 0 then
  return {'missing'}
end
if ARGV[3] == '' then
  redis.call('HDEL', KEYS[3], ARGV[2])
else
  redis.call('HSET', KEYS[3], ARGV[2], ARGV[3])
end
return {'ok'}
"""

DELETE = _FENCE + """
local fence_raw, fence_ok = fence_check(KEYS[1], ARGV[1])
if not fence_ok then
  return {'fenced', fence_raw}
end
local version = redis.call('HGET', KEYS[2], 'version')
if not version and redis.call('EXISTS', KEYS[3]) == 0 then
  return {'missing'}
end
raise_fence(KEYS[1], fence_raw, ARGV[1])
local removed = 0
for i = 2, #KEYS do
  removed = removed + redis.call('DEL', KEYS[i])
end
return {'ok', version or '', tostring(removed)}
"""


@dataclass(slots=True)
class Scripts:
    """The scripts registered on one client (``EVALSHA``, reloaded on ``NOSCRIPT``).

    redis-py's :class:`~redis.commands.core.Script` sends ``EVALSHA`` and, on a
    ``NOSCRIPT`` reply (for example after a Redis restart emptied the script
    cache), loads the source and retries once; a script that never ran is safe
    to send again.
    """

    commit: Script
    put_receipt: Script
    get_receipt_synced: Script
    claim: Script
    claim_load: Script
    create: Script
    snapshot: Script
    delete: Script
    set_residency: Script

    @classmethod
    def register(cls, client: RedisClient) -> Scripts:
        """Register every script on ``client`` (no round trip until first use)."""
        return cls(
            commit=client.register_script(COMMIT),
            put_receipt=client.register_script(PUT_RECEIPT),
            get_receipt_synced=client.register_script(GET_RECEIPT_SYNCED),
            claim=client.register_script(CLAIM),
            claim_load=client.register_script(CLAIM_LOAD),
            create=client.register_script(CREATE),
            snapshot=client.register_script(SNAPSHOT),
            delete=client.register_script(DELETE),
            set_residency=client.register_script(SET_RESIDENCY),
        )

