"""The bounds of the dead-letter stream: at most N letters, none older than an age.

``<prefix>:{dispatch}:dead`` is an operator queue, but not an unbounded one:

* **count**: at most ``max_count`` letters (``XTRIM MAXLEN``, exact), enforced
  in the same script that appends a letter, so the stream never holds more;
* **age**: no letter older than ``max_age_s`` (``XTRIM MINID`` at Redis time
  minus the age; letter ids are Redis-clock milliseconds), enforced at every
  append and by every worker's scan loop, so letters also expire while no new
  letter arrives.

The oldest letters go first, whatever their state. A *provisional* letter
(written, its settle not yet run; see ``_claim.py``) removed by a bound ends
exactly like a settled one removed a moment later: its entry is acknowledged
only by the fenced settle, which still runs under the same rules (a stale
worker is refused, an acknowledged entry stays acknowledged), and the removal
is counted and logged. The fencing rules do not depend on the letter: the
settle reads only the source stream, its claim token and ``:dead-settled``.

Every run that removes letters records, in the hash ``<prefix>:{dispatch}:dead-trim``
(fixed size): ``below``, an id such that every letter below it that is no
longer in the stream was removed by a bound (or re-driven before that);
``total``, letters removed by the bounds ever; and the bounds then in force,
so a re-drive of a removed letter can say why it is gone.

``<stream>:dead-settled`` (entry -> the letter that settled it) is needed only
while that letter is in the stream (``delivery_status`` reads it to count the
letter). Its fields are pruned: at re-drive (the letter moved), and by a sweep
that deletes every field naming a letter below the stream's oldest kept id
(such a letter is gone for good: ids only grow). So the fields never outlive
their letters by more than one sweep, and every hash is bounded by the
letters kept.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from svit_cluster.errors import ConfigurationError

__all__ = [
    "BOUND_SCRIPT",
    "PRUNE_ONE_SCRIPT",
    "PRUNE_SETTLED_SCRIPT",
    "WRITE_SCRIPT",
    "DeadLetterBound",
    "Trimmed",
    "id_below",
]

#: Letters kept at most, by default.
DEFAULT_MAX_COUNT = 10_000
#: Seconds a letter is kept at most, by default (7 days).
DEFAULT_MAX_AGE_S = 7 * 86_400.0

_ID_LESS = """
local function id_less(a, b)
  local am, as = string.match(a, '^(%d+)-(%d+)$')
  local bm, bs = string.match(b, '^(%d+)-(%d+)$')
  if not am or not bm then return false end
  if #am ~= #bm then return #am < #bm end
  if am ~= bm then return am < bm end
  if #as ~= #bs then return #as < #bs end
  return as < bs
end
"""

# bound_dead(dead, meta, max_count, max_age_ms) -> {removed by age, removed by
# count, below}: ``below`` is the oldest kept id, or the successor of the last
# id ever added when none is kept ('' when the stream does not exist).
_BOUND = _ID_LESS + """
local function bound_dead(dead, meta, max_count, max_age_ms)
  if redis.call('EXISTS', dead) == 0 then
    return {0, 0, ''}
  end
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local cutoff = now - tonumber(max_age_ms)
  local by_age = 0
  if cutoff > 0 then
    by_age = redis.call('XTRIM', dead, 'MINID', string.format('%d-0', cutoff))
  end
  local by_count = redis.call('XTRIM', dead, 'MAXLEN', max_count)
  local below
  local first = redis.call('XRANGE', dead, '-', '+', 'COUNT', 1)
  if #first > 0 then
    below = first[1][1]
  else
    local info = redis.call('XINFO', 'STREAM', dead)
    local last = '0-0'
    for i = 1, #info, 2 do
      if info[i] == 'last-generated-id' then last = info[i + 1] end
    end
    local ms, seq = string.match(last, '^(%d+)-(%d+)$')
    below = ms .. '-' .. string.format('%d', tonumber(seq) + 1)
  end
  if by_age + by_count > 0 then
    redis.call('HINCRBY', meta, 'total', by_age + by_count)
    local old = redis.call('HGET', meta, 'below')
    if not old or id_less(old, below) then
      redis.call('HSET', meta, 'below', below)
    end
    redis.call('HSET', meta, 'max_count', max_count, 'max_age_ms', max_age_ms)
  end
  return {by_age, by_count, below}
