"""W3C ``traceparent`` from the request to the commit and back.

Real parts: the gateway app (all its ASGI layers), the controller, the fenced
Redis commit log (``RedisBackend`` on the shared redis-server) and the SDK. The
wire is an in-process ``httpx.ASGITransport``. The trace id reaching the commit
is read back from the commit log's stream entry (field ``trace``).

Two modes: OpenTelemetry switched off (ids still propagated, each hop its own
span id), and OpenTelemetry on with an in-memory exporter (spans per hop with
their parent/child links). A third test imports the tracing path with
``opentelemetry`` made unimportable.
"""

from __future__ import annotations

import itertools
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis

from svit_cluster import tracing
from svit_cluster.client import AsyncSvitClient
from svit_cluster.gateway import Principal, TokenStore, create_app
from svit_cluster.store import connect
from tests.gateway._redis_router import RedisRouter

TOKEN = "tenant-token-0123456789"
INCREMENT = """(define (main input)
  (let ((count (+ (read "/memory/count") 1)))
    (do (write "/memory/count" count) count)))"""
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
INCOMING = f"00-{TRACE_ID}-{PARENT_ID}-01"
_ids = itertools.count()


@pytest.fixture
def rc(redis_server: Any) -> Iterator[redis.Redis]:
    client = connect(redis_server.url, timeout_s=5)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def no_otel() -> Iterator[None]:
    tracing.configure(enabled=False)
    yield
    tracing.configure()


@pytest.fixture
def app_router(rc: redis.Redis) -> tuple[Any, RedisRouter]:
    router = RedisRouter(rc)
    tokens = TokenStore()
    tokens.add(TOKEN, Principal(tenant="tenant-a"))
    return create_app(router, tokens), router


def _pid() -> str:
    return f"svit://tenant-a/trace-{next(_ids)}-{id(object())}"


def _control(pid: str, version: int, rid: str) -> dict[str, Any]:
    return {"protocol": "svit-control@1", "client_id": "c1", "request_id": rid,
            "process_id": pid, "expected_version": version,
            "command": {"operation": "activate", "script": "inc", "input": {"type": "null"}}}


def _http(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw",
                             headers={"Authorization": f"Bearer {TOKEN}"})


async def _create(http: httpx.AsyncClient, pid: str) -> None:
    resp = await http.post("/v1/processes", json={
        "process_id": pid, "memory": {"count": 0}, "scripts": {"inc": INCREMENT}})
    assert resp.status_code == 201, resp.text


def _parts(traceparent: str) -> tuple[str, str, str, str]:
    version, trace_id, span_id, flags = traceparent.split("-")
    return version, trace_id, span_id, flags


@pytest.mark.parametrize(("header", "valid"), [
    (INCOMING, True),
    (f"00-{TRACE_ID}-{PARENT_ID}-00", True),
    (f"01-{TRACE_ID}-{PARENT_ID}-01-future-field", True),   # a later version: read as 00
    (f"00-{TRACE_ID}-{PARENT_ID}-01-extra", False),          # version 00 has 4 fields
    (f"ff-{TRACE_ID}-{PARENT_ID}-01", False),                # version ff is invalid
    (f"00-{'0' * 32}-{PARENT_ID}-01", False),                # all-zero trace id
    (f"00-{TRACE_ID}-{'0' * 16}-01", False),                 # all-zero parent id
    (f"00-{TRACE_ID.upper()}-{PARENT_ID}-01", False),        # upper case hex
    (f"00-{TRACE_ID[:-1]}-{PARENT_ID}-01", False),           # short trace id
    ("garbage", False),
    ("", False),
])
def test_traceparent_validation(header: str, valid: bool) -> None:
    ctx = tracing.TraceContext.parse(header, "vendor=abc")
    assert (ctx is not None) == valid
    if ctx is not None:
        assert ctx.trace_id == TRACE_ID and ctx.span_id == PARENT_ID
        assert ctx.tracestate == "vendor=abc"
        assert _parts(ctx.traceparent)[0] == "00"


def test_oversized_or_bad_tracestate_is_dropped_not_the_traceparent() -> None:
    ctx = tracing.TraceContext.parse(INCOMING, "k=" + "v" * 600)
    assert ctx is not None and ctx.tracestate is None
    ctx = tracing.TraceContext.parse(INCOMING, "k=\x00")
    assert ctx is not None and ctx.tracestate is None


