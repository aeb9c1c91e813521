"""``/thread`` keeps bounded host bookkeeping: the inbox dedup window and the
dropped inbox heads (pure, no servers). The reasoning loop's session metadata:
``tests/reasoning/test_thread_metadata_bounds.py``."""

from __future__ import annotations

import pytest

from svit_cluster.errors import ErrorCode, InvalidInput
from svit_cluster.process import (
    DEDUP_WINDOW,
    Process,
    dedup_slot,
    prepare_inbox_append,
    prepare_inbox_drop,
)
from svit_cluster.process._inbox import DEAD_LETTER_KEEP


def test_the_delivered_window_keeps_the_newest_dedup_window_keys() -> None:
    proc = Process.create("svit://t/dedup")
    extra = 10
    for i in range(DEDUP_WINDOW + extra):
        t = prepare_inbox_append(proc, i, dedup_key=f"k{i}")
        assert t is not None
        proc.commit(t)
    delivered = proc.read("/thread/delivered")
    assert isinstance(delivered, dict) and len(delivered) == DEDUP_WINDOW == 4096
    assert all(dedup_slot(f"k{i}") not in delivered for i in range(extra))  # oldest gone
    assert dedup_slot(f"k{DEDUP_WINDOW + extra - 1}") in delivered
    assert prepare_inbox_append(proc, "again", dedup_key=f"k{extra}") is None  # kept: deduped


def test_dead_letters_keep_the_newest_dead_letter_keep() -> None:
    proc = Process.create("svit://t/drops")
    for i in range(DEAD_LETTER_KEEP + 4):
        t = prepare_inbox_append(proc, {"content": "x", "id": f"m{i}"})
        assert t is not None
        proc.commit(t)
        t, _letter = prepare_inbox_drop(proc, reason="poison", message_id=f"m{i}")
        proc.commit(t)
    kept = proc.read("/thread/dead_letters")
    assert isinstance(kept, list) and len(kept) == DEAD_LETTER_KEEP == 16
    assert [d["message_id"] for d in kept] == [  # type: ignore[index]
        f"m{i}" for i in range(4, DEAD_LETTER_KEEP + 4)]


def test_a_dedup_key_or_drop_reason_that_is_not_unicode_is_invalid_input() -> None:
    """A lone surrogate has no UTF-8 bytes: hashing a dedup key or measuring a
    reason with one is the caller's bad input (``invalid_value``), not a crash."""
    proc = Process.create("svit://t/surrogates")
    with pytest.raises(InvalidInput) as bad_key:
        prepare_inbox_append(proc, "x", dedup_key="k\ud800")
    assert bad_key.value.code == ErrorCode.INVALID_VALUE
    t = prepare_inbox_append(proc, {"content": "x", "id": "m1"})
    assert t is not None
    proc.commit(t)
    with pytest.raises(InvalidInput) as bad_reason:
        prepare_inbox_drop(proc, reason="poison \udfff", message_id="m1")
    assert bad_reason.value.code == ErrorCode.INVALID_VALUE
    assert proc.version == 1  # nothing committed by either
