"""JSON error bodies with stable codes, and the SvitError -> HTTP status mapping."""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse

from svit_cluster.errors import (
    ConflictError,
    CorruptData,
    ErrorCode,
    FencedError,
    InvalidInput,
    LimitExceeded,
    NotFound,
    SvitError,
    UnavailableError,
    sanitize_message,
)

__all__ = ["RETRY_AFTER_S", "error_response", "status_for"]

#: Seconds a client should wait before retrying an ``unavailable`` answer.
RETRY_AFTER_S = 1


def status_for(exc: SvitError) -> int:
    """HTTP status for a project error (400, 404, 409, 413, 503, 500)."""
    if exc.code == ErrorCode.PAYLOAD_TOO_LARGE:
        return 413
    if isinstance(exc, NotFound):
        return 404
    if isinstance(exc, LimitExceeded | InvalidInput):
        return 400
    if isinstance(exc, ConflictError):
        return 409
    if isinstance(exc, FencedError | UnavailableError):
        return 503
    if isinstance(exc, CorruptData):
        return 500
    return 500


def error_response(
    status: int, code: str, message: str, *, headers: dict[str, str] | None = None,
    **fields: Any,
) -> JSONResponse:
    """``{"error": {"code", "message", ...fields}}`` with ``status``.

    ``unavailable`` answers carry ``Retry-After`` (seconds) and ``retry: true``.
    The SDK rebuilds the typed error from ``code`` and the ``fields`` map
    (:func:`svit_cluster.errors.error_from_wire`).
    """
    body: dict[str, Any] = {"code": code, "message": sanitize_message(message)}
    body.update(fields)
    hdrs = dict(headers or {})
    if status == 503:
        hdrs.setdefault("Retry-After", str(RETRY_AFTER_S))
        body["retry"] = True
    return JSONResponse({"error": body}, status_code=status, headers=hdrs)


def from_exception(exc: SvitError) -> JSONResponse:
    """The JSON error response for ``exc``; fenced becomes ``unavailable`` (retry).

    The error's JSON-safe ``fields`` travel as ``error.fields`` (a fenced
    answer keeps ``token``/``fence`` there, plus ``fenced: true``).
    """
    status = status_for(exc)
    fields = exc.wire_fields()
    if isinstance(exc, FencedError):
        code: ErrorCode = ErrorCode.UNAVAILABLE
        fields["fenced"] = True
    else:
        code = exc.code
    if fields:
        return error_response(status, str(code), exc.message, fields=fields)
    return error_response(status, str(code), exc.message)
