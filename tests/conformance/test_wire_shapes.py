"""The reference's wire shapes for activation logs and message intents.

The reference's ``Activation.logs`` is a list of records ``{message, fields}``
and a message intent names its id ``message_id`` (in the response and in
``/system/outbox``). svit_cluster writes those shapes, decodes a
reference-shaped response, and still reads the legacy shapes (plain log strings
and ``id`` in stored receipts and outbox stream entries).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from svit_cluster.control import ProcessController, decode_request, decode_response
from svit_cluster.dispatch._intent import parse_entry
from svit_cluster.process import Process, Script, canonical_json

PID = "svit://conformance/wire"
SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"

SENDER = """(define (main input)
  (do
    (log-info! "plain")
    (log-info! "with fields" (value-map "k" 1 "tags" (value-array "a" "b")))
    (log-info! "scalar field" 7)
    (write "/memory/sent" (send! "svit://conformance/peer" input))
    "done"))
"""


def _request(rid: str = "r1", version: int = 0) -> Any:
    return decode_request({
        "protocol": "svit-control@1", "client_id": "c", "request_id": rid, "process_id": PID,
        "expected_version": version,
        "command": {"operation": "activate", "script": "sender",
                    "input": {"type": "map", "value": {"n": {"type": "integer", "value": 5}}}},
    })


def _run() -> tuple[ProcessController, dict[str, Any]]:
    ctrl = ProcessController(Process.create(PID, scripts={"sender": Script(SENDER)}))
    response = ctrl.execute(_request())
    return ctrl, json.loads(response.model_dump_json())


def test_activation_logs_are_message_and_fields_records() -> None:
    _, doc = _run()
    activation = doc["outcome"]["activation"]
    assert activation["logs"] == [
        {"message": "plain", "fields": {}},
        {"message": "with fields", "fields": {
            "k": {"type": "integer", "value": 1},
            "tags": {"type": "array", "value": [{"type": "string", "value": "a"},
                                                {"type": "string", "value": "b"}]}}},
        # not a map: kept whole under "value" (svit_cluster's choice, docs/conformance.md)
        {"message": "scalar field", "fields": {"value": {"type": "integer", "value": 7}}},
    ]


def test_message_intents_carry_message_id_in_response_and_outbox() -> None:
    ctrl, doc = _run()
    (message,) = doc["outcome"]["activation"]["messages"]
    assert set(message) == {"message_id", "to", "body"}
    assert message["message_id"] == f"{PID}:1:0"
    outbox = ctrl.process.read("/system/outbox")
    assert outbox == [{"message_id": f"{PID}:1:0", "to": "svit://conformance/peer",
                       "body": {"n": 5}}]
    # send! returns the intent's message id (what the chaos workload records)
    assert ctrl.process.read("/memory/sent") == message["message_id"]


def test_a_reference_shaped_response_decodes() -> None:
    reference_shaped = {
        "protocol": "svit-control@1", "client_id": "agent-a", "request_id": "turn-42",
        "process_id": "svit://local/example/planner", "replayed": False,
        "outcome": {"status": "committed", "previous_version": 7, "activation": {
            "output": {"type": "null"},
            "logs": [{"message": "planned", "fields": {"steps": {"type": "integer", "value": 3}}},
                     {"message": "no fields", "fields": {}}],
            "messages": [{"message_id": "svit://local/example/planner:8:0",
                          "to": "svit://local/example/worker",
                          "body": {"type": "string", "value": "go"}}],
            "version": 8, "root_hash": "ab" * 32, "changed": ["/memory/plan"]}},
    }
    resp = decode_response(json.dumps(reference_shaped))
    act = resp.outcome.activation  # type: ignore[union-attr]
    assert [(rec.message, rec.fields) for rec in act.logs] == [
        ("planned", {"steps": 3}), ("no fields", {})]
    assert act.messages[0].message_id == "svit://local/example/planner:8:0"
    assert json.loads(resp.model_dump_json()) == reference_shaped


def test_a_receipt_stored_by_the_old_code_still_decodes() -> None:
    # A response as svit_cluster wrote it at c0cb931 (receipts in Redis hold these).
    legacy = (
        '{"protocol":"svit-control@1","client_id":"c","request_id":"r1",'
        '"process_id":"svit://golden/legacy","replayed":false,"outcome":{"status":"committed",'
        '"previous_version":0,"activation":{"output":{"type":"integer","value":1},'
        '"logs":["sent {\\"k\\":1}"],"messages":[{"id":"svit://golden/legacy:1:0",'
        '"to":"svit://golden/peer","body":{"type":"map","value":{"k":{"type":"integer",'
        '"value":1}}}}],"version":1,"root_hash":'
        '"8eea3ad05cd219e2308787388887815be9fec58ceeba4dd9d45efde09dac4003",'
        '"changed":["/system/outbox"]}}}'
    )
    act = decode_response(legacy).outcome.activation  # type: ignore[union-attr]
    assert [(rec.message, rec.fields) for rec in act.logs] == [('sent {"k":1}', {})]
    assert act.messages[0].message_id == "svit://golden/legacy:1:0"
    written = json.loads(decode_response(legacy).model_dump_json())
    assert written["outcome"]["activation"]["messages"][0]["message_id"] == \
        "svit://golden/legacy:1:0"
    assert "id" not in written["outcome"]["activation"]["messages"][0]


def test_the_dispatcher_keys_on_message_id_and_still_reads_legacy_id() -> None:
    ctrl, doc = _run()
    (intent,) = ctrl.process.read("/system/outbox")
    # what the commit script XADDs: canonical JSON of the intent
    fields = {b"intent": canonical_json(intent), b"version": b"1"}
    parsed = parse_entry("outbox", "1-0", fields, PID)
    assert parsed.id == doc["outcome"]["activation"]["messages"][0]["message_id"]
    legacy = {b"intent": b'{"body":1,"id":"svit://old:3:0","to":"svit://x"}', b"version": b"3"}
    assert parse_entry("outbox", "2-0", legacy, "svit://old").id == "svit://old:3:0"


def test_the_committed_schema_describes_the_new_shapes() -> None:
    schema = json.loads((SCHEMAS / "svit-control-1.response.schema.json").read_text())
    defs = schema["$defs"]
    assert defs["Activation"]["properties"]["logs"]["items"] == {"$ref": "#/$defs/LogRecord"}
    assert set(defs["LogRecord"]["properties"]) == {"message", "fields"}
    assert "message_id" in defs["Message"]["required"]
    assert "id" not in defs["Message"]["properties"]
