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

from collections.abc import Mapping
from enum import StrEnum
from typing import Any, ClassVar

__all__ = [
    "MAX_MESSAGE_BYTES",
    "ConfigurationError",
    "ConflictError",
    "CorruptData",
    "DecodeError",
    "ErrorCode",
    "ExecutionLimitExceeded",
    "FencedError",
    "Forbidden",
    "InboxClosed",
    "InboxConflict",
    "InternalError",
    "InvalidControlId",
    "InvalidInput",
    "InvalidMount",
    "InvalidPath",
    "InvalidProcessId",
    "InvalidScriptName",
    "InvalidSnapshot",
    "InvalidTransaction",
    "LimitExceeded",
    "MountDenied",
    "MountUnavailable",
    "NotFound",
    "OutcomeUnknownError",
    "PayloadTooLarge",
    "ProcessMismatch",
    "RequestIdReused",
    "ScriptFailed",
    "ScriptNotFound",
    "SvitError",
    "Unauthenticated",
    "UnavailableError",
    "error_class",
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
    INVALID_MOUNT = "invalid_mount"
    MOUNT_UNAVAILABLE = "mount_unavailable"
    MOUNT_DENIED = "mount_denied"
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

    One wire format: :meth:`to_wire` gives ``{code, message, fields}``,
    :meth:`from_wire` rebuilds the class registered for ``code`` (every hop --
    actor to gateway, gateway to SDK -- uses these two), and :attr:`http_status`
    is the status the gateway answers with. Each class declares its code and
    status itself; the code -> class registry is built from the classes.

    Attributes:
        code: the stable :class:`ErrorCode`.
        message: sanitized text, at most 1024 UTF-8 bytes.
        fields: structured details (tokens, versions, paths) that survive a
            trip over the wire.
    """

    default_code: ClassVar[ErrorCode] = ErrorCode.INTERNAL
    #: The gateway's HTTP status for this error (subclasses inherit or override).
    http_status: ClassVar[int] = 500

    def __init_subclass__(cls, *, code: ErrorCode | None = None, **kwargs: Any) -> None:
        """Register ``cls`` as *the* class of the code it declares.

        A class declares its code in its class statement, ``class
        InvalidPath(InvalidInput, code=ErrorCode.INVALID_PATH)``, which sets its
        ``default_code`` (as every class of this module does), or by setting
        ``default_code`` in its own body. A class that declares no code is not
        registered, and the first class to claim a code keeps it: the classes of
        this module claim every code, so a subclass elsewhere (e.g. a reasoner's
        ``TurnFailed`` with code ``internal``) refines an error without changing
        what the wire maps to.
        """
        super().__init_subclass__(**kwargs)
        if code is not None:
            cls.default_code = code
        declared = cls.__dict__.get("default_code")
        if declared is not None:
            _REGISTRY.setdefault(declared, cls)

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

    def wire_fields(self) -> dict[str, Any]:
        """The JSON-safe ``fields`` (str, int, float, bool, None, lists/maps of them)."""
        return {k: v for k, v in self.fields.items() if _json_safe(v)}

    def to_wire(self) -> dict[str, Any]:
        """``{code, message, fields}``: the error's full wire form (see :meth:`from_wire`)."""
        return {"code": str(self.code), "message": self.message, "fields": self.wire_fields()}

    @staticmethod
    def from_wire(wire: Mapping[str, Any]) -> SvitError:
        """Rebuild the typed error from its wire form ``{code, message, fields}``.

        The class is the one registered for ``code`` (:func:`error_class`); a
        missing code is ``internal`` and a missing message is the code. An
        unknown code becomes :class:`InternalError` with ``fields["wire_code"]``
        set to the code received (a newer peer's code is kept, not lost).
        Never raises: a ``fields`` that is not a map is dropped, and so are
        field names that are not strings or collide with the constructor
        (``self``, ``message``, ``code``).
        """
        code = str(wire.get("code", "internal"))
        message = str(wire.get("message", code))
        raw = wire.get("fields")
        extra = {k: v for k, v in (raw if isinstance(raw, Mapping) else {}).items()
                 if isinstance(k, str) and k not in ("self", "message", "code")}
        try:
            ecode = ErrorCode(code)
        except ValueError:
            extra["wire_code"] = code[:64]
            return InternalError(message, **extra)
        return error_class(ecode)(message, code=ecode, **extra)


_REGISTRY: dict[ErrorCode, type[SvitError]] = {}


def _json_safe(value: Any, depth: int = 0) -> bool:
    if depth > 8:
        return False
    if value is None or isinstance(value, str | int | float | bool):
        return True
    if isinstance(value, list | tuple):
        return all(_json_safe(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _json_safe(v, depth + 1) for k, v in value.items())
    return False


def error_class(code: str | ErrorCode) -> type[SvitError]:
    """The exception class registered for ``code``; :class:`InternalError` for unknown codes.

    Every :class:`ErrorCode` member has exactly one class (the one whose
    ``default_code`` it is); the mapping is built by ``SvitError.__init_subclass__``.
    """
    try:
        return _REGISTRY[ErrorCode(code)]
    except (ValueError, KeyError):
        return InternalError


class InvalidInput(SvitError, code=ErrorCode.INVALID_VALUE):
    """The caller's input is malformed or not allowed; retrying it unchanged fails again."""

    http_status = 400


class NotFound(InvalidInput, code=ErrorCode.NOT_FOUND):
    """A named thing (script, process, key to remove) does not exist."""

    http_status = 404


class ConfigurationError(InvalidInput, code=ErrorCode.INVALID_CONTROL_CONFIGURATION):
    """A configuration value is outside its documented range."""


class ConflictError(SvitError, code=ErrorCode.CONFLICT):
    """A precondition (expected version, expected head hash) does not hold.

    Nothing was changed. Observe the current state, recompute, and retry with a
    new request.
    """

    http_status = 409


class FencedError(SvitError, code=ErrorCode.FENCED):
    """A newer owner holds the process: this owner's fencing token is stale.

    Fields ``token`` (ours) and ``fence`` (the stored, newer one) are set. Nothing
    was changed and this owner must stop serving the process.
    """

    http_status = 503


class UnavailableError(SvitError, code=ErrorCode.UNAVAILABLE):
    """A dependency outside this process (etcd, Redis, Ray, network) failed.

    The outcome of the operation may be unknown; retry with the *same* request
    id so that a receipt replays instead of committing twice.
    """

    http_status = 503


class LimitExceeded(SvitError, code=ErrorCode.RESOURCE_LIMIT_EXCEEDED):
    """A configured bound (size, depth, count, fuel, time) was exceeded. Nothing changed."""

    http_status = 400


class ScriptFailed(SvitError, code=ErrorCode.SCRIPT_FAILED):
    """Guest code failed: a ``panic``, a type or arity error, a missing ``main``,
    or a script that does not compile.

    Inside an activation this is a protocol outcome, never an HTTP error: the
    control response is ``rejected`` with ``failure.code`` ``script_failed``
    (HTTP 200), nothing committed. Raised out of a host call, it is the
    caller's input that failed -- a script given to create a process that does
    not compile -- and the gateway answers 422 (the request decoded, its script
    cannot be used; retrying it unchanged fails again).
    """

    http_status = 422


class CorruptData(SvitError, code=ErrorCode.CORRUPT_LOG):
    """Stored data failed verification (hash chain, version step, root hash)."""


class OutcomeUnknownError(SvitError, code=ErrorCode.OUTCOME_UNKNOWN):
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


# -- one class per remaining stable code (registered by SvitError.__init_subclass__) --


class InternalError(SvitError, code=ErrorCode.INTERNAL):
    """An unexpected failure inside svit_cluster (a bug); the request may be retried."""


class RequestIdReused(InvalidInput, code=ErrorCode.REQUEST_ID_REUSED):
    """A request id was reused with different request bytes (control protocol: receipts)."""


class ProcessMismatch(InvalidInput, code=ErrorCode.PROCESS_MISMATCH):
    """The request names a different process than the one it was sent to."""


class InvalidScriptName(InvalidInput, code=ErrorCode.INVALID_SCRIPT_NAME):
    """A script name does not match the allowed pattern."""


class ScriptNotFound(NotFound, code=ErrorCode.SCRIPT_NOT_FOUND):
    """The activated script is not stored under ``/lib``."""


class InvalidPath(InvalidInput, code=ErrorCode.INVALID_PATH):
    """A path is malformed, or its parent does not exist or is not a container."""


class InvalidMount(InvalidInput, code=ErrorCode.INVALID_MOUNT):
    """A mount name, descriptor or source is malformed, or its source cannot be resolved."""


class MountUnavailable(SvitError, code=ErrorCode.MOUNT_UNAVAILABLE):
    """The addressed mount has no attached provider here, or its source failed.

    A restored process keeps each mount's descriptor, never its authority: the
    serving host re-attaches the providers its operator granted. Retry later, or
    ask the operator to grant the mount (reference: ``MountUnavailable``).
    """

    http_status = 503


class MountDenied(SvitError, code=ErrorCode.MOUNT_DENIED):
    """The mount exists but does not grant this operation (a write to a read-only
    mount, a symbolic link or special file inside a folder mount)."""

    http_status = 403


class ExecutionLimitExceeded(LimitExceeded, code=ErrorCode.EXECUTION_LIMIT_EXCEEDED):
    """An activation ran out of fuel or time."""


class InvalidControlId(InvalidInput, code=ErrorCode.INVALID_CONTROL_ID):
    """A ``client_id`` or ``request_id`` is malformed."""


class InvalidProcessId(InvalidInput, code=ErrorCode.INVALID_PROCESS_ID):
    """A process id is not a valid ``svit://tenant/name`` id."""


class InboxConflict(ConflictError, code=ErrorCode.INBOX_CONFLICT):
    """The inbox head does not match the expected hash."""


class InboxClosed(ConflictError, code=ErrorCode.INBOX_CLOSED):
    """The inbox was closed (``close_inbox``); the message was not committed.

    Final for this process: a closed inbox stays closed (it is process state,
    ``/thread/inbox_closed``), so retrying the same append cannot succeed.
    """


class InvalidSnapshot(InvalidInput, code=ErrorCode.INVALID_SNAPSHOT):
    """A snapshot document does not verify or decode."""


class InvalidTransaction(InvalidInput, code=ErrorCode.INVALID_TRANSACTION):
    """A transaction's mutations are not allowed together."""


class DecodeError(InvalidInput, code=ErrorCode.DECODE_ERROR):
    """A request body could not be decoded (JSON, schema, content type)."""


class Unauthenticated(SvitError, code=ErrorCode.UNAUTHENTICATED):
    """No bearer token, or an unknown one (HTTP 401). Set ``SVIT_TOKEN`` or pass ``token``."""

    http_status = 401


class Forbidden(SvitError, code=ErrorCode.FORBIDDEN):
    """The token may not act on this process or route (HTTP 403)."""

    http_status = 403


class PayloadTooLarge(LimitExceeded, code=ErrorCode.PAYLOAD_TOO_LARGE):
    """The request body exceeds the gateway's byte cap (HTTP 413)."""

    http_status = 413
