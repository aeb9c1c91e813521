"""Serve an ASGI app with uvicorn on a free loopback port in a background thread."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn

from svit_cluster.gateway import Principal, TokenStore
from svit_cluster.local import free_port

ADMIN = "chaos-admin-token-0123456789"


def tokens() -> TokenStore:
    store = TokenStore()
    store.add(ADMIN, Principal(tenant=None, admin=True))
    return store


@contextmanager
def serve(app: Any) -> Iterator[str]:
    """Yield ``http://127.0.0.1:<port>`` while ``app`` is served; stop it afterwards."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                           log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, name="chaos-test-gateway", daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "gateway did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
