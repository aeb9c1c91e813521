"""One socket write per HTTP response: uvicorn's protocols with writes coalesced.

uvicorn writes a response's status line and headers when the application sends
``http.response.start``, and the body when it sends ``http.response.body``: two
``send`` calls per response, in the same step of the event loop. On a loopback
or same-host connection each ``send`` also runs the receiver's TCP path in the
sender's CPU time, so the second write costs about as much as the first.

:func:`coalescing` makes a subclass of a uvicorn HTTP protocol whose transport
holds the first write of an event-loop step and sends it together with the next
write of that step, or alone at the end of the step (``call_soon``). So a
response's head and body leave in one ``send``; a streamed body's chunks, each
written in its own step, leave one step later than before, never later than
that. Bytes and their order are unchanged; ``close`` sends what is held first;
``abort`` drops it, as the transport would drop its own buffer.
"""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["CoalescingTransport", "coalescing"]


class CoalescingTransport:
    """A transport wrapper that sends the writes of one event-loop step at once.

    Every attribute other than the write and close methods is the wrapped
    transport's (flow control, ``get_extra_info``, ``pause_reading``, ...).

    Args:
        transport: the connection's transport.
        loop: the loop the connection runs on.
    """

    __slots__ = ("_handle", "_held", "_loop", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: bytes | None = None
        self._handle: asyncio.Handle | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Hold ``data`` until the end of this step, or send it with what is held."""
        if not data:
            return
        held = self._held
        if held is None:
            self._held = bytes(data)
            self._handle = self._loop.call_soon(self.flush)
            return
        self._held = None
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self._transport.write(held + data)

    def writelines(self, chunks: Any) -> None:
        self.write(b"".join(chunks))

    def flush(self) -> None:
        """Send what is held now (the end-of-step callback; idempotent)."""
        held, self._held = self._held, None
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if held is not None and not self._transport.is_closing():
            self._transport.write(held)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def abort(self) -> None:
        self._held = None
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self._transport.abort()

    def get_write_buffer_size(self) -> int:
        held = self._held
        return self._transport.get_write_buffer_size() + (len(held) if held else 0)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def coalescing(protocol: type[asyncio.Protocol]) -> type[asyncio.Protocol]:
    """A subclass of the uvicorn HTTP protocol class ``protocol`` whose
    connection writes go through a :class:`CoalescingTransport`.

    ``protocol`` must keep its loop in ``self.loop`` and take its transport in
    ``connection_made`` (uvicorn's ``HttpToolsProtocol`` and ``H11Protocol``).
    """

    class Coalescing(protocol):  # type: ignore[valid-type,misc]
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(CoalescingTransport(transport, self.loop))  # type: ignore[arg-type]

    Coalescing.__name__ = Coalescing.__qualname__ = f"Coalescing{protocol.__name__}"
    Coalescing.__module__ = __name__
    return Coalescing
