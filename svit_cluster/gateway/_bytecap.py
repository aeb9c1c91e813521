"""ASGI layer 1: cap request body bytes before anything reads or decodes them."""

from __future__ import annotations

import asyncio

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from svit_cluster.errors import ErrorCode
from svit_cluster.gateway._errors import error_response
from svit_cluster.settings import DEFAULT_MAX_REQUEST_BYTES  # 1 MiB, one place

__all__ = [
    "DEFAULT_DRAIN_BYTES",
    "DEFAULT_DRAIN_S",
    "DEFAULT_MAX_REQUEST_BYTES",
    "ByteCapMiddleware",
    "PayloadTooLarge",
    "payload_too_large_handler",
]

#: Body bytes read and discarded at most before a 413 is sent (4 MiB).
DEFAULT_DRAIN_BYTES = 4 * 1024 * 1024
#: Seconds spent at most reading and discarding a refused body (5 s).
DEFAULT_DRAIN_S = 5.0


class PayloadTooLarge(HTTPException):
    """The request body passed the byte cap while it streamed (no ``Content-Length``).

    Raised inside the ASGI ``receive`` that :class:`ByteCapMiddleware` hands to
    the app, so it travels through the app's own error handling: an
    ``HTTPException`` subclass, because FastAPI re-raises those from body
    parsing (any other exception there becomes a generic 400). The app maps it
    with :func:`payload_too_large_handler` (413 ``payload_too_large``).
    """

    def __init__(self, max_bytes: int) -> None:
        super().__init__(413, f"request body exceeds {max_bytes} bytes")
        self.max_bytes = max_bytes


def _too_large(max_bytes: int) -> JSONResponse:
    return error_response(413, str(ErrorCode.PAYLOAD_TOO_LARGE),
                          f"request body exceeds {max_bytes} bytes",
                          headers={"Connection": "close"})


async def payload_too_large_handler(_: Request, exc: Exception) -> JSONResponse:
    """Exception handler: :class:`PayloadTooLarge` -> 413 JSON, ``Connection: close``."""
    assert isinstance(exc, PayloadTooLarge)
    return _too_large(exc.max_bytes)


class ByteCapMiddleware:
    """Answer ``413 payload_too_large`` for bodies over ``max_bytes``, readably.

    A declared ``Content-Length`` over the cap is refused before the app runs;
    a body without one (chunked) is counted while it streams, and the first
    byte over the cap raises :class:`PayloadTooLarge` inside ``receive`` (the
    app's handler answers 413; if the exception escapes the app before a
    response started, this layer answers it). Non-HTTP scopes pass through.

    Before refusing, the rest of the body is read and discarded, up to
    ``drain_bytes`` and ``drain_s`` (production servers' "lingering close"):
    a client that is still sending, as httpx and urllib do, reads the 413
    instead of a reset or a broken pipe. A client that sent ``Expect:
    100-continue`` has sent no body yet and is answered at once. A body larger
    than the bound, or slower, is answered after the bound and the connection
    closed (such a client may then see a reset).

    Args:
        app: the wrapped ASGI app.
        max_bytes: the cap in bytes, at least 1 (default 1 MiB).
        drain_bytes: body bytes discarded at most before answering (default 4 MiB).
        drain_s: seconds spent discarding at most (default 5).

    Raises:
        ValueError: ``max_bytes`` < 1, or a negative drain bound.
    """

    def __init__(self, app: ASGIApp, max_bytes: int = DEFAULT_MAX_REQUEST_BYTES, *,
                 drain_bytes: int = DEFAULT_DRAIN_BYTES,
                 drain_s: float = DEFAULT_DRAIN_S) -> None:
        if max_bytes < 1:
            raise ValueError("max_bytes must be at least 1")
        if drain_bytes < 0 or drain_s < 0:
            raise ValueError("drain_bytes and drain_s must be >= 0")
        self.app = app
        self.max_bytes = max_bytes
        self.drain_bytes = drain_bytes
        self.drain_s = drain_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers", []))
        expects_continue = headers.get(b"expect", b"").lower() == b"100-continue"
        raw_length = headers.get(b"content-length")
        if raw_length is not None:
            try:
                declared = int(raw_length)
            except ValueError:
                declared = self.max_bytes + 1
            if declared > self.max_bytes:
                if not expects_continue:
                    await self._drain(receive)
                await _too_large(self.max_bytes)(scope, receive, send)
                return
        seen = 0
        started = False

        async def counting_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    if message.get("more_body", False):
                        await self._drain(receive)
                    raise PayloadTooLarge(self.max_bytes)
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counting_receive, tracking_send)
        except PayloadTooLarge:
            if not started:
                await _too_large(self.max_bytes)(scope, receive, send)

    async def _drain(self, receive: Receive) -> int:
        """Read and discard the rest of the body, within the drain bounds.

        Returns the bytes discarded. Stops at the body's end, a disconnect,
        ``drain_bytes`` or ``drain_s``.
        """
        drained = 0
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.drain_s
        while drained < self.drain_bytes:
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            try:
                message = await asyncio.wait_for(receive(), remaining)
            except TimeoutError:
                break
            if message["type"] != "http.request":
                break
            drained += len(message.get("body", b""))
            if not message.get("more_body", False):
                break
        return drained
