"""Cross-origin access for browser pages (CORS), outermost gateway layer.

Off by default: with no origins, no CORS headers are sent and browsers refuse
cross-origin reads. Configured origins (``SVIT_CORS_ORIGINS``, comma list;
Helm ``gateway.corsOrigins``) get Starlette's ``CORSMiddleware``, outside the
byte cap and authentication, so a preflight ``OPTIONS`` (which carries no
credentials) is answered before either.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from starlette.middleware.cors import CORSMiddleware

from svit_cluster.errors import ConfigurationError

__all__ = ["parse_origins", "with_cors"]

_ORIGIN = re.compile(r"^https?://[A-Za-z0-9.\-\[\]:]+$")


def parse_origins(origins: str | Sequence[str] | None) -> tuple[str, ...]:
    """Validated origins from a comma list or a sequence; ``*`` means any origin.

    An origin is ``scheme://host[:port]``, exactly as a browser sends it in
    the ``Origin`` header: no path and no trailing slash (a common mistake
    that would otherwise silently match nothing).

    Raises:
        ConfigurationError: an entry is not ``*`` and not an http(s) origin.
    """
    if origins is None:
        return ()
    items = origins.split(",") if isinstance(origins, str) else list(origins)
    out: list[str] = []
    for raw in items:
        origin = raw.strip()
        if not origin:
            continue
        if origin != "*" and not _ORIGIN.match(origin):
            raise ConfigurationError(
                f"CORS origin {origin[:200]!r} must be '*' or scheme://host[:port] "
                "(no path, no trailing slash)")
        out.append(origin)
    return tuple(out)


def with_cors(app: Any, origins: Sequence[str]) -> Any:
    """``app`` wrapped in ``CORSMiddleware`` for ``origins``; ``app`` itself when empty.

    Allowed: ``GET``/``POST``, the ``Authorization``, ``Content-Type``,
    ``Last-Event-ID`` and W3C ``traceparent``/``tracestate`` request headers;
    exposed: ``Retry-After``, ``X-Svit-Token`` and ``traceparent``.
    Credentials (cookies, e.g. the observe-token cookie with
    ``EventSource(url, {withCredentials: true})``) are allowed only for
    explicit origins, never with ``*``. Preflight answers are cached 10 minutes.

    Raises:
        ConfigurationError: as :func:`parse_origins`.
    """
    allowed = parse_origins(origins)
    if not allowed:
        return app
    return CORSMiddleware(
        app, allow_origins=list(allowed), allow_methods=["GET", "POST"],
        allow_headers=["Authorization", "Content-Type", "Last-Event-ID",
                       "traceparent", "tracestate"],
        expose_headers=["Retry-After", "X-Svit-Token", "traceparent"],
        allow_credentials="*" not in allowed, max_age=600)
