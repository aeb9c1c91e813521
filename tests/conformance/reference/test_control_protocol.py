"""Port of the reference's ``crates/svit/tests/control_protocol.rs`` (see docs/conformance.md).

One test per reference test, same name, each case re-expressed against
:class:`svit_cluster.control.ProcessController`. The counter process is built the
way the reference builds it: created with ``count = 0``, then the counter script
is stored by a host write, so the process stands at version 1 when clients start.
"""

from __future__ import annotations

import json
import threading

import pytest

from svit_cluster.control import (
    Committed,
    Conflict,
    ControlRequest,
    ControlResponse,
    MemoryBackend,
    ProcessController,
    Rejected,
    decode_request,
    decode_response,
)
from svit_cluster.errors import ConfigurationError, InvalidInput
from svit_cluster.process import Process
from tests.conformance.reference._support import ADDER, activate_request

PID = "svit://local/control/counter"


def counter_controller(receipts: int) -> ProcessController:
    proc = Process.create(PID, memory={"count": 0})
    proc.write("/lib/counter", {"source": ADDER})
    assert proc.version == 1
    return ProcessController(proc, MemoryBackend(max_receipts=receipts))


def add(client: str, request: str, version: int, by: int) -> ControlRequest:
    return activate_request(client, request, PID, version, "counter", {"by": by})


def test_concurrent_clients_cannot_commit_the_same_process_version() -> None:
    """Two clients race on version 1: exactly one commits, the other conflicts."""
    controller = counter_controller(16)
    start = threading.Barrier(3)
    responses: list[ControlResponse] = []

    def client(name: str, request_id: str) -> None:
        request = add(name, request_id, 1, 1)
        start.wait()
        responses.append(controller.execute(request))

    threads = [threading.Thread(target=client, args=args)
               for args in (("agent-a", "request-a"), ("agent-b", "request-b"))]
    for thread in threads:
        thread.start()
    start.wait()
    for thread in threads:
        thread.join()

    kinds = sorted(type(r.outcome).__name__ for r in responses)
    assert kinds == ["Committed", "Conflict"]
    assert controller.observe()[0] == 2
    restored = Process.restore(controller.process.snapshot())
    assert restored.read("/memory/count") == 1


def test_exact_retry_replays_the_receipt_without_a_second_commit() -> None:
    controller = counter_controller(16)
    request = add("agent-a", "request-a", 1, 2)
    first = controller.execute(request)
    again = controller.execute(request)
    assert not first.replayed and again.replayed
    assert again.outcome == first.outcome
    assert controller.observe()[0] == 2


def test_version_cas_prevents_duplicate_commit_after_receipt_eviction() -> None:
    """With one retained receipt, an old request's receipt is evicted by a newer
    one; retrying it then meets the version precondition and conflicts."""
    controller = counter_controller(1)
    old = add("agent-a", "request-a", 1, 1)
    controller.execute(old)
    controller.execute(add("agent-b", "request-b", 2, 2))
    retry = controller.execute(old)
    assert isinstance(retry.outcome, Conflict)
    assert controller.observe()[0] == 3
    assert Process.restore(controller.process.snapshot()).read("/memory/count") == 3


def test_reusing_a_request_id_with_different_content_is_rejected() -> None:
    controller = counter_controller(16)
    controller.execute(add("agent-a", "request-a", 1, 1))
    response = controller.execute(add("agent-a", "request-a", 2, 100))
    assert isinstance(response.outcome, Rejected)
    assert response.outcome.failure.code == "request_id_reused"
    assert controller.observe()[0] == 2


def test_rejected_request_is_stable_under_retry() -> None:
    """A request naming a script that does not exist is rejected; the retry
    replays the same rejection and the version does not move."""
    controller = counter_controller(16)
    request = activate_request("agent-a", "missing-script", PID, 1, "missing", None)
    first = controller.execute(request)
    again = controller.execute(request)
    assert isinstance(first.outcome, Rejected)
    assert again.outcome == first.outcome and again.replayed
    assert controller.observe()[0] == 1


