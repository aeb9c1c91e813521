"""Host inbox transitions: append (deduplicated by key) and acknowledge the exact head.

Deduplication state lives in the process itself, under ``/thread/delivered``
(``sha256(key)[:32] -> version``), so it is committed atomically with the
append, replayed on restore, and carried by snapshots. The window keeps the
newest :data:`DEDUP_WINDOW` keys; the outbox dispatcher redelivers only
unacknowledged entries, far fewer than that.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

from svit_cluster.errors import ConflictError, ErrorCode, InboxClosed
from svit_cluster.process._process import Process
from svit_cluster.process._tree import MapNode, ScalarNode, get_node
from svit_cluster.process._working import Transition, WorkingCopy
from svit_cluster.values import Value

__all__ = [
    "CLOSED_PATH",
    "DEDUP_WINDOW",
    "dedup_slot",
    "inbox_closed",
    "prepare_inbox_ack",
    "prepare_inbox_append",
    "prepare_inbox_close",
]

#: Host mark of a closed inbox (``true``); absent while the inbox is open.
CLOSED_PATH = "/thread/inbox_closed"

#: Delivered keys remembered per process.
DEDUP_WINDOW = 4096


def dedup_slot(key: str) -> str:
    """The ``/thread/delivered`` map key for a dedup key (32 hex characters)."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:32]


def prepare_inbox_append(
    process: Process, message: Value, *, dedup_key: str | None = None,
    stage: Callable[[WorkingCopy], None] | None = None,
) -> Transition | None:
    """Seal an ``/inbox`` append; None when ``dedup_key`` was already delivered.

    ``stage`` may add host mutations to the same transition (the reasoning
    loop's ``/thread`` metadata).

    Raises:
        ConflictError: (``inbox_closed``) the inbox was closed
            (:func:`prepare_inbox_close`); nothing is committed.
        InvalidInput, LimitExceeded: the message is not a valid value or too big
            (checked before anything is staged: nothing is committed).
    """
    if inbox_closed(process):
        raise InboxClosed("the inbox is closed")
    wc = process.working_copy()
    if dedup_key is not None:
        slot = dedup_slot(dedup_key)
        found = get_node(process.root, ("thread", "delivered"))
        if isinstance(found, MapNode) and found.get(slot) is not None:
            return None
        wc.append("/inbox", message)
        if isinstance(found, MapNode):
            delivered = found
        else:
            wc.host_set("/thread/delivered", {})
            delivered = MapNode.from_items({})
        wc.host_set(f"/thread/delivered/{slot}", process.version + 1)
        if len(delivered) + 1 > DEDUP_WINDOW:
            oldest = min(delivered.items(), key=_delivered_at)[0]
            wc.host_remove(f"/thread/delivered/{oldest}")
    else:
        wc.append("/inbox", message)
    if stage is not None:
        stage(wc)
    return process.seal(wc, "inbox.append")


def _delivered_at(item: tuple[str, object]) -> int:
    node = item[1]
    value = node.value if isinstance(node, ScalarNode) else 0
    return value if isinstance(value, int) else 0


def prepare_inbox_ack(process: Process, expected_head_hash: str) -> Transition:
    """Seal the removal of the inbox head, which must hash to ``expected_head_hash``.

    Raises:
        ConflictError: (``inbox_conflict``) empty inbox or another head.
    """
    head = process.inbox_head_hash()
    if head is None or head != expected_head_hash:
        raise ConflictError("inbox head does not match the expected hash",
                            code=ErrorCode.INBOX_CONFLICT)
    wc = process.working_copy()
    wc.remove_front("/inbox")
    return process.seal(wc, "inbox.ack")


def inbox_closed(process: Process) -> bool:
    """True when ``/thread/inbox_closed`` marks the inbox closed."""
    found = get_node(process.root, ("thread", "inbox_closed"))
    return isinstance(found, ScalarNode) and found.value is True


def prepare_inbox_close(process: Process) -> Transition | None:
    """Seal the close of ``/inbox`` (None when already closed).

    After it commits, :func:`prepare_inbox_append` refuses every message;
    items already in the inbox stay and are still processed.
    """
    if inbox_closed(process):
        return None
    wc = process.working_copy()
    wc.host_set(CLOSED_PATH, True)
    return process.seal(wc, "inbox.close")
