"""Point 8: value depth, entry-count and text-size violations are ``invalid_value``
(reference: value.rs value validation; process.rs maps it to the activation failure)."""

from __future__ import annotations

from typing import Any

import pytest

from svit_cluster.activation import activate
from svit_cluster.control import ProcessController, decode_request
from svit_cluster.errors import ErrorCode, SvitError
from svit_cluster.process import Limits, Process

LIMITS = Limits(max_value_depth=4, max_value_entries=8, max_text_bytes=200)


def _nested(n: int) -> Any:
    value: Any = 1
    for _ in range(n):
        value = [value]
    return value


@pytest.mark.parametrize(("what", "value"), [
    ("depth", _nested(6)),
    ("entries", list(range(20))),
    ("text", "x" * 300),
])
def test_8_value_bounds_are_invalid_value(what: str, value: Any) -> None:
    proc = Process.create("svit://conformance/v", limits=LIMITS, scripts={
        "deep": "(define (main input) (value-array (value-array (value-array (value-array "
                "(value-array (value-array 1)))))))"})
    with pytest.raises(SvitError) as info:
        proc.write("/memory/x", value)
    assert info.value.code == ErrorCode.INVALID_VALUE, what
    with pytest.raises(SvitError) as info:
        proc.inbox_append(value)
    assert info.value.code == ErrorCode.INVALID_VALUE, what
    with pytest.raises(SvitError) as info:  # a guest building a too-deep value
        activate(proc, "deep", None)
    assert info.value.code == ErrorCode.INVALID_VALUE
    ctrl = ProcessController(proc)
    from svit_cluster.process import encode_value

    out = ctrl.execute(decode_request({
        "protocol": "svit-control@1", "client_id": "c", "request_id": "r",
        "process_id": proc.id, "expected_version": 0,
        "command": {"operation": "activate", "script": "deep", "input": encode_value(value)}}))
    assert out.outcome.status == "rejected"
    assert out.outcome.failure.code == "invalid_value"  # type: ignore[union-attr]
