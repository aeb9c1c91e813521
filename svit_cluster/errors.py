"""One error root for svit_cluster, with subclasses sorted by cause.

Every error carries a stable ``code`` (a member of :class:`ErrorCode`), a short
``message`` that is sanitized and capped at :data:`MAX_MESSAGE_BYTES`, and
optional structured ``fields``. The codes are the single list of failure codes
used on the wire (control protocol: ``rejected.failure.code``) and in logs.

Causes (see ``STYLE.md`` §5):

* :class:`InvalidInput` -- the caller sent something malformed or not allowed.
* :class:`ConflictError` -- a precondition (version, head hash) no longer holds.
* :class:`FencedError` -- a newer owner has claimed the process (fencing token).
* :class:`UnavailableError` -- something outside (etcd, Redis, Ray) is down or slow.
* :class:`LimitExceeded` -- a configured bound was hit.
* :class:`ScriptFailed` -- guest code failed on its own terms (``panic``, type error).
* :class:`CorruptData` -- stored bytes do not verify (hash chain, snapshot).
* :class:`OutcomeUnknownError` -- (SDK) whether a request committed cannot be
  established any more.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

__all__ = [
    "MAX_MESSAGE_BYTES",
    "ConfigurationError",
    "ConflictError",
    "CorruptData",
    "ErrorCode",
    "FencedError",
    "InvalidInput",
    "LimitExceeded",
    "NotFound",
    "OutcomeUnknownError",
    "ScriptFailed",
    "SvitError",
    "UnavailableError",
    "sanitize_message",
]

#: Failure messages are capped at this many UTF-8 bytes (control protocol: failures).
MAX_MESSAGE_BYTES = 1024


class ErrorCode(StrEnum):
    """Every stable failure code, in one place.

    Codes from the reference control protocol come first; codes this project
    adds for distribution follow.
    """

    # control protocol (svit-control@1)
    REQUEST_ID_REUSED = "request_id_reused"
    PROCESS_MISMATCH = "process_mismatch"
    INVALID_SCRIPT_NAME = "invalid_script_name"
    SCRIPT_NOT_FOUND = "script_not_found"
    INVALID_PATH = "invalid_path"
    INVALID_VALUE = "invalid_value"
    EXECUTION_LIMIT_EXCEEDED = "execution_limit_exceeded"
    RESOURCE_LIMIT_EXCEEDED = "resource_limit_exceeded"
    SCRIPT_FAILED = "script_failed"
    INVALID_CONTROL_ID = "invalid_control_id"
    INVALID_CONTROL_CONFIGURATION = "invalid_control_configuration"
    # process core
    INVALID_PROCESS_ID = "invalid_process_id"
    NOT_FOUND = "not_found"
    INBOX_CONFLICT = "inbox_conflict"
    INBOX_CLOSED = "inbox_closed"
    INVALID_SNAPSHOT = "invalid_snapshot"
    INVALID_TRANSACTION = "invalid_transaction"
    DECODE_ERROR = "decode_error"
    # distribution
    CONFLICT = "conflict"
    FENCED = "fenced"
    UNAVAILABLE = "unavailable"
    CORRUPT_LOG = "corrupt_log"
    OUTCOME_UNKNOWN = "outcome_unknown"
    UNAUTHENTICATED = "unauthenticated"
    FORBIDDEN = "forbidden"
    PAYLOAD_TOO_LARGE = "payload_too_large"
    INTERNAL = "internal"


def sanitize_message(message: str, max_bytes: int = MAX_MESSAGE_BYTES) -> str:
    """Return ``message`` with control characters replaced and capped to ``max_bytes``.

    Args:
        message: any text, possibly containing guest-controlled content.
        max_bytes: cap on the UTF-8 length of the result (default 1024 bytes).

    Returns:
        A single-line string of at most ``max_bytes`` UTF-8 bytes; a truncated
        message ends with ``"…"``.
    """
    cleaned = "".join(ch if ch.isprintable() or ch == " " else " " for ch in message)
    raw = cleaned.encode("utf-8")
    if len(raw) <= max_bytes:
        return cleaned
    ellipsis = "…".encode()
    cut = raw[: max_bytes - len(ellipsis)].decode("utf-8", errors="ignore")
    return cut + "…"


class SvitError(Exception):
    """Root of every error svit_cluster raises on purpose.

    Attributes:
        code: the stable :class:`ErrorCode`.
        message: sanitized text, at most 1024 UTF-8 bytes.
        fields: structured details (tokens, versions, paths) that survive a
            trip over the wire.
    """

    default_code: ErrorCode = ErrorCode.INTERNAL

    def __init__(
        self, message: str, *, code: ErrorCode | None = None, **fields: Any
    ) -> None:
        self.code: ErrorCode = code if code is not None else self.default_code
        self.message: str = sanitize_message(message)
        self.fields: dict[str, Any] = fields
        super().__init__(self.message)

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"

    def to_failure(self) -> dict[str, str]:
        """The wire failure shape ``{code, message}`` (control protocol: rejected)."""
        return {"code": str(self.code), "message": self.message}


class InvalidInput(SvitError):
    """The caller's input is malformed or not allowed; retrying it unchanged fails again."""

    default_code = ErrorCode.INVALID_VALUE


class NotFound(InvalidInput):
    """A named thing (script, process, key to remove) does not exist."""

    default_code = ErrorCode.NOT_FOUND


class ConfigurationError(InvalidInput):
    """A configuration value is outside its documented range."""

    default_code = ErrorCode.INVALID_CONTROL_CONFIGURATION


class ConflictError(SvitError):
    """A precondition (expected version, expected head hash) does not hold.

    Nothing was changed. Observe the current state, recompute, and retry with a
    new request.
    """

    default_code = ErrorCode.CONFLICT


class FencedError(SvitError):
    """A newer owner holds the process: this owner's fencing token is stale.

    Fields ``token`` (ours) and ``fence`` (the stored, newer one) are set. Nothing
    was changed and this owner must stop serving the process.
    """

    default_code = ErrorCode.FENCED


class UnavailableError(SvitError):
    """A dependency outside this process (etcd, Redis, Ray, network) failed.

    The outcome of the operation may be unknown; retry with the *same* request
    id so that a receipt replays instead of committing twice.
    """

    default_code = ErrorCode.UNAVAILABLE


class LimitExceeded(SvitError):
    """A configured bound (size, depth, count, fuel, time) was exceeded. Nothing changed."""

    default_code = ErrorCode.RESOURCE_LIMIT_EXCEEDED


class ScriptFailed(SvitError):
    """Guest code failed: a ``panic``, a type or arity error, a missing ``main``."""

    default_code = ErrorCode.SCRIPT_FAILED


class CorruptData(SvitError):
    """Stored data failed verification (hash chain, version step, root hash)."""

    default_code = ErrorCode.CORRUPT_LOG


class OutcomeUnknownError(SvitError):
    """Whether one request committed can no longer be established (SDK).

    Raised by ``activate_until_committed`` when an attempt's outcome was
    unknown (transport error or ``unavailable``), its retry then met a
    ``conflict`` (the receipt was evicted), and the log entry that would name
    the request has been trimmed. Recomputing could apply the change twice, so
    the helper stops; the caller decides (inspect the state, reconcile).

    Fields ``process_id``, ``client_id``, ``request_id`` name the request;
    ``expected_version`` is the version it was sent against (it would have
    committed ``expected_version + 1``) and ``retained_from_version`` the oldest
    version whose committing request the owner can still name.
    """

    default_code = ErrorCode.OUTCOME_UNKNOWN
