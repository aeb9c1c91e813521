"""User-space TCP proxies that cut, stall or slow one host's link to etcd or Redis.

``tc netem`` is unavailable on these machines (no qdisc modules), so every host of
a chaos cluster reaches etcd and Redis through its own :class:`TcpProxy`, one
per (host, service), all served by one :class:`ProxyHub` event-loop thread
inside the harness process. A nemesis switches a proxy's :class:`LinkMode` at
run time:

* ``PASS`` -- forward bytes both ways.
* ``DROP`` -- a cut: every open connection is reset (RST on both sides) and
  every new connection is accepted and reset at once, so clients see
  ``connection reset`` / ``refused`` quickly.
* ``STALL`` -- a black hole: connections stay open (new ones are accepted)
  but nothing is forwarded; bytes already read wait, and TCP back-pressure
  stops the senders. Clients see timeouts. Back to ``PASS``, the held bytes
  flow on, as TCP retransmission would deliver them after a partition.
* ``DELAY`` -- forward every chunk ``delay_ms`` milliseconds after it was
  read, in order, in both directions.

The hub's thread owns all sockets; :meth:`TcpProxy.set_mode` and
:meth:`ProxyHub.close` are safe to call from any thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from enum import StrEnum
from types import TracebackType
from typing import Any, Generic, Protocol, TypeVar
from urllib.parse import urlsplit, urlunsplit

__all__ = ["HubLinks", "Link", "LinkGroup", "LinkMode", "ProxyFactory", "ProxyHub", "TcpProxy"]

T = TypeVar("T")

_LOOPBACK = "127.0.0.1"
_CHUNK = 64 * 1024
_QUEUE_CHUNKS = 64

#: ``(host_name, etcd_endpoint, redis_url) -> (etcd_endpoint, redis_url)`` for that host.
ProxyFactory = Callable[[str, str, str], tuple[str, str]]


class LinkMode(StrEnum):
    """What a proxy does with traffic (see the module docstring)."""

    PASS = "pass"
    DROP = "drop"
    STALL = "stall"
    DELAY = "delay"


def _reset(writer: asyncio.StreamWriter | None) -> None:
    """Abort a connection with RST (SO_LINGER 0), not a graceful FIN."""
    if writer is None:
        return
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


@dataclass(eq=False)
class _Conn:
    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter | None = None
    tasks: tuple[asyncio.Task[None], ...] = ()

    def reset(self) -> None:
        _reset(self.client)
        _reset(self.upstream)
        for task in self.tasks:
            task.cancel()


class TcpProxy:
    """One listening loopback port forwarding to one upstream ``host:port``.

    Create it with :meth:`ProxyHub.proxy`. Attributes: ``name``, ``port`` (the
    local listening port), ``upstream`` (``(host, port)``), ``mode``,
    ``delay_ms``, ``accepted`` (connections accepted so far), ``resets``
    (connections reset by ``DROP``).
    """

    def __init__(self, hub: ProxyHub, name: str, upstream: tuple[str, int]) -> None:
        self.hub = hub
        self.name = name
        self.upstream = upstream
        self.port = 0
        self.mode = LinkMode.PASS
        self.delay_ms = 0
        self.accepted = 0
        self.resets = 0
        self._server: asyncio.Server | None = None
        self._conns: set[_Conn] = set()
        self._changed: asyncio.Event | None = None
        self._closed = False

    # -- control (any thread) ---------------------------------------------------------

    @property
    def address(self) -> str:
        """``127.0.0.1:<port>`` of the listening side."""
        return f"{_LOOPBACK}:{self.port}"

    @property
    def connections(self) -> int:
        """Connections open through this proxy now."""
        return len(self._conns)

    def set_mode(self, mode: LinkMode | str, *, delay_ms: int = 0) -> None:
        """Switch the mode; takes effect for open and new connections alike.

        Args:
            mode: a :class:`LinkMode` (or its value).
            delay_ms: one-way delay for ``DELAY`` in milliseconds (0..60000).

        Raises:
            ValueError: unknown mode or delay out of range.
            RuntimeError: the proxy is closed.
        """
        mode = LinkMode(mode)
        if not 0 <= delay_ms <= 60_000:
            raise ValueError("delay_ms must be in 0..60000")
        self.hub.call(self._set_mode(mode, delay_ms))

    def close(self) -> None:
        """Stop listening and reset every connection (idempotent)."""
        if not self._closed and self.hub.running:
            self.hub.call(self._close())

    # -- loop side --------------------------------------------------------------------

    async def _start(self) -> None:
        self._changed = asyncio.Event()
        self._server = await asyncio.start_server(self._accept, _LOOPBACK, 0)
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def _set_mode(self, mode: LinkMode, delay_ms: int) -> None:
        if self._closed:
            raise RuntimeError(f"proxy {self.name} is closed")
        self.mode = mode
        self.delay_ms = delay_ms
        if mode is LinkMode.DROP:
            for conn in list(self._conns):
                self.resets += 1
                conn.reset()
            self._conns.clear()
        self._notify()

    def _current(self) -> LinkMode:
        """The mode now (a call, so checks after an ``await`` re-read it)."""
        return self.mode

    def _notify(self) -> None:
        assert self._changed is not None
        self._changed.set()
        self._changed = asyncio.Event()

    async def _mode_change(self) -> None:
        assert self._changed is not None
        await self._changed.wait()

    async def _close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._server is not None:
            self._server.close()
        for conn in list(self._conns):
            conn.reset()
        self._conns.clear()
        if self._changed is not None:
            self._notify()
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 1.0)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        if self._closed or self.mode is LinkMode.DROP:
            self.resets += 1
            _reset(writer)
            return
        conn = _Conn(writer)
        self._conns.add(conn)
        try:
            while self.mode is LinkMode.STALL and not self._closed:
                await self._mode_change()  # a black hole: hold the client, no upstream
            if self._closed or self._current() is LinkMode.DROP or conn not in self._conns:
                _reset(writer)
                return
            try:
                up_reader, up_writer = await asyncio.open_connection(*self.upstream)
            except OSError:
                _reset(writer)
                return
            if conn not in self._conns:  # dropped while connecting
                _reset(up_writer)
                return
            conn.upstream = up_writer
            conn.tasks = (
                asyncio.ensure_future(self._pipe(conn, reader, up_writer)),
                asyncio.ensure_future(self._pipe(conn, up_reader, writer)),
            )
            await asyncio.gather(*conn.tasks, return_exceptions=True)
        finally:
            self._conns.discard(conn)
            for w in (writer, conn.upstream):
                if w is not None and not w.is_closing():
                    w.close()

    async def _pipe(
        self, conn: _Conn, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        """Copy one direction: a reader task queues chunks, this task gates and writes."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue(_QUEUE_CHUNKS)

        async def read() -> None:
            try:
                while True:
                    data = await reader.read(_CHUNK)
                    await queue.put((loop.time(), data))
                    if not data:
                        return
            except (OSError, asyncio.IncompleteReadError):
                await queue.put((loop.time(), b""))

        reading = asyncio.ensure_future(read())
        try:
            while True:
                received, data = await queue.get()
                while self.mode is LinkMode.STALL and not self._closed:
                    await self._mode_change()
                if self._closed or self._current() is LinkMode.DROP:
                    conn.reset()
                    return
                if self._current() is LinkMode.DELAY and self.delay_ms:
                    wait = received + self.delay_ms / 1000 - loop.time()
                    if wait > 0:
                        await asyncio.sleep(wait)
                if not data:
                    if writer.can_write_eof():
                        with contextlib.suppress(OSError):
                            writer.write_eof()
                    return
                writer.write(data)
                await writer.drain()
        except (OSError, ConnectionError):
            conn.reset()
        finally:
            reading.cancel()


