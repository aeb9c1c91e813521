"""Point 7: ``-0.0`` and ``0.0`` are one number (reference: value.rs, number equality
and the canonical hash): equal, same content hash, same request fingerprint."""

from __future__ import annotations

from svit_cluster.control import decode_request
from svit_cluster.control._controller import request_fingerprint
from svit_cluster.process import Process, decode_value, values_equal
from svit_cluster.process._tree import node_from_value


def _req(zero: float) -> dict[str, object]:
    return {"protocol": "svit-control@1", "client_id": "c", "request_id": "r",
            "process_id": "svit://conformance/z", "expected_version": 0,
            "command": {"operation": "activate", "script": "s",
                        "input": {"type": "number", "value": zero}}}


def test_7_negative_zero_equals_zero_in_values_hashes_and_requests() -> None:
    assert values_equal(-0.0, 0.0) and values_equal([{"a": -0.0}], [{"a": 0.0}])
    assert node_from_value(-0.0).digest == node_from_value(0.0).digest
    assert node_from_value({"z": -0.0}).hex == node_from_value({"z": 0.0}).hex
    assert not values_equal(0, 0.0)  # integer and number stay apart
    assert decode_value({"type": "number", "value": -0.0}) == 0.0
    a, b = Process.create("svit://z"), Process.create("svit://z")
    a.write("/memory/x", -0.0)
    b.write("/memory/x", 0.0)
    assert a.root_hash == b.root_hash
    assert request_fingerprint(decode_request(_req(-0.0))) == request_fingerprint(
        decode_request(_req(0.0)))
