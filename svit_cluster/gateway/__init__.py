"""The network transport: an authenticated ASGI gateway for svit-control@1.

Public names: :func:`create_app`, :class:`TokenStore`, :class:`Principal`,
:class:`Router` (its in-process implementation is
``svit_cluster.inprocess.InProcessRouter``), :class:`ByteCapMiddleware`,
:class:`BearerAuthMiddleware`, :func:`authorize`, :class:`GatewayMetrics`,
:class:`ObserveTokens` (browser observe tokens), :func:`parse_origins` (CORS),
:class:`ConsoleMiddleware` (the browser console at ``/ui/``, its policy
:data:`CONSOLE_CSP`).
"""

from svit_cluster.gateway._app import CAPABILITIES, create_app
from svit_cluster.gateway._auth import (
    PUBLIC_PATHS,
    BearerAuthMiddleware,
    Principal,
    TokenStore,
    authorize,
    tenant_of,
)
from svit_cluster.gateway._bytecap import DEFAULT_MAX_REQUEST_BYTES, ByteCapMiddleware
from svit_cluster.gateway._coalesce import coalescing
from svit_cluster.gateway._console import CONSOLE_CSP, ConsoleMiddleware
from svit_cluster.gateway._cors import parse_origins
from svit_cluster.gateway._metrics import GatewayMetrics
from svit_cluster.gateway._observe import (
    OBSERVE_COOKIE,
    OBSERVE_PARAM,
    ObserveClaims,
    ObserveTokens,
    install_log_redaction,
)
from svit_cluster.gateway._router import (
    TOKEN_HEADER,
    ProcessInfo,
    Router,
)

__all__ = [
    "CAPABILITIES",
    "CONSOLE_CSP",
    "DEFAULT_MAX_REQUEST_BYTES",
    "OBSERVE_COOKIE",
    "OBSERVE_PARAM",
    "PUBLIC_PATHS",
    "TOKEN_HEADER",
    "BearerAuthMiddleware",
    "ByteCapMiddleware",
    "ConsoleMiddleware",
    "GatewayMetrics",
    "ObserveClaims",
    "ObserveTokens",
    "Principal",
    "ProcessInfo",
    "Router",
    "TokenStore",
    "authorize",
    "coalescing",
    "create_app",
    "install_log_redaction",
    "parse_origins",
    "tenant_of",
]
