"""Runnable examples: ``python -m svit_cluster.examples.<name>``."""

__all__ = ["REFERENCE_REQUEST"]

#: The request from reference/control-protocol.md, verbatim (indentation included).
REFERENCE_REQUEST = """{
  "protocol": "svit-control@1",
  "client_id": "agent-a",
  "request_id": "turn-42",
  "process_id": "svit://local/example/planner",
  "expected_version": 7,
  "command": {
"operation": "activate",
"script": "plan",
"input": {
  "type": "map",
  "value": {
    "goal": { "type": "string", "value": "prepare release" }
  }
}
  }
}"""
