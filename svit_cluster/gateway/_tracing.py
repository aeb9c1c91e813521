"""ASGI layer: W3C ``traceparent`` in, the gateway's span, ``traceparent`` out.

The outermost layer of the gateway (see ``_app``), so every answer carries
``traceparent``, a 413 or a 401 too. A request without a valid
``traceparent`` (missing, malformed, repeated) starts a new trace: a bad trace
header never fails a request (W3C Trace Context, section 3.2: a receiver that
cannot parse it restarts the trace). The span is named ``<METHOD> <path>``
without the query string (which may carry credentials).
"""

from __future__ import annotations

from typing import Any

from svit_cluster import tracing

__all__ = ["TraceContextMiddleware"]

Scope = dict[str, Any]


def _header(scope: Scope, name: bytes) -> str | None:
    """The single value of header ``name``, or None when absent or repeated."""
    values = [v for k, v in scope.get("headers", ()) if k.lower() == name]
    if len(values) != 1:
        return None
    try:
        return bytes(values[0]).decode("ascii")
    except UnicodeDecodeError:
        return None


class TraceContextMiddleware:
    """Reads ``traceparent``/``tracestate``, runs the request as span
    ``<METHOD> <path>`` (:func:`svit_cluster.tracing.span`) and adds
    ``traceparent`` (and ``tracestate``) to the response headers.

    Args:
        app: the inner ASGI app. Non-HTTP scopes pass through untouched.
    """

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        parent = tracing.TraceContext.parse(_header(scope, b"traceparent"),
                                            _header(scope, b"tracestate"))
        method = str(scope.get("method", "GET"))
        path = str(scope.get("path", ""))
        with tracing.use(parent), tracing.span(
            f"{method} {path}", root=True, server=True,
            attributes={"http.request.method": method, "url.path": path},
        ) as hop:
            assert hop is not None  # root=True always yields a hop
            extra = [(k.encode(), v.encode()) for k, v in hop.context.headers().items()]

            async def send_traced(message: dict[str, Any]) -> None:
                if message["type"] == "http.response.start":
                    hop.set_attribute("http.response.status_code", int(message["status"]))
                    headers = [(k, v) for k, v in message.get("headers", ())
                               if k.lower() not in (b"traceparent", b"tracestate")]
                    message = {**message, "headers": headers + extra}
                await send(message)

            await self.app(scope, receive, send_traced)
