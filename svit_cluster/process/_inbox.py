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

from svit_cluster.errors import ConflictError, ErrorCode, InboxClosed, InvalidInput
from svit_cluster.process._process import Process
from svit_cluster.process._tree import MapNode, ScalarNode, get_node
from svit_cluster.process._working import Transition, WorkingCopy
from svit_cluster.values import Value, utf8_len

__all__ = [
    "CLOSED_PATH",
    "DEAD_LETTERS_PATH",
    "DEAD_LETTER_KEEP",
    "DEDUP_WINDOW",
    "dedup_slot",
    "inbox_closed",
    "prepare_inbox_ack",
    "prepare_inbox_append",
    "prepare_inbox_close",
    "prepare_inbox_drop",
]

#: Host mark of a closed inbox (``true``); absent while the inbox is open.
CLOSED_PATH = "/thread/inbox_closed"

#: Where dropped inbox heads are kept (a list, newest last).
DEAD_LETTERS_PATH = "/thread/dead_letters"
#: Dead letters kept per process (older ones are discarded).
DEAD_LETTER_KEEP = 16
#: Bytes of a drop reason, at most (UTF-8).
MAX_REASON_BYTES = 512

#: Delivered keys remembered per process.
DEDUP_WINDOW = 4096


def dedup_slot(key: str) -> str:
    """The ``/thread/delivered`` map key for a dedup key (32 hex characters).

    Raises:
        InvalidInput: (``invalid_value``) ``key`` holds a lone surrogate (not
            Unicode text: it has no UTF-8 bytes to hash).
    """
    utf8_len(key)
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


def prepare_inbox_ack(process: Process, expected_head_hash: str,
                      stage: Callable[[WorkingCopy], None] | None = None) -> Transition:
    """Seal the removal of the inbox head, which must hash to ``expected_head_hash``.

    ``stage``, when given, adds the host's own writes to the same transition
    after the removal (the reasoning loop's ``/thread/session`` record).

    Raises:
        ConflictError: (``inbox_conflict``) empty inbox or another head.
        InvalidInput, LimitExceeded: ``stage`` refused a write.
    """
    head = process.inbox_head_hash()
    if head is None or head != expected_head_hash:
        raise ConflictError("inbox head does not match the expected hash",
                            code=ErrorCode.INBOX_CONFLICT)
    wc = process.working_copy()
    wc.remove_front("/inbox")
    if stage is not None:
        stage(wc)
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


def _message_id(message: Value) -> str | None:
    if isinstance(message, dict):
        mid = message.get("id")
        return mid if isinstance(mid, str) else None
    return None


def prepare_inbox_drop(process: Process, *, reason: str, message_id: str | None = None,
                       head_hash: str | None = None) -> tuple[Transition, dict[str, Value]]:
    """Seal the move of the inbox head to ``/thread/dead_letters`` (dead-lettering).

    The head is named by ``message_id`` (the ``id`` of a ``{content, id}``
    message) and/or ``head_hash`` (:meth:`Process.inbox_head_hash`); every
    given one must match, so an operator drops exactly the message they looked
    at. The dead letter ``{inbox_hash, message_id, message, reason, version}``
    is appended to ``/thread/dead_letters`` (the newest
    :data:`DEAD_LETTER_KEEP` are kept) in the same transition that removes the
    head (source ``inbox.drop``); the next item becomes the head.

    Returns:
        ``(transition, dead_letter)``.

    Raises:
        InvalidInput: neither ``message_id`` nor ``head_hash`` given, or
            ``reason`` blank, longer than :data:`MAX_REASON_BYTES` or not
            Unicode text (a lone surrogate).
        ConflictError: (``inbox_conflict``) the inbox is empty or its head is
            not the named message; nothing is committed.
    """
    if message_id is None and head_hash is None:
        raise InvalidInput("name the inbox head to drop: its message id or its hash")
    if not reason.strip() or utf8_len(reason) > MAX_REASON_BYTES:
        raise InvalidInput(f"a drop needs a reason of 1..{MAX_REASON_BYTES} bytes")
    head = process.inbox_head_hash()
    if head is None:
        raise ConflictError("the inbox is empty", code=ErrorCode.INBOX_CONFLICT)
    message = process.read("/inbox/0")
    found_id = _message_id(message)
    if (head_hash is not None and head_hash != head) or (
            message_id is not None and message_id != found_id):
        raise ConflictError("the inbox head is not the named message",
                            code=ErrorCode.INBOX_CONFLICT, inbox_hash=head,
                            message_id=found_id)
    letter: dict[str, Value] = {"inbox_hash": head, "message_id": found_id,
                                "message": message, "reason": reason,
                                "version": process.version + 1}
    existing = get_node(process.root, ("thread", "dead_letters"))
    kept: list[Value] = []
    if existing is not None:
        old = process.read(DEAD_LETTERS_PATH)
        if isinstance(old, list):
            kept = list(old)[-(DEAD_LETTER_KEEP - 1):]
    wc = process.working_copy()
    wc.remove_front("/inbox")
    wc.host_set(DEAD_LETTERS_PATH, [*kept, letter])
    return process.seal(wc, "inbox.drop"), letter
