"""Ports on the single-host path: catalog, port-call, http, llm, spawn, fencing, restore.

Real parts: the http port talks to a real HTTP server on loopback; the
idempotency and stale-grant tests commit through the real fenced Redis log
(``rclient`` fixture); the llm port runs the simulated reasoner.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import redis

from svit_cluster.activation import activate, prepare_activation
from svit_cluster.control import ProcessController, decode_request
from svit_cluster.errors import (
    ConfigurationError,
    FencedError,
    InvalidInput,
    LimitExceeded,
    ScriptFailed,
)
from svit_cluster.ports import (
    DESCRIPTOR_FIELDS,
    PortsConfig,
    build_registry,
    child_id,
    idempotency_key,
)
from svit_cluster.process import Process, encode_value
from svit_cluster.store import RedisBackend, StoreConfig

_ids = itertools.count(1)

CALL = "(define (main input) (port-call (map-get input \"port\") (map-get input \"input\")))"
CALL_AND_COUNT = (
    "(define (main input)"
    " (let ((r (port-call \"http\" input)))"
    "  (write \"/memory/n\" (+ 1 (read \"/memory/n\")))"
    "  r))"
)


def pid(name: str) -> str:
    return f"svit://test/ports/{name}-{next(_ids)}"


class _Server:
    """A loopback HTTP server recording every request (path, Idempotency-Key, Svit-* headers).

    With :attr:`dedup` set it answers a key it has answered before with that
    first answer (a well-behaved deduplicating server).
    """

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.dedup = False
        self.answers: dict[str, bytes] = {}
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return None

            def _answer(self) -> None:
                size = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(size).decode() if size else ""
                key = self.headers.get("Idempotency-Key")
                outer.requests.append({"method": self.command, "path": self.path,
                                       "key": key, "body": body,
                                       "token": self.headers.get("Svit-Fencing-Token"),
                                       "process": self.headers.get("Svit-Process"),
                                       "version": self.headers.get("Svit-Version"),
                                       "call_index": self.headers.get("Svit-Call-Index")})
                if self.path == "/redirect":
                    self.send_response(302)
                    self.send_header("Location", "/hello")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                payload = (b"x" * 5000) if self.path == "/big" else b"hello " + body.encode()
                if outer.dedup and key:
                    payload = outer.answers.setdefault(key, payload)
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = _answer
            do_POST = _answer

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server() -> Iterator[_Server]:
    s = _Server()
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def other_server() -> Iterator[_Server]:
    s = _Server()
    try:
        yield s
    finally:
        s.close()


def http_registry(server: _Server, **http: Any) -> Any:
    cfg = {"enabled": True, "allow_hosts": [f"127.0.0.1:{server.port}"], **http}
    return build_registry(PortsConfig.parse({"http": cfg}))


def granted(name: str, registry: Any, **scripts: str) -> Process:
    proc = Process.create(pid(name), memory={"n": 0}, scripts={"call": CALL, **scripts})
    proc.grant_ports(registry.catalog())
    return proc


# -- registry, catalog, config -------------------------------------------------------------


def test_nothing_is_granted_by_default_and_the_catalog_describes_each_port() -> None:
    assert PortsConfig.parse(None).enabled() == []
    assert build_registry(PortsConfig()).catalog() == {}
    reg = build_registry(PortsConfig.parse({
        "http": {"enabled": True, "allow_hosts": ["example.org"]},
        "llm": {"enabled": True}, "spawn": {"enabled": True}}))
    proc = Process.create(pid("catalog"))
    assert proc.read("/ports") == {}
    change = proc.grant_ports(reg.catalog())
    assert change is not None and proc.version == 1
    assert proc.discover("/ports") == ["http", "llm", "spawn"]
    for name in ("http", "llm", "spawn"):
        desc = proc.read(f"/ports/{name}")
        assert isinstance(desc, dict) and set(desc) == set(DESCRIPTOR_FIELDS)
        assert desc["name"] == name and desc["version"] == "v1"
        assert desc["limits"]["max_calls_per_activation"] == 8
    assert proc.read("/ports/http/limits/allow_hosts") == ["example.org"]
    assert proc.grant_ports(reg.catalog()) is None  # unchanged: no new version
    assert proc.version == 1


def test_ports_config_rejects_unknown_keys_and_out_of_range_limits() -> None:
    with pytest.raises(ConfigurationError, match="htp"):
        PortsConfig.parse({"htp": {}})
    with pytest.raises(ConfigurationError, match="max_calls"):
        PortsConfig.parse({"max_calls": 1000})


def test_cluster_config_reads_ports_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from svit_cluster.cluster._config import ClusterConfig

    monkeypatch.setenv("SVIT_PORTS_JSON", '{"llm": {"enabled": true}, "max_calls": 3}')
    assert ClusterConfig.from_env().ports == {"llm": {"enabled": True}, "max_calls": 3}
    monkeypatch.setenv("SVIT_PORTS_JSON", '{"llm": {"enabled": "maybe"}}')
    with pytest.raises(ConfigurationError):
        ClusterConfig.from_env()


def test_guest_cannot_write_the_catalog() -> None:
    reg = build_registry(PortsConfig.parse({"llm": {"enabled": True}}))
    proc = granted("guest-write", reg, w='(define (main input) (write "/ports/llm/name" "x"))')
    with pytest.raises(InvalidInput, match="not writable"):
        activate(proc, "w", None, ports=reg)
    assert proc.read("/ports/llm/name") == "llm"


# -- http ----------------------------------------------------------------------------------


def test_http_port_reaches_an_allowlisted_server_and_sends_an_idempotency_key(
        server: _Server) -> None:
    reg = http_registry(server)
    proc = granted("http", reg)
    url = server.url("/hello")
    call_input = {"url": url, "method": "POST", "body": "svit",
                  "headers": {"idempotency-key": "guest-chosen", "Svit-Version": "99",
                              "svit-process": "svit://someone/else"}}
    result = activate(proc, "call", {"port": "http", "input": call_input}, ports=reg, token=11)
    assert result.output == {"status": 200, "headers": {"content-type": "text/plain"},
                             "body": "hello svit"}
    assert len(server.requests) == 1
    want = idempotency_key(proc.id, 2, 0, "http", call_input)
    # The host's headers win over the guest's: key, token and where the call was made.
    assert {k: server.requests[0][k] for k in ("key", "token", "process", "version",
                                               "call_index")} == {
        "key": want, "token": "11", "process": proc.id, "version": "2", "call_index": "0"}
    (call,) = result.port_calls
    assert (call.port, call.token, call.version, call.call_index, call.ok) == ("http", 11, 2,
                                                                             0, True)
    assert call.idempotency_key == want


def test_http_port_refuses_a_host_off_the_allowlist(server: _Server,
                                                    other_server: _Server) -> None:
    reg = http_registry(server)
    proc = granted("http-off", reg)
    before = proc.root_hash
    with pytest.raises(ScriptFailed, match="not on the allowlist"):
        activate(proc, "call", {"port": "http", "input": {"url": other_server.url("/hello")}},
                 ports=reg)
    with pytest.raises(ScriptFailed, match="not on the allowlist"):
        activate(proc, "call", {"port": "http", "input": {"url": "file:///etc/passwd"}},
                 ports=reg)
    assert other_server.requests == [] and server.requests == []
    assert proc.root_hash == before


def test_http_port_does_not_follow_redirects_and_bounds_the_response(server: _Server) -> None:
    reg = http_registry(server, max_response_bytes=1000)
    proc = granted("http-redirect", reg)
    out = activate(proc, "call", {"port": "http", "input": {"url": server.url("/redirect")}},
                   ports=reg).output
    assert out["status"] == 302 and out["headers"]["location"] == "/hello"
    assert [r["path"] for r in server.requests] == ["/redirect"]
    version = proc.version
    with pytest.raises(LimitExceeded, match="max_response_bytes=1000"):
        activate(proc, "call", {"port": "http", "input": {"url": server.url("/big")}},
                 ports=reg)
    assert proc.version == version


def test_a_failed_script_does_not_repeat_the_port_or_commit_guest_state(server: _Server) -> None:
    reg = http_registry(server)
    proc = granted("http-fail", reg, fail=(
        '(define (main input) (do (write "/memory/uncommitted" true)'
        ' (port-call "http" input) (panic "failed after HTTP")))'))
    version, root = proc.version, proc.root_hash
    with pytest.raises(ScriptFailed, match="failed after HTTP"):
        activate(proc, "fail", {"url": server.url("/hello")}, ports=reg)
    assert len(server.requests) == 1  # the effect happened once, outside the commit
    assert (proc.version, proc.root_hash) == (version, root)
    assert proc.read("/memory/uncommitted") is None


# -- port-call semantics: limits, fuel, grants -----------------------------------------------


class _ReadValue:
    """A host's own port: reads one committed value through the read-only context."""

    name = "read-value"

    def descriptor(self) -> dict[str, Any]:
        return {"name": self.name, "version": "v1",
                "description": "Read one committed process value.",
                "input_schema": {"type": "object", "required": ["path"]},
                "output": "The committed value at path.", "effect": "read", "limits": {}}

    def call(self, input: Any, ctx: Any) -> Any:
        return ctx.committed.read(input["path"])


