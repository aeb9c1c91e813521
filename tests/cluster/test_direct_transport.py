"""The direct transport's wire and connection rules (no Ray cluster; real sockets).

``svit_cluster.cluster._direct``: a frame is ``>II`` + JSON meta + payload; a
connection is served only after its first frame carries the actor's secret;
each answer goes back on the connection that asked; a dead server makes the
client raise :class:`DirectUnreachable` (the router then falls back to Ray);
a server that does not answer makes it raise ``TimeoutError``.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
import time
from typing import Any

import pytest

from svit_cluster.cluster._direct import (
    MAX_META_BYTES,
    DirectClient,
    DirectEndpoint,
    DirectServer,
    DirectUnreachable,
    FrameError,
    read_frame,
    write_frame,
)
from svit_cluster.cluster._results import CreateSpec, Outcome, Started, control_frame
from svit_cluster.cluster._types import Activated, ServeStatus
from svit_cluster.control import ControlAnswer


class Echo:
    """A handler that answers ``{"seen": meta}`` + the payload reversed (on the
    server's connection thread); with ``hang``, it waits until ``release``."""

    def __init__(self) -> None:
        self.calls = 0
        self.hang = False
        self.release = threading.Event()
        self._lock = threading.Lock()

    def __call__(self, meta: dict[str, Any], payload: bytes) -> tuple[dict[str, Any], bytes]:
        with self._lock:
            self.calls += 1
        if self.hang:
            self.release.wait(30)
        time.sleep(0.001)
        return {"seen": meta}, payload[::-1]


def test_round_trip_and_concurrent_calls_get_their_own_answers() -> None:
    async def main() -> None:
        echo = Echo()
        server = DirectServer(echo, "127.0.0.1")
        client = DirectClient(server.start(), max_idle=2)
        answers = await asyncio.gather(*(
            client.call({"op": "control", "n": n}, f"body-{n}".encode(), timeout_s=5)
            for n in range(20)))
        for n, (meta, payload) in enumerate(answers):
            assert meta == {"seen": {"op": "control", "n": n}}
            assert payload == f"body-{n}".encode()[::-1]
        assert echo.calls == 20
        assert len(client._idle) == 2  # bounded pool: the rest were closed
        meta, payload = await client.call({"op": "x"}, b"", timeout_s=5)
        assert meta == {"seen": {"op": "x"}} and payload == b""
        client.close()
        server.close()

    asyncio.run(main())


def test_wrong_secret_is_refused_and_nothing_runs() -> None:
    async def main() -> None:
        echo = Echo()
        server = DirectServer(echo, "127.0.0.1")
        good = server.start()
        bad = DirectClient(DirectEndpoint(good.host, good.port, "0" * 64))
        with pytest.raises(DirectUnreachable):
            await bad.call({"op": "control"}, b"x", timeout_s=5)
        assert echo.calls == 0
        # control: the right secret is served on the same socket
        ok = DirectClient(good)
        assert (await ok.call({"op": "control"}, b"ab", timeout_s=5))[1] == b"ba"
        assert echo.calls == 1
        server.close()

    asyncio.run(main())


def test_an_unauthenticated_peer_cannot_make_the_actor_buffer_a_large_frame() -> None:
    """Before the secret, only a small meta-only hello is read: a first frame that
    declares a 64 MiB payload (or a large meta) closes the connection at once,
    without the actor reading (buffering) it."""
    async def main() -> None:
        echo = Echo()
        server = DirectServer(echo, "127.0.0.1")
        ep = server.start()
        for declared in (struct.pack(">II", 16, 64 << 20), struct.pack(">II", 4096, 0)):
            reader, writer = await asyncio.open_connection(ep.host, ep.port)
            writer.write(declared)
            await writer.drain()
            # the server closes without waiting for (or reading) the declared bytes
            assert await asyncio.wait_for(reader.read(), 2.0) == b""
            writer.close()
        assert echo.calls == 0
        ok = DirectClient(ep)  # control: a proper hello is still served
        assert (await ok.call({"op": "control"}, b"ab", timeout_s=5))[1] == b"ba"
        server.close()

    asyncio.run(main())


def test_closed_server_is_unreachable_and_silent_server_times_out() -> None:
    async def main() -> None:
        echo = Echo()
        server = DirectServer(echo, "127.0.0.1")
        client = DirectClient(server.start())
        await client.call({"op": "control"}, b"1", timeout_s=5)  # leaves an idle connection
        server.close()  # the actor fenced out (or died): idle connection and listener gone
        with pytest.raises(DirectUnreachable):
            await client.call({"op": "control"}, b"2", timeout_s=5)
        with pytest.raises(DirectUnreachable):  # a fresh connect is refused too
            await client.call({"op": "control"}, b"3", timeout_s=5)

        hung = Echo()
        hung.hang = True
        server2 = DirectServer(hung, "127.0.0.1")
        client2 = DirectClient(server2.start())
        with pytest.raises(TimeoutError):
            await client2.call({"op": "control"}, b"4", timeout_s=0.2)
        assert client2._idle == []  # the timed-out connection is never reused
        hung.release.set()
        server2.close()

    asyncio.run(main())


def test_calls_in_flight_are_bounded_and_a_silent_peer_is_dropped(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import svit_cluster.cluster._direct as direct

    monkeypatch.setattr(direct, "HELLO_TIMEOUT_S", 0.2)

    async def main() -> None:
        inflight = peak = 0
        lock = threading.Lock()

        def slow(meta: dict[str, Any], payload: bytes) -> tuple[dict[str, Any], bytes]:
            nonlocal inflight, peak
            with lock:
                inflight += 1
                peak = max(peak, inflight)
            time.sleep(0.02)
            with lock:
                inflight -= 1
            return {}, payload

        server = DirectServer(slow, "127.0.0.1")
        endpoint = server.start()
        client = DirectClient(endpoint, max_connections=3)
        await asyncio.gather(*(client.call({}, b"x", timeout_s=5) for _ in range(12)))
        assert peak == 3
        # a connection that never sends the secret is closed by the server
        reader, writer = await asyncio.open_connection(endpoint.host, endpoint.port)
        assert await asyncio.wait_for(reader.read(), timeout=5) == b""
        writer.close()
        server.close()

    asyncio.run(main())


def test_requests_are_served_while_the_actors_event_loop_is_blocked() -> None:
    """The hot path does not pass through the actor's asyncio loop: a request is
    read, run and answered on its connection's thread, so it is served while
    the loop the server was started from is busy (with the server on that
    loop, this call could not be answered until the loop was free)."""
    async def main() -> None:
        server = DirectServer(Echo(), "127.0.0.1")
        endpoint = server.start()
        answered: list[bytes] = []

        def call() -> None:
            answered.append(asyncio.run(DirectClient(endpoint).call(
                {"op": "control"}, b"abc", timeout_s=5))[1])

        caller = threading.Thread(target=call)
        caller.start()
        caller.join(timeout=5)  # blocks this (the server's) event loop meanwhile
        assert answered == [b"cba"]
        server.close()

    asyncio.run(main())


def test_close_refuses_new_connections_and_drops_open_ones_with_a_request_running() -> None:
    """``close`` ends listening at once and wakes every connection's thread; a
    request running then finishes on its thread but is never answered (the
    client sees a broken connection: fall back to Ray, repeat by request id),
    and the server opens again on a later ``start``."""
    async def main() -> None:
        echo = Echo()
        echo.hang = True
        server = DirectServer(echo, "127.0.0.1")
        endpoint = server.start()
        call = asyncio.ensure_future(DirectClient(endpoint).call({"op": "control"}, b"x",
                                                                 timeout_s=5))
        while echo.calls == 0:
            await asyncio.sleep(0.01)
        server.close()
        with pytest.raises(DirectUnreachable):
            await call
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((endpoint.host, endpoint.port), timeout=2).close()
        echo.release.set()
        echo.hang = False
        again = server.start()  # a resumed binding listens again, same secret
        assert again.secret == endpoint.secret
        assert (await DirectClient(again).call({"op": "x"}, b"ab", timeout_s=5))[1] == b"ba"
        server.close()

    asyncio.run(main())


def test_connections_past_the_bound_are_closed_without_a_thread() -> None:
    async def main() -> None:
        server = DirectServer(Echo(), "127.0.0.1", max_connections=2)
        endpoint = server.start()
        first, second = DirectClient(endpoint), DirectClient(endpoint)
        await first.call({}, b"1", timeout_s=5)  # each keeps its connection open
        await second.call({}, b"2", timeout_s=5)
        with pytest.raises(DirectUnreachable):
            await DirectClient(endpoint).call({}, b"3", timeout_s=5)
        first.close()  # a slot frees once the server sees that connection go
        deadline = time.monotonic() + 5
        while True:
            try:
                assert (await DirectClient(endpoint).call({}, b"4", timeout_s=5))[1] == b"4"
                break
            except DirectUnreachable:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.05)
        server.close()

    asyncio.run(main())


def test_a_failed_accept_is_retried_and_connections_use_keepalive(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """An ``accept`` that fails (EMFILE: out of descriptors) does not end
    listening: the endpoint the actor advertised keeps serving."""
    import errno

    real = socket.socket.accept
    failures = [OSError(errno.EMFILE, "Too many open files")]

    def flaky(self: socket.socket) -> Any:
        if failures:
            raise failures.pop()
        return real(self)

    monkeypatch.setattr(socket.socket, "accept", flaky)

    async def main() -> None:
        server = DirectServer(Echo(), "127.0.0.1")
        client = DirectClient(server.start())
        assert (await client.call({}, b"ab", timeout_s=5))[1] == b"ba"
        assert failures == []  # the first accept did fail
        [conn] = list(server._conns)
        assert conn.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        server.close()

    asyncio.run(main())


def test_oversized_or_malformed_frames_are_refused() -> None:
    async def main() -> None:
        reader = asyncio.StreamReader()
        reader.feed_data(struct.pack(">II", MAX_META_BYTES + 1, 0))
        with pytest.raises(FrameError):
            await read_frame(reader)
        reader = asyncio.StreamReader()
        reader.feed_data(struct.pack(">II", 2, 0) + b"[]")
        with pytest.raises(FrameError):
            await read_frame(reader)
        reader = asyncio.StreamReader()
        reader.feed_data(struct.pack(">II", 7, 3) + b'{"a":1}xyz')
        assert await read_frame(reader) == ({"a": 1}, b"xyz")

    asyncio.run(main())


def test_write_frame_layout() -> None:
    class Sink:
        data = b""

        def write(self, chunk: bytes) -> None:
            self.data += chunk

    sink = Sink()
    write_frame(sink, {"k": "v"}, b"pp")  # type: ignore[arg-type]
    assert sink.data == struct.pack(">II", 9, 2) + b'{"k":"v"}pp'


# -- the router: direct first, Ray as the fallback -------------------------------------


class _Handle:
    """A Ray actor handle over ``target``: ``handle.m.remote(*a)`` awaits ``target.m(*a)``."""

    def __init__(self, target: Any) -> None:
        self._target = target

    def __getattr__(self, method: str) -> Any:
        fn = getattr(self._target, method)
        return type("M", (), {"remote": staticmethod(lambda *args: fn(*args))})()


class DirectActor:
    """A process actor that serves ``control`` over Ray and over a real direct socket."""

    def __init__(self, token: int) -> None:
        self.token = token
        self.via: list[str] = []
        #: the owner token each call was routed for (the actor refuses another's)
        self.tokens: list[int] = []
        self.server = DirectServer(self._direct, "127.0.0.1")

    def _answer(self, token: int, body: bytes, partition: str, via: str
                ) -> Outcome[ControlAnswer]:
        self.via.append(via)
        self.tokens.append(token)
        return Outcome.ok(ControlAnswer(b"R:" + body + partition.encode(), "committed",
                                        host="a", token=self.token))

    async def control(self, token: int, body: bytes, partition: str,
                      trace: str | None = None) -> Outcome[ControlAnswer]:
        return self._answer(token, body, partition, "ray")

    def _direct(self, meta: dict[str, Any], payload: bytes) -> tuple[dict[str, Any], bytes]:
        return control_frame(self._answer(meta["token"], payload, meta["partition"], "direct"))

    async def direct_endpoint(self) -> Outcome[DirectEndpoint]:
        ep = self.server.start()
        return Outcome.ok(DirectEndpoint(ep.host, ep.port, ep.secret, self.token))


def _answered(body: bytes) -> Outcome[ControlAnswer]:
    """What the router's control call returns for ``DirectActor``'s answer ``body``."""
    return Outcome.ok(ControlAnswer(body, "committed", None, 7, "a"))


def _router(actor: DirectActor, name: str, **cfg: Any) -> Any:
    from svit_cluster.cluster import ClusterConfig, RouteCache
    from svit_cluster.cluster._router import RayRouter

    cache = RouteCache(None, "unit")
    cache.ready.set()
    router = RayRouter(ClusterConfig(cluster="unit", **cfg), cache)
    router._handles[name] = _Handle(actor)
    return router


async def test_router_sends_control_direct_and_falls_back_to_ray_when_the_socket_goes() -> None:
    from svit_cluster.cluster import Route

    actor = DirectActor(token=7)
    route = Route("svit://t/p", "a", 7, "svit:a:p")
    router = _router(actor, route.actor)
    # the first call goes over Ray while the endpoint is asked for in the background
    answer = await router._control_call(route, b"first", "tenant", None)
    assert answer == _answered(b"R:firsttenant")
    assert actor.via == ["ray"]
    await asyncio.gather(*router._direct_asking.values())
    answer = await router._control_call(route, b"body", "tenant", None)
    assert answer == _answered(b"R:bodytenant")
    assert actor.via == ["ray", "direct"]
    await router._control_call(route, b"again", "tenant", None)
    assert actor.via == ["ray", "direct", "direct"]
    actor.server.close()  # the actor fenced out or its process died
    answer = await router._control_call(route, b"late", "tenant", None)
    assert answer.unwrap().body == b"R:latetenant"
    assert actor.via == ["ray", "direct", "direct", "ray"]
    assert router._direct[route.actor, 7] is None  # this binding stays on Ray from now on
    await router._control_call(route, b"more", "tenant", None)
    assert actor.via[-1] == "ray"
    assert set(actor.tokens) == {7}  # every call, either way, named the route's token


async def test_router_never_uses_an_endpoint_of_another_token_or_when_turned_off() -> None:
    from svit_cluster.cluster import Route

    actor = DirectActor(token=8)  # the route (etcd) says token 7: not its owner
    route = Route("svit://t/p", "a", 7, "svit:a:p")
    router = _router(actor, route.actor)
    await router._control_call(route, b"x", "t", None)
    await asyncio.gather(*router._direct_asking.values())
    await router._control_call(route, b"y", "t", None)
    assert actor.via == ["ray", "ray"] and (route.actor, 7) not in router._direct

    actor = DirectActor(token=7)
    router = _router(actor, route.actor, direct_transport=False)
    await router._control_call(route, b"x", "t", None)
    assert router._direct_asking == {}
    await router._control_call(route, b"y", "t", None)
    assert actor.via == ["ray", "ray"]


async def test_a_direct_call_in_flight_is_abandoned_the_moment_its_owner_record_goes() -> None:
    """A paused owner never answers on its socket either: the direct call ends when
    the ownership record goes (as a Ray call does), not at ``call_timeout_s``,
    and the connection to that actor is dropped."""
    import json

    from svit_cluster.cluster import Route
    from svit_cluster.cluster._router import RouteMoved
    from svit_cluster.ownership import owner_key

    actor = DirectActor(token=7)
    route = Route("svit://t/p", "a", 7, "svit:a:p")
    router = _router(actor, route.actor, call_timeout_s=5.0)
    key = owner_key("unit", route.process_id)
    router.cache._apply(key, json.dumps({"host": "a", "address": route.actor}).encode(), 7)
    await router._control_call(route, b"first", "t", None)  # over Ray; endpoint asked
    await asyncio.gather(*router._direct_asking.values())
    assert router._direct[route.actor, 7] is not None

    paused, release = threading.Event(), threading.Event()

    def hang(meta: dict[str, Any], payload: bytes) -> tuple[dict[str, Any], bytes]:
        paused.set()
        release.wait(30)  # SIGSTOPped host: no answer
        return {}, b""

    actor.server.handler = hang
    loop = asyncio.get_running_loop()
    call = asyncio.ensure_future(router._control_call(route, b"late", "t", None))
    assert await asyncio.to_thread(paused.wait, 2.0)
    started = loop.time()
    router.cache._apply(key, None, 0)  # its host's lease is gone
    with pytest.raises(RouteMoved):
        await asyncio.wait_for(call, 2.0)
    assert loop.time() - started < 1.0
    assert (route.actor, 7) not in router._direct  # the connection went with it
    assert router.cache._movers == {}
    release.set()
    actor.server.close()


class _Agent:
    """A host agent whose activation answer carries ``actor``'s direct endpoint,
    as ``HostAgent`` passes on ``ProcessActor.serve``'s answer."""

    def __init__(self, actor: DirectActor, *, endpoint_token: int) -> None:
        self.actor = actor
        self.endpoint_token = endpoint_token

    async def activate(self, process_id: str, create: CreateSpec | None
                       ) -> Outcome[Activated]:
        ep = (await self.actor.direct_endpoint()).unwrap()
        endpoint = DirectEndpoint(ep.host, ep.port, ep.secret, self.endpoint_token)
        return Outcome.ok(Activated(ServeStatus.SERVING, "a", 7, "svit:a:p",
                                    Started(3, "0" * 64, direct=endpoint)))


@pytest.mark.parametrize("endpoint_token", [7, 8])
async def test_the_first_request_to_a_new_owner_goes_direct_from_the_activation_answer(
        endpoint_token: int) -> None:
    """Cold activation: the agent's activation answer carries the new
    actor's endpoint, so the first request needs no Ray name lookup and no Ray
    call; an endpoint of another token than the route's is never used."""
    from svit_cluster.cluster import agent_name

    actor = DirectActor(token=7)
    router = _router(actor, "unused")
    router._handles = {agent_name("a"): _Handle(_Agent(actor, endpoint_token=endpoint_token))}
    router.cache.hosts["a"] = {"host": "a"}
    route = await router._place("svit://t/p", None)
    assert (route.host, route.token, route.actor) == ("a", 7, "svit:a:p")
    if endpoint_token == 7:
        answer = await router._control_call(route, b"first", "tenant", None)
        assert answer == _answered(b"R:firsttenant")
        assert actor.via == ["direct"]
        assert route.actor not in router._handles  # never looked up over Ray
    else:
        router._handles[route.actor] = _Handle(actor)
        await router._control_call(route, b"first", "tenant", None)
        assert actor.via == ["ray"]
    actor.server.close()
    for client in router._direct.values():
        if client is not None:
            client.close()
