"""A fault-injecting TCP proxy for Redis that understands request boundaries.

:class:`chaos.proxy.TcpProxy` cuts, stalls or slows a whole link; the faults
here hit *one* Redis command, chosen by a predicate on its arguments (for
example "the next ``EVALSHA`` of the commit script"), so a test can lose the
reply of exactly one commit and nothing else. Requests from the client are
parsed as RESP arrays of bulk strings (what redis-py sends); replies are not
parsed: redis-py does not pipeline a script call, so the next bytes from Redis
on that connection are its reply.

One-shot faults (:meth:`FaultProxy.arm`), applied to the next matching command:

* ``DROP_REQUEST`` -- the command never reaches Redis; the client's connection
  is reset (the client sees ``connection reset``; nothing was applied).
* ``DROP_REPLY`` -- the command is forwarded and executed; its reply is
  discarded and the connection reset (applied, but the client cannot know).
* ``STALL_REPLY`` -- forwarded and executed; the reply is withheld until the
  client gives up (its socket timeout), as on a path that black-holes replies.
* ``DELAY`` -- forwarded ``delay_s`` seconds late; the reply flows normally.
* ``ERROR_REPLY`` -- not run; Redis is sent, in its place, a script that only
  answers the error reply ``error`` (for example ``LOADING ...``), so the
  client gets that error in the right place among its replies (also inside a
  ``MULTI``/``EXEC`` batch), as if Redis had refused the command.

:meth:`FaultProxy.reset_all` resets every open connection (idle pooled ones
included). Every socket belongs to one event-loop thread; the public methods
are safe to call from any thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

__all__ = ["Fault", "FaultProxy", "Match", "split_command"]

_LOOPBACK = "127.0.0.1"
_CHUNK = 64 * 1024

#: A predicate on one command's arguments (``[b"EVALSHA", sha, nkeys, ...]``).
Match = Callable[[list[bytes]], bool]


class Fault(StrEnum):
    """What happens to the next matching command (see the module docstring)."""

    DROP_REQUEST = "drop_request"
    DROP_REPLY = "drop_reply"
    STALL_REPLY = "stall_reply"
    DELAY = "delay"
    ERROR_REPLY = "error_reply"


def split_command(buf: bytearray) -> tuple[list[bytes], int] | None:
    """The first complete RESP command in ``buf``: ``(args, bytes used)``, or None.

    Raises:
        ValueError: ``buf`` does not start with a RESP array of bulk strings.
    """
    if not buf:
        return None
    if buf[0:1] != b"*":
        raise ValueError(f"not a RESP array: {bytes(buf[:20])!r}")
    end = buf.find(b"\r\n")
    if end < 0:
        return None
    count, pos, args = int(buf[1:end]), end + 2, []
    for _ in range(count):
        end = buf.find(b"\r\n", pos)
        if end < 0:
            return None
        if buf[pos:pos + 1] != b"$":
            raise ValueError("RESP array element is not a bulk string")
        length = int(buf[pos + 1:end])
        start = end + 2
        if len(buf) < start + length + 2:
            return None
        args.append(bytes(buf[start:start + length]))
        pos = start + length + 2
    return args, pos


def _error_script(error: bytes) -> bytes:
    """A RESP ``EVAL`` whose only effect is to reply with the error ``error``."""
    args = [b"EVAL", b"return redis.error_reply(ARGV[1])", b"0", error.replace(b"\r\n", b" ")]
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


def _abort(writer: asyncio.StreamWriter | None) -> None:
    """Close with RST (SO_LINGER 0), not FIN."""
    if writer is None or writer.transport.is_closing():
        return
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


@dataclass
class _Armed:
    fault: Fault
    match: Match
    delay_s: float
    error: bytes


@dataclass(eq=False)
class _Conn:
    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter
    swallow: str = ""  # "" | "drop" | "stall": what to do with the next reply bytes
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def reset(self) -> None:
        _abort(self.client)
        _abort(self.upstream)


class FaultProxy:
    """A loopback proxy to ``upstream_port`` that injects one-shot command faults.

    Args:
        upstream_port: the Redis port on 127.0.0.1 (it may restart on the same port).

    Attributes:
        port: the proxy's own loopback port; :attr:`url` is the Redis URL to use.
        fired: the faults applied so far, in order (``(fault, command name)``).
        upstream_failures: client connections reset because Redis refused.
    """

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.fired: list[tuple[Fault, bytes]] = []
        #: Client connections reset because Redis could not be reached.
        self.upstream_failures = 0
        self._armed: _Armed | None = None
        self._conns: set[_Conn] = set()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fault-proxy",
                                        daemon=True)
        self._thread.start()
        self._server = self._call(asyncio.start_server(self._accept, _LOOPBACK, 0))
        self.port: int = self._server.sockets[0].getsockname()[1]

    @property
    def url(self) -> str:
        return f"redis://{_LOOPBACK}:{self.port}/0"

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=10)

    # -- control (any thread) --------------------------------------------------------

    def arm(self, fault: Fault, match: Match, *, delay_s: float = 0.0,
            error: bytes = b"ERR injected by the fault proxy") -> None:
        """Apply ``fault`` to the next command for which ``match(args)`` is true (once)."""
        armed = _Armed(fault, match, delay_s, error)

        async def set_armed() -> None:
            self._armed = armed

        self._call(set_armed())

    def disarm(self) -> bool:
        """Cancel an unfired fault; True if one was pending."""
        async def clear() -> bool:
            pending, self._armed = self._armed is not None, None
            return pending

        return bool(self._call(clear()))

    def reset_all(self) -> int:
        """Reset every open connection; returns how many there were."""
        async def reset() -> int:
            conns = list(self._conns)
            for conn in conns:
                conn.reset()
            return len(conns)

        return int(self._call(reset()))

    def close(self) -> None:
        async def shutdown() -> None:
            self._server.close()
            for conn in list(self._conns):
                conn.reset()
                for task in conn.tasks:
                    task.cancel()

        with contextlib.suppress(Exception):
            self._call(shutdown())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    # -- data path (loop thread) --------------------------------------------------------

    async def _accept(self, reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(_LOOPBACK, self.upstream_port)
        except OSError:
            self.upstream_failures += 1
            _abort(writer)
            return
        conn = _Conn(writer, up_writer)
        self._conns.add(conn)
        conn.tasks = [asyncio.current_task()]  # type: ignore[list-item]
        down = asyncio.create_task(self._downstream(conn, up_reader))
        conn.tasks.append(down)
        try:
            await self._upstream(conn, reader)
        except (OSError, ValueError, asyncio.CancelledError):
            conn.reset()
        finally:
            down.cancel()
            with contextlib.suppress(BaseException):
                await down
            _abort(conn.upstream)
            _abort(conn.client)
            self._conns.discard(conn)

    def _take(self, args: list[bytes]) -> _Armed | None:
        armed = self._armed
        if armed is None or not armed.match(args):
            return None
        self._armed = None
        self.fired.append((armed.fault, args[0].upper() if args else b""))
        return armed

    async def _upstream(self, conn: _Conn, reader: asyncio.StreamReader) -> None:
        buf = bytearray()
        while True:
            chunk = await reader.read(_CHUNK)
            if not chunk:
                return
            buf += chunk
            while (parsed := split_command(buf)) is not None:
                args, used = parsed
                raw = bytes(buf[:used])
                del buf[:used]
                armed = self._take(args)
                if armed is None:
                    conn.upstream.write(raw)
                    continue
                if armed.fault is Fault.DROP_REQUEST:
                    conn.reset()
                    return
                if armed.fault is Fault.ERROR_REPLY:
                    conn.upstream.write(_error_script(armed.error))
                    continue
                if armed.fault is Fault.DELAY:
                    await asyncio.sleep(armed.delay_s)
                elif armed.fault is Fault.DROP_REPLY:
                    conn.swallow = "drop"
                elif armed.fault is Fault.STALL_REPLY:
                    conn.swallow = "stall"
                conn.upstream.write(raw)
            await conn.upstream.drain()

    async def _downstream(self, conn: _Conn, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                chunk = await reader.read(_CHUNK)
                if not chunk:
                    break
                if conn.swallow == "drop":
                    conn.reset()  # the command ran; its reply is lost with the connection
                    return
                if conn.swallow == "stall":
                    continue  # withheld until the client times out and closes
                conn.client.write(chunk)
                await conn.client.drain()
        except (OSError, asyncio.CancelledError):
            pass
        conn.reset()
