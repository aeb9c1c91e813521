"""Conformance tests for the VAST controller (control protocol, in our own words)."""

from __future__ import annotations

import threading

import pytest

from svit_cluster.control import (
    MemoryBackend,
    ProcessController,
    decode_request,
)
from svit_cluster.errors import ConfigurationError, ErrorCode
from tests.control._support import COUNTER, PID, request


def run(ctrl: ProcessController, doc: dict) -> dict:
    return ctrl.execute(decode_request(doc)).model_dump(mode="json")


def test_commit_then_version_advances(controller: ProcessController) -> None:
    out = run(controller, request(version=0, by=5))
    assert out["outcome"]["status"] == "committed"
    act = out["outcome"]["activation"]
    assert out["outcome"]["previous_version"] == 0
    assert act["version"] == 1
    assert act["output"] == {"type": "map", "value": {"count": {"type": "integer", "value": 5}}}
    assert act["changed"] == ["/memory/count"]
    assert act["root_hash"] == controller.process.root_hash
    assert controller.process.read("/memory/count") == 5
    assert out["replayed"] is False


def test_two_racing_clients_on_one_version_commit_exactly_once(
    controller: ProcessController,
) -> None:
    a = run(controller, request(client="agent-a", rid="a1", version=0))
    b = run(controller, request(client="agent-b", rid="b1", version=0))
    assert a["outcome"]["status"] == "committed"
    assert b["outcome"] == {
        "status": "conflict",
        "expected_version": 0,
        "actual_version": 1,
        "root_hash": controller.process.root_hash,
    }
    assert controller.process.version == 1
    assert controller.process.read("/memory/count") == 1


def test_exact_retry_replays_without_second_commit(controller: ProcessController) -> None:
    first = run(controller, request(rid="x", version=0))
    again = run(controller, request(rid="x", version=0))
    assert again["replayed"] is True
    assert {**again, "replayed": False} == first
    assert controller.process.version == 1
    assert controller.process.read("/memory/count") == 1


def test_after_receipt_eviction_old_request_conflicts() -> None:
    from svit_cluster.process import Process

    proc = Process.create(PID, memory={"count": 0}, scripts={"counter": COUNTER})
    ctrl = ProcessController(proc, MemoryBackend(max_receipts=1))
    assert run(ctrl, request(rid="old", version=0))["outcome"]["status"] == "committed"
    assert run(ctrl, request(rid="other", version=1))["outcome"]["status"] == "committed"
    # "old" was evicted (FIFO, bound 1): the retry is evaluated again and the
    # version precondition stops a second commit.
    retry = run(ctrl, request(rid="old", version=0))
    assert retry["replayed"] is False
    assert retry["outcome"]["status"] == "conflict"
    assert proc.read("/memory/count") == 2
    assert proc.version == 2


def test_request_status_names_the_committer_after_receipt_eviction() -> None:
    """The log, not the (evicted) receipt, answers "did r commit?"."""
    from svit_cluster.control import RequestStatus
    from svit_cluster.process import Process

    proc = Process.create(PID, memory={"count": 0}, scripts={"counter": COUNTER})
    ctrl = ProcessController(proc, MemoryBackend(max_receipts=1, request_log=3))
    assert ctrl.request_status("agent-a", "old") == RequestStatus(False, None, 1)
    assert run(ctrl, request(rid="old", version=0))["outcome"]["status"] == "committed"
    assert run(ctrl, request(rid="other", version=1))["outcome"]["status"] == "committed"
    assert ctrl.backend.get_receipt("", "agent-a", "old") is None  # evicted
    # The same-id retry conflicts and stores a conflict receipt: no proof either way.
    assert run(ctrl, request(rid="old", version=0))["outcome"]["status"] == "conflict"
    assert ctrl.request_status("agent-a", "old") == RequestStatus(True, 1, 1)
    assert ctrl.request_status("agent-a", "old", tenant="t2") == RequestStatus(False, None, 1)
    assert ctrl.request_status("agent-b", "old") == RequestStatus(False, None, 1)
    ctrl.append_inbox("host op")  # version 3, no request
    assert run(ctrl, request(rid="new", version=3))["outcome"]["status"] == "committed"
    # request_log=3 keeps versions 2..4: version 1 is gone, so "old" is unknown.
    assert ctrl.request_status("agent-a", "old") == RequestStatus(False, None, 2)
    assert ctrl.request_status("agent-a", "new") == RequestStatus(True, 4, 2)