end
"""

# KEYS: dead, dead-trim.  ARGV: max_count, max_age_ms.
BOUND_SCRIPT = _BOUND + """
return bound_dead(KEYS[1], KEYS[2], ARGV[1], ARGV[2])
"""

# KEYS: dead, dead-trim.  ARGV: max_count, max_age_ms, field, value, ...
# Appends one letter, then enforces the bounds (the new letter is the newest,
# so neither bound removes it): {letter id, removed by age, by count, below}.
WRITE_SCRIPT = _BOUND + """
local id = redis.call('XADD', KEYS[1], '*', unpack(ARGV, 3))
local r = bound_dead(KEYS[1], KEYS[2], ARGV[1], ARGV[2])
return {id, r[1], r[2], r[3]}
"""

# KEYS: a ``<stream>:dead-settled`` hash.  ARGV: below.  Deletes every field
# naming a letter id below ARGV[1]; returns how many.
PRUNE_SETTLED_SCRIPT = _ID_LESS + """
local all = redis.call('HGETALL', KEYS[1])
local n = 0
for i = 1, #all, 2 do
  if id_less(all[i + 1], ARGV[1]) then
    redis.call('HDEL', KEYS[1], all[i])
    n = n + 1
  end
end
return n
"""

# KEYS: a ``<stream>:dead-settled`` hash.  ARGV: entry id, letter id.  Deletes
# the field only while it still names that letter.
PRUNE_ONE_SCRIPT = """
if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then
  return redis.call('HDEL', KEYS[1], ARGV[1])
end
return 0
"""


def _sid(text: str) -> tuple[int, int] | None:
    ms, sep, seq = text.partition("-")
    if not (sep and ms.isdigit() and seq.isdigit()):
        return None
    return int(ms), int(seq)


def id_below(a: str, b: str) -> bool:
    """True when stream id ``a`` is below stream id ``b`` (False if either is malformed)."""
    x, y = _sid(a), _sid(b)
    return x is not None and y is not None and x < y


def _text(raw: Any) -> str:
    return raw.decode() if isinstance(raw, bytes) else str(raw)


@dataclass(frozen=True, slots=True)
class DeadLetterBound:
    """How many dead letters are kept, and for how long.

    Attributes:
        max_count: letters kept at most (>= 1; default 10 000). The oldest go first.
        max_age_s: seconds a letter is kept at most, by its id's Redis time
            (> 0, millisecond resolution; default 604 800 = 7 days).

    Raises:
        ConfigurationError: a value out of range.
    """

    max_count: int = DEFAULT_MAX_COUNT
    max_age_s: float = DEFAULT_MAX_AGE_S

    def __post_init__(self) -> None:
        if type(self.max_count) is not int or self.max_count < 1:
            raise ConfigurationError(
                f"dead_letter_max_count must be a positive integer, got {self.max_count!r}")
        if (not isinstance(self.max_age_s, int | float) or isinstance(self.max_age_s, bool)
                or not self.max_age_s >= 0.001):
            raise ConfigurationError(
                f"dead_letter_max_age_s must be a positive number of seconds (>= 0.001), "
                f"got {self.max_age_s!r}")

    @property
    def args(self) -> list[int]:
        """``[max_count, max_age_ms]``: the scripts' first two arguments."""
        return [self.max_count, int(self.max_age_s * 1000)]


@dataclass(frozen=True, slots=True)
class Trimmed:
    """What one enforcement of :class:`DeadLetterBound` removed.

    Attributes:
        by_age: letters older than ``max_age_s``.
        by_count: letters beyond ``max_count`` (the oldest).
        below: every letter with a lower id is gone from the stream (the
            oldest kept id, or past the newest when none is kept); ``""`` when
            the stream does not exist.
    """

    by_age: int = 0
    by_count: int = 0
    below: str = ""

    @property
    def total(self) -> int:
        return self.by_age + self.by_count

    @classmethod
    def from_reply(cls, reply: Any) -> Trimmed:
        """From the ``{by_age, by_count, below}`` part of a script reply."""
        return cls(int(reply[0]), int(reply[1]), _text(reply[2]))
