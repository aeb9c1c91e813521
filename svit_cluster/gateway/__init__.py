"""The network transport: an authenticated ASGI gateway for svit-control@1.

Public names: :func:`create_app`, :class:`TokenStore`, :class:`Principal`,
:class:`Router`, :class:`LocalRouter`, :class:`ByteCapMiddleware`,
:class:`BearerAuthMiddleware`, :func:`authorize`, :class:`GatewayMetrics`.
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
from svit_cluster.gateway._metrics import GatewayMetrics
from svit_cluster.gateway._router import (
    TOKEN_HEADER,
    LocalRouter,
    ProcessInfo,
    Router,
    capture_owner_token,
    report_owner_token,
)

__all__ = [
    "CAPABILITIES",
    "DEFAULT_MAX_REQUEST_BYTES",
    "PUBLIC_PATHS",
    "TOKEN_HEADER",
    "BearerAuthMiddleware",
    "ByteCapMiddleware",
    "GatewayMetrics",
    "LocalRouter",
    "Principal",
    "ProcessInfo",
    "Router",
    "TokenStore",
    "authorize",
    "capture_owner_token",
    "create_app",
    "report_owner_token",
    "tenant_of",
]