async def _cancel_tasks() -> None:
    current = asyncio.current_task()
    tasks = [t for t in asyncio.all_tasks() if t is not current]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


class Link(Protocol):
    """What a nemesis and a test use of one proxy, in this process or in a
    :class:`~svit_chaos.proxy_process.ProcessProxyHub`."""

    name: str
    upstream: tuple[str, int]

    @property
    def address(self) -> str: ...

    @property
    def resets(self) -> int: ...

    def set_mode(self, mode: LinkMode | str, *, delay_ms: int = 0) -> None: ...

    def close(self) -> None: ...


L = TypeVar("L", bound=Link)


class LinkGroup:
    """One host's link to a service of several members (a 3-member etcd): one
    proxy per member, switched together, so a cut of the host's link cuts it
    off from every member at once.

    Args:
        name: the link's name (``"h1/etcd"``).
        members: the members' proxies, in the order of the service's endpoints.

    Raises:
        ValueError: ``members`` is empty.
    """

    def __init__(self, name: str, members: list[Link]) -> None:
        if not members:
            raise ValueError(f"link group {name!r} has no member")
        self.name = name
        self.members = list(members)
        self.upstream = members[0].upstream

    @property
    def address(self) -> str:
        """The members' proxy addresses, comma-separated (an etcd endpoint list)."""
        return ",".join(m.address for m in self.members)

    @property
    def resets(self) -> int:
        return sum(m.resets for m in self.members)

    def set_mode(self, mode: LinkMode | str, *, delay_ms: int = 0) -> None:
        for member in self.members:
            member.set_mode(mode, delay_ms=delay_ms)

    def close(self) -> None:
        for member in self.members:
            with contextlib.suppress(Exception):
                member.close()


