"""W3C Trace Context propagation, with OpenTelemetry spans when it is installed.

Source of the header rules: W3C Trace Context (https://www.w3.org/TR/trace-context/),
section 3.2 ``traceparent`` and 3.3 ``tracestate``. One trace crosses these hops:

1. the gateway (``svit_cluster.gateway``) reads ``traceparent``/``tracestate`` of
   every request; a missing or malformed header starts a new trace (never an
   error); the answer carries ``traceparent`` naming the gateway's span;
2. the router passes the context to the process actor (as an argument of the Ray
   call: Ray does not carry context variables between processes);
3. the controller runs the activation (span ``svit.activation``) and the commit
   (span ``svit.commit``); the fenced Redis log records the commit span's
   ``traceparent`` in the stream entry (field ``trace``, see
   ``svit_cluster.store``).

The current context lives in a :class:`~contextvars.ContextVar`, so it follows
``await`` and :func:`asyncio.to_thread` within one process.

OpenTelemetry is optional (``pip install 'svit-cluster[otel]'``). This module never
imports it at import time (Ray workers stay light); :func:`span` creates a real
span when a tracer provider records it (the global one, or the one given to
:func:`configure`). It imports ``opentelemetry.trace`` only once tracing can be
set up in this process: a provider given to :func:`configure`,
``opentelemetry.trace`` already imported (setting a global provider imports it),
or ``OTEL_PYTHON_TRACER_PROVIDER`` set (OpenTelemetry builds that provider on
first use). Otherwise the global provider is OpenTelemetry's no-op proxy, whose
spans never record, and the hop comes out the same without it. Without
OpenTelemetry, or with a provider that does not record, every hop still gets
its own random span id, so the ``traceparent`` sent on stays valid.
"""

from __future__ import annotations

import contextlib
import os
import random as _random
import re
import secrets
import sys
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from svit_cluster import __version__

__all__ = [
    "TRACEPARENT",
    "TRACESTATE",
    "Hop",
    "TraceContext",
    "configure",
    "current",
    "current_traceparent",
    "span",
    "use",
    "use_traceparent",
]

#: Request/response header names (lower case, as ASGI carries them).
TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"

# version-traceid-parentid-flags; a future version may append "-..." fields (3.2.4).
_TRACEPARENT_RE = re.compile(
    r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-[ -~]*)?")
#: Longest ``tracestate`` propagated (the spec's minimum to keep is 512 characters);
#: a longer one is dropped, not truncated mid-entry.
MAX_TRACESTATE = 512
_TRACESTATE_RE = re.compile(r"[ -~]*")  # printable ASCII; entries are not parsed further


