"""Serve an ASGI app with uvicorn on a free loopback port, in a thread."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn

from svit_cluster.local import free_port


@contextmanager
def serve(app: Any, *, port: int | None = None, **config: Any) -> Iterator[str]:
    """Run ``app`` until the block exits; yields its base URL.

    ``port`` (default: a free one) lets a test restart a server on the same
    address; ``config`` overrides ``uvicorn.Config`` keywords (e.g.
    ``timeout_graceful_shutdown`` to cut open streams on exit).
    """
    port = port or free_port()
    kwargs: dict[str, Any] = {"log_level": "warning", "lifespan": "off", **config}
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, **kwargs))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