def test_request_status_uses_a_retained_committed_receipt() -> None:
    from svit_cluster.control import RequestStatus
    from svit_cluster.process import Process

    proc = Process.create(PID, memory={"count": 0}, scripts={"counter": COUNTER})
    ctrl = ProcessController(proc, MemoryBackend(max_receipts=8, request_log=1))
    run(ctrl, request(rid="a", version=0))
    run(ctrl, request(rid="b", version=1))
    # Version 1 left the request log, but "a"'s committed receipt is retained.
    assert ctrl.request_status("agent-a", "a") == RequestStatus(True, 1, 2)
    with pytest.raises(ConfigurationError):
        MemoryBackend(request_log=0)


def test_reused_id_with_different_content_is_rejected_and_not_stored(
    controller: ProcessController,
) -> None:
    run(controller, request(rid="k", version=0, by=1))
    reused = run(controller, request(rid="k", version=1, by=2))
    assert reused["outcome"]["status"] == "rejected"
    assert reused["outcome"]["failure"]["code"] == "request_id_reused"
    # Not stored: the original receipt still replays.
    again = run(controller, request(rid="k", version=0, by=1))
    assert again["replayed"] is True
    assert again["outcome"]["status"] == "committed"
    assert controller.process.version == 1


def test_integer_one_is_not_float_one_for_identity(controller: ProcessController) -> None:
    run(controller, request(rid="t", version=0, by=1))
    as_float = request(rid="t", version=0)
    as_float["command"]["input"] = {
        "type": "map",
        "value": {"by": {"type": "number", "value": 1.0}},
    }
    out = run(controller, as_float)
    assert out["outcome"]["failure"]["code"] == "request_id_reused"


def test_rejected_request_is_stable_under_retry(controller: ProcessController) -> None:
    bad = request(rid="bad", version=0, script="missing")
    first = run(controller, bad)
    assert first["outcome"]["status"] == "rejected"
    assert first["outcome"]["failure"]["code"] == "script_not_found"
    second = run(controller, bad)
    assert second["replayed"] is True
    assert second["outcome"] == first["outcome"]
    assert controller.process.version == 0


def test_activation_failure_is_rejected_with_state_unchanged(controller: ProcessController) -> None:
    before = controller.process.root_hash
    out = run(
        controller,
        request(rid="s", version=0, input_value={"type": "map", "value": {
            "by": {"type": "string", "value": "x"}}}),
    )
    assert out["outcome"]["status"] == "rejected"
    assert out["outcome"]["version"] == 0
    assert out["outcome"]["root_hash"] == before
    assert controller.process.root_hash == before


def test_conflict_is_cached_and_replayed(controller: ProcessController) -> None:
    run(controller, request(rid="a", version=0))
    c1 = run(controller, request(rid="c", version=0))
    assert c1["outcome"]["status"] == "conflict"
    run(controller, request(rid="b", version=1))
    c2 = run(controller, request(rid="c", version=0))
    assert c2["replayed"] is True
    assert c2["outcome"] == c1["outcome"]  # actual_version is still the stored 1


def test_validation_runs_before_the_version_check(controller: ProcessController) -> None:
    stale_and_bad = request(rid="v", version=99, script="bad name!")
    out = run(controller, stale_and_bad)
    assert out["outcome"]["status"] == "rejected"
    assert out["outcome"]["failure"]["code"] == "invalid_script_name"


