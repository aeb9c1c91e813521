"""ASGI layer 1: cap request body bytes before anything reads or decodes them."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from svit_cluster.errors import ErrorCode
from svit_cluster.gateway._errors import error_response

__all__ = ["DEFAULT_MAX_REQUEST_BYTES", "ByteCapMiddleware"]

#: Default request body cap: 1 MiB.
DEFAULT_MAX_REQUEST_BYTES = 1024 * 1024


class _TooLarge(Exception):
    pass


class ByteCapMiddleware:
    """Answer ``413 payload_too_large`` for bodies over ``max_bytes``.

    A declared ``Content-Length`` over the cap is refused before reading; a
    chunked body is counted while it streams and refused at the first byte over.
    Non-HTTP scopes pass through.

    Args:
        app: the wrapped ASGI app.
        max_bytes: the cap in bytes, at least 1 (default 1 MiB).

    Raises:
        ValueError: ``max_bytes`` < 1.
    """

    def __init__(self, app: ASGIApp, max_bytes: int = DEFAULT_MAX_REQUEST_BYTES) -> None:
        if max_bytes < 1:
            raise ValueError("max_bytes must be at least 1")
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = self.max_bytes + 1
                if declared > self.max_bytes:
                    await self._refuse(scope, receive, send)
                    return
        seen = 0
        started = False

        async def counting_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise _TooLarge()
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counting_receive, tracking_send)
        except _TooLarge:
            if not started:
                await self._refuse(scope, receive, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = error_response(
            413,
            str(ErrorCode.PAYLOAD_TOO_LARGE),
            f"request body exceeds {self.max_bytes} bytes",
            headers={"Connection": "close"},
        )
        await response(scope, receive, send)
