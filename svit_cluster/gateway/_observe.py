"""Browser observers: short-lived, read-only observe tokens scoped to one process.

A browser's ``EventSource`` cannot send an ``Authorization`` header, so a web
page cannot present a bearer token to ``GET /v1/processes/events``. Instead a
trusted party holding a bearer token (typically the page's own backend) mints
an *observe token* with ``POST /v1/processes/observe-token`` and hands it to
the page, which opens
``/v1/processes/events?process_id=…&observe_token=…`` (or sends the token as
the :data:`OBSERVE_COOKIE` cookie).

An observe token

* names exactly one process and an expiry (unix seconds), and is signed with
  HMAC-SHA256 under the gateway's observe key
  (:meth:`~svit_cluster.gateway.TokenStore.observe_key`: the tokens document's
  ``observe_key``, else derived from its admin tokens, so every gateway replica
  loading the same tokens Secret accepts the others' observe tokens);
* is accepted only on ``GET /v1/processes/events`` (any other path answers
  ``401 unauthenticated``), only for its own process (``403 forbidden``) and
  only until it expires (``401 unauthenticated``); a stream opened with it ends
  with ``event: expired`` at the first keepalive or signal after the expiry;
* is never logged: :func:`install_log_redaction` rewrites ``observe_token=…``
  in the records of uvicorn's access and error loggers and httpx's request log.

Wire format: ``svo1.<base64url(claims JSON)>.<base64url(HMAC-SHA256)>`` with
claims ``{"pid": process id, "exp": unix seconds, "jti": random hex}``; the MAC
covers the literal prefix ``svo1.`` and the encoded claims.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import logging
import re
import secrets
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

from starlette.requests import cookie_parser
from starlette.types import Scope

from svit_cluster.errors import ConfigurationError, InvalidInput, Unauthenticated

__all__ = [
    "DEFAULT_OBSERVE_TTL_S",
    "MAX_OBSERVE_TTL_S",
    "OBSERVE_COOKIE",
    "OBSERVE_PARAM",
    "OBSERVE_PATH",
    "ObserveClaims",
    "ObserveTokens",
    "RedactObserveTokens",
    "install_log_redaction",
    "observe_token_of",
    "redact",
]

#: The one path (GET only) that accepts an observe token.
OBSERVE_PATH = "/v1/processes/events"
#: Query parameter carrying an observe token.
OBSERVE_PARAM = "observe_token"
#: Cookie carrying an observe token (used when the query parameter is absent).
OBSERVE_COOKIE = "svit_observe_token"
#: Default and maximum lifetime of an observe token, in seconds.
DEFAULT_OBSERVE_TTL_S = 300
MAX_OBSERVE_TTL_S = 3600
#: Upper bound on a presented token's length (a 4 KiB process id plus overhead).
_MAX_TOKEN_CHARS = 8192
_PREFIX = "svo1."


def _b64e(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _b64d(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass(frozen=True, slots=True)
class ObserveClaims:
    """What a valid observe token grants: read ``process_id``'s events until ``expires_at``."""

    process_id: str
    #: Unix seconds after which the token is refused.
    expires_at: int


