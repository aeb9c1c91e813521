"""Redis key names the dispatcher uses (its own keys; the store's keys are read-only here).

Source streams are the store's per-process outbox streams,
``<prefix>:{<process>}:outbox`` (see ``svit_cluster/store/README.md``), plus the
dispatcher's own re-drive stream. Everything global lives under the hash tag
``{dispatch}`` so it shares one Redis Cluster slot (dead letters and re-drive
move atomically in one ``MULTI``). A process id always starts with ``svit://``,
so ``{dispatch}`` never collides with a process's tag.

| key | type | holds |
| --- | --- | --- |
| ``<prefix>:{<P>}:outbox`` | stream | (store) committed intents; consumer group ``svit-dispatch`` |
| ``<stream>:lease`` | string | consumer name of the worker that may read ``<stream>`` (PX TTL) |
| ``<stream>:lease-token`` | string | the claim's fencing token (``INCR`` on every acquire) |
| ``<stream>:dead-settled`` | hash | entry id -> its dead letter id (set by the fenced ``XACK``) |
| ``<prefix>:{dispatch}:workers`` | zset | live worker -> heartbeat expiry (ms, Redis clock) |
| ``<prefix>:{dispatch}:dead`` | stream | dead letters: intent, source, error, attempts, ... |
| ``<prefix>:{dispatch}:dead-trim`` | hash | what the dead-letter bounds removed so far |
| ``<prefix>:{dispatch}:redrive`` | stream | dead letters sent back for delivery (a source stream) |

Slots on a Redis Cluster: every ``<prefix>:{<P>}:...`` key, the stream's
``:lease``, ``:lease-token`` and ``:dead-settled`` included, lives in the slot
of the tag ``{<P>}`` (one process = one slot), so each claim, fenced ``XACK``
and settle script touches one slot. The four ``{dispatch}`` keys share the
single slot of the tag ``dispatch`` (re-drive moves a letter from ``dead`` to
``redrive`` in one script there; a letter is written and the bounds enforced
in one script there); the scripts that write a dead letter and
then settle it are two separate calls (``{dispatch}`` slot, then the
process's slot), never one multi-slot script or ``MULTI``; so are the prunes
of ``:dead-settled`` (one script per hash, in its process's slot). An integration
stream of ``redis-stream://<name>`` and its dedup set share ``<name>``'s slot
(see ``RedisStreamSink``). Reads over many slots (the status API's ``HGET``
of many ``:dead-settled`` hashes) use a non-transactional pipeline, which the
cluster client splits per node; the wake-up ``XREAD`` over many streams is
refused (``CROSSSLOT``) on a cluster, and the worker then polls each stream
every ``poll_interval_s`` instead. The trim after acknowledgement
(``_trim.py``) is one script on the stream's key alone.

Bounds (the table of every bound: ``docs/capacity.md``, "Bounds of every
growing structure"): an outbox and the re-drive stream keep their
unacknowledged entries plus one (trimmed after each acknowledged batch);
``dead`` keeps at most ``dead_letter_max_count`` letters, none older than
``dead_letter_max_age_s`` (``_deadbound.py``); ``:dead-settled`` has one field
per settled letter still in ``dead``; ``:lease`` expires ``claim_ttl_s`` after
its last renewal; ``:lease-token`` is one integer per stream, kept after the
stream is gone (a fencing counter must never restart below a token a paused
worker may still hold).
"""

from __future__ import annotations

from dataclasses import dataclass

from svit_cluster.store import DEFAULT_PREFIX, ProcessKeys

__all__ = ["DEFAULT_GROUP", "DispatchKeys"]

#: Consumer group name on every source stream.
DEFAULT_GROUP = "svit-dispatch"


@dataclass(frozen=True, slots=True)
class DispatchKeys:
    """The dispatcher's key names under one store prefix.

    Args:
        prefix: the store's key prefix (``StoreConfig.prefix``, default ``"svit"``).

    Raises:
        InvalidInput: the prefix is malformed (same rule as the store's).
    """

    prefix: str = DEFAULT_PREFIX

    def __post_init__(self) -> None:
        ProcessKeys("svit://validate/prefix", self.prefix)  # validates the prefix

    def outbox(self, process_id: str) -> str:
        """The outbox stream of ``process_id`` (the store's key)."""
        return ProcessKeys(process_id, self.prefix).outbox

    @property
    def outbox_pattern(self) -> str:
        """``SCAN MATCH`` pattern of every outbox stream (``{`` is literal in Redis globs)."""
        return f"{self.prefix}:{{*}}:outbox"

    def process_of(self, stream: str) -> str | None:
        """The process id of an outbox stream key, or None for other keys."""
        head, tail = f"{self.prefix}:{{", "}:outbox"
        if stream.startswith(head) and stream.endswith(tail) and len(stream) > len(head + tail):
            return stream[len(head) : -len(tail)]
        return None

    @staticmethod
    def claim(stream: str) -> str:
        """The per-stream claim key (same hash tag, so the same slot, as the stream).

        Named ``<stream>:lease`` on purpose: the key name predates the rename to
        "stream claim" and is kept so old and new workers exclude each other.
        """
        return f"{stream}:lease"

    @staticmethod
    def claim_token(stream: str) -> str:
        """The per-stream claim fencing-token counter (``INCR`` on every acquire)."""
        return f"{stream}:lease-token"

    @staticmethod
    def dead_settled(stream: str) -> str:
        """Hash: entry id -> dead-letter id, written by the fenced settle of a dead letter."""
        return f"{stream}:dead-settled"

    def _global(self, name: str) -> str:
        return f"{self.prefix}:{{dispatch}}:{name}"

    @property
    def workers(self) -> str:
        """Sorted set: worker name -> heartbeat expiry in ms (Redis clock)."""
        return self._global("workers")

    @property
    def dead(self) -> str:
        """Stream of dead letters."""
        return self._global("dead")

    @property
    def dead_trim(self) -> str:
        """Hash: what the dead-letter bounds removed (``below``, ``total``, the bounds)."""
        return self._global("dead-trim")

    @property
    def settled_pattern(self) -> str:
        """``SCAN MATCH`` pattern of every ``<stream>:dead-settled`` hash."""
        return f"{self.prefix}:{{*:dead-settled"

    @property
    def redrive(self) -> str:
        """Stream of re-driven dead letters (consumed like an outbox stream)."""
        return self._global("redrive")
