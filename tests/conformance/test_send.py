"""Point 2: ``send!`` parses its address (reference: process.rs, send! parses a process id).

An address that is neither a ``svit://<rest>`` process id nor, for this host's outbox
dispatcher, an external ``<scheme>://<destination>`` URI fails the activation with
``script_failed``; nothing is committed, so the dispatcher never sees it.
"""

from __future__ import annotations

import pytest

from svit_cluster.activation import activate
from svit_cluster.errors import ErrorCode, ScriptFailed
from svit_cluster.process import Process


@pytest.mark.parametrize("address", ["not-an-address", "svit://", "svit:// x", "svit:x",
                                     "", "Svit://x", "http://", "://x", "http://a b"])
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


@pytest.mark.parametrize("address", [
    "svit://conformance/peer",
    # decision D8 (docs/conformance.md): external destinations for the dispatcher
    "https://hooks.example.org/x", "redis-stream://integrations:orders",
])
def test_2_send_to_a_process_id_or_external_uri_commits_the_intent(address: str) -> None:
    """Control: a valid address still commits one intent."""
    proc = Process.create("svit://conformance/sender", scripts={
        "s": f'(define (main input) (send! "{address}" 1))'})
    result = activate(proc, "s", None)
    assert [m["to"] for m in result.messages] == [address]
    outbox = proc.read("/system/outbox")
    assert isinstance(outbox, list) and len(outbox) == 1
    assert Process.restore(proc.snapshot()).root_hash == proc.root_hash