async def test_traceparent_reaches_the_commit_and_comes_back(
        app_router: tuple[Any, RedisRouter], no_otel: None) -> None:
    app, router = app_router
    pid = _pid()
    async with _http(app) as http:
        await _create(http, pid)
        resp = await http.post("/v1/control", json=_control(pid, 0, "r1"),
                               headers={"traceparent": INCOMING, "tracestate": "vendor=abc"})
        assert resp.status_code == 200, resp.text
        assert resp.json()["outcome"]["status"] == "committed"
        version, trace_id, gateway_span, flags = _parts(resp.headers["traceparent"])
        assert (version, trace_id, flags) == ("00", TRACE_ID, "01")
        assert gateway_span != PARENT_ID  # the gateway's own hop
        assert resp.headers["tracestate"] == "vendor=abc"

        entry = router.backends[pid].entries()[-1]
        assert entry.version == 1 and entry.trace is not None
        _, commit_trace, commit_span, _ = _parts(entry.trace)
        assert commit_trace == TRACE_ID
        assert commit_span not in (PARENT_ID, gateway_span)

        # host API commits (inbox) are traced the same way
        resp = await http.post("/v1/processes/inbox", json={"process_id": pid, "message": 1},
                               headers={"traceparent": f"00-{'a' * 32}-{PARENT_ID}-00"})
        assert resp.status_code == 200, resp.text
        assert _parts(resp.headers["traceparent"])[1] == "a" * 32
        entry = router.backends[pid].entries()[-1]
        assert entry.version == 2 and entry.trace is not None
        assert _parts(entry.trace)[1] == "a" * 32


@pytest.mark.parametrize("headers", [
    {},
    {"traceparent": "00-not-a-trace-01"},
    {"traceparent": f"00-{'0' * 32}-{PARENT_ID}-01"},
    {"traceparent": f"00-{TRACE_ID.upper()}-{PARENT_ID}-01"},
    {"traceparent": "\u00e9" * 55},
])
async def test_missing_or_bad_traceparent_starts_a_new_trace_never_an_error(
        app_router: tuple[Any, RedisRouter], no_otel: None, headers: dict[str, str]) -> None:
    app, router = app_router
    pid = _pid()
    async with _http(app) as http:
        await _create(http, pid)
        resp = await http.post("/v1/control", json=_control(pid, 0, "r1"),
                               headers={k: v.encode() for k, v in headers.items()})
        assert resp.status_code == 200, resp.text
        answered = tracing.TraceContext.parse(resp.headers["traceparent"])
        assert answered is not None and answered.trace_id != TRACE_ID.lower()
        entry = router.backends[pid].entries()[-1]
        assert entry.trace is not None and _parts(entry.trace)[1] == answered.trace_id


async def test_error_answers_carry_traceparent_too(
        app_router: tuple[Any, RedisRouter], no_otel: None) -> None:
    app, _ = app_router
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://gw") as http:
        resp = await http.post("/v1/control", content=b"{}",
                               headers={"traceparent": INCOMING})
    assert resp.status_code == 401
    assert _parts(resp.headers["traceparent"])[1] == TRACE_ID


async def test_sdk_sends_the_callers_traceparent(
        app_router: tuple[Any, RedisRouter], no_otel: None) -> None:
    """The SDK over a user-supplied ``httpx.AsyncClient``: the trace set with
    ``tracing.use_traceparent`` around a call reaches the commit."""
    app, router = app_router
    pid = _pid()
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app))
    async with http:
        client = AsyncSvitClient("http://gw", TOKEN, http_client=http, attempts=1)
        await client.create_process(pid, memory={"count": 0}, scripts={"inc": INCREMENT})
        with tracing.use_traceparent(INCOMING):
            await client.activate(pid, "inc", None, expected_version=0)
        await client.aclose()  # the user's client stays open
        assert not http.is_closed
    entry = router.backends[pid].entries()[-1]
    assert entry.trace is not None and _parts(entry.trace)[1] == TRACE_ID


async def test_otel_spans_per_hop_with_parent_links(
        app_router: tuple[Any, RedisRouter]) -> None:
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import SpanKind

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.configure(tracer_provider=provider)
    try:
        app, router = app_router
        pid = _pid()
        async with _http(app) as http:
            await _create(http, pid)
            exporter.clear()
            resp = await http.post("/v1/control", json=_control(pid, 0, "r1"),
                                   headers={"traceparent": INCOMING})
        assert resp.status_code == 200, resp.text
    finally:
        tracing.configure()
    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert {"POST /v1/control", "svit.activation", "svit.commit"} <= set(spans), spans
    gateway, activation, commit = (spans["POST /v1/control"], spans["svit.activation"],
                                   spans["svit.commit"])
    for s in (gateway, activation, commit):
        assert f"{s.context.trace_id:032x}" == TRACE_ID
    assert gateway.kind == SpanKind.SERVER
    assert gateway.parent is not None and f"{gateway.parent.span_id:016x}" == PARENT_ID
    assert activation.parent is not None
    assert activation.parent.span_id == gateway.context.span_id
    assert commit.parent is not None and commit.parent.span_id == activation.context.span_id
    assert gateway.attributes is not None
    assert gateway.attributes["http.response.status_code"] == 200
    assert activation.attributes is not None
    assert activation.attributes["svit.outcome"] == "committed"
    assert commit.attributes is not None and commit.attributes["svit.version"] == 1
    # the answer names the gateway span; the log entry names the commit span
    assert _parts(resp.headers["traceparent"])[2] == f"{gateway.context.span_id:016x}"
    entry = router.backends[pid].entries()[-1]
    assert entry.trace is not None
    assert _parts(entry.trace)[2] == f"{commit.context.span_id:016x}"


