"""ASGI layer 2: bearer-token authentication; tokens stored only as SHA-256 hashes.

Authorization (tenant of the process) happens after the envelope is decoded and
*before* any receipt lookup; see :func:`authorize`.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from svit_cluster.errors import ConfigurationError, ErrorCode, InvalidInput
from svit_cluster.gateway._errors import error_response

__all__ = [
    "PUBLIC_PATHS",
    "BearerAuthMiddleware",
    "Principal",
    "TokenStore",
    "authorize",
    "tenant_of",
]

#: Paths reachable without a token: health, metrics, negotiation, API docs.
PUBLIC_PATHS = frozenset({
    "/healthz", "/livez", "/readyz", "/metrics", "/v1/initialize", "/openapi.json", "/docs",
})


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a token authenticates: one tenant, or an admin (all tenants)."""

    tenant: str | None
    admin: bool = False

    @property
    def partition(self) -> str:
        """The trusted receipt partition for this principal."""
        return "@admin" if self.admin else f"tenant:{self.tenant}"


class TokenStore:
    """Token hashes -> principals. Plain tokens are never kept.

    Lookups compare the SHA-256 of the presented token against *every* stored
    hash with :func:`hmac.compare_digest`, so the time taken does not depend on
    which stored token (if any) matches.
    """

    def __init__(self) -> None:
        self._entries: list[tuple[bytes, Principal]] = []

    def add(self, token: str, principal: Principal) -> None:
        """Register ``token`` (at least 16 characters).

        Raises:
            ConfigurationError: the token is too short, or a tenant principal
                has no tenant.
        """
        if len(token) < 16:
            raise ConfigurationError("tokens must be at least 16 characters")
        if not principal.admin and not principal.tenant:
            raise ConfigurationError("a tenant token needs a tenant")
        self._entries.append((hashlib.sha256(token.encode()).digest(), principal))

    def lookup(self, token: str) -> Principal | None:
        presented = hashlib.sha256(token.encode()).digest()
        found: Principal | None = None
        for digest, principal in self._entries:
            if hmac.compare_digest(digest, presented):
                found = principal
        return found

    def __len__(self) -> int:
        return len(self._entries)

    @classmethod
    def from_document(cls, doc: Any) -> TokenStore:
        """Load ``{"tokens": [{"token": "...", "admin": true} | {"token": "...", "tenant": "t"}]}``.

        Raises:
            ConfigurationError: malformed document.
        """
        store = cls()
        if not isinstance(doc, dict) or not isinstance(doc.get("tokens"), list):
            raise ConfigurationError('tokens file must be {"tokens": [...]}')
        for entry in doc["tokens"]:
            if not isinstance(entry, dict) or not isinstance(entry.get("token"), str):
                raise ConfigurationError("each token entry needs a string token")
            admin = entry.get("admin") is True
            tenant = entry.get("tenant")
            if tenant is not None and not isinstance(tenant, str):
                raise ConfigurationError("tenant must be a string")
            store.add(entry["token"], Principal(tenant=tenant, admin=admin))
        return store

    @classmethod
    def from_file(cls, path: str | Path) -> TokenStore:
        """Load a tokens JSON file (see :meth:`from_document`)."""
        try:
            doc = json.loads(Path(path).read_text())
        except (OSError, ValueError) as exc:
            raise ConfigurationError(f"cannot read tokens file {path}: {exc}") from exc
        return cls.from_document(doc)


class BearerAuthMiddleware:
    """Answer ``401 unauthenticated`` unless ``Authorization: Bearer <token>`` is known.

    Sets ``scope["svit.principal"]`` for downstream layers. Paths in
    :data:`PUBLIC_PATHS` and non-HTTP scopes pass through.
    """

    def __init__(self, app: ASGIApp, tokens: TokenStore) -> None:
        self.app = app
        self.tokens = tokens

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") in PUBLIC_PATHS:
            await self.app(scope, receive, send)
            return
        header = b""
        for name, value in scope.get("headers", []):
            if name == b"authorization":
                header = value
        scheme, _, token = header.decode("latin-1").partition(" ")
        principal = self.tokens.lookup(token.strip()) if scheme.lower() == "bearer" else None
        if principal is None:
            response = error_response(
                401,
                str(ErrorCode.UNAUTHENTICATED),
                "missing or unknown bearer token",
                headers={"WWW-Authenticate": 'Bearer realm="svit"'},
            )
            await response(scope, receive, send)
            return
        scope["svit.principal"] = principal
        await self.app(scope, receive, send)


def tenant_of(process_id: str) -> str:
    """The tenant named by the authority of ``svit://<tenant>/...``.

    Raises:
        InvalidInput: (``invalid_process_id``) no authority.
    """
    rest = process_id[len("svit://") :] if process_id.startswith("svit://") else ""
    tenant = rest.split("/", 1)[0]
    if not tenant:
        raise InvalidInput("process id has no tenant authority", code=ErrorCode.INVALID_PROCESS_ID)
    return tenant


def authorize(principal: Principal, process_id: str) -> bool:
    """True when ``principal`` may act on ``process_id`` (admin, or same tenant)."""
    if principal.admin:
        return True
    try:
        return tenant_of(process_id) == principal.tenant
    except InvalidInput:
        return False