def test_validation_and_mismatch_rejections_are_not_stored(controller: ProcessController) -> None:
    out = run(controller, request(rid="m", version=0, pid="svit://local/other"))
    assert out["outcome"]["failure"]["code"] == "process_mismatch"
    out = run(controller, request(rid="n", version=0, script="bad name!"))
    assert out["outcome"]["failure"]["code"] == "invalid_script_name"
    # Same ids, now valid: they commit (nothing was stored for them).
    assert run(controller, request(rid="m", version=0))["outcome"]["status"] == "committed"
    assert run(controller, request(rid="n", version=1))["outcome"]["status"] == "committed"


def test_oversized_input_is_rejected_without_receipt_then_same_ids_commit() -> None:
    from svit_cluster.process import Limits, Process

    proc = Process.create(
        PID,
        memory={"count": 0},
        scripts={"counter": COUNTER},
        limits=Limits(max_text_bytes=1024),
    )
    ctrl = ProcessController(proc)
    huge = request(rid="big", version=0, input_value={"type": "map", "value": {
        "by": {"type": "integer", "value": 1},
        "pad": {"type": "string", "value": "x" * 5000}}})
    out = run(ctrl, huge)
    assert out["outcome"]["status"] == "rejected"
    # value text/depth bounds are invalid_value (reference: value validation)
    assert out["outcome"]["failure"]["code"] == "invalid_value"
    assert run(ctrl, request(rid="big", version=0))["outcome"]["status"] == "committed"


def test_deeply_nested_input_is_rejected_without_receipt(controller: ProcessController) -> None:
    value: dict = {"type": "integer", "value": 1}
    for _ in range(40):  # deeper than max_value_depth (32)
        value = {"type": "array", "value": [value]}
    doc = request(rid="deep", version=0, input_value={"type": "map", "value": {"by": value}})
    out = run(controller, doc)
    assert out["outcome"]["failure"]["code"] == "invalid_value"
    assert run(controller, request(rid="deep", version=0))["outcome"]["status"] == "committed"


@pytest.mark.parametrize("limit", [0, 4097, -1, "8", 1.5])
def test_receipt_limits_out_of_range_are_refused(limit: object) -> None:
    with pytest.raises(ConfigurationError) as info:
        MemoryBackend(max_receipts=limit)  # type: ignore[arg-type]
    assert info.value.code == ErrorCode.INVALID_CONTROL_CONFIGURATION


@pytest.mark.parametrize("limit", [1, 4096])
def test_receipt_limits_in_range_are_accepted(limit: int) -> None:
    assert MemoryBackend(max_receipts=limit).max_receipts == limit


def test_receipts_are_evicted_fifo() -> None:
    backend = MemoryBackend(max_receipts=2)
    from svit_cluster.process import Process

    proc = Process.create(PID, memory={"count": 0}, scripts={"counter": COUNTER})
    ctrl = ProcessController(proc, backend)
    for i in range(3):
        run(ctrl, request(rid=f"r{i}", version=i))
    assert len(backend) == 2
    assert backend.get_receipt("", "agent-a", "r0") is None
    assert backend.get_receipt("", "agent-a", "r2") is not None


def test_threaded_clients_retry_on_conflict_give_unbroken_versions() -> None:
    from svit_cluster.process import Process

    proc = Process.create(PID, memory={"count": 0}, scripts={"counter": COUNTER})
    ctrl = ProcessController(proc, MemoryBackend(max_receipts=4096))
    committed: list[int] = []
    lock = threading.Lock()
    clients, per_client = 8, 200

    def client(n: int) -> None:
        for i in range(per_client):
            version = ctrl.observe()[0]
            attempt = 0
            while True:
                doc = request(client=f"c{n}", rid=f"r{i}-{attempt}", version=version)
                out = run(ctrl, doc)
                status = out["outcome"]["status"]
                if status == "committed":
                    with lock:
                        committed.append(out["outcome"]["activation"]["version"])
                    break
                assert status == "conflict", out
                version = out["outcome"]["actual_version"]
                attempt += 1

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(committed) == clients * per_client
    assert sorted(committed) == list(range(1, clients * per_client + 1))
    assert proc.read("/memory/count") == len(committed)
    assert proc.version == len(committed)
