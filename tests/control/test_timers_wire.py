"""Timers on the wire: ``activation.messages`` carries intents, delayed intents
and cancels, each with exactly its own fields (``svit_cluster.control``)."""

from __future__ import annotations

import json
from typing import Any

from svit_cluster.control import (
    CancelMessage,
    DelayedMessage,
    Message,
    ProcessController,
    decode_request,
    decode_response,
)
from svit_cluster.process import Process, encode_value

PID = "svit://t/wire-timers"
HOOK = "https://hooks.example.org/x"
SCRIPT = f"""(define (main input)
  (if (= (value-get input "/op") "arm")
      (value-array (send! "{HOOK}" "now")
                   (send! "{HOOK}" (value-map "k" 1) (value-map "delay_ms" 8000)))
      (cancel! (value-get input "/id"))))"""


def _execute(ctrl: ProcessController, rid: str, input: Any,
             version: int | None = None) -> dict[str, Any]:
    expected = ctrl.process.version if version is None else version
    doc = {"protocol": "svit-control@1", "client_id": "c", "request_id": rid,
           "process_id": PID, "expected_version": expected,
           "command": {"operation": "activate", "script": "s", "input": encode_value(input)}}
    response = ctrl.execute(decode_request(json.dumps(doc).encode()))
    return json.loads(response.model_dump_json())  # type: ignore[no-any-return]


def test_messages_carry_each_kind_with_exactly_its_fields_and_round_trip() -> None:
    now = [1_000]
    ctrl = ProcessController(Process.create(PID, scripts={"s": SCRIPT}),
                             wall_clock=lambda: now[0])
    armed = _execute(ctrl, "r1", {"op": "arm"})
    messages = armed["outcome"]["activation"]["messages"]
    assert messages == [
        {"message_id": f"{PID}:1:0", "to": HOOK,
         "body": {"type": "string", "value": "now"}},
        {"message_id": f"{PID}:1:1", "to": HOOK,
         "body": {"type": "map", "value": {"k": {"type": "integer", "value": 1}}},
         "delay_ms": 8_000, "due_ms": 9_000},
    ]
    now[0] = 2_000
    cancelled = _execute(ctrl, "r2", {"op": "cancel", "id": f"{PID}:1:1"})
    activation = cancelled["outcome"]["activation"]
    assert activation["output"] == {"type": "bool", "value": True}
    assert activation["messages"] == [{"message_id": f"{PID}:2:0", "cancel": f"{PID}:1:1"}]
    # decoding gives each entry its own type, and encoding it again is the same JSON
    for doc, kinds in ((armed, [Message, DelayedMessage]), (cancelled, [CancelMessage])):
        decoded = decode_response(doc)
        entries = decoded.outcome.activation.messages  # type: ignore[union-attr]
        assert [type(m) for m in entries] == kinds
        assert json.loads(decoded.model_dump_json()) == doc
    # the receipt is the same answer: a retry replays it
    again = _execute(ctrl, "r2", {"op": "cancel", "id": f"{PID}:1:1"}, version=1)
    assert again["replayed"] is True and again["outcome"] == cancelled["outcome"]
