"""``ScriptLane``: an owner's write scripts on one connection of its own, on a real Redis.

What must hold as on the pooled path (``run_script``): the same replies and
error replies; ``NOSCRIPT`` loads the script once more; a connection the server
closed (a restart, ``CLIENT KILL``) is opened anew before the next script
instead of failing it; a connection error during a script drops the connection;
every new connection checks ``maxmemory-policy``. And a backend configured with
``dedicated_connection`` commits through it, one connection for all its commits.
"""

from __future__ import annotations

import dataclasses

import pytest
import redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from svit_cluster.errors import FencedError
from svit_cluster.local import RedisServer
from svit_cluster.store import RedisBackend, StoreConfig, connect
from svit_cluster.store._lane import ScriptLane
from svit_cluster.store._redis import RedisClient, run_script
from tests._commit_log import commit_write, new_log, seal_write

ECHO = "redis.call('SET', KEYS[1], ARGV[1]); return {redis.call('GET', KEYS[1]), ARGV[2]}"
FAIL = "return redis.error_reply('nope')"


def test_the_lane_answers_as_the_pooled_call_does(single_rclient: RedisClient) -> None:
    lane = ScriptLane(single_rclient)  # type: ignore[arg-type]
    script = single_rclient.register_script(ECHO)
    key = "{svit-test}lane"
    for args in (["one", 7], [b"\x00bin", -3], ["é", 2**70], [1.5, "x"]):
        assert lane.run(script, [key], args) == run_script(single_rclient, script, [key], args)
    failing = single_rclient.register_script(FAIL)
    with pytest.raises(ResponseError, match="nope"):
        lane.run(failing, [key], [])
    assert lane.run(script, [key], ["after", 1]) == [b"after", b"1"]  # still in step
    with pytest.raises(redis.exceptions.DataError):
        lane.run(script, [key], [True, 1])  # refused before sending, as redis-py does
    assert lane.run(script, [key], ["again", 2]) == [b"again", b"2"]
    lane.close()
    lane.close()  # idempotent
    with pytest.raises(RedisConnectionError, match="nothing was sent"):
        lane.run(script, [key], ["after close", 3])
    assert single_rclient.get(key) == b"again"


def test_close_does_not_wait_for_a_running_script_which_then_closes_the_connection(
        single_rclient: RedisClient) -> None:
    import threading
    import time

    lane = ScriptLane(single_rclient)  # type: ignore[arg-type]
    slow = single_rclient.register_script(
        "local t = redis.call('TIME') local e = t[1] * 1000000 + t[2] + 300000 "
        "while true do local n = redis.call('TIME') "
        "if n[1] * 1000000 + n[2] > e then break end end return 'done'")
    answers: list[bytes] = []
    runner = threading.Thread(target=lambda: answers.append(
        lane.run(slow, ["{svit-test}lane-slow"], [])))
    runner.start()
    time.sleep(0.1)  # the script is running on the server
    started = time.monotonic()
    lane.close()
    assert time.monotonic() - started < 0.05  # did not wait for the script
    runner.join(5)
    assert answers == [b"done"]  # the running script finished and answered
    assert lane._conn is None  # and its end closed the connection


def test_noscript_loads_the_script_and_one_connection_serves_every_call(
        single_rclient: RedisClient) -> None:
    lane = ScriptLane(single_rclient)  # type: ignore[arg-type]
    script = single_rclient.register_script(ECHO + " -- lane-noscript")
    key = "{svit-test}lane-noscript"
    single_rclient.script_flush()
    assert lane.run(script, [key], ["x", 1]) == [b"x", b"1"]
    before = {c["id"] for c in single_rclient.client_list()}
    for n in range(20):
        lane.run(script, [key], [n, n])
    assert {c["id"] for c in single_rclient.client_list()} == before  # no new connection
    lane.close()