class ObserveTokens:
    """Mints and verifies observe tokens under one HMAC-SHA256 key.

    Args:
        key: the observe key, at least 32 bytes.
        max_ttl_s: the longest lifetime :meth:`mint` grants (default 3600 s).
        clock: unix time in seconds (``time.time``; injectable for tests).

    Raises:
        ConfigurationError: the key is shorter than 32 bytes.
    """

    def __init__(self, key: bytes, *, max_ttl_s: int = MAX_OBSERVE_TTL_S,
                 clock: Callable[[], float] = time.time) -> None:
        if len(key) < 32:
            raise ConfigurationError("the observe key must be at least 32 bytes")
        self._key = key
        self.max_ttl_s = max_ttl_s
        self._clock = clock

    def _mac(self, body: str) -> bytes:
        return hmac.new(self._key, (_PREFIX + body).encode("ascii"), hashlib.sha256).digest()

    def mint(self, process_id: str, ttl_s: int = DEFAULT_OBSERVE_TTL_S) -> tuple[str, int]:
        """A token for ``process_id`` valid for ``ttl_s`` seconds: ``(token, expires_at)``.

        The caller must already have authorized the minting principal for
        ``process_id`` (the gateway does, in ``POST /v1/processes/observe-token``).

        Raises:
            InvalidInput: ``ttl_s`` is outside ``1..max_ttl_s``.
        """
        if type(ttl_s) is not int or not 1 <= ttl_s <= self.max_ttl_s:
            raise InvalidInput(f"ttl_s must be an integer in 1..{self.max_ttl_s}")
        expires_at = int(self._clock()) + ttl_s
        claims = {"pid": process_id, "exp": expires_at, "jti": secrets.token_hex(8)}
        body = _b64e(json.dumps(claims, separators=(",", ":")).encode())
        return f"{_PREFIX}{body}.{_b64e(self._mac(body))}", expires_at

    def verify(self, token: str) -> ObserveClaims:
        """The claims of a genuine, unexpired token.

        Raises:
            Unauthenticated: malformed or tampered (``invalid observe token``),
                or expired (``observe token expired``). The message never
                contains the token.
        """
        invalid = Unauthenticated("invalid observe token")
        # a genuine token is ASCII (prefix, base64url, dots); the MAC is computed
        # over ASCII bytes, so anything else is refused before it is computed
        if len(token) > _MAX_TOKEN_CHARS or not token.isascii() \
                or not token.startswith(_PREFIX):
            raise invalid
        body, _, mac = token[len(_PREFIX):].partition(".")
        try:
            presented = _b64d(mac)
        except (binascii.Error, ValueError):
            raise invalid from None
        if not hmac.compare_digest(presented, self._mac(body)):
            raise invalid
        try:
            claims: Any = json.loads(_b64d(body))
        except (binascii.Error, ValueError):
            raise invalid from None
        pid = claims.get("pid") if isinstance(claims, dict) else None
        exp = claims.get("exp") if isinstance(claims, dict) else None
        if not isinstance(pid, str) or type(exp) is not int:
            raise invalid
        if self._clock() >= exp:
            raise Unauthenticated("observe token expired; mint a new one")
        return ObserveClaims(process_id=pid, expires_at=exp)


def observe_token_of(scope: Scope) -> str | None:
    """The observe token a request presents: the ``observe_token`` query
    parameter, else the :data:`OBSERVE_COOKIE` cookie; None when neither."""
    query: bytes = scope.get("query_string", b"")
    if query and OBSERVE_PARAM.encode() in query:
        values = parse_qs(query.decode("latin-1"), keep_blank_values=True).get(OBSERVE_PARAM)
        if values:
            return values[0]
    for name, value in scope.get("headers", []):
        if name == b"cookie":
            found = cookie_parser(value.decode("latin-1")).get(OBSERVE_COOKIE)
            if found is not None:
                return found
    return None


_TOKEN_IN_TEXT = re.compile(r"((?:observe_token|svit_observe_token)(?:=|%3D))[^&\s\"';#]*",
                            re.IGNORECASE)


def redact(text: str) -> str:
    """``text`` with every ``observe_token=<value>`` replaced by ``observe_token=[redacted]``."""
    return _TOKEN_IN_TEXT.sub(r"\1[redacted]", text)


def _redact_arg(arg: Any) -> Any:
    if arg is None or isinstance(arg, int | float):
        return arg
    text = arg if isinstance(arg, str) else str(arg)
    return redact(text) if "observe_token" in text.lower() else arg


class RedactObserveTokens(logging.Filter):
    """A logging filter that redacts observe tokens from a record's message and
    arguments (uvicorn's access line carries the full path with the query
    string; httpx logs request URLs). It never drops a record."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str) and "observe_token" in record.msg.lower():
            record.msg = redact(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(_redact_arg(a) for a in record.args)
        elif isinstance(record.args, dict):
            record.args = {k: _redact_arg(v) for k, v in record.args.items()}
        return True


#: Loggers that may log a request line or URL with its query string.
REDACTED_LOGGERS: tuple[str, ...] = ("uvicorn.access", "uvicorn.error", "uvicorn", "httpx",
                                     "httpcore", "")


def install_log_redaction(loggers: Iterable[str] = REDACTED_LOGGERS) -> None:
    """Add one :class:`RedactObserveTokens` to each named logger (idempotent).

    A logger filter sees the records logged on that logger itself (uvicorn's
    access records are logged on ``uvicorn.access``), before any handler, so
    every handler, including handlers configured later by uvicorn's
    ``dictConfig``, receives the redacted record.
    """
    for name in loggers:
        logger = logging.getLogger(name)
        if not any(isinstance(f, RedactObserveTokens) for f in logger.filters):
            logger.addFilter(RedactObserveTokens())
