"""Redis key names for one process; every key shares the hash tag ``{<process>}``.

Sharing the tag puts all of a process's keys in one Redis Cluster hash slot, so
one Lua script may touch them all atomically.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from svit_cluster.errors import ErrorCode, InvalidInput
from svit_cluster.process import validate_process_id

__all__ = ["DEFAULT_PREFIX", "ProcessKeys", "receipt_field"]

DEFAULT_PREFIX = "svit"
_PREFIX = re.compile(r"[A-Za-z0-9_.:\-]{1,64}")
_SESSION = re.compile(r"[A-Za-z0-9_.\-]{1,64}")


def receipt_field(tenant: str, client_id: str, request_id: str) -> bytes:
    """The receipts-hash field for one idempotency key: ``tenant\\0client_id\\0request_id``."""
    return f"{tenant}\x00{client_id}\x00{request_id}".encode()


@dataclass(frozen=True, slots=True)
class ProcessKeys:
    """The Redis keys of one process, ``<prefix>:{<process>}:<name>``.

    Args:
        process_id: a valid ``svit://`` id without ``{`` or ``}``.
        prefix: key namespace (default ``"svit"``); ``[A-Za-z0-9_.:-]{1,64}``.

    Raises:
        InvalidInput: (``invalid_process_id``) the id is invalid or contains a
            brace (it would break the hash tag); (``invalid_value``) bad prefix.
    """

    process_id: str
    prefix: str = DEFAULT_PREFIX

    def __post_init__(self) -> None:
        validate_process_id(self.process_id)
        if "{" in self.process_id or "}" in self.process_id:
            raise InvalidInput(
                "process id must not contain '{' or '}' (Redis hash tag)",
                code=ErrorCode.INVALID_PROCESS_ID,
            )
        if type(self.prefix) is not str or not _PREFIX.fullmatch(self.prefix):
            raise InvalidInput("key prefix must match [A-Za-z0-9_.:-]{1,64}")

    def _key(self, name: str) -> str:
        return f"{self.prefix}:{{{self.process_id}}}:{name}"

    @property
    def stream(self) -> str:
        """Stream of committed transactions; entry id ``<version>-0``."""
        return self._key("stream")

    @property
    def head(self) -> str:
        """Hash ``{version, chain_head, root_hash, position, token}`` of the last commit."""
        return self._key("head")

    @property
    def fence(self) -> str:
        """String: the highest fencing token that has claimed or committed."""
        return self._key("fence")

    @property
    def receipts(self) -> str:
        """Hash: receipt field -> ``<fingerprint>\\n<response bytes>``."""
        return self._key("receipts")

    @property
    def receipts_order(self) -> str:
        """List of receipt fields, oldest first (FIFO eviction)."""
        return self._key("receipts:order")

    @property
    def outbox(self) -> str:
        """Stream of committed outbox intents (consumed by the dispatcher)."""
        return self._key("outbox")

    @property
    def snapshot(self) -> str:
        """Hash ``{data, version, position, chain_head, root_hash, token}``."""
        return self._key("snapshot")

    @property
    def signals(self) -> str:
        """Stream of observer signals (``committed``, ``canonical_event``, ``message``,
        ``completion``, ``failed``), capped with ``MAXLEN ~``; see ``svit_cluster.events``."""
        return self._key("signals")

    @property
    def session(self) -> str:
        """String: the id of the process's current reasoning session."""
        return self._key("session")

    @property
    def hold(self) -> str:
        """String: a tail reader's hold, the highest version it has copied.

        The snapshot trim keeps every entry above it, up to
        ``StoreConfig.hold_max_entries`` below the new snapshot, so a reader
        that copies the stream (an archiver, the chaos observer) sees every
        entry however far it lags -- what Redis 8.2's ``XTRIM ... ACKED`` does
        for consumer groups. No key, no hold.
        """
        return self._key("hold")

    @property
    def residency(self) -> str:
        """Hash: the process's residency settings (``passivate_after_s``), read by
        every owner at start; outside the process state (no version, no hash)."""
        return self._key("residency")

    @property
    def queued(self) -> str:
        """String: present exactly while the committed ``/inbox`` is non-empty
        (the version of the last commit that left it non-empty). Written by
        the commit and create scripts with the state they store, so it never
        disagrees with the durable state; an owner-less process that has it
        is activated by the gateway's inbox re-drive
        (``svit_cluster.cluster._redrive``)."""
        return self._key("queued")

    @property
    def timers(self) -> str:
        """Sorted set: pending timer (delayed intent) id -> due time in ms since the
        epoch; written only by the dispatcher (``svit_cluster.dispatch``)."""
        return self._key("timers")

    @property
    def timer_intents(self) -> str:
        """Hash: pending timer id -> the parked intent (JSON; dispatcher)."""
        return self._key("timers:intents")

    @property
    def timer_firing(self) -> str:
        """Hash: timer id -> the intent, while a dispatcher delivers it (dispatcher)."""
        return self._key("timers:firing")

    @property
    def timer_done(self) -> str:
        """Sorted set: ``fired:<id>`` / ``cancelled:<id>`` -> Redis ms of the
        outcome, the newest ``TIMER_DONE_KEEP`` (dispatcher)."""
        return self._key("timers:done")

    @property
    def timer_log(self) -> str:
        """Stream of timer events (``armed``, ``fired``, ``cancelled``,
        ``too_late``, ...), ``MAXLEN ~`` 1000 (dispatcher)."""
        return self._key("timers:log")

    def events(self, session: str) -> str:
        """Stream of one session's canonical events; entry id ``<seq>-0``.

        Raises:
            InvalidInput: ``session`` is not ``[A-Za-z0-9_.-]{1,64}``.
        """
        if type(session) is not str or not _SESSION.fullmatch(session):
            raise InvalidInput("session id must match [A-Za-z0-9_.-]{1,64}")
        return self._key(f"events:{session}")

    def all(self) -> tuple[str, ...]:
        """Every fixed key of the process (for deletion in tests and tools).

        The per-session event logs (:meth:`events`) are not included.
        """
        return (
            self.stream,
            self.head,
            self.fence,
            self.receipts,
            self.receipts_order,
            self.outbox,
            self.snapshot,
            self.signals,
            self.session,
            self.hold,
            self.residency,
            self.queued,
            self.timers,
            self.timer_intents,
            self.timer_firing,
            self.timer_done,
            self.timer_log,
        )
