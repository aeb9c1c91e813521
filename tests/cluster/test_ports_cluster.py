"""Ports on a real local cluster (etcd, Redis, Ray head + 3 hosts, gateway).

One script calls the ``http`` port against a loopback test server on the
allowlist (and is refused for a server off it), the ``llm`` port against the
simulated reasoner, and ``spawn``, whose child is a process of its own: after
its owner's host is killed, another host serves it.

Heavy (a cluster of its own, with the ports configured): run it alone.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from svit_cluster.client import SvitClient
from svit_cluster.local import ClusterSpec, LocalCluster
from svit_cluster.local._status import cluster_status
from svit_cluster.ports import idempotency_key

pytestmark = pytest.mark.cluster

os.environ.setdefault("RAY_AUTH_MODE", "disabled")

CALL = '(define (main input) (port-call (map-get input "port") (map-get input "input")))'
CHILD = ('(define (main input) (write "/memory/child" input)'
         ' (+ input (read "/memory/base")))')


class _Server:
    def __init__(self) -> None:
        self.keys: list[str | None] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return None

            def do_GET(self) -> None:
                outer.keys.append(self.headers.get("Idempotency-Key"))
                body = b"pong"
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[_Server, _Server]]:
    on, off = _Server(), _Server()
    try:
        yield on, off
    finally:
        on.close()
        off.close()


@pytest.fixture(scope="module")
def ports_cluster(tmp_path_factory: pytest.TempPathFactory,
                  servers: tuple[_Server, _Server]) -> Iterator[LocalCluster]:
    state: Path = tmp_path_factory.mktemp("pc")
    ports = {"http": {"enabled": True, "allow_hosts": [f"127.0.0.1:{servers[0].port}"]},
             "llm": {"enabled": True}, "spawn": {"enabled": True}}
    lc = LocalCluster.up(ClusterSpec(state_dir=state, hosts=3, lease_ttl_s=3,
                                     snapshot_every=20, passivate_after_s=60.0,
                                     dispatchers=0, ports=ports))
    try:
        yield lc
    finally:
        lc.down()


def _call(c: SvitClient, pid: str, port: str, inp: Any) -> Any:
    resp = c.activate_until_committed(pid, "call", {"port": port, "input": inp})
    return resp.outcome


def test_http_llm_and_spawn_ports_on_the_cluster(ports_cluster: LocalCluster,
                                                 servers: tuple[_Server, _Server]) -> None:
    on, off = servers
    url, token = ports_cluster.doc["gateway"]["url"], ports_cluster.doc["tokens"]["admin"]
    with SvitClient(url, token, client_id="ports", attempts=80, max_wait_s=0.5) as c:
        pid = f"svit://local/ports-{uuid.uuid4().hex[:10]}"
        c.create_process(pid, memory={"base": 100}, scripts={"call": CALL, "child": CHILD})
        # Every host installs the deployment's catalog (one ports.refresh commit).
        catalog, version = c.state(pid, "/ports")
        assert sorted(catalog) == ["http", "llm", "spawn"] and version == 1
        assert catalog["http"]["limits"]["allow_hosts"] == [f"127.0.0.1:{on.port}"]

        # http: allowlisted server, with the idempotency key of (pid, version, call 0,
        # port, input).
        ping = {"url": f"http://127.0.0.1:{on.port}/ping"}
        out = _call(c, pid, "http", ping)
        assert out.status == "committed", out
        assert out.activation.output["status"] == 200
        assert out.activation.output["body"] == "pong"
        assert on.keys == [idempotency_key(pid, out.activation.version, 0, "http", ping)]
        # ... and refused off the allowlist: no request reaches that server.
        out = _call(c, pid, "http", {"url": f"http://127.0.0.1:{off.port}/ping"})
        assert out.status == "rejected" and out.failure.code == "script_failed"
        assert "allowlist" in out.failure.message and off.keys == []

        # llm: the simulated reasoner.
        out = _call(c, pid, "llm", {"prompt": "hello"})
        assert out.status == "committed", out
        assert out.activation.output == {"content": "echo: hello", "tool_calls": []}

        # spawn: a child process of its own, created through the normal create path.
        out = _call(c, pid, "spawn", {"script": "child", "input": 7})
        assert out.status == "committed", out
        child = out.activation.output["child"]
        assert out.activation.output["output"] == 107
        memory, child_version = c.state(child, "/memory")
        assert memory == {"base": 100, "child": 7}
        assert c.state(child, "/system/lineage/parent")[0] == pid
        owners = cluster_status(ports_cluster)["owners"]
        victim = owners[child]["host"]
        token_before = owners[child]["token"]
        ports_cluster.kill_host(victim)  # not restarted: the module's cluster goes down next
        deadline = time.monotonic() + 60
        while True:  # the next request places the child on a live host
            try:
                again = c.state(child, "/memory")
                break
            except Exception:
                assert time.monotonic() < deadline, "child never served again"
                time.sleep(0.5)
        assert again == (memory, child_version)
        moved = cluster_status(ports_cluster)["owners"][child]
        assert moved["host"] != victim and moved["token"] > token_before
        print(f"spawned child {child}: {victim} -> {moved['host']}")
