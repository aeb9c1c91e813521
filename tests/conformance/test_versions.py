"""Point 9: the version limit fails cleanly.

Reference: process.rs, the next version is a checked add that fails with
``resource_limit_exceeded``; control.rs, ``expected_version`` is a u64.
Decision (docs/conformance.md): process versions here stop at 2**63-1 (signed 64-bit,
as values and the store carry them); ``expected_version`` accepts the reference's u64
range and anything above the process range simply conflicts.
"""

from __future__ import annotations

from typing import Any

import pytest

from svit_cluster.control import ProcessController, decode_request, decode_response
from svit_cluster.errors import ErrorCode, InvalidInput, SvitError
from svit_cluster.process import Process
from tests.conformance._support import counter_process, tampered

TOP = 2**63 - 1


def _doc(pid: str, version: int) -> dict[str, Any]:
    return {"protocol": "svit-control@1", "client_id": "c", "request_id": f"r{version}",
            "process_id": pid, "expected_version": version,
            "command": {"operation": "activate", "script": "counter",
                        "input": {"type": "map", "value": {
                            "by": {"type": "integer", "value": 1}}}}}


def _at_top() -> Process:
    proc = counter_process()

    def edit(doc: dict[str, Any]) -> None:
        doc["version"] = TOP
    return Process.restore(tampered(proc, edit))


def test_9_activation_at_the_last_version_is_a_clean_resource_limit_rejection() -> None:
    proc = _at_top()
    out = ProcessController(proc).execute(decode_request(_doc(proc.id, TOP)))
    assert out.outcome.status == "rejected"
    assert out.outcome.failure.code == "resource_limit_exceeded"  # type: ignore[union-attr]
    assert proc.version == TOP
    with pytest.raises(SvitError) as info:  # host writes too
        proc.write("/memory/count", 5)
    assert info.value.code == ErrorCode.RESOURCE_LIMIT_EXCEEDED


@pytest.mark.parametrize("expected", [2**63, 2**64 - 1])
def test_9_expected_version_takes_the_u64_range_and_conflicts_above_ours(expected: int) -> None:
    proc = counter_process()
    out = ProcessController(proc).execute(decode_request(_doc(proc.id, expected)))
    assert out.outcome.status == "conflict"
    assert out.outcome.expected_version == expected  # type: ignore[union-attr]
    assert out.outcome.actual_version == 0  # type: ignore[union-attr]
    assert decode_response(out.model_dump_json().encode()).outcome.status == "conflict"
    with pytest.raises(InvalidInput) as info:  # beyond u64: malformed, not a conflict
        decode_request(_doc(proc.id, 2**64))
    assert info.value.code == ErrorCode.DECODE_ERROR