def test_a_host_port_exposes_its_own_descriptor_and_reads_committed_state() -> None:
    from svit_cluster.ports import PortRegistry

    reg = PortRegistry({"read-value": _ReadValue()}, PortsConfig())
    proc = granted("custom", reg, w=(
        '(define (main input) (write "/memory/color" "red")'
        ' (port-call "read-value" input))'))
    proc.write("/memory/color", "blue")
    desc = proc.read("/ports/read-value")
    assert desc["description"] == "Read one committed process value."
    assert desc["effect"] == "read" and desc["version"] == "v1"
    # The port sees the last committed state, not the activation's working copy.
    assert activate(proc, "w", {"path": "/memory/color"}, ports=reg).output == "blue"
    assert proc.read("/memory/color") == "red"



def test_port_calls_are_bounded_per_activation_and_charged_fuel() -> None:
    reg = build_registry(PortsConfig.parse({"llm": {"enabled": True}, "max_calls": 2,
                                            "fuel_per_call": 5000, "max_input_bytes": 64}))
    three = ('(define (main input) (port-call "llm" input) (port-call "llm" input)'
             ' (port-call "llm" input))')
    two = '(define (main input) (port-call "llm" input) (port-call "llm" input))'
    proc = granted("limits", reg, three=three, two=two)
    with pytest.raises(LimitExceeded, match="max_calls=2"):
        activate(proc, "three", {"prompt": "hi"}, ports=reg)
    used = activate(proc, "two", {"prompt": "hi"}, ports=reg).fuel_used
    assert used >= 2 * 5000
    with pytest.raises(LimitExceeded, match="max_input_bytes=64"):
        activate(proc, "two", {"prompt": "x" * 100}, ports=reg)


