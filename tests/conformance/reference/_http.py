"""A loopback HTTP fixture server for the ported port tests (stdlib, one thread)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Fixture:
    """Answers ``GET /data``, ``/tree``, ``/models.json`` with fixed JSON; records each path."""

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
    "/models.json": {
        "openai/gpt-4.1": {"id": "openai/gpt-4.1", "name": "GPT-4.1",
                           "release_date": "2025-04-14"},
        "openai/gpt-5.6": {"id": "openai/gpt-5.6", "name": "GPT-5.6",
                           "release_date": "2026-08-01"},
        "openai/gpt-5.4": {"id": "openai/gpt-5.4", "name": "GPT-5.4",
                           "release_date": "2026-06-01"},
        "anthropic/large-catalog-entry": {"id": "anthropic/large-catalog-entry",
                                          "name": "Large catalog entry",
                                          "description": "x" * 2048},
    },
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
