"""The TCP proxies of :mod:`svit_chaos.proxy`, served from their own OS process.

A :class:`~svit_chaos.proxy.ProxyHub` runs its event loop on a thread of the
process that created it. In a test session or a chaos harness that process is
also busy: client threads, the store observer, a Ray driver. Every proxied
byte then waits for that process's GIL, so a host's etcd keepalive can be late
because the *harness* was busy -- a fault the harness made, not one it
injected. :class:`ProcessProxyHub` runs an ordinary ``ProxyHub`` in a child
process (``multiprocessing`` spawn) and controls it over a pipe: the bytes
never touch the parent, only mode switches do (one round trip each, about a
millisecond).

The child exits when the parent closes the hub, and on its own when the pipe
breaks (the parent died).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import threading
from multiprocessing.connection import Connection
from types import TracebackType
from typing import Any

from .proxy import HubLinks, Link, LinkMode, ProxyHub

__all__ = ["ProcessProxyHub", "RemoteProxy"]

#: Seconds to wait for the child to answer one request.
REQUEST_TIMEOUT_S = 10.0


class RemoteProxy:
    """A handle on one proxy of a :class:`ProcessProxyHub` (same surface as
    :class:`~svit_chaos.proxy.TcpProxy` for nemeses and tests).

    Attributes: ``name``, ``port`` (the local listening port), ``upstream``
    (``(host, port)``).
    """

    def __init__(self, hub: ProcessProxyHub, name: str, upstream: tuple[str, int],
                 port: int) -> None:
        self.hub = hub
        self.name = name
        self.upstream = upstream
        self.port = port

    @property
    def address(self) -> str:
        """``127.0.0.1:<port>`` of the listening side."""
        return f"127.0.0.1:{self.port}"

    def _stat(self, key: str) -> Any:
        return self.hub._request("stat", self.name)[key]

    @property
    def mode(self) -> LinkMode:
        return LinkMode(self._stat("mode"))

    @property
    def connections(self) -> int:
        """Connections open through this proxy now."""
        return int(self._stat("connections"))

    @property
    def accepted(self) -> int:
        return int(self._stat("accepted"))

    @property
    def resets(self) -> int:
        return int(self._stat("resets"))

    def set_mode(self, mode: LinkMode | str, *, delay_ms: int = 0) -> None:
        """As :meth:`svit_chaos.proxy.TcpProxy.set_mode`.

        Raises:
            ValueError: unknown mode or delay out of range.
            RuntimeError: the hub is closed.
            TimeoutError: the child did not answer in :data:`REQUEST_TIMEOUT_S`.
        """
        mode = LinkMode(mode)
        if not 0 <= delay_ms <= 60_000:
            raise ValueError("delay_ms must be in 0..60000")
        self.hub._request("set_mode", self.name, mode.value, delay_ms)

    def close(self) -> None:
        """Stop listening and reset every connection (idempotent)."""
        if self.hub.running:
            self.hub._request("close", self.name)


class ProcessProxyHub(HubLinks[RemoteProxy]):
    """A :class:`~svit_chaos.proxy.ProxyHub` in a child process.

    Use as a context manager, or :meth:`start` and (always, in a ``finally``)
    :meth:`close`. :meth:`proxy`, :meth:`link`, :meth:`links`,
    :meth:`factory` and :meth:`heal_all` behave as on ``ProxyHub``; every
    method is safe to call from any thread.
    """

    def __init__(self) -> None:
        self._process: Any = None
        self._conn: Connection | None = None
        self._lock = threading.Lock()
        self._proxies: dict[str, RemoteProxy] = {}
        self._links: dict[tuple[str, str], Link] = {}

    def _all(self) -> list[RemoteProxy]:
        return list(self._proxies.values())

    @property
    def running(self) -> bool:
        return self._conn is not None and self._process is not None \
            and self._process.is_alive()

    def start(self) -> ProcessProxyHub:
        """Start the child and wait until it serves (idempotent). Returns self.

        Raises:
            TimeoutError: the child did not answer in :data:`REQUEST_TIMEOUT_S`.
        """
        if self._process is not None:
            return self
        ctx = multiprocessing.get_context("spawn")
        parent, child = ctx.Pipe()
        process = ctx.Process(target=_serve, args=(child,), name="svit-chaos-proxies",
                              daemon=True)
        process.start()
        child.close()
        self._process, self._conn = process, parent
        self._request("ping")
        return self

    def _request(self, op: str, *args: Any) -> Any:
        with self._lock:
            conn = self._conn
            if conn is None:
                raise RuntimeError("proxy hub is not running")
            conn.send((op, args))
            if not conn.poll(REQUEST_TIMEOUT_S):
                raise TimeoutError(f"proxy process did not answer {op} in "
                                   f"{REQUEST_TIMEOUT_S} s")
            ok, value = conn.recv()
        if not ok:
            raise value
        return value

    def proxy(self, name: str, upstream_host: str, upstream_port: int) -> RemoteProxy:
        """Start a proxy on a free loopback port (in the child) forwarding to ``upstream``.

        Raises:
            ValueError: ``name`` is already used.
            RuntimeError: the hub is not running.
        """
        port = int(self._request("proxy", name, upstream_host, upstream_port))
        proxy = RemoteProxy(self, name, (upstream_host, upstream_port), port)
        self._proxies[name] = proxy
        return proxy

    def close(self) -> None:
        """Close every proxy and stop the child (idempotent, never raises)."""
        process, conn = self._process, self._conn
        if process is None or conn is None:
            return
        with contextlib.suppress(Exception):
            self._request("stop")
        with self._lock:
            self._conn = None
            conn.close()
        process.join(10)
        if process.is_alive():
            process.kill()
            process.join(5)
        self._process = None

    def __enter__(self) -> ProcessProxyHub:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def _serve(conn: Connection) -> None:
    """The child: one in-process ProxyHub, driven by requests on ``conn``."""
    hub = ProxyHub().start()
    proxies: dict[str, Any] = {}
    try:
        while True:
            try:
                op, args = conn.recv()
            except (EOFError, OSError):
                return  # the parent closed the pipe or died
            try:
                result: Any = None
                if op == "proxy":
                    name, host, port = args
                    proxies[name] = hub.proxy(name, host, port)
                    result = proxies[name].port
                elif op == "set_mode":
                    name, mode, delay_ms = args
                    proxies[name].set_mode(mode, delay_ms=delay_ms)
                elif op == "stat":
                    p = proxies[args[0]]
                    result = {"mode": p.mode.value, "connections": p.connections,
                              "accepted": p.accepted, "resets": p.resets}
                elif op == "close":
                    proxies[args[0]].close()
                elif op == "stop":
                    conn.send((True, None))
                    return
                elif op != "ping":
                    raise ValueError(f"unknown request {op!r}")
                conn.send((True, result))
            except Exception as exc:  # answered to the parent, which raises it
                conn.send((False, exc))
    finally:
        hub.close()
