"""ASGI layer 2: bearer-token authentication; tokens stored only as SHA-256 hashes.

Authorization (tenant of the process) happens after the envelope is decoded and
*before* any receipt lookup; see :func:`authorize`.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from svit_cluster.errors import ConfigurationError, ErrorCode, InvalidInput, Unauthenticated
from svit_cluster.gateway._errors import error_response
from svit_cluster.gateway._observe import OBSERVE_PATH, ObserveTokens, observe_token_of

log = logging.getLogger(__name__)

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
    """Who a token authenticates: one tenant, or an admin (all tenants), or the
    reader of one process's events (an observe token, see
    :mod:`svit_cluster.gateway._observe`)."""

    tenant: str | None
    admin: bool = False
    #: An observe token's one process: :func:`authorize` allows nothing else.
    observe: str | None = None
    #: Unix seconds when the credential stops being valid (observe tokens); None: never.
    expires_at: float | None = None

    @property
    def partition(self) -> str:
        """The trusted receipt partition for this principal."""
        return "@admin" if self.admin else f"tenant:{self.tenant}"


class TokenStore:
    """Token hashes -> principals. Plain tokens are never kept.

    Lookups compare the SHA-256 of the presented token against *every* stored
    hash with :func:`hmac.compare_digest`, so the time taken does not depend on
    which stored token (if any) matches.

    A store read with :meth:`from_file` follows its file: at most every
    ``reload_interval_s`` seconds a lookup checks it, and when its
    identity (inode, size, mtime) changed the tokens are read again, so a
    rotated Kubernetes Secret (the kubelet swaps the mounted file atomically,
    within about a minute) takes effect without restarting the gateway. A new
    file that cannot be read or parsed keeps the previous tokens (logged as a
    warning, retried at the next interval); rotation never opens the gateway.
    """

    def __init__(self) -> None:
        self._entries: list[tuple[bytes, Principal]] = []
        self._observe_material: list[bytes] = []
        self._observe_key: bytes | None = None
        self._path: Path | None = None
        self._identity: tuple[int, int, int] | None = None
        self._checked_at = 0.0
        self.reload_interval_s = 2.0

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
        if principal.admin:
            self._observe_material.append(
                hmac.new(token.encode(), b"svit-observe-key/v1", hashlib.sha256).digest())

    def set_observe_key(self, key: str) -> None:
        """Use ``key`` (at least 32 characters) to sign observe tokens.

        Raises:
            ConfigurationError: the key is shorter than 32 characters.
        """
        if len(key) < 32:
            raise ConfigurationError("observe_key must be at least 32 characters")
        self._observe_key = hashlib.sha256(b"svit-observe-key/v1:" + key.encode()).digest()

    def observe_key(self) -> bytes:
        """The 32-byte HMAC key of observe tokens.

        In order: the configured ``observe_key`` (:meth:`set_observe_key`); else
        a key derived from the admin tokens (HMAC-SHA256 of each, so the key
        reveals no token and no tenant token holder can compute it; every
        gateway replica loading the same tokens document derives the same key);
        else, with no admin token, a random key kept by this store (observe
        tokens then work only on the gateway that minted them). The gateway
        takes the key once, at start: a reloaded tokens file (rotation) does
        not change it, so replicas started after a rotation of the admin
        tokens derive another key; set ``observe_key`` to keep them in step.
        """
        if self._observe_key is None:
            if self._observe_material:
                self._observe_key = hashlib.sha256(
                    b"".join(sorted(self._observe_material))).digest()
            else:
                self._observe_key = os.urandom(32)
        return self._observe_key

    def lookup(self, token: str) -> Principal | None:
        """The principal of ``token``, or None (re-reads a changed tokens file first)."""
        if self._path is not None:
            self._maybe_reload()
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

        An optional ``"observe_key"`` (string, at least 32 characters) sets the
        key of observe tokens (:meth:`observe_key`).

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
        observe_key = doc.get("observe_key")
        if observe_key is not None:
            if not isinstance(observe_key, str):
                raise ConfigurationError("observe_key must be a string")
            store.set_observe_key(observe_key)
        return store

    @classmethod
    def from_file(cls, path: str | Path, *, reload_interval_s: float = 2.0) -> TokenStore:
        """Load a tokens JSON file (see :meth:`from_document`) and follow its changes.

        Args:
            path: the tokens file (``SVIT_TOKENS_FILE``).
            reload_interval_s: seconds between two checks of the file (> 0).

        Raises:
            ConfigurationError: the file cannot be read or is malformed.
        """
        path = Path(path)
        identity = _identity(path)
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise ConfigurationError(f"cannot read tokens file {path}: {exc}") from exc
        store = cls.from_document(doc)
        store._path, store._identity = path, identity
        store._checked_at = time.monotonic()
        store.reload_interval_s = reload_interval_s
        return store

    def _maybe_reload(self) -> None:
        now = time.monotonic()
        if now - self._checked_at < self.reload_interval_s or self._path is None:
            return
        self._checked_at = now
        identity = _identity(self._path)
        if identity is None or identity == self._identity:
            return
        try:
            fresh = TokenStore.from_file(self._path)
        except ConfigurationError as exc:
            log.warning("tokens file changed but cannot be loaded; keeping the previous "
                        "tokens: %s", exc)
            return
        self._entries, self._identity = fresh._entries, fresh._identity
        log.warning("tokens file %s reloaded: %d tokens", self._path, len(self._entries))


def _identity(path: Path) -> tuple[int, int, int] | None:
    """``(inode, size, mtime_ns)`` of ``path`` (symlinks followed), or None when absent."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