def test_a_port_the_host_does_not_grant_fails_even_if_the_catalog_names_it() -> None:
    reg = build_registry(PortsConfig.parse({"llm": {"enabled": True}}))
    proc = granted("ungranted", reg)
    assert proc.read("/ports/llm/name") == "llm"
    with pytest.raises(ScriptFailed, match="no port named llm is granted"):
        activate(proc, "call", {"port": "llm", "input": {"prompt": "hi"}})  # this host: none


# -- llm -----------------------------------------------------------------------------------


def test_llm_port_calls_the_simulated_reasoner() -> None:
    reg = build_registry(PortsConfig.parse({"llm": {"enabled": True}}))
    proc = granted("llm", reg, ask=(
        '(define (main input)'
        ' (let ((r (port-call "llm" input)))'
        '  (write "/memory/answer" (map-get r "content")) r))'))
    result = activate(proc, "ask", {"messages": [{"role": "user", "content": "ping"}]},
                      ports=reg)
    assert result.output == {"content": "echo: ping", "tool_calls": []}
    assert proc.read("/memory/answer") == "echo: ping"
    with pytest.raises(ScriptFailed, match="port llm"):
        activate(proc, "ask", {"messages": [{"role": "tool", "content": "x"}]}, ports=reg)


# -- spawn ---------------------------------------------------------------------------------


def test_spawn_forks_the_committed_state_and_runs_one_child_activation() -> None:
    reg = build_registry(PortsConfig.parse({"spawn": {"enabled": True}}))
    child_script = ('(define (main input) (write "/memory/n" (+ input (read "/memory/n")))'
                    ' (read "/memory/n"))')
    spawn = '(define (main input) (write "/memory/n" 100) (port-call "spawn" input))'
    proc = granted("spawn", reg, child=child_script, spawn=spawn)
    activate(proc, "child", 5)  # committed /memory/n = 5
    version = proc.version
    result = activate(proc, "spawn", {"script": "child", "input": 2}, ports=reg)
    kid = child_id(proc.id, idempotency_key(proc.id, version + 1, 0, "spawn",
                                            {"script": "child", "input": 2}))
    # The child forked the LAST COMMITTED state (n = 5), not the parent's
    # uncommitted write of 100, and ran one activation there.
    assert result.output == {"child": kid, "output": 7, "version": version + 1}
    spawner = reg.ports["spawn"].spawner
    child = spawner.children[kid]
    assert child.read("/memory/n") == 7 and child.read("/system/lineage/parent") == proc.id
    assert proc.read("/memory/n") == 100  # the parent commits its own change once