@dataclass(frozen=True, slots=True)
class TraceContext:
    """One hop's W3C trace context.

    Attributes:
        trace_id: 32 lowercase hex digits, not all zero (the whole trace).
        span_id: 16 lowercase hex digits, not all zero (this hop; the next hop's
            parent id).
        flags: 2 hex digits; ``01`` = sampled (the caller may be recording).
        tracestate: the vendor ``tracestate`` header, passed on unchanged, or None.
    """

    trace_id: str
    span_id: str
    flags: str = "00"
    tracestate: str | None = None

    @property
    def traceparent(self) -> str:
        """The ``traceparent`` header value (version ``00``)."""
        return f"00-{self.trace_id}-{self.span_id}-{self.flags}"

    @property
    def sampled(self) -> bool:
        return bool(int(self.flags, 16) & 1)

    @classmethod
    def parse(cls, traceparent: str | None, tracestate: str | None = None
              ) -> TraceContext | None:
        """Parse a ``traceparent`` header (and optional ``tracestate``).

        Returns:
            The context, or None when ``traceparent`` is missing or invalid:
            wrong shape or case, version ``ff``, a version-``00`` header with
            extra fields, an all-zero trace or parent id (section 3.2.2). An
            invalid or over-long (> :data:`MAX_TRACESTATE`) ``tracestate`` is
            dropped, keeping the ``traceparent``. Never raises.
        """
        if not isinstance(traceparent, str) or len(traceparent) > 512:
            return None
        match = _TRACEPARENT_RE.fullmatch(traceparent.strip(" \t"))
        if match is None:
            return None
        version, trace_id, span_id, flags, extra = match.groups()
        if version == "ff" or (version == "00" and extra):
            return None
        if trace_id == "0" * 32 or span_id == "0" * 16:
            return None
        state = tracestate.strip(" \t") if isinstance(tracestate, str) else None
        if not state or len(state) > MAX_TRACESTATE or not _TRACESTATE_RE.fullmatch(state):
            state = None
        # A higher version is read as version 00 (3.2.4): only the sampled bit kept.
        return cls(trace_id, span_id, f"{int(flags, 16) & 1:02x}", state)

    @classmethod
    def new(cls, *, sampled: bool = False) -> TraceContext:
        """A new trace: random trace id and span id."""
        return cls(secrets.token_hex(16), secrets.token_hex(8), "01" if sampled else "00")

    def child(self) -> TraceContext:
        """The same trace with a new random span id (the next hop)."""
        return TraceContext(self.trace_id, _span_id(), self.flags, self.tracestate)

    def headers(self) -> dict[str, str]:
        """``{"traceparent": ..., "tracestate": ...}`` to send on (tracestate when set)."""
        out = {TRACEPARENT: self.traceparent}
        if self.tracestate:
            out[TRACESTATE] = self.tracestate
        return out


_CURRENT: ContextVar[TraceContext | None] = ContextVar("svit_trace", default=None)


def _span_id() -> str:
    """A random non-zero span id (16 hex digits). Span ids need to be unique, not
    secret (a trace id starting a trace comes from :mod:`secrets`), so they come
    from :func:`random.getrandbits`, as OpenTelemetry's SDK draws them."""
    return f"{_random.getrandbits(64) or 1:016x}"


@dataclass(slots=True)
class _Config:
    enabled: bool = True
    provider: Any = None


_CONFIG = _Config()


def configure(*, tracer_provider: Any = None, enabled: bool = True) -> None:
    """Choose how :func:`span` records (process-wide).

    Args:
        tracer_provider: an OpenTelemetry ``TracerProvider`` to record spans
            with; None (default): OpenTelemetry's global provider.
        enabled: False: never create OpenTelemetry spans (ids are still
            propagated).
    """
    _CONFIG.enabled = enabled
    _CONFIG.provider = tracer_provider


def current() -> TraceContext | None:
    """This context's trace context (set by :func:`use` or :func:`span`), or None."""
    return _CURRENT.get()


def current_traceparent() -> str | None:
    """The ``traceparent`` to send on from here, or None.

    Our own context first; else, when OpenTelemetry is already imported (the
    application uses it), the current OpenTelemetry span, if valid.
    """
    ctx = _CURRENT.get()
    if ctx is not None:
        return ctx.traceparent
    otel = sys.modules.get("opentelemetry.trace")
    if otel is None:
        return None
    sc = otel.get_current_span().get_span_context()
    if not sc.is_valid:
        return None
    return f"00-{sc.trace_id:032x}-{sc.span_id:016x}-{int(sc.trace_flags):02x}"


@contextlib.contextmanager
def use(ctx: TraceContext | None) -> Iterator[TraceContext | None]:
    """Make ``ctx`` the current trace context inside the block (None clears it)."""
    reset = _CURRENT.set(ctx)
    try:
        yield ctx
    finally:
        _CURRENT.reset(reset)


@contextlib.contextmanager
def use_traceparent(traceparent: str | None, tracestate: str | None = None
                    ) -> Iterator[TraceContext | None]:
    """:func:`use` of a parsed header; an invalid one clears the context (no error).

    This is also how a caller of the SDK sets the ``traceparent`` of the calls
    made inside the block.
    """
    with use(TraceContext.parse(traceparent, tracestate)) as ctx:
        yield ctx


