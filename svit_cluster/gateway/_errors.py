"""JSON error bodies with stable codes (each error class names its own HTTP status)."""

from __future__ import annotations

import logging
import math
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse

from svit_cluster.errors import ErrorCode, FencedError, SvitError, sanitize_message

__all__ = [
    "RETRY_AFTER_S",
    "error_response",
    "from_exception",
    "from_http_exception",
    "internal_error_handler",
]

log = logging.getLogger(__name__)

#: Seconds a client should wait before retrying an ``unavailable`` answer.
RETRY_AFTER_S = 1


def error_response(
    status: int, code: str, message: str, *, headers: dict[str, str] | None = None,
    **fields: Any,
) -> JSONResponse:
    """``{"error": {"code", "message", ...fields}}`` with ``status``.

    ``unavailable`` answers carry ``Retry-After`` (seconds) and ``retry: true``.
    The SDK rebuilds the typed error from ``code`` and the ``fields`` map
    (:meth:`svit_cluster.errors.SvitError.from_wire`).
    """
    body: dict[str, Any] = {"code": code, "message": sanitize_message(message)}
    body.update(fields)
    hdrs = dict(headers or {})
    if status == 503:
        hdrs.setdefault("Retry-After", str(RETRY_AFTER_S))
        body["retry"] = True
    return JSONResponse({"error": body}, status_code=status, headers=hdrs)


def from_exception(exc: SvitError) -> JSONResponse:
    """The JSON error response for ``exc`` with its class's ``http_status``;
    fenced becomes ``unavailable`` (retry).

    The error's JSON-safe ``fields`` travel as ``error.fields`` (a fenced
    answer keeps ``token``/``fence`` there, plus ``fenced: true``). A 503
    whose fields carry ``retry_after_s`` (seconds, 0 < s <= 3600) answers
    that as ``Retry-After`` (rounded up); others get :data:`RETRY_AFTER_S`.
    """
    status = exc.http_status
    fields = exc.wire_fields()
    if isinstance(exc, FencedError):
        code: ErrorCode = ErrorCode.UNAVAILABLE
        fields["fenced"] = True
    else:
        code = exc.code
    # A 401 names its scheme, as the auth middleware's own 401 does (RFC 9110 11.6.1).
    headers = {"WWW-Authenticate": 'Bearer realm="svit"'} if status == 401 else None
    wait = fields.get("retry_after_s")
    if status == 503 and isinstance(wait, (int, float)) and not isinstance(wait, bool) \
            and 0 < wait <= 3600:
        # the error's own advice (e.g. ``cluster_full``), in whole seconds
        headers = {"Retry-After": str(max(1, math.ceil(wait)))}
    if fields:
        return error_response(status, str(code), exc.message, headers=headers, fields=fields)
    return error_response(status, str(code), exc.message, headers=headers)


#: The stable code of an HTTP error raised by the framework itself (no route,
#: wrong method, a body it could not parse), by status; any other 4xx is
#: ``invalid_value``, any other 5xx ``internal``.
_FRAMEWORK_CODES: dict[int, ErrorCode] = {
    400: ErrorCode.DECODE_ERROR, 401: ErrorCode.UNAUTHENTICATED, 403: ErrorCode.FORBIDDEN,
    404: ErrorCode.NOT_FOUND, 413: ErrorCode.PAYLOAD_TOO_LARGE, 503: ErrorCode.UNAVAILABLE,
}


def from_http_exception(exc: HTTPException) -> JSONResponse:
    """The typed error answer for an ``HTTPException`` raised by Starlette or FastAPI.

    The framework raises these for an unknown path (404), a method the path
    does not take (405, with its ``Allow`` header kept) and a body it could not
    parse before validation (400: not UTF-8, nested deeper than the JSON
    parser recurses). They get the same ``{"error": {"code", "message"}}``
    shape as every other error, with the code :data:`_FRAMEWORK_CODES` gives
    the status.
    """
    status = exc.status_code
    code = _FRAMEWORK_CODES.get(
        status, ErrorCode.INVALID_VALUE if status < 500 else ErrorCode.INTERNAL)
    message = str(exc.detail)
    cause = exc.__cause__
    if status == 400 and isinstance(cause, RecursionError):
        message = "request body is not valid JSON: nested too deeply"
    elif status == 400 and isinstance(cause, UnicodeDecodeError):
        message = "request body is not valid JSON: not UTF-8"
    return error_response(status, str(code), message, headers=dict(exc.headers or {}))


async def internal_error_handler(request: Request, exc: Exception) -> JSONResponse:
    """The typed 500 answer for an exception no other handler took.

    Logs one ERROR record on this module's logger with the request's method,
    path (no query string: it may carry an observe token) and ``exc`` with its
    traceback. Answers 500 ``{"error": {"code": "internal", "message"}}``;
    the message names only the exception's class: its text and traceback
    stay in the log, since they may hold internal state or secrets.
    """
    name = type(exc).__name__
    log.exception("unhandled %s on %s %s", name, request.method, request.url.path,
                  exc_info=exc)
    return error_response(500, str(ErrorCode.INTERNAL), f"internal error ({name})")
