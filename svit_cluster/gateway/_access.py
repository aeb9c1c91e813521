"""Process authorization for the gateway's endpoints: one FastAPI dependency.

Every endpoint that acts on a process declares :func:`process_access` (or, when it
decodes its own body, calls :func:`require_access` after decoding). A principal that
may not act on a named process gets ``403 forbidden`` -- the :class:`Forbidden`
exception, answered by :func:`forbidden_handler` in the gateway's error wire format
(``{"error": {"code": "forbidden", "message": ...}}``). The check runs before the
router sees the request, so no receipt lookup or state read happens for a foreign
tenant (control protocol: authorization precedes receipt lookup).
"""

from __future__ import annotations

from typing import Any

from fastapi import Request
from starlette.responses import JSONResponse, Response

from svit_cluster.errors import ErrorCode, InvalidInput
from svit_cluster.gateway._auth import Principal, authorize
from svit_cluster.gateway._errors import error_response
from svit_cluster.process import validate_process_id

__all__ = [
    "PROCESS_ID_FIELDS",
    "Forbidden",
    "admin_only",
    "forbidden_handler",
    "forbidden_response",
    "principal_of",
    "process_access",
    "require_access",
]

#: Query or JSON-body fields that name a process the caller acts on.
PROCESS_ID_FIELDS: tuple[str, ...] = ("process_id", "new_process_id")


class Forbidden(Exception):
    """The authenticated principal may not act on ``process_id`` (HTTP 403 ``forbidden``)."""

    def __init__(self, process_id: str) -> None:
        super().__init__(f"token may not act on {process_id[:200]}")
        self.process_id = process_id


def forbidden_response(process_id: str) -> JSONResponse:
    """The 403 answer for ``process_id``: ``{"error": {"code": "forbidden", "message"}}``."""
    return error_response(
        403, str(ErrorCode.FORBIDDEN), f"token may not act on {process_id[:200]}"
    )


async def forbidden_handler(_: Request, exc: Exception) -> Response:
    """Exception handler for :class:`Forbidden` (registered by ``create_app``)."""
    assert isinstance(exc, Forbidden)
    return forbidden_response(exc.process_id)


def admin_only(request: Request, what: str) -> JSONResponse | None:
    """None when the request's principal is an admin; else the ``403 forbidden``
    answer saying ``what`` needs an admin token."""
    principal = request.scope.get("svit.principal")
    if isinstance(principal, Principal) and principal.admin:
        return None
    return error_response(403, str(ErrorCode.FORBIDDEN), f"{what} need an admin token")


def principal_of(request: Request) -> Principal:
    """The principal :class:`BearerAuthMiddleware` put on the request scope."""
    principal = request.scope.get("svit.principal")
    assert isinstance(principal, Principal)
    return principal


def require_access(principal: Principal, process_id: str) -> None:
    """Raise :class:`Forbidden` unless ``principal`` may act on ``process_id``
    (rule: :func:`~svit_cluster.gateway._auth.authorize`)."""
    if not authorize(principal, process_id):
        raise Forbidden(process_id)


async def _json_body(request: Request) -> Any:
    """The request's JSON body, or None: empty, or not JSON the endpoint could use
    (malformed, not UTF-8, nested too deeply; a route that takes a body answers
    that with its own 400)."""
    if not await request.body():
        return None
    try:
        return await request.json()
    except (ValueError, RecursionError):
        return None


async def process_access(request: Request) -> Principal:
    """FastAPI dependency: authorize every process the request names.

    Reads each of :data:`PROCESS_ID_FIELDS` from the query string (every
    value of a repeated parameter) *and* from the JSON body: an endpoint takes
    its ids from one of the two, and the check covers both, so an id of the
    caller's own tenant in the query cannot cover another tenant's id in the
    body. A value that is not a string or not a valid process id is left to
    the endpoint's own validation (400).

    Returns:
        The authenticated principal.

    Raises:
        Forbidden: the principal may not act on a named process (403).
    """
    principal = principal_of(request)
    body = await _json_body(request)
    for name in PROCESS_ID_FIELDS:
        named: list[Any] = list(request.query_params.getlist(name))
        if isinstance(body, dict):
            named.append(body.get(name))
        for raw in named:
            if not isinstance(raw, str):
                continue
            try:
                pid = validate_process_id(raw)
            except InvalidInput:
                continue
            require_access(principal, pid)
    return principal