def test_tracing_works_without_opentelemetry_installed() -> None:
    """``opentelemetry`` unimportable (as when the ``otel`` extra is not installed):
    the worker side (actor, controller, store) and the SDK import, a traced
    activation commits, spans still propagate ids, nothing raises. (The gateway
    is not part of this probe: recent FastAPI releases import OpenTelemetry
    themselves.)"""
    code = textwrap.dedent(f"""
        import sys
        sys.modules["opentelemetry"] = None  # import opentelemetry -> ImportError
        from svit_cluster import tracing
        import svit_cluster.cluster._actor  # the worker side: actor, controller, store
        import svit_cluster.client
        from svit_cluster.control import ProcessController, decode_request
        from svit_cluster.process import Process, Script
        import json
        proc = Process.create("svit://t/p", memory={{"count": 0}},
                              scripts={{"inc": Script({INCREMENT!r})}})
        ctrl = ProcessController(proc)
        with tracing.use_traceparent({INCOMING!r}):
            body = json.dumps({{"protocol": "svit-control@1", "client_id": "c",
                "request_id": "r", "process_id": "svit://t/p", "expected_version": 0,
                "command": {{"operation": "activate", "script": "inc",
                             "input": {{"type": "null"}}}}}})
            assert ctrl.execute(decode_request(body.encode())).outcome.status == "committed"
            with tracing.span("svit.activation") as a:
                with tracing.span("svit.commit") as c:
                    assert c is not None and not c.recording
                    assert c.context.trace_id == {TRACE_ID!r}
                    assert a is not None and c.context.span_id != a.context.span_id
        with tracing.span("untraced") as none:
            assert none is None
        assert not any(m.startswith("opentelemetry.") for m in sys.modules), sorted(
            m for m in sys.modules if m.startswith("opentelemetry"))
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def _run(code: str, env: dict[str, str] | None = None) -> str:
    import os

    full = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    full.update(env or {})
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                         text=True, timeout=120, env=full)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_a_global_tracer_provider_records_spans() -> None:
    """A provider set globally (``trace.set_tracer_provider``, which imports
    ``opentelemetry.trace``) records our spans, as one given to ``configure``."""
    pytest.importorskip("opentelemetry.sdk.trace")
    assert _run(f"""
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        trace.set_tracer_provider(TracerProvider())
        from svit_cluster import tracing
        with tracing.use_traceparent({INCOMING!r}), tracing.span("svit.activation") as hop:
            assert hop is not None and hop.recording
            assert hop.context.trace_id == {TRACE_ID!r}
        print("ok")
    """) == "ok"


def test_a_tracer_provider_named_by_the_environment_records_spans() -> None:
    """``OTEL_PYTHON_TRACER_PROVIDER`` names a provider that OpenTelemetry builds on
    first use, with nothing imported before: our spans record through it."""
    pytest.importorskip("opentelemetry.sdk.trace")
    assert _run(f"""
        import sys
        from svit_cluster import tracing
        with tracing.use_traceparent({INCOMING!r}), tracing.span("svit.activation") as hop:
            assert hop is not None and hop.recording
        print("ok")
    """, {"OTEL_PYTHON_TRACER_PROVIDER": "sdk_tracer_provider"}) == "ok"


def test_no_tracing_set_up_means_no_opentelemetry_import() -> None:
    """OpenTelemetry installed but set up nowhere in the process (a process actor's
    worker): a traced hop gets a child context of the same trace without importing
    ``opentelemetry.trace`` (the global provider could only be the no-op proxy)."""
    pytest.importorskip("opentelemetry.trace")
    assert _run(f"""
        import sys
        from svit_cluster import tracing
        with tracing.use_traceparent({INCOMING!r}), tracing.span("svit.activation") as hop:
            assert hop is not None and not hop.recording
            assert hop.context.trace_id == {TRACE_ID!r}
            assert hop.context.span_id != {PARENT_ID!r}
            assert tracing.current_traceparent() == hop.context.traceparent
        assert "opentelemetry.trace" not in sys.modules
        print("ok")
    """) == "ok"
