"""The TCP proxy against a real redis-server and a real etcd: pass, drop, stall, delay, close."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from svit_chaos.proxy import LinkGroup, LinkMode, ProxyHub
from svit_chaos.proxy_process import ProcessProxyHub

from svit_cluster.errors import UnavailableError
from svit_cluster.local import EtcdClusterServer, EtcdServer, RedisServer
from svit_cluster.ownership import open_client
from svit_cluster.ownership._etcd import etcd_call

pytestmark = pytest.mark.servers


@pytest.fixture(params=["thread", "process"])
def hub(request: pytest.FixtureRequest) -> Iterator[Any]:
    """Every behaviour below holds for the in-process hub and the child-process hub."""
    with (ProxyHub() if request.param == "thread" else ProcessProxyHub()) as h:
        yield h


def client_for(url: str, timeout_s: float = 0.5) -> redis.Redis:
    return redis.Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s,
                                retry_on_error=[], retry=None)


def test_factory_gives_each_host_its_own_stable_proxies(hub: Any,
                                                        redis_server: RedisServer) -> None:
    make = hub.factory()
    e1, r1 = make("h1", "127.0.0.1:2379", redis_server.url)
    e2, r2 = make("h2", "127.0.0.1:2379", redis_server.url)
    assert make("h1", "127.0.0.1:2379", redis_server.url) == (e1, r1)
    assert len({e1, e2, r1, r2}) == 4 and r1.startswith("redis://127.0.0.1:") and r1.endswith("/0")
    assert hub.link("h1", "redis").upstream == ("127.0.0.1", redis_server.port)
    c = client_for(r1)
    try:
        assert c.ping() and c.set("proxy:k", "v") and c.get("proxy:k") == b"v"
    finally:
        c.close()
    with pytest.raises(KeyError, match="h1/etcd"):
        hub.link("h9", "redis")


def test_drop_resets_open_connections_and_refuses_new_ones(hub: Any,
                                                           redis_server: RedisServer) -> None:
    _, url = hub.factory()("h1", "127.0.0.1:1", redis_server.url)
    link = hub.link("h1", "redis")
    c = client_for(url)
    try:
        assert c.ping()
        link.set_mode(LinkMode.DROP)
        started = time.monotonic()
        with pytest.raises(redis.ConnectionError):
            c.ping()  # the pooled connection was reset
        with pytest.raises(redis.ConnectionError):
            client_for(url).ping()  # a new one is reset at once
        assert time.monotonic() - started < 0.5  # a cut fails fast, it does not hang
        assert link.resets >= 2
        link.set_mode(LinkMode.PASS)
        assert c.ping()
    finally:
        c.close()


def test_stall_holds_bytes_until_healed(hub: Any, redis_server: RedisServer) -> None:
    hub.factory()("h1", "127.0.0.1:1", redis_server.url)
    link = hub.link("h1", "redis")
    with socket.create_connection(("127.0.0.1", link.port), timeout=2) as s:
        s.sendall(b"PING\r\n")
        assert s.recv(16) == b"+PONG\r\n"
        link.set_mode(LinkMode.STALL)
        s.sendall(b"PING\r\n")
        s.settimeout(0.3)
        with pytest.raises(TimeoutError):
            s.recv(16)  # a black hole: no answer, no reset
        link.set_mode(LinkMode.PASS)
        s.settimeout(2)
        assert s.recv(16) == b"+PONG\r\n"  # the held request went through after healing
    # a connection opened during a stall connects upstream only after healing
    link.set_mode(LinkMode.STALL)
    with socket.create_connection(("127.0.0.1", link.port), timeout=2) as s:
        s.sendall(b"PING\r\n")
        s.settimeout(0.3)
        with pytest.raises(TimeoutError):
            s.recv(16)
        link.set_mode(LinkMode.PASS)
        s.settimeout(2)
        assert s.recv(16) == b"+PONG\r\n"


def test_delay_adds_latency_in_order(hub: Any, redis_server: RedisServer) -> None:
    _, url = hub.factory()("h1", "127.0.0.1:1", redis_server.url)
    link = hub.link("h1", "redis")
    c = client_for(url, timeout_s=2)
    try:
        c.ping()
        link.set_mode(LinkMode.DELAY, delay_ms=100)
        started = time.monotonic()
        pipe = c.pipeline(transaction=False)
        for _ in range(20):
            pipe.incr("proxy:delay")
        results = pipe.execute()
        elapsed = time.monotonic() - started
        assert results == sorted(results) and len(results) == 20
        assert 0.2 <= elapsed < 1.5  # 100 ms each way
        with pytest.raises(ValueError):
            link.set_mode(LinkMode.DELAY, delay_ms=-1)
    finally:
        c.close()


async def _get_after_heal(client: Any, key: bytes, timeout_s: float) -> bytes | None:
    """``key``'s value once etcd answers again after a healed cut (gRPC reconnects
    with backoff, capped at 1 s here)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            got = await etcd_call("get", client.get(key), timeout_s=1)
            return None if got is None else bytes(got.value)
        except UnavailableError:
            assert time.monotonic() < deadline, "etcd not reachable after healing"
            await asyncio.sleep(0.2)


