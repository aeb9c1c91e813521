"""How one owner runs its write scripts on one process's log: checks before, verdicts after.

:class:`FencedRunner` is what every write of a :class:`~svit_cluster.store.RedisBackend`
goes through. Rules it keeps:

* before a script is sent, the node must not evict keys
  (:func:`~svit_cluster.store.require_noeviction`), and, for the writes that
  take a guard, the owner's own guard must pass (a refusal is recorded in the
  stale-writes stream with ``by`` ``self`` and raised);
* with ``wait_replicas`` every script is followed by ``WAIT`` on the same
  connection, and an ``ok`` that too few replicas acknowledged is
  ``UnavailableError`` (``reason`` ``replication``);
* a ``fenced`` reply discards the receipts in memory for good (the fence stays
  above this token), is recorded with ``by`` ``fence``, and becomes a
  :class:`~svit_cluster.errors.FencedError`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import redis

from svit_cluster.errors import FencedError, SvitError, UnavailableError
from svit_cluster.store._keys import ProcessKeys
from svit_cluster.store._lane import ScriptLane
from svit_cluster.store._log_config import StoreConfig
from svit_cluster.store._receipts import ReceiptCache
from svit_cluster.store._redis import RedisClient, require_noeviction, run_replicated
from svit_cluster.store._scripts import Scripts
from svit_cluster.store._stale_writes import record_refusal

__all__ = ["FencedRunner", "Guard", "split_status"]

#: A callable run before every commit; it raises to refuse (self-fencing).
Guard = Callable[[], None]


def split_status(reply: Any) -> tuple[str, list[bytes]]:
    """A script's reply as its status string and the elements after it."""
    return reply[0].decode(), list(reply[1:])


class FencedRunner:
    """One owner's identity on one process's log, and the way it runs write scripts.

    Args:
        client: a redis-py client.
        process_id: the ``svit://`` id.
        token: this owner's fencing token (>= 1, checked by the caller).
        keys: the process's keys.
        config: the log's options.
        guard: optional check run before guarded writes; it raises to refuse.

    Attributes ``client``, ``process_id``, ``token``, ``keys``, ``config``,
    ``scripts`` (registered on ``client``) and ``receipts`` (the receipts in
    memory, empty until a claim loads them) are shared by the writer and reader.
    """

    def __init__(self, client: RedisClient, process_id: str, token: int, keys: ProcessKeys,
                 config: StoreConfig, guard: Guard | None) -> None:
        self.client = client
        self.process_id = process_id
        self.token = token
        self.keys = keys
        self.config = config
        self.scripts = Scripts.register(client)
        self.receipts = ReceiptCache(config.max_receipts)
        self._guard = guard
        #: This owner's own connection for its scripts (``config.dedicated_connection``).
        self.lane = (ScriptLane(client) if config.dedicated_connection
                     and not config.wait_replicas and isinstance(client, redis.Redis)
                     else None)

    def fenced(self, fence: bytes, op: str) -> FencedError:
        """The error for a script's ``fenced`` reply (``fence``: the stored fence).

        Discards the receipts in memory for good and records the refusal
        (best effort); the caller raises the returned error.
        """
        self.receipts.fence(int(fence))
        self.refused(op, "fence", fence=int(fence))
        return FencedError(
            f"{op} refused for {self.process_id}: token {self.token} is below the fence "
            f"{int(fence)}",
            token=self.token,
            fence=int(fence),
            process_id=self.process_id,
        )

    def verdict(self, reply: Any, op: str) -> tuple[str, list[bytes]]:
        """A write script's reply as its status and the elements after it.

        Raises:
            FencedError: the status is ``fenced`` (see :meth:`fenced`).
        """
        status, rest = split_status(reply)
        if status == "fenced":
            raise self.fenced(rest[0], op)
        return status, rest

    def run(self, op: str, script: Any, keys: Sequence[str], args: Sequence[Any], *,
            outcome: str = "unknown") -> Any:
        """Run a write script; with ``wait_replicas`` also ``WAIT`` for the replicas.

        Call inside :func:`redis_boundary`. Raises UnavailableError
        (``outcome`` as given, ``unknown`` for writes; ``reason``
        ``replication``) when the script answered ``ok`` but fewer replicas
        than configured acknowledged; and (``reason`` ``eviction_policy``,
        ``outcome`` ``none``, before sending the script) while a node this
        client writes to may evict keys (:func:`require_noeviction`).
        """
        require_noeviction(self.client, keys[0], op=op, process_id=self.process_id)
        if self.lane is not None:
            return self.lane.run(script, keys, args)
        cfg = self.config
        reply, acked = run_replicated(self.client, script, keys, args,
                                      replicas=cfg.wait_replicas,
                                      timeout_ms=cfg.wait_timeout_ms)
        if acked is not None and acked < cfg.wait_replicas and split_status(reply)[0] == "ok":
            raise UnavailableError(
                f"redis {op} of {self.process_id} ran on the master but {acked} of "
                f"{cfg.wait_replicas} replicas acknowledged within {cfg.wait_timeout_ms} ms; "
                "a promoted replica may lack it",
                op=op, process_id=self.process_id, outcome=outcome, reason="replication",
                replicas=cfg.wait_replicas, acknowledged=acked)
        return reply

    def check_guard(self) -> None:
        """Run the guard, if any; a :class:`~svit_cluster.errors.SvitError` it
        raises is recorded (``by`` ``self``) and raised again."""
        if self._guard is not None:
            try:
                self._guard()
            except SvitError as exc:
                self.refused("guard", "self", reason=exc.message)
                raise

    def refused(self, op: str, by: str, *, fence: int | None = None, reason: str = "") -> None:
        """Record one refused write of this owner (best effort, see
        :func:`~svit_cluster.store._stale_writes.record_refusal`)."""
        record_refusal(self.client, self.config.prefix, self.process_id, self.token, op, by,
                       fence=fence, reason=reason)
