"""Direct transport: the gateway reaches a process actor's control path over the
actor's own TCP socket, with Ray kept as the control plane.

Ray still creates, places, supervises and kills every process actor, and every
other call (start, state, inbox, delete, ...) still goes through Ray. Only
``ProcessActor.control`` -- the hot path -- can also be served on a socket the
actor opens on its node's address. The gateway learns the address and a
per-actor random secret through one Ray call (``ProcessActor.direct_endpoint``)
and keeps a few connections per actor open.

Why this keeps the guarantees:

* The request runs through the same ``ProcessActor.control`` code as a Ray
  call: the actor's guards (closed, fenced, suspended) and the fenced Redis
  commit decide every commit; the transport only carries bytes.
* The endpoint belongs to one actor, whose Ray name is unique per ownership
  record (one fencing token). A stale route reaches either that actor, which
  refuses when it no longer serves (``unavailable`` / ``fenced``, answered like
  a Ray call), or nothing (connection refused or reset), after which the
  gateway falls back to the Ray call path, which classifies the dead actor and
  asks the agent to reconcile, as without the direct transport. Re-sending a
  control request is safe: receipts make a repeated ``(client_id, request_id)``
  a replay.
* A call that does not answer within the deadline is ``unavailable`` (outcome
  unknown, retry with the same request id), as for a Ray call.
* A connection is accepted only after its first frame carries the actor's
  secret, which only travels over Ray; the socket grants nothing more than the
  Ray actor handle already does.

Wire format (both directions): a frame is ``>II`` (meta length, payload
length), then ``meta`` as UTF-8 JSON (an object), then ``payload`` bytes. The
client's first frame on a connection is ``{"secret": ...}``; then each request
is ``{"op": "control", "partition", "trace", "token"}`` + the request body,
each answer ``{"status", "code", "token", "host"}`` + the response bytes, or
``{"error": wire}`` + no payload (``_results.control_frame``).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import secrets
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, BinaryIO

__all__ = [
    "HELLO_TIMEOUT_S",
    "MAX_CONNECTIONS",
    "MAX_HELLO_META_BYTES",
    "MAX_META_BYTES",
    "MAX_PAYLOAD_BYTES",
    "DirectClient",
    "DirectEndpoint",
    "DirectServer",
    "DirectUnreachable",
    "FrameError",
    "SyncHandler",
    "frame_bytes",
    "read_frame",
    "read_frame_from",
    "write_frame",
]

log = logging.getLogger(__name__)

_HEADER = struct.Struct(">II")
#: Largest accepted ``meta`` object, bytes (a bigger frame closes the connection).
MAX_META_BYTES = 1 << 20
#: Largest accepted payload, bytes (request bodies are capped far lower by the gateway).
MAX_PAYLOAD_BYTES = 64 << 20

#: Seconds a new connection has to present the secret before it is closed.
HELLO_TIMEOUT_S = 10.0
#: Largest first frame (the secret) a connection may send before it is
#: authenticated, bytes of meta; it carries no payload. An unauthenticated peer
#: can make the actor buffer no more than this.
MAX_HELLO_META_BYTES = 512

#: Connections one actor serves at once (each holds a thread); the gateway keeps
#: at most 64 per actor in flight (:class:`DirectClient`).
MAX_CONNECTIONS = 256

#: Seconds the accept thread waits after a failed ``accept`` (EMFILE, ENOBUFS, ...).
ACCEPT_RETRY_S = 0.1
#: Idle seconds before keepalive probes check that a connection's peer is alive.
KEEPALIVE_IDLE_S = 60

#: ``(meta, payload) -> (meta, payload)``: what the actor runs for one request,
#: on the connection's thread.
SyncHandler = Callable[[dict[str, Any], bytes], tuple[dict[str, Any], bytes]]


class FrameError(Exception):
    """A frame that breaks the wire format (too large, meta not a JSON object)."""


def frame_bytes(meta: dict[str, Any], payload: bytes = b"") -> bytes:
    """One frame: header, meta, payload."""
    head = json.dumps(meta, separators=(",", ":")).encode()
    return _HEADER.pack(len(head), len(payload)) + head + payload


def write_frame(writer: asyncio.StreamWriter, meta: dict[str, Any], payload: bytes = b"") -> None:
    """Queue one frame on ``writer`` (the caller drains)."""
    writer.write(frame_bytes(meta, payload))


def _check_lengths(meta_len: int, payload_len: int, max_meta_bytes: int,
                   max_payload_bytes: int) -> None:
    if meta_len > max_meta_bytes or payload_len > max_payload_bytes:
        raise FrameError(f"frame too large ({meta_len} + {payload_len} bytes)")


def _meta_of(raw: bytes) -> dict[str, Any]:
    try:
        meta = json.loads(raw)
    except ValueError as exc:
        raise FrameError("frame meta is not JSON") from exc
    if not isinstance(meta, dict):
        raise FrameError("frame meta is not a JSON object")
    return meta


def read_frame_from(stream: BinaryIO, *, max_meta_bytes: int = MAX_META_BYTES,
                    max_payload_bytes: int = MAX_PAYLOAD_BYTES) -> tuple[dict[str, Any], bytes]:
    """:func:`read_frame` from a blocking binary stream (a socket's ``makefile("rb")``).

    Raises:
        EOFError: the peer closed the connection (before or inside a frame).
        OSError: the socket failed or timed out.
        FrameError: as :func:`read_frame`.
    """
    meta_len, payload_len = _HEADER.unpack(_read_exactly(stream, _HEADER.size))
    _check_lengths(meta_len, payload_len, max_meta_bytes, max_payload_bytes)
    meta = _meta_of(_read_exactly(stream, meta_len))
    return meta, _read_exactly(stream, payload_len) if payload_len else b""


def _read_exactly(stream: BinaryIO, size: int) -> bytes:
    data = stream.read(size)
    if len(data) != size:
        raise EOFError(f"connection closed after {len(data)} of {size} bytes")
    return data


async def read_frame(reader: asyncio.StreamReader, *, max_meta_bytes: int = MAX_META_BYTES,
                     max_payload_bytes: int = MAX_PAYLOAD_BYTES
                     ) -> tuple[dict[str, Any], bytes]:
    """Read one frame; its lengths are checked before anything else is read.

    Raises:
        asyncio.IncompleteReadError: the peer closed the connection.
        FrameError: a length above ``max_meta_bytes`` / ``max_payload_bytes``
            (default :data:`MAX_META_BYTES` / :data:`MAX_PAYLOAD_BYTES`), or
            ``meta`` is not a JSON object.
    """
    meta_len, payload_len = _HEADER.unpack(await reader.readexactly(_HEADER.size))
    _check_lengths(meta_len, payload_len, max_meta_bytes, max_payload_bytes)
    meta = _meta_of(await reader.readexactly(meta_len))
    payload = await reader.readexactly(payload_len) if payload_len else b""
    return meta, payload


@dataclass(frozen=True, slots=True)
class DirectEndpoint:
    """Where one process actor serves its control path: ``host:port``, the
    connection secret (hex) and the owner token of the binding it serves
    (None when not named), as answered by ``ProcessActor.direct_endpoint``."""

    host: str
    port: int
    secret: str
    token: int | None = None

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> DirectEndpoint:
        """Raises:
            KeyError, TypeError, ValueError: ``doc`` lacks or mistypes a field."""
        token = doc.get("token")
        return cls(str(doc["host"]), int(doc["port"]), str(doc["secret"]),
                   None if token is None else int(token))


class DirectServer:
    """The actor's side: accepts authenticated connections and runs ``handler``
    for each request frame, one at a time per connection, on that connection's
    own thread.

    The request runs on the thread that read it, and its answer is written
    from there: one thread wakes per request, and none of them is the actor's
    asyncio loop, which is left to Ray's calls (``hold``, ``suspend``,
    ``fence_out``): those never wait behind a commit.

    Args:
        handler: runs one request on the connection's thread; must not raise
            (errors are answered in ``meta``).
        host: the address to listen on (the node's IP; port chosen by the OS).
        max_connections: connections served at once (default
            :data:`MAX_CONNECTIONS`); one more is closed at once, and its
            client falls back to Ray.
    """

    def __init__(self, handler: SyncHandler, host: str, *,
                 max_connections: int = MAX_CONNECTIONS) -> None:
        self.handler = handler
        self.host = host
        self.max_connections = max_connections
        self.secret = secrets.token_hex(32)
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._port = 0
        self._conns: set[socket.socket] = set()

    def start(self) -> DirectEndpoint:
        """Listen (once; again after :meth:`close`) and return the endpoint.
        Threads: one accepting, one per open connection (daemons).

        Raises:
            OSError: the address cannot be bound.
        """
        with self._lock:
            if self._listener is None:
                listener = socket.create_server((self.host, 0), backlog=128)
                self._listener, self._port = listener, int(listener.getsockname()[1])
                threading.Thread(target=self._accept, args=(listener,), daemon=True,
                                 name="svit-direct-accept").start()
            return DirectEndpoint(self.host, self._port, self.secret)

    def close(self) -> None:
        """Stop listening and drop every connection (idempotent). A request
        running now finishes, but its answer is not sent."""
        with self._lock:
            listener, self._listener = self._listener, None
            conns = list(self._conns)
            self._conns.clear()
        # shutdown wakes the thread blocked in accept / recv on it; that thread
        # closes the socket (closing it here could hand its number to a new file).
        for sock in ([listener] if listener is not None else []) + conns:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def _accept(self, listener: socket.socket) -> None:
        try:
            while True:
                try:
                    conn, _ = listener.accept()
                except OSError as exc:
                    if self._listener is not listener:
                        return  # closed (shutdown wakes accept with EINVAL)
                    # out of descriptors or memory, or a network error accept(2)
                    # says to retry: the listener stays, and so does its endpoint
                    log.warning("direct transport: accept failed (%s); retrying", exc)
                    time.sleep(ACCEPT_RETRY_S)
                    continue
                with self._lock:
                    serving = (self._listener is listener
                               and len(self._conns) < self.max_connections)
                    if serving:
                        self._conns.add(conn)
                if not serving:
                    conn.close()
                    continue
                try:
                    threading.Thread(target=self._serve, args=(conn,), daemon=True,
                                     name="svit-direct-conn").start()
                except RuntimeError as exc:  # no thread could start: refuse this one
                    log.warning("direct transport: cannot serve a connection: %s", exc)
                    with self._lock:
                        self._conns.discard(conn)
                    conn.close()
        finally:
            listener.close()

    def _serve(self, conn: socket.socket) -> None:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # A peer that vanished without closing (its host died) is detected by
        # keepalive probes within about KEEPALIVE_IDLE_S + 3 x 10 s, which ends
        # this thread and frees its slot.
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        for option, value in ((getattr(socket, "TCP_KEEPIDLE", None), KEEPALIVE_IDLE_S),
                              (getattr(socket, "TCP_KEEPINTVL", None), 10),
                              (getattr(socket, "TCP_KEEPCNT", None), 3)):
            if option is not None:
                conn.setsockopt(socket.IPPROTO_TCP, option, value)
        stream = conn.makefile("rb")
        try:
            # A peer that connects but does not identify itself is dropped.
            conn.settimeout(HELLO_TIMEOUT_S)
            hello, _ = read_frame_from(stream, max_meta_bytes=MAX_HELLO_META_BYTES,
                                       max_payload_bytes=0)
            offered = str(hello.get("secret", "")).encode()
            if not hmac.compare_digest(offered, self.secret.encode()):
                log.warning("direct transport: refused a connection with a wrong secret")
                return
            conn.settimeout(None)
            while True:
                meta, payload = read_frame_from(stream)
                answer, body = self.handler(meta, payload)
                conn.sendall(frame_bytes(answer, body))
        except (EOFError, OSError):  # the peer went, a hello timeout, or close()
            pass
        except FrameError as exc:
            log.warning("direct transport: dropped a connection: %s", exc)
        finally:
            with self._lock:
                self._conns.discard(conn)
            stream.close()
            conn.close()


class DirectUnreachable(Exception):
    """The request did not reach the actor, or the connection broke before an
    answer; the caller falls back to the Ray call path (a repeat is safe)."""


class DirectClient:
    """The gateway's side for one actor: a small pool of open connections.

    Each connection carries one request at a time; a call takes an idle
    connection or opens one (so concurrent calls use several connections) and
    returns it afterwards, keeping at most ``max_idle``. At most
    ``max_connections`` calls are in flight (as the actor's Ray
    ``max_concurrency``); later ones wait for a slot.

    Args:
        endpoint: the actor's endpoint.
        max_idle: idle connections kept open (default 4).
        max_connections: calls in flight at once (default 64).
        connect_timeout_s: deadline for opening a connection (default 1 s).
    """

    def __init__(self, endpoint: DirectEndpoint, *, max_idle: int = 4,
                 max_connections: int = 64, connect_timeout_s: float = 1.0) -> None:
        self.endpoint = endpoint
        self.max_idle = max_idle
        self.connect_timeout_s = connect_timeout_s
        self._slots = asyncio.Semaphore(max_connections)
        self._idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        self.closed = False

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(self.endpoint.host, self.endpoint.port),
                timeout=self.connect_timeout_s)
        except (OSError, TimeoutError) as exc:
            raise DirectUnreachable(f"cannot connect to {self.endpoint.host}:"
                                    f"{self.endpoint.port}: {exc!r}") from exc
        write_frame(writer, {"secret": self.endpoint.secret})
        return reader, writer

    async def call(self, meta: dict[str, Any], payload: bytes, *, timeout_s: float
                   ) -> tuple[dict[str, Any], bytes]:
        """Send one request and wait for its answer.

        Raises:
            DirectUnreachable: no connection, or it broke before the answer
                (fall back to Ray; the request may or may not have run).
            TimeoutError: no answer within ``timeout_s`` (outcome unknown).
        """
        async with self._slots:
            return await self._call(meta, payload, timeout_s)

    async def _call(self, meta: dict[str, Any], payload: bytes, timeout_s: float
                    ) -> tuple[dict[str, Any], bytes]:
        if self.closed:
            raise DirectUnreachable("direct client closed")
        conn = self._idle.pop() if self._idle else await self._connect()
        reader, writer = conn
        try:
            write_frame(writer, meta, payload)
            async with asyncio.timeout(timeout_s):
                await writer.drain()
                answer = await read_frame(reader)
        except BaseException as exc:
            writer.close()
            if isinstance(exc, TimeoutError):  # an OSError subclass: keep it apart
                raise
            if isinstance(exc, (OSError, asyncio.IncompleteReadError, FrameError)):
                raise DirectUnreachable(f"connection to {self.endpoint.host}:"
                                        f"{self.endpoint.port} broke: {exc!r}") from exc
            raise
        if len(self._idle) < self.max_idle and not self.closed:
            self._idle.append(conn)
        else:
            writer.close()
        return answer

    def close(self) -> None:
        """Close every idle connection; later calls raise :class:`DirectUnreachable`."""
        self.closed = True
        for _reader, writer in self._idle:
            with contextlib.suppress(Exception):
                writer.close()
        self._idle.clear()
