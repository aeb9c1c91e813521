"""A loopback HTTP fixture server for the ported port tests (stdlib, one thread)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Fixture:
    """Answers ``GET /data`` and ``GET /tree`` with fixed JSON; records every request path."""

    def __init__(self, server: ThreadingHTTPServer) -> None:
        self.server = server
        self.paths: list[str] = []

    @property
    def host(self) -> str:
        """``127.0.0.1:<port>``, the allowlist entry for this server."""
        return f"127.0.0.1:{self.server.server_address[1]}"

    def url(self, path: str) -> str:
        return f"http://{self.host}{path}"


BODIES: dict[str, Any] = {
    "/data": {"source": "fixture"},
    "/tree": {"tree": [{"path": "README.md", "type": "blob"},
                       {"path": "src", "type": "tree"},
                       {"path": "src/lib.rs", "type": "blob"}]},
}


@contextmanager
def fixture_server() -> Iterator[Fixture]:
    """Run the fixture server on a free loopback port for the ``with`` block."""
    holder: list[Fixture] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            return None

        def do_GET(self) -> None:
            holder[0].paths.append(self.path)
            body = BODIES.get(self.path)
            raw = json.dumps(body).encode() if body is not None else b"{}"
            self.send_response(200 if body is not None else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    holder.append(Fixture(server))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield holder[0]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
