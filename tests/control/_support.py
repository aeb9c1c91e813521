"""Shared helpers for control tests."""

from __future__ import annotations

import json
from typing import Any

COUNTER = """(define (main input)
  (let ((count (+ (read "/memory/count") (value-get input "/by"))))
    (do
      (write "/memory/count" count)
      (value-map "count" count))))
"""
PID = "svit://local/example/counter"


def request(
    *,
    client: str = "agent-a",
    rid: str = "r1",
    version: int = 0,
    by: Any = None,
    script: str = "counter",
    pid: str = PID,
    input_value: dict[str, Any] | None = None,
) -> dict[str, Any]:
    if input_value is None:
        input_value = {
            "type": "map",
            "value": {"by": {"type": "integer", "value": 1 if by is None else by}},
        }
    return {
        "protocol": "svit-control@1",
        "client_id": client,
        "request_id": rid,
        "process_id": pid,
        "expected_version": version,
        "command": {"operation": "activate", "script": script, "input": input_value},
    }


def dumps(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc).encode()


