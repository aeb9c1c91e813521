"""svit-control@1: canonical wire types, generated schema, and the VAST controller.

``reference/control-protocol.md`` is normative. Public names, by importance:

* :class:`ProcessController` -- the serialization point for one process.
* :func:`decode_request`, :class:`ControlRequest`, :class:`ControlResponse` and
  the outcome models :class:`Committed`, :class:`Conflict`, :class:`Rejected`;
  ``activation.messages`` entries :class:`Message`, :class:`DelayedMessage`
  (a timer) and :class:`CancelMessage`.
* :class:`ControlAnswer` -- a response encoded once, with its status and the
  owner's token, as hosts answer the gateway.
* :class:`CommitBackend`, :class:`MemoryBackend`, :class:`Receipt` -- where
  receipts and commits go; :class:`RequestStatus` -- "did request r commit?".
"""

from svit_cluster.control._answer import ControlAnswer
from svit_cluster.control._backend import (
    DEFAULT_RECEIPTS,
    DEFAULT_REQUEST_LOG,
    MAX_RECEIPTS,
    CommitBackend,
    MemoryBackend,
    Receipt,
    RequestStatus,
    validate_receipt_limit,
)
from svit_cluster.control._controller import ProcessController, request_fingerprint
from svit_cluster.control._wire import (
    PROTOCOL,
    ActivateCommand,
    Activation,
    CancelMessage,
    Committed,
    Conflict,
    ControlRequest,
    ControlResponse,
    DelayedMessage,
    Failure,
    LogRecord,
    Message,
    Rejected,
    decode_request,
    decode_response,
    wire,
)

__all__ = [
    "DEFAULT_RECEIPTS",
    "DEFAULT_REQUEST_LOG",
    "MAX_RECEIPTS",
    "PROTOCOL",
    "ActivateCommand",
    "Activation",
    "CancelMessage",
    "CommitBackend",
    "Committed",
    "Conflict",
    "ControlAnswer",
    "ControlRequest",
    "ControlResponse",
    "DelayedMessage",
    "Failure",
    "LogRecord",
    "MemoryBackend",
    "Message",
    "ProcessController",
    "Receipt",
    "Rejected",
    "RequestStatus",
    "decode_request",
    "decode_response",
    "request_fingerprint",
    "validate_receipt_limit",
    "wire",
]