def _unauthenticated(message: str) -> Any:
    return error_response(401, str(ErrorCode.UNAUTHENTICATED), message,
                          headers={"WWW-Authenticate": 'Bearer realm="svit"'})


class BearerAuthMiddleware:
    """Answer ``401 unauthenticated`` unless ``Authorization: Bearer <token>`` is known.

    Sets ``scope["svit.principal"]`` for downstream layers. Paths in
    :data:`PUBLIC_PATHS` and non-HTTP scopes pass through.

    With ``observe``, a request without an ``Authorization`` header may instead
    present an observe token (``observe_token`` query parameter or cookie,
    :mod:`svit_cluster.gateway._observe`): accepted only on ``GET
    /v1/processes/events``, where it authenticates a principal limited to the
    token's process until its expiry; anywhere else, or tampered or expired,
    the answer is ``401 unauthenticated``.
    """

    def __init__(self, app: ASGIApp, tokens: TokenStore,
                 observe: ObserveTokens | None = None) -> None:
        self.app = app
        self.tokens = tokens
        self.observe = observe

    def _observer(self, scope: Scope, presented: str) -> Principal | str:
        """The observe principal of ``presented``, or the reason it is refused."""
        assert self.observe is not None
        if scope.get("path") != OBSERVE_PATH or scope.get("method") != "GET":
            return f"observe tokens are accepted only on GET {OBSERVE_PATH}"
        try:
            claims = self.observe.verify(presented)
        except Unauthenticated as exc:
            return exc.message
        try:
            tenant: str | None = tenant_of(claims.process_id)
        except InvalidInput:
            tenant = None
        return Principal(tenant=tenant, observe=claims.process_id,
                         expires_at=float(claims.expires_at))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") in PUBLIC_PATHS:
            await self.app(scope, receive, send)
            return
        header = b""
        for name, value in scope.get("headers", []):
            if name == b"authorization":
                header = value
        presented = observe_token_of(scope) if not header and self.observe else None
        if presented is not None:
            observer = self._observer(scope, presented)
            if isinstance(observer, str):
                await _unauthenticated(observer)(scope, receive, send)
                return
            scope["svit.principal"] = observer
            await self.app(scope, receive, send)
            return
        scheme, _, token = header.decode("latin-1").partition(" ")
        principal = self.tokens.lookup(token.strip()) if scheme.lower() == "bearer" else None
        if principal is None:
            await _unauthenticated("missing or unknown bearer token")(scope, receive, send)
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
    """True when ``principal`` may act on ``process_id`` (admin, or same tenant;
    an observe principal: its one process only)."""
    if principal.observe is not None:
        return process_id == principal.observe
    if principal.admin:
        return True
    try:
        return tenant_of(process_id) == principal.tenant
    except InvalidInput:
        return False
