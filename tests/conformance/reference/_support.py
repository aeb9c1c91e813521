"""Shared helpers for the ported reference tests (no fixtures)."""

from __future__ import annotations

from pathlib import Path

from svit_cluster.control import ActivateCommand, ControlRequest, wire
from svit_cluster.process import Value

SCRIPTS = Path(__file__).resolve().parent / "scripts"

#: Reference commit each ported module was read from (recorded in docs/conformance.md).
REFERENCE_COMMITS = {
    "control_protocol.rs": "17f1a2f2427fa0fdf7c5f008c7981b432d8c32e1",
    "persistence.rs": "4ae8f10abd4b9d0310840419057c272fb546fc43",
    "process_invariants.rs": "28183774b7b0d729f1c35b0392312e9bbcbff8cc",
    "lisp_runtime.rs": "2f9ebc01267cc1f1b3df687353d2a99082847ef0",
    "script_macros.rs": "05d9c9c499cc0d79959557d341979a6d12dcd8f4",
    "scripts/counter.svit-script": "9030f8e738461dd9c783ecaacd93032ca83934f2",
    "agent_loop.rs": "3713006ef7a18989d680e3d35e1c94b5ab5e110b",
    "reasoning_loop.rs": "31e040151e15e085da904e19b74cdbd6c80ff601",
    "mounts.rs": "28183774b7b0d729f1c35b0392312e9bbcbff8cc",
    "deed_runtime.rs": "28183774b7b0d729f1c35b0392312e9bbcbff8cc",
}

#: A counter: add ``input.by`` to ``/memory/count`` and answer ``{count}``.
ADDER = """
(define (main input)
  (let ((next (+ (read "/memory/count") (value-get input "/by"))))
    (do (write "/memory/count" next) (value-map "count" next))))
"""


def activate_request(client: str, request: str, process_id: str, version: int,
                     script: str, value: Value) -> ControlRequest:
    """An svit-control@1 ``activate`` request built from Python values."""
    return ControlRequest(
        protocol="svit-control@1",
        client_id=client,
        request_id=request,
        process_id=process_id,
        expected_version=version,
        command=ActivateCommand(operation="activate", script=script, input=wire(value)),
    )