class Hop:
    """The span of one hop, as :func:`span` yields it.

    Attributes:
        context: this hop's trace context (its ``span_id`` is the parent id of
            the next hop).
        recording: True when an OpenTelemetry span records this hop.
    """

    __slots__ = ("_span", "context")

    def __init__(self, context: TraceContext, otel_span: Any = None) -> None:
        self.context = context
        self._span = otel_span

    @property
    def recording(self) -> bool:
        return self._span is not None

    def set_attribute(self, key: str, value: str | int | float | bool) -> None:
        """Set an attribute on the OpenTelemetry span (no-op when not recording)."""
        if self._span is not None:
            self._span.set_attribute(key, value)


#: OpenTelemetry's environment variable naming a tracer provider to build on first use.
_OTEL_PROVIDER_ENV = "OTEL_PYTHON_TRACER_PROVIDER"


def _tracer() -> Any:
    if not _CONFIG.enabled:
        return None
    if (_CONFIG.provider is None and "opentelemetry.trace" not in sys.modules
            and not os.environ.get(_OTEL_PROVIDER_ENV)):
        return None  # no provider can be set: the no-op proxy's spans never record
    try:
        from opentelemetry import trace
    except ImportError:
        return None
    provider = _CONFIG.provider or trace.get_tracer_provider()
    return provider.get_tracer("svit_cluster", __version__)


def _otel_parent(parent: TraceContext | None) -> Any:
    from opentelemetry import context as otel_context
    from opentelemetry import trace

    if parent is None:
        return otel_context.Context()  # a root span: a new trace
    state = trace.TraceState.from_header([parent.tracestate]) if parent.tracestate else None
    sc = trace.SpanContext(trace_id=int(parent.trace_id, 16), span_id=int(parent.span_id, 16),
                           is_remote=True, trace_flags=trace.TraceFlags(int(parent.flags, 16)),
                           trace_state=state)
    return trace.set_span_in_context(trace.NonRecordingSpan(sc))


@contextlib.contextmanager
def span(name: str, *, root: bool = False, server: bool = False,
         attributes: Mapping[str, str | int | float | bool] | None = None
         ) -> Iterator[Hop | None]:
    """Run the block as one hop of the current trace.

    The hop's context (a new span id, same trace id) is current inside the
    block, so a nested :func:`span` or a call made inside is its child.

    Args:
        name: span name (``svit.activation``, ``svit.commit``, ``POST /v1/control``).
        root: with no current context, start a new trace (the gateway); False:
            with no current context, the block runs untraced and yields None.
        server: the span kind is SERVER (the gateway), else INTERNAL.
        attributes: OpenTelemetry span attributes (never secrets).

    Yields:
        The :class:`Hop`, or None (no current context and not ``root``).

    Raises:
        Whatever the block raises (recorded on the OpenTelemetry span).
    """
    parent = _CURRENT.get()
    if parent is None and not root:
        yield None
        return
    tracer = _tracer()
    if tracer is None:
        ctx = parent.child() if parent is not None else TraceContext.new()
        reset = _CURRENT.set(ctx)
        try:
            yield Hop(ctx)
        finally:
            _CURRENT.reset(reset)
        return
    from opentelemetry import trace

    kind = trace.SpanKind.SERVER if server else trace.SpanKind.INTERNAL
    with tracer.start_as_current_span(name, context=_otel_parent(parent), kind=kind,
                                      attributes=dict(attributes or {})) as otel_span:
        sc = otel_span.get_span_context()
        if otel_span.is_recording() and sc.is_valid:
            ctx = TraceContext(f"{sc.trace_id:032x}", f"{sc.span_id:016x}",
                               f"{int(sc.trace_flags) & 1:02x}",
                               parent.tracestate if parent is not None else None)
            hop = Hop(ctx, otel_span)
        else:  # a provider that does not record (none configured, or not sampled)
            ctx = parent.child() if parent is not None else TraceContext.new()
            hop = Hop(ctx)
        with use(ctx):
            yield hop