# -- fencing and retries through the real fenced log -----------------------------------------


def _request(proc_id: str, version: int, request_id: str, url: str) -> Any:
    return decode_request({
        "protocol": "svit-control@1", "client_id": "c", "request_id": request_id,
        "process_id": proc_id, "expected_version": version,
        "command": {"operation": "activate", "script": "count",
                    "input": encode_value({"url": url})}})


def test_idempotency_key_is_stable_across_a_retried_activation_after_failover(
        rclient: redis.Redis, server: _Server) -> None:
    config = StoreConfig()
    reg_a = http_registry(server)
    reg_b = http_registry(server)
    name = pid("retry")
    a = RedisBackend(rclient, name, 1, config)
    a.claim()
    proc_a = Process.create(name, memory={"n": 0}, scripts={"count": CALL_AND_COUNT})
    a.create(proc_a)
    calls: list[Any] = []
    reg_a.on_call = calls.append
    reg_b.on_call = calls.append
    ctrl_a = ProcessController(proc_a, a, ports=reg_a, token=1)
    ctrl_a.grant_ports()
    version = proc_a.version
    # A newer owner (token 2) claims the fence while owner 1 is mid-activation:
    # owner 1's port call has already happened when its commit is refused.
    b = RedisBackend(rclient, name, 2, config)
    b.claim()
    with pytest.raises(FencedError):
        ctrl_a.execute(_request(name, version, "r1", server.url("/hello")))
    proc_b = b.restore()
    assert proc_b is not None and proc_b.version == version
    ctrl_b = ProcessController(proc_b, b, ports=reg_b, token=2)
    assert ctrl_b.grant_ports() is None  # same deployment catalog
    response = ctrl_b.execute(_request(name, version, "r1", server.url("/hello")))
    assert response.outcome.status == "committed"
    assert proc_b.read("/memory/n") == 1
    # The effect was requested twice (once by the fenced owner), with ONE key.
    keys = [r["key"] for r in server.requests]
    assert keys == [idempotency_key(name, version + 1, 0, "http",
                                    {"url": server.url("/hello")})] * 2
    # The fenced owner's call is visible as such: recorded with its token.
    assert [(c.token, c.version, c.idempotency_key, c.ok) for c in calls] == [
        (1, version + 1, keys[0], True), (2, version + 1, keys[0], True)]


def test_the_idempotency_key_covers_the_call_input(server: _Server) -> None:
    """Regression (chaos ``--workload ports``): the key named only (process,
    version, call index), so two different calls at the same place shared it.
    Now a different input at the same (process, version, call index) gets a
    different key, and the same input (a retried activation) the same key."""
    reg = http_registry(server)
    proc = granted("key-content", reg)
    version = proc.version

    def key_of(body: str) -> str:
        result = prepare_activation(proc, "call", {"port": "http", "input": {
            "url": server.url("/e"), "method": "POST", "body": body}}, ports=reg)
        (call,) = result.port_calls
        assert (call.process_id, call.version, call.call_index) == (proc.id, version + 1, 0)
        return str(call.idempotency_key)

    first, again, other = key_of("request-1"), key_of("request-1"), key_of("request-2")
    assert first == again
    assert first != other
    assert [r["key"] for r in server.requests] == [first, first, other]
    # The key is a function of the call's content, not only of its place.
    at = (proc.id, version + 1, 0)
    assert idempotency_key(*at, "http", {"body": "a"}) != idempotency_key(*at, "http",
                                                                          {"body": "b"})
    assert idempotency_key(*at, "http", {"n": 1}) != idempotency_key(*at, "http", {"n": 1.0})
    assert idempotency_key(*at, "http", None) != idempotency_key(*at, "spawn", None)
    assert idempotency_key(*at, "http", {"a": 1, "b": 2}) == idempotency_key(
        *at, "http", {"b": 2, "a": 1})


