"""One socket write per response (``svit_cluster.gateway._coalesce``).

The unit tests drive :class:`CoalescingTransport` over a recording transport on
a real event loop. The server tests run the gateway's own uvicorn configuration
(:func:`svit_cluster.cluster.serve.gateway_server_config`) on a real socket and
count the write system calls of the server's thread (``syscw`` in
``/proc/self/task/<tid>/io``; libuv and asyncio write sockets with
``write``/``writev``/``send``), with uvicorn's own protocol as the control.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from svit_cluster.gateway._coalesce import CoalescingTransport


class Recorder:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = self.aborted = False

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))

    def is_closing(self) -> bool:
        return self.closed or self.aborted

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.aborted = True

    def get_write_buffer_size(self) -> int:
        return 0

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("peer", name)


async def test_writes_of_one_step_leave_in_one_write_and_a_lone_one_at_its_end() -> None:
    raw = Recorder()
    t = CoalescingTransport(raw, asyncio.get_running_loop())  # type: ignore[arg-type]
    t.write(b"HTTP/1.1 200 OK\r\n\r\n")
    assert raw.writes == [] and t.get_write_buffer_size() == 19
    t.write(memoryview(b"body"))
    assert raw.writes == [b"HTTP/1.1 200 OK\r\n\r\nbody"]
    t.write(b"chunk")  # alone in its step: sent when the step ends
    assert raw.writes[1:] == []
    await asyncio.sleep(0)
    assert raw.writes[1:] == [b"chunk"]
    await asyncio.sleep(0)
    assert len(raw.writes) == 2  # the cancelled end-of-step send adds nothing
    t.write(b"")  # nothing to send holds nothing
    await asyncio.sleep(0)
    assert len(raw.writes) == 2
    assert t.get_extra_info("peername") == ("peer", "peername")  # the rest is the transport's


async def test_close_sends_what_is_held_first_and_abort_drops_it() -> None:
    loop = asyncio.get_running_loop()
    raw = Recorder()
    t = CoalescingTransport(raw, loop)  # type: ignore[arg-type]
    t.write(b"last words")
    t.close()
    assert raw.writes == [b"last words"] and raw.closed
    raw = Recorder()
    t = CoalescingTransport(raw, loop)  # type: ignore[arg-type]
    t.write(b"never")
    t.abort()
    await asyncio.sleep(0)
    assert raw.writes == [] and raw.aborted


# -- the gateway's uvicorn configuration on a real socket ------------------------------


async def _hello(request: Request) -> Response:
    return PlainTextResponse("x" * int(request.query_params.get("n", "100")))


async def _stream(request: Request) -> Response:
    async def chunks() -> Any:
        for i in range(3):
            yield f"part{i};"
            await asyncio.sleep(0)
    return StreamingResponse(chunks())


APP = Starlette(routes=[Route("/hello", _hello, methods=["GET", "HEAD"]),
                        Route("/stream", _stream)])


def _write_calls(tid: int) -> int:
    for line in Path(f"/proc/self/task/{tid}/io").read_text().splitlines():
        if line.startswith("syscw:"):
            return int(line.split()[1])
    raise AssertionError("no syscw")


@pytest.fixture(params=["coalesced", "uvicorn"])
def server(request: pytest.FixtureRequest) -> Iterator[tuple[str, int, str]]:
    """``(base url, server thread id, kind)`` of a uvicorn server run as the gateway
    runs it, or (the control) with uvicorn's own protocol class."""
    import uvicorn

    from svit_cluster.cluster import serve

    config = serve.gateway_server_config(APP, host="127.0.0.1", port=0)
    if request.param == "uvicorn":
        config.http = serve.http_stack()[1]
    srv = uvicorn.Server(config)
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not (srv.started and srv.servers):
        assert time.monotonic() < deadline, "server did not start"
        time.sleep(0.01)
    port = srv.servers[0].sockets[0].getsockname()[1]
    assert thread.native_id is not None
    yield f"http://127.0.0.1:{port}", thread.native_id, request.param
    srv.should_exit = True
    thread.join(10)


def test_each_response_leaves_the_server_in_one_write(server: tuple[str, int, str]) -> None:
    url, tid, kind = server
    with httpx.Client(base_url=url) as client:
        assert client.get("/hello").text == "x" * 100  # connection opened
        before = _write_calls(tid)
        for n in range(1, 41):
            answer = client.get("/hello", params={"n": n * 50})
            assert answer.status_code == 200 and answer.text == "x" * (n * 50)
        writes = _write_calls(tid) - before
    if kind == "coalesced":
        assert writes <= 44, writes  # one per response (a little slack for logging)
    else:
        assert writes >= 78, writes  # the control: head and body written apart


def test_head_streamed_and_closing_responses_are_whole(server: tuple[str, int, str]) -> None:
    url, _, _ = server
    with httpx.Client(base_url=url) as client:
        head = client.head("/hello")
        assert head.status_code == 200 and head.headers["content-length"] == "100"
        assert head.content == b""
        assert client.get("/stream").text == "part0;part1;part2;"
        closing = client.get("/hello", params={"n": 7}, headers={"connection": "close"})
        assert closing.text == "x" * 7 and closing.headers["connection"] == "close"
        assert client.get("/hello", params={"n": 3}).text == "xxx"  # a new connection
