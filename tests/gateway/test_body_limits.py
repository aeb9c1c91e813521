"""Oversized, chunked, truncated and slow request bodies against a REAL uvicorn server.

Every error on the way in maps to its JSON error and status, and mainstream
clients (httpx, urllib) can read it: a chunked body over the byte cap is 413
JSON (not 500), and a body with a ``Content-Length`` over the cap is drained
(bounded) before the 413, so a client that is still sending reads the answer
instead of a reset or a broken pipe. A truncated body (the client closes
early) never becomes a 500, and the server stays healthy.
"""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from svit_cluster.gateway import Principal, TokenStore, create_app
from svit_cluster.inprocess import InProcessRouter
from tests.events._server import serve

ADMIN = "admin-token-0123456789"
PID = "svit://acme/body-limits"
CAP = 1024 * 1024  # the default cap
BIG = 2_000_000  # the 2 MB body


@dataclass
class Recorder:
    """ASGI wrapper: every response status the app sent, every exception it raised."""

    app: ASGIApp
    statuses: list[int] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def recording_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                self.statuses.append(int(message["status"]))
            await send(message)

        try:
            await self.app(scope, receive, recording_send)
        except BaseException as exc:
            self.errors.append(f"{type(exc).__name__}: {exc}")
            raise


@dataclass
class Server:
    base: str
    port: int
    recorder: Recorder


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    tokens = TokenStore()
    tokens.add(ADMIN, Principal(tenant=None, admin=True))
    recorder = Recorder(create_app(InProcessRouter(), tokens))
    with serve(recorder) as base:
        httpx.post(base + "/v1/processes", json={"process_id": PID, "memory": {"n": 0}},
                   headers=auth()).raise_for_status()
        yield Server(base, int(base.rsplit(":", 1)[1]), recorder)


@pytest.fixture(autouse=True)
def no_server_errors(server: Server) -> Iterator[None]:
    """After each test: no 500 sent and no exception escaped during it; healthy."""
    statuses, errors = len(server.recorder.statuses), len(server.recorder.errors)
    yield
    time.sleep(0.1)  # let the server finish what the client abandoned
    assert 500 not in server.recorder.statuses[statuses:]
    assert server.recorder.errors[errors:] == []
    assert httpx.get(server.base + "/healthz", timeout=5).status_code == 200


def auth() -> dict[str, str]:
    return {"Authorization": f"Bearer {ADMIN}"}


def inbox_doc(rid: str) -> bytes:
    return json.dumps({"process_id": PID, "message": {"content": rid},
                       "dedup_key": rid}).encode()


def assert_413(status: int, body: bytes) -> None:
    assert status == 413, body[:200]
    assert json.loads(body)["error"]["code"] == "payload_too_large"


def chunks(total: int, size: int = 64 * 1024, delay_s: float = 0.0) -> Iterator[bytes]:
    sent = 0
    while sent < total:
        piece = min(size, total - sent)
        sent += piece
        if delay_s:
            time.sleep(delay_s)
        yield b"x" * piece


@pytest.mark.parametrize("path", ["/v1/control", "/v1/processes/inbox", "/v1/processes"])
def test_chunked_body_over_the_cap_is_413_json(server: Server, path: str) -> None:
    r = httpx.post(server.base + path, content=chunks(BIG),
                   headers={**auth(), "Content-Type": "application/json"}, timeout=30)
    assert r.request.headers.get("transfer-encoding") == "chunked"
    assert_413(r.status_code, r.content)


def test_slow_chunked_body_over_the_cap_is_413_json(server: Server) -> None:
    r = httpx.post(server.base + "/v1/control", content=chunks(CAP + 200_000, delay_s=0.01),
                   headers={**auth(), "Content-Type": "application/json"}, timeout=30)
    assert_413(r.status_code, r.content)


@pytest.mark.parametrize("attempt", range(3))
def test_content_length_over_the_cap_is_readable_by_httpx(server: Server, attempt: int) -> None:
    r = httpx.post(server.base + "/v1/control", content=b"x" * BIG,
                   headers={**auth(), "Content-Type": "application/json"}, timeout=30)
    assert r.request.headers["content-length"] == str(BIG)
    assert_413(r.status_code, r.content)


def test_streamed_content_length_over_the_cap_is_readable_by_httpx(server: Server) -> None:
    """httpx still sending (a generator body with its Content-Length) reads the 413."""
    r = httpx.post(server.base + "/v1/control", content=chunks(BIG, delay_s=0.002),
                   headers={**auth(), "Content-Type": "application/json",
                            "Content-Length": str(BIG)}, timeout=30)
    assert r.request.headers["content-length"] == str(BIG)
    assert "transfer-encoding" not in r.request.headers
    assert_413(r.status_code, r.content)


def test_content_length_over_the_cap_is_readable_by_urllib(server: Server) -> None:
    request = urllib.request.Request(server.base + "/v1/control", data=b"x" * BIG,
                                     headers={**auth(), "Content-Type": "application/json"},
                                     method="POST")
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(request, timeout=30)
    assert_413(info.value.code, info.value.read())


def test_a_body_within_the_cap_still_works(server: Server) -> None:
    r = httpx.post(server.base + "/v1/processes/inbox", content=inbox_doc("ok-1"),
                   headers={**auth(), "Content-Type": "application/json"}, timeout=30)
    assert r.status_code == 200 and r.json()["process_id"] == PID, r.text


def raw(port: int, path: str, length: int, parts: Iterator[bytes], *,
        close_early: bool = False) -> bytes:
    """One HTTP/1.1 POST over a plain socket; returns everything read back."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     f"Authorization: Bearer {ADMIN}\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {length}\r\n\r\n".encode())
        for part in parts:
            sock.sendall(part)
        if close_early:
            return b""
        out = b""
        while True:
            data = sock.recv(65536)
            if not data:
                return out
            out += data
            if b"\r\n\r\n" in out:
                head, _, body = out.partition(b"\r\n\r\n")
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length" and \
                            len(body) >= int(value):
                        return out


def parse(reply: bytes) -> tuple[int, bytes]:
    head, _, body = reply.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


def test_slow_body_over_the_cap_is_read_then_413(server: Server) -> None:
    reply = raw(server.port, "/v1/control", BIG, chunks(BIG, delay_s=0.005))
    assert_413(*parse(reply))


def test_slow_body_within_the_cap_is_served(server: Server) -> None:
    doc = inbox_doc("slow-1")
    pieces = iter([doc[:10], doc[10:40], doc[40:]])

    def slowly() -> Iterator[bytes]:
        for piece in pieces:
            time.sleep(0.2)
            yield piece

    status, body = parse(raw(server.port, "/v1/processes/inbox", len(doc), slowly()))
    assert status == 200 and json.loads(body)["process_id"] == PID, body


@pytest.mark.parametrize(("length", "sent"), [(5000, 100), (BIG, 300_000)],
                         ids=["within-cap", "over-cap"])
def test_truncated_body_is_no_server_error(server: Server, length: int, sent: int) -> None:
    before = len(server.recorder.statuses)
    raw(server.port, "/v1/control", length, chunks(sent), close_early=True)

    deadline = time.monotonic() + 10
    while len(server.recorder.statuses) == before and time.monotonic() < deadline:
        time.sleep(0.02)
    got: list[Any] = server.recorder.statuses[before:]
    # the app answered (to nobody) with an input error, not a server error
    assert got and all(400 <= s < 500 for s in got), got