def test_another_request_at_a_fenced_attempts_version_gets_its_own_answer(
        rclient: redis.Redis, server: _Server) -> None:
    """Regression: request r1's attempt calls the port and is fenced; a different
    request r2 then computes the SAME version. With a key of (process, version,
    call index) only, a deduplicating server answered r2 with r1's answer and r2
    committed it (its own effect never applied). The key now covers the input,
    so r2 sends another key and commits its own answer."""
    server.dedup = True
    config = StoreConfig()
    reg_a, reg_b = http_registry(server), http_registry(server)
    name = pid("other-request")
    a = RedisBackend(rclient, name, 1, config)
    a.claim()
    keep = ('(define (main input)'
            ' (write "/memory/port" (map-get (port-call "http" input) "body")))')
    proc_a = Process.create(name, memory={"port": ""}, scripts={"keep": keep})
    a.create(proc_a)
    ctrl_a = ProcessController(proc_a, a, ports=reg_a, token=1)
    ctrl_a.grant_ports()
    version = proc_a.version
    b = RedisBackend(rclient, name, 2, config)
    b.claim()

    def req(request_id: str) -> Any:
        return decode_request({
            "protocol": "svit-control@1", "client_id": "c", "request_id": request_id,
            "process_id": name, "expected_version": version,
            "command": {"operation": "activate", "script": "keep",
                        "input": encode_value({"url": server.url("/e"), "method": "POST",
                                               "body": request_id})}})

    with pytest.raises(FencedError):
        ctrl_a.execute(req("r1"))
    proc_b = b.restore()
    assert proc_b is not None and proc_b.version == version
    ctrl_b = ProcessController(proc_b, b, ports=reg_b, token=2)
    ctrl_b.grant_ports()
    response = ctrl_b.execute(req("r2"))
    assert response.outcome.status == "committed"
    assert proc_b.version == version + 1
    # r2 committed the answer to r2, not the fenced r1's stored answer; the
    # durable log agrees (a fresh restore reads the committed value).
    assert proc_b.read("/memory/port") == "hello r2"
    again = RedisBackend(rclient, name, 2, config).restore()
    assert again is not None and again.read("/memory/port") == "hello r2"
    r1, r2 = server.requests
    assert (r1["body"], r1["token"], r2["body"], r2["token"]) == ("r1", "1", "r2", "2")
    assert r1["key"] != r2["key"]
    assert (r1["version"], r2["version"]) == (str(version + 1),) * 2


def test_a_stale_grant_in_a_snapshot_is_not_restored(rclient: redis.Redis) -> None:
    config = StoreConfig()
    name = pid("stale")
    granting = build_registry(PortsConfig.parse({"llm": {"enabled": True}}))
    a = RedisBackend(rclient, name, 1, config)
    a.claim()
    proc = Process.create(name, scripts={"call": CALL})
    a.create(proc)
    ProcessController(proc, a, ports=granting, token=1).grant_ports()
    snapshot = proc.snapshot()
    # The snapshot keeps the old catalog for inspection ...
    restored = Process.restore(snapshot)
    assert restored.read("/ports/llm/name") == "llm"
    # ... but a host that grants nothing replaces it on restore, and port-call fails.
    b = RedisBackend(rclient, name, 2, config)
    b.claim()
    proc_b = b.restore()
    assert proc_b is not None and proc_b.read("/ports") != {}
    ctrl_b = ProcessController(proc_b, b, ports=None, token=2)
    change = ctrl_b.grant_ports()
    assert change is not None and "/ports/llm" in change.paths
    assert proc_b.read("/ports") == {}
    with pytest.raises(ScriptFailed, match="no port named llm is granted"):
        prepare_activation(proc_b, "call", {"port": "llm", "input": {"prompt": "x"}})
    # The replacement is an ordinary logged transition: any later host replays it.
    c = RedisBackend(rclient, name, 3, config)
    c.claim()
    proc_c = c.restore()
    assert proc_c is not None
    assert proc_c.read("/ports") == {} and proc_c.root_hash == proc_b.root_hash


def test_restore_validation_accepts_a_catalog_but_not_a_malformed_one() -> None:
    reg = build_registry(PortsConfig.parse({"llm": {"enabled": True}}))
    proc = granted("shape", reg)
    assert Process.restore(proc.snapshot()).read("/ports/llm/name") == "llm"
    bad = proc.snapshot().replace(b'"name":{"type":"string","value":"llm"}',
                                  b'"name":{"type":"string","value":"xyz"}')
    assert bad != proc.snapshot()
    with pytest.raises(InvalidInput, match="/ports/llm/name"):
        Process.restore(bad)