def test_request_and_response_have_a_stable_json_round_trip() -> None:
    controller = counter_controller(16)
    request = add("agent-a", "request-a", 1, 4)
    decoded = decode_request(request.model_dump_json().encode())
    assert decoded == request
    response = controller.execute(decoded)
    assert decode_response(response.model_dump_json().encode()) == response


def test_activation_request_has_the_documented_wire_shape() -> None:
    encoded = json.loads(add("agent-a", "request-a", 1, 4).model_dump_json())
    assert encoded == {
        "protocol": "svit-control@1",
        "client_id": "agent-a",
        "request_id": "request-a",
        "process_id": PID,
        "expected_version": 1,
        "command": {
            "operation": "activate",
            "script": "counter",
            "input": {"type": "map", "value": {"by": {"type": "integer", "value": 4}}},
        },
    }


def test_known_protocol_major_ignores_additive_fields() -> None:
    """Unknown fields added at any level of svit-control@1 are ignored on decode."""
    controller = counter_controller(16)
    request = add("agent-a", "request-a", 1, 4)
    doc = json.loads(request.model_dump_json())
    doc["future_envelope_field"] = True
    doc["command"]["future_command_field"] = 42
    assert decode_request(doc) == request

    response = controller.execute(request)
    assert isinstance(response.outcome, Committed)
    out = json.loads(response.model_dump_json())
    out["future_response_field"] = True
    out["outcome"]["future_outcome_field"] = 42
    out["outcome"]["activation"]["future_activation_field"] = True
    assert decode_response(out) == response


def test_unknown_operations_fail_closed() -> None:
    doc = json.loads(add("agent-a", "request-a", 1, 4).model_dump_json())
    doc["command"]["operation"] = "future_operation"
    with pytest.raises(InvalidInput):
        decode_request(doc)


def test_wire_decoder_revalidates_process_and_control_identifiers() -> None:
    """The decoder checks the process id and the client id, not just the JSON shape."""
    valid = {
        "protocol": "svit-control@1", "client_id": "agent-a", "request_id": "request-a",
        "process_id": PID, "expected_version": 0,
        "command": {"operation": "activate", "script": "main", "input": {"type": "null"}},
    }
    decode_request(valid)  # control: the untouched envelope decodes
    with pytest.raises(InvalidInput) as info:
        decode_request({**valid, "process_id": "not-an-address"})
    assert info.value.code == "invalid_process_id"
    with pytest.raises(InvalidInput) as info:
        decode_request({**valid, "client_id": "agent/a"})
    assert info.value.code == "invalid_control_id"


def test_independent_controllers_do_not_form_a_distributed_lease() -> None:
    """Two in-process controllers restored from one snapshot each commit version 2:
    a controller alone is no lease. (In the cluster, the etcd lease and the fenced
    Redis log are what stop the second owner; see tests/store and tests/ownership.)"""
    snapshot = counter_controller(16).process.snapshot()
    first = ProcessController(Process.restore(snapshot))
    second = ProcessController(Process.restore(snapshot))
    a = first.execute(activate_request("host-a", "request-a", PID, 1, "counter", {"by": 1}))
    b = second.execute(activate_request("host-b", "request-b", PID, 1, "counter", {"by": 1}))
    assert isinstance(a.outcome, Committed) and isinstance(b.outcome, Committed)
    assert first.observe()[0] == 2 and second.observe()[0] == 2


def test_receipt_retention_has_a_hard_host_limit() -> None:
    for bad in (0, 4097):
        with pytest.raises(ConfigurationError):
            MemoryBackend(max_receipts=bad)
    assert MemoryBackend(max_receipts=4096).max_receipts == 4096  # control


def test_oversized_decoded_input_is_rejected_without_receipt_retention() -> None:
    """An input with a text of 1 MiB + 1 byte is rejected and no receipt is kept:
    the same request id with a valid input then commits."""
    controller = counter_controller(16)
    big = activate_request("agent-a", "oversized", PID, 1, "counter",
                           {"text": "x" * (1024 * 1024 + 1)})
    assert isinstance(controller.execute(big).outcome, Rejected)
    valid = activate_request("agent-a", "oversized", PID, 1, "counter", {"by": 1})
    assert isinstance(controller.execute(valid).outcome, Committed)
