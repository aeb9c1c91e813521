"""Point 2: ``send!`` parses its address as a process id (reference: process.rs, send!).

An address that is not ``svit://<rest>`` fails the activation with ``script_failed``;
nothing is committed, so the dispatcher never sees it.
"""

from __future__ import annotations

import pytest

from svit_cluster.errors import ErrorCode, ScriptFailed
from svit_cluster.process import Process
from svit_cluster.process._activation import activate


@pytest.mark.parametrize("address", ["not-an-address", "svit://", "svit:// x", "", "http://x"])
def test_2_send_to_an_invalid_address_fails_the_activation(address: str) -> None:
    proc = Process.create("svit://conformance/sender", scripts={
        "s": f'(define (main input) (send! "{address}" 1))'})
    before = proc.root_hash
    with pytest.raises(ScriptFailed) as info:
        activate(proc, "s", None)
    assert info.value.code == ErrorCode.SCRIPT_FAILED
    assert "send!" in info.value.message
    assert proc.version == 0 and proc.root_hash == before
    assert proc.read("/system/outbox") == []


def test_2_send_to_a_process_id_commits_the_intent() -> None:
    """Control: a valid address still commits one intent."""
    proc = Process.create("svit://conformance/sender", scripts={
        "s": '(define (main input) (send! "svit://conformance/peer" 1))'})
    result = activate(proc, "s", None)
    assert [m["to"] for m in result.messages] == ["svit://conformance/peer"]
    outbox = proc.read("/system/outbox")
    assert isinstance(outbox, list) and len(outbox) == 1
