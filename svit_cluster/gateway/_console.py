"""ASGI layer: the browser console's static files under ``/ui/``.

The console (``svit_cluster/gateway/console/``: one HTML page, one ES module,
one stylesheet; no build step) is plain files shipped as package data. They
hold no data and no secret, so this layer answers them *before* the byte cap
and authentication: the page itself asks for a token and sends it as
``Authorization: Bearer`` on every JSON call (never in a URL), and uses observe
tokens for its event streams (see ``docs/console.md``).

Rules this layer keeps:

* only ``GET`` and ``HEAD`` of ``/ui``, ``/ui/`` and the files read at start
  (a fixed table: a request path is looked up, never joined to a directory,
  so nothing outside the folder can be named); anything else under ``/ui/``
  is the typed ``404 not_found`` or ``405``; every other path passes through;
* ``/ui`` redirects to ``ui/``: a *relative* ``Location``, so behind a proxy
  that serves the gateway under a sub-path (an Ingress rewriting
  ``/svit/...`` to ``/...``) the browser stays under that sub-path, and every
  URL the page builds is relative to it too;
* every answer carries a content security policy that allows scripts, styles
  and connections from the page's own origin only, no inline script or
  style, no framing and no form submission (a form sent without the page's
  script would put its fields in a URL); plus ``nosniff`` and
  ``Referrer-Policy: no-referrer``;
* ``Cache-Control: no-cache`` with a strong ``ETag`` (the content's SHA-256):
  a browser revalidates every file on each load and gets ``304`` while it is
  unchanged, so a gateway upgrade is picked up at the next load, never mixed
  with stale files.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from importlib import resources

from starlette.types import ASGIApp, Receive, Scope, Send

from svit_cluster.errors import ErrorCode
from svit_cluster.gateway._errors import error_response

__all__ = ["CONSOLE_CSP", "CONSOLE_PATH", "ConsoleMiddleware", "console_files"]

#: Where the console is served (its page is ``/ui/``).
CONSOLE_PATH = "/ui"

#: The console's content security policy: same-origin scripts, styles and
#: connections (``fetch`` and ``EventSource``), nothing inline, no framing,
#: no form submission, no ``<base>``.
CONSOLE_CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
               "connect-src 'self'; base-uri 'none'; form-action 'none'; "
               "frame-ancestors 'none'")

_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}


@dataclass(frozen=True, slots=True)
class _File:
    body: bytes
    content_type: str
    etag: str


def console_files() -> dict[str, bytes]:
    """The console's files by name (``index.html``, ``console.js``, ...), read
    from the package (only the types the layer serves: html, js, css, svg)."""
    folder = resources.files("svit_cluster.gateway").joinpath("console")
    out: dict[str, bytes] = {}
    for entry in folder.iterdir():
        name = entry.name
        if entry.is_file() and any(name.endswith(ext) for ext in _TYPES):
            out[name] = entry.read_bytes()
    return out


def _headers(extra: dict[str, str]) -> list[tuple[bytes, bytes]]:
    base = {
        "content-security-policy": CONSOLE_CSP,
        "x-content-type-options": "nosniff",
        "referrer-policy": "no-referrer",
        "x-frame-options": "DENY",
        "cache-control": "no-cache",
        **extra,
    }
    return [(k.encode("latin-1"), v.encode("latin-1")) for k, v in base.items()]


class ConsoleMiddleware:
    """Serve the console's files at ``/ui/`` and pass every other request to ``app``.

    Args:
        app: the rest of the gateway (byte cap, authentication, routes).
        files: name -> content; default :func:`console_files`.
    """

    def __init__(self, app: ASGIApp, files: dict[str, bytes] | None = None) -> None:
        self.app = app
        table: dict[str, _File] = {}
        for name, body in (console_files() if files is None else files).items():
            ext = name[name.rfind("."):]
            table[name] = _File(body, _TYPES.get(ext, "application/octet-stream"),
                                '"' + hashlib.sha256(body).hexdigest()[:32] + '"')
        if "index.html" not in table:
            raise ValueError("the console needs an index.html")
        self._files = table

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if path != CONSOLE_PATH and not path.startswith(CONSOLE_PATH + "/"):
            await self.app(scope, receive, send)
            return
        method = scope.get("method", "GET")
        if method not in ("GET", "HEAD"):
            await error_response(405, str(ErrorCode.INVALID_VALUE),
                                 "the console's files answer GET and HEAD only",
                                 headers={"Allow": "GET, HEAD"})(scope, receive, send)
            return
        if path == CONSOLE_PATH:
            # relative: resolves against the URL the browser asked for, so a
            # proxy's sub-path (/svit/ui -> /svit/ui/) is kept
            await self._send(send, 308, b"", _headers({"location": "ui/",
                                                       "content-length": "0"}))
            return
        name = path[len(CONSOLE_PATH) + 1:] or "index.html"
        found = self._files.get(name)
        if found is None:
            await error_response(404, str(ErrorCode.NOT_FOUND),
                                 "no such console file")(scope, receive, send)
            return
        extra = {"content-type": found.content_type, "etag": found.etag}
        if _etag_matches(scope, found.etag):
            await self._send(send, 304, b"", _headers({"etag": found.etag}))
            return
        extra["content-length"] = str(len(found.body))
        await self._send(send, 200, b"" if method == "HEAD" else found.body, _headers(extra))

    @staticmethod
    async def _send(send: Send, status: int, body: bytes,
                    headers: list[tuple[bytes, bytes]]) -> None:
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def _etag_matches(scope: Scope, etag: str) -> bool:
    for name, value in scope.get("headers", []):
        if name == b"if-none-match":
            presented = {v.strip().removeprefix("W/") for v in value.decode("latin-1").split(",")}
            return etag in presented or "*" in presented
    return False