class HubLinks(ABC, Generic[L]):
    """What both hubs share: the (host, service) links and the cluster's proxy
    factory, over a hub-specific :meth:`proxy`."""

    _links: dict[tuple[str, str], Link]

    @abstractmethod
    def proxy(self, name: str, upstream_host: str, upstream_port: int) -> L:
        """Start a proxy on a free loopback port forwarding to ``upstream``.

        Raises:
            ValueError: ``name`` is already used.
        """

    @abstractmethod
    def _all(self) -> list[L]:
        """Every proxy of this hub."""

    @abstractmethod
    def close(self) -> None:
        """Close every proxy and stop serving (idempotent, never raises)."""

    def link(self, host: str, service: str) -> Link:
        """The proxy of ``host``'s link to ``service`` (``"etcd"`` or ``"redis"``).

        Raises:
            KeyError: no such link (the message lists the links).
        """
        try:
            return self._links[(host, service)]
        except KeyError:
            known = ", ".join(f"{h}/{s}" for h, s in sorted(self._links))
            raise KeyError(f"no link {host}/{service}; links: {known or 'none'}") from None

    @property
    def links(self) -> dict[tuple[str, str], Link]:
        return dict(self._links)

    def factory(self) -> ProxyFactory:
        """The ``proxy_factory`` for ``LocalCluster.up``: per host, one proxy per etcd
        member and one Redis proxy.

        The returned callable maps ``(host, "127.0.0.1:<etcd port>[,...]",
        "redis://127.0.0.1:<port>/0")`` to the same endpoints on the host's
        proxies; several etcd members become a :class:`LinkGroup`, the host's
        one ``etcd`` link. Calling it twice for one host returns the same
        proxies.
        """

        def make(host: str, etcd_endpoint: str, redis_url: str) -> tuple[str, str]:
            etcd = self._links.get((host, "etcd"))
            if etcd is None:
                members: list[Link] = []
                for i, member in enumerate(etcd_endpoint.split(",")):
                    ehost, _, eport = member.strip().rpartition(":")
                    members.append(self.proxy(f"{host}/etcd" + (f"-{i}" if i else ""),
                                              ehost or _LOOPBACK, int(eport)))
                etcd = members[0] if len(members) == 1 else LinkGroup(f"{host}/etcd", members)
                self._links[(host, "etcd")] = etcd
            redis = self._links.get((host, "redis"))
            parts = urlsplit(redis_url)
            if redis is None:
                redis = self.proxy(f"{host}/redis", parts.hostname or _LOOPBACK,
                                   parts.port or 6379)
                self._links[(host, "redis")] = redis
            netloc = redis.address
            if parts.username or parts.password:
                netloc = f"{parts.username or ''}:{parts.password or ''}@{netloc}"
            return etcd.address, urlunsplit(parts._replace(netloc=netloc))

        return make

    def heal_all(self) -> None:
        """Set every proxy back to ``PASS`` (best effort)."""
        for proxy in self._all():
            with contextlib.suppress(Exception):
                proxy.set_mode(LinkMode.PASS)


class ProxyHub(HubLinks[TcpProxy]):
    """Owns one event-loop thread serving every :class:`TcpProxy` of a run.

    Use as a context manager, or call :meth:`start` and (always, in a
    ``finally``) :meth:`close`, which resets every connection, closes every
    listening socket and joins the thread.
    """

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._proxies: dict[str, TcpProxy] = {}
        self._links: dict[tuple[str, str], Link] = {}
        self._lock = threading.Lock()

    def _all(self) -> list[TcpProxy]:
        return list(self._proxies.values())

    @property
    def running(self) -> bool:
        return self._loop is not None and self._loop.is_running()

    def start(self) -> ProxyHub:
        """Start the loop thread (idempotent). Returns self."""
        if self._thread is not None:
            return self
        loop = asyncio.new_event_loop()
        ready = threading.Event()

        def main() -> None:
            asyncio.set_event_loop(loop)
            loop.call_soon(ready.set)
            loop.run_forever()
            loop.close()

        self._loop = loop
        self._thread = threading.Thread(target=main, name="svit-chaos-proxies", daemon=True)
        self._thread.start()
        ready.wait(5)
        return self

    def call(self, coro: Coroutine[Any, Any, T], timeout_s: float = 10.0) -> T:
        """Run ``coro`` on the hub's loop and wait for its result (any thread but the hub's).

        Raises:
            RuntimeError: the hub is not running.
        """
        if self._loop is None or not self._loop.is_running():
            coro.close()
            raise RuntimeError("proxy hub is not running")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout_s)

    def proxy(self, name: str, upstream_host: str, upstream_port: int) -> TcpProxy:
        """Start a proxy on a free loopback port forwarding to ``upstream``.

        Raises:
            ValueError: ``name`` is already used.
        """
        with self._lock:
            if name in self._proxies:
                raise ValueError(f"proxy {name!r} exists")
            proxy = TcpProxy(self, name, (upstream_host, upstream_port))
            self._proxies[name] = proxy
        self.call(proxy._start())
        return proxy

    def close(self) -> None:
        """Close every proxy and stop the thread (idempotent, never raises)."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        for proxy in list(self._proxies.values()):
            with contextlib.suppress(Exception):
                proxy.close()
        with contextlib.suppress(Exception):
            self.call(_cancel_tasks())
        if loop.is_running():
            loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        self._loop = None
        self._thread = None

    def __enter__(self) -> ProxyHub:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