async def test_etcd_through_a_proxy_can_be_cut_and_healed(fresh_etcd: EtcdServer) -> None:
    with ProxyHub() as hub:
        endpoint, _ = hub.factory()("h1", fresh_etcd.endpoint, "redis://127.0.0.1:1/0")
        client = open_client(endpoint, request_timeout_s=0.5)
        try:
            await etcd_call("put", client.put(b"/chaos/k", b"v"), timeout_s=2)
            link = hub.link("h1", "etcd")
            await asyncio.to_thread(link.set_mode, LinkMode.DROP)
            with pytest.raises(UnavailableError):
                await etcd_call("get", client.get(b"/chaos/k"), timeout_s=1)
            await asyncio.to_thread(link.set_mode, LinkMode.PASS)
            assert await _get_after_heal(client, b"/chaos/k", 10.0) == b"v"
        finally:
            await client.close()


def test_close_frees_ports_connections_and_the_thread(redis_server: RedisServer) -> None:
    hub = ProxyHub().start()
    _, url = hub.factory()("h1", "127.0.0.1:1", redis_server.url)
    port = hub.link("h1", "redis").port
    c = client_for(url)
    assert c.ping()
    thread = hub._thread
    hub.close()
    hub.close()  # idempotent
    assert thread is not None and not thread.is_alive()
    with pytest.raises(redis.ConnectionError):
        c.ping()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
    c.close()


# A client in another process PINGs Redis through the proxy every 50 ms and
# prints "<sent wall time> <latency s>" per reply.
_PINGER = """
import socket, sys, time
port, until = int(sys.argv[1]), float(sys.argv[2])
s = socket.create_connection(("127.0.0.1", port))
while time.time() < until:
    sent = time.time()
    s.sendall(b"PING\\r\\n")
    assert s.recv(64).startswith(b"+PONG")
    print(sent, time.time() - sent, flush=True)
    time.sleep(0.05)
"""


@pytest.mark.parametrize("kind", ["thread", "process"])
def test_a_busy_harness_delays_only_the_in_process_proxy(
        kind: str, redis_server: RedisServer) -> None:
    """The harness process holding its GIL (here: over 1 s inside one C call) stalls
    every byte through a thread hub -- a link fault nobody injected -- and none
    through the child-process hub. The thread hub is the negative control."""
    hub: Any = ProxyHub() if kind == "thread" else ProcessProxyHub()
    with hub:
        hub.factory()("h1", "127.0.0.1:1", redis_server.url)
        port = hub.link("h1", "redis").port
        until = time.time() + 8.0
        pinger = subprocess.Popen([sys.executable, "-c", _PINGER, str(port), str(until)],
                                  stdout=subprocess.PIPE, text=True)
        try:
            time.sleep(1.0)  # the pinger is connected and answering
            n = 20_000_000
            while True:  # one C call of at least 1 s, which never yields the GIL
                held_from = time.time()
                sum(range(n))
                held_to = time.time()
                if held_to - held_from >= 1.0 or held_to > until - 1.5:
                    break
                n *= 2
            out, _ = pinger.communicate(timeout=30)
        finally:
            pinger.kill()
    numbers = [float(x) for x in out.split()]
    pairs = list(zip(numbers[::2], numbers[1::2], strict=True))
    held = held_to - held_from
    assert held >= 1.0, f"could not hold the GIL for 1 s ({held:.2f} s)"
    if kind == "thread":
        # every ping in flight during the hold waited for the GIL: none was
        # answered before the hold ended
        during = [(sent, lat) for sent, lat in pairs
                  if sent <= held_to - 0.3 and sent + lat >= held_from + 0.05]
        assert during, f"no ping was in flight while the GIL was held ({len(pairs)} pings)"
        assert all(sent + lat >= held_to - 0.05 for sent, lat in during), (held, during)
    else:
        window = [lat for sent, lat in pairs if held_from <= sent <= held_to - 0.3]
        assert len(window) >= 5 and max(window) < held / 3, (held, window)


async def test_a_hosts_link_to_a_3_member_etcd_cuts_and_heals_every_member_at_once(
        tmp_path: Path) -> None:
    """With several etcd members each host gets one proxy per member, grouped as
    its one ``etcd`` link: the client (failing over between members) sees the
    cut only when every member is cut, and the heal brings all of them back."""
    members = EtcdClusterServer(tmp_path / "etcd3", members=3, die_with_parent=True)
    members.start()
    try:
        with ProxyHub() as hub:
            endpoint, _ = hub.factory()("h1", members.endpoints, "redis://127.0.0.1:1/0")
            link = hub.link("h1", "etcd")
            assert isinstance(link, LinkGroup) and len(link.members) == 3
            assert endpoint == link.address and len(endpoint.split(",")) == 3
            assert sorted(m.upstream[1] for m in link.members) == sorted(
                m.port for m in members.members)
            client = open_client(endpoint, request_timeout_s=0.5)
            try:
                await etcd_call("put", client.put(b"/chaos/g", b"v"), timeout_s=3)
                await asyncio.to_thread(link.set_mode, LinkMode.DROP)
                with pytest.raises(UnavailableError):
                    await etcd_call("get", client.get(b"/chaos/g"), timeout_s=2)
                assert link.resets >= 1
                await asyncio.to_thread(link.set_mode, LinkMode.PASS)
                assert await _get_after_heal(client, b"/chaos/g", 15.0) == b"v"
            finally:
                await client.close()
    finally:
        members.stop()