def test_a_connection_the_server_closed_is_opened_anew_before_the_next_script(
        fresh_redis: RedisServer) -> None:
    client = connect(fresh_redis.url)
    lane = ScriptLane(client)  # type: ignore[arg-type]
    script = client.register_script(ECHO)
    key = "{svit-test}lane-restart"
    assert lane.run(script, [key], ["a", 1]) == [b"a", b"1"]
    victim = [c for c in client.client_list() if c["cmd"] == "evalsha"]
    assert len(victim) == 1
    client.client_kill_filter(_id=victim[0]["id"])
    # the pooled path checks a connection before use; so does the lane: no error
    assert lane.run(script, [key], ["b", 2]) == [b"b", b"2"]
    fresh_redis.restart()  # a restarted server: closed connection and no scripts
    assert lane.run(script, [key], ["c", 3]) == [b"c", b"3"]
    lane.close()
    client.close()


def test_a_connection_error_during_a_script_drops_the_connection(
        fresh_redis: RedisServer) -> None:
    client = connect(fresh_redis.url, timeout_s=0.5)
    lane = ScriptLane(client)  # type: ignore[arg-type]
    script = client.register_script(ECHO)
    key = "{svit-test}lane-down"
    assert lane.run(script, [key], ["a", 1]) == [b"a", b"1"]
    fresh_redis.pause()  # SIGSTOP: the script is sent, no answer comes
    try:
        with pytest.raises((RedisConnectionError, redis.exceptions.TimeoutError)):
            lane.run(script, [key], ["b", 2])
        assert lane._conn is not None and not lane._conn.is_connected
    finally:
        fresh_redis.resume()
    assert lane.run(script, [key], ["c", 3]) == [b"c", b"3"]  # a new connection
    lane.close()
    client.close()


def test_a_new_lane_connection_checks_the_eviction_policy(fresh_redis: RedisServer) -> None:
    """Like every connection of the client, the lane's refuses a Redis that may evict."""
    client = connect(fresh_redis.url)
    lane = ScriptLane(client)  # type: ignore[arg-type]
    script = client.register_script(ECHO)
    raw = redis.Redis.from_url(fresh_redis.url)
    raw.config_set("maxmemory-policy", "allkeys-lru")
    try:
        with pytest.raises(Exception, match=r"maxmemory-policy|evict"):
            lane.run(script, ["{svit-test}lane-policy"], ["a", 1])
        raw.config_set("maxmemory-policy", "noeviction")
        assert lane.run(script, ["{svit-test}lane-policy"], ["b", 1]) == [b"b", b"1"]
    finally:
        raw.config_set("maxmemory-policy", "noeviction")
        raw.close()
        lane.close()
        client.close()


def test_a_backend_with_a_dedicated_connection_commits_through_its_lane(
        single_rclient: RedisClient, pid: str, config: StoreConfig) -> None:
    """Every write of such a backend (claim, create, commits, receipts) goes
    through its lane; the fence and the receipts hold as on the pooled path."""
    cfg = dataclasses.replace(config, dedicated_connection=True)
    backend, proc = new_log(single_rclient, pid, 10, cfg)
    lane = backend._lane
    assert lane is not None
    sent: list[int] = []
    real = lane.run
    lane.run = lambda s, k, a: sent.append(1) or real(s, k, a)  # type: ignore[method-assign]
    for n in range(1, 4):
        commit_write(backend, proc, n, request_id=f"r{n}")
    assert len(sent) == 3
    assert backend.head().version == proc.version == 3
    assert backend.get_receipt("tenant-a", "c1", "r2") is not None
    newer = RedisBackend(single_rclient, pid, 11, cfg)
    assert newer.claim() == 11
    with pytest.raises(FencedError):
        backend.commit(seal_write(proc, 4))  # below the fence: refused through the lane
    assert len(sent) == 4 and backend.head().version == 3
    backend.close()
    backend.close()  # idempotent
    newer.close()
    assert RedisBackend(single_rclient, pid, 12, config)._lane is None  # off by default
