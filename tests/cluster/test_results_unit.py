"""The typed answers that cross the Ray boundary (``cluster._results``), without Ray.

Ray pickles a remote method's answer, so every answer type, and every project
error inside an :class:`Outcome`, must survive ``pickle`` with its code, message
and fields; the router's "stale owner, place again" and "route moved, resend"
decisions read the outcome, not a raw code string.
"""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from svit_cluster.cluster._config import ClusterConfig
from svit_cluster.cluster._direct import DirectEndpoint
from svit_cluster.cluster._results import (
    STALE_OWNER_CODES,
    ActorUsage,
    Appended,
    Deleted,
    Dropped,
    Outcome,
    Read,
    Residency,
    ShutDown,
    Snapshot,
    Started,
    Unbound,
    control_frame,
    control_from_frame,
)
from svit_cluster.cluster._types import Activated, ServeStatus
from svit_cluster.control import ControlAnswer, RequestStatus
from svit_cluster.errors import (
    ErrorCode,
    FencedError,
    InternalError,
    SvitError,
    UnavailableError,
    error_class,
)
from svit_cluster.store import RestoreStats
from svit_cluster.values import Script

FIELDS: dict[str, Any] = {"token": 7, "route_moved": False, "nested": {"a": [1, "b"]}}


def _again(obj: Any) -> Any:
    return pickle.loads(pickle.dumps(obj))


@pytest.mark.parametrize("code", list(ErrorCode), ids=str)
def test_every_error_code_survives_pickle_inside_an_outcome(code: ErrorCode) -> None:
    original = error_class(code)("boom", code=code, **FIELDS)
    again = _again(Outcome.fail(original))
    assert again.failed and again.value is None and again.code == str(code)
    err = again.error
    assert type(err) is type(original)
    assert (err.code, err.message, err.fields) == (code, "boom", FIELDS)
    with pytest.raises(SvitError) as info:
        again.unwrap()
    assert type(info.value) is type(original) and info.value.fields == FIELDS


@pytest.mark.parametrize("code", list(ErrorCode), ids=str)
def test_every_registered_error_pickles_on_its_own(code: ErrorCode) -> None:
    original = error_class(code)("boom", code=code, **FIELDS)
    again = _again(original)
    assert type(again) is type(original)
    assert (again.code, again.message, again.fields) == (code, "boom", FIELDS)


def test_a_field_that_is_not_json_safe_is_dropped_as_on_the_wire() -> None:
    err = UnavailableError("down", cause=object(), host="h1")
    assert _again(Outcome.fail(err)).error.fields == {"host": "h1"}


def test_stale_owner_is_unavailable_or_fenced_only() -> None:
    assert STALE_OWNER_CODES == {"unavailable", "fenced"}
    assert Outcome.fail(UnavailableError("passivated")).stale_owner
    assert Outcome.fail(FencedError("newer owner")).stale_owner
    for code in set(ErrorCode) - {ErrorCode.UNAVAILABLE, ErrorCode.FENCED}:
        assert not Outcome.fail(error_class(code)("x", code=code)).stale_owner, code
    assert not Outcome.ok(Appended(True, 1)).stale_owner


def test_route_moved_reads_the_errors_field() -> None:
    assert Outcome.fail(UnavailableError("moved", route_moved=True)).route_moved
    assert not Outcome.fail(UnavailableError("suspended", lease_state="suspended")).route_moved
    assert not Outcome.ok(Appended(True, 1)).route_moved


def test_a_value_unwraps_and_an_empty_outcome_is_internal() -> None:
    ok = Outcome.ok(Read(1, 3))
    assert not ok.failed and ok.error is None and ok.code is None
    assert ok.unwrap() == Read(1, 3)
    with pytest.raises(InternalError):
        Outcome().unwrap()
    failed = Outcome.fail(FencedError("newer owner"))
    assert failed.failure() == failed and failed.failure().code == "fenced"


@pytest.mark.parametrize("value", [
    Started(3, "ab" * 32, RestoreStats(2, 512, 1, 0.01),
            DirectEndpoint("10.0.0.1", 4000, "s" * 64, 7), 1234),
    Unbound(False, busy=True),
    Appended(False, 4),
    Dropped({"message_id": "m1", "message": {"content": ["hi", 1.0]}}, 5),
    Read({"n": [1, 2.0, "x", None, True], "lib": Script("(define (main input) 1)", "doc")}, 6),
    Snapshot(b"\x00snap", 9),
    Residency(30.0, False),
    Deleted(1, 4, "h1", 9),
    RequestStatus(True, 3, 1),
    ControlAnswer(b'{"outcome":{}}', "committed", None, 7, "h1"),
    Activated(ServeStatus.SERVING, "h1", 7, "svit:h1:1", Started(0, "0" * 64)),
], ids=lambda v: type(v).__name__)
def test_every_answer_type_survives_pickle(value: Any) -> None:
    assert _again(Outcome.ok(value)) == Outcome.ok(value)


@pytest.mark.parametrize("value", [
    Unbound(True), ActorUsage(7, "svit://t/p", 1.5, 0, False, 1234, 2), ShutDown(3, True),
], ids=lambda v: type(v).__name__)
def test_answers_without_an_outcome_survive_pickle(value: Any) -> None:
    assert _again(value) == value


def test_the_cluster_config_survives_pickle() -> None:
    """Process actors and host agents are built with the config itself."""
    config = ClusterConfig(cluster="c1", host_endpoints={"h1": {"etcd": "127.0.0.1:1"}},
                           reasoner={"kind": "simulated", "enabled": False},
                           ports={"http": {"allow": ["https://example.org/"]}})
    again = _again(config)
    assert again == config and again.etcd_for("h1") == "127.0.0.1:1"


def test_the_control_frame_round_trips_without_copying_the_body() -> None:
    body = b'{"outcome":{"status":"committed"}}'
    answer = ControlAnswer(body, "committed", None, 7, "h1")
    meta, payload = control_frame(Outcome.ok(answer))
    assert payload is body and "response" not in meta
    again = control_from_frame(dict(meta), payload)
    assert again == Outcome.ok(answer) and again.unwrap().body is body

    meta, payload = control_frame(Outcome.fail(UnavailableError("moved", route_moved=True)))
    assert payload == b""
    refused = control_from_frame(meta, payload)
    assert refused.route_moved and refused.stale_owner
    odd = control_from_frame({"error": "a bare string"}, b"")
    assert odd.code == "internal"
    with pytest.raises(InternalError):
        odd.unwrap()
