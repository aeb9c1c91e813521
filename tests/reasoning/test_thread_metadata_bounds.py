"""``/thread`` session metadata has fixed keys and bounded text (pure, no servers)."""

from __future__ import annotations

import pytest

from svit_cluster.reasoning._thread import (
    MAX_INSTRUCTIONS_BYTES,
    METADATA_KEYS,
    ThreadRefused,
    check_thread,
    thread_metadata,
)


def test_session_metadata_has_fixed_keys_and_bounded_instructions() -> None:
    meta = thread_metadata("svit://t/a", {"format": "svit-thread@8", "process_id": "svit://t/a",
                                          "instructions": "be brief", "stale": "x" * 1000},
                           None)
    assert tuple(sorted(meta)) == METADATA_KEYS
    check_thread({"format": "svit-thread@8", "process_id": "svit://t/a",
                  "instructions": "x" * MAX_INSTRUCTIONS_BYTES})
    with pytest.raises(ThreadRefused):
        check_thread({"format": "svit-thread@8", "process_id": "svit://t/a",
                      "instructions": "x" * (MAX_INSTRUCTIONS_BYTES + 1)})
    with pytest.raises(ThreadRefused):  # the conversation lives in the event log, not here
        check_thread({"format": "svit-thread@8", "process_id": "svit://t/a",
                      "messages": []})
