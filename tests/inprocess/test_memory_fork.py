"""The in-memory store-level fork of reasoning history (``inprocess.MemorySignals.fork_events``)."""

from __future__ import annotations

import pytest

from svit_cluster.errors import ConflictError
from svit_cluster.events import project_message, session_for
from svit_cluster.inprocess import MemoryEventLog, MemorySignals


def _append(log: MemoryEventLog, session: str, turn: int, content: str) -> tuple[int, int]:
    ev = {"session": session, "kind": "user", "turn": turn, "data": {"content": content}}
    return log.append(session, [(ev, project_message(ev))])


async def test_fork_shares_the_prefix_then_diverges_and_a_retry_is_safe() -> None:
    store = MemorySignals()
    parent_id, child_id = "svit://local/mem-parent", "svit://local/mem-parent/child"
    parent = MemoryEventLog(store, parent_id)
    psession = session_for(parent_id)
    for i in range(4):
        _append(parent, psession, i + 1, str(i))
    assert store.fork_events(parent_id, child_id, upto_seq=3) == 3
    child = MemoryEventLog(store, child_id)
    csession = session_for(child_id)
    copied = child.recent(csession, 10)
    assert [(r.session, r.seq) for r in copied] == [(csession, 1), (csession, 2), (csession, 3)]
    assert [r.event for r in copied] == [r.event for r in parent.recent(psession, 3 + 1)][:3]
    # the child's current session is the forked one (what recent_events serves)
    assert [r.seq for r in await store.recent_events(child_id, 10)] == [1, 2, 3]
    # retrying the fork before the child appended copies nothing more
    assert store.fork_events(parent_id, child_id, upto_seq=3) == 0
    assert _append(child, csession, 5, "child") == (4, 4)
    assert parent.last_seq(psession) == 4  # the parent's history is unchanged
    with pytest.raises(ConflictError):
        store.fork_events(parent_id, child_id, upto_seq=3)


def test_fork_of_a_parent_without_history_copies_nothing() -> None:
    store = MemorySignals()
    assert store.fork_events("svit://local/none", "svit://local/none/child") == 0
