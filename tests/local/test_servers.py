"""The local server launchers: start, readiness, stop by PID, kill -9, restart."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import redis

import svit_cluster.local as local
from svit_cluster.defaults import LEASE_NICENESS
from svit_cluster.errors import ErrorCode, UnavailableError
from svit_cluster.local import EtcdServer, RedisServer, ServerError

pytestmark = pytest.mark.servers


def test_missing_binary_says_how_to_install(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ServerError) as info:
        RedisServer(tmp_path).start()
    assert "apt-get install redis-server" in info.value.message
    assert isinstance(info.value, UnavailableError)
    with pytest.raises(ServerError) as info:
        EtcdServer(tmp_path).start()
    assert "apt-get install etcd-server" in info.value.message
    assert info.value.code is ErrorCode.UNAVAILABLE


def test_redis_kill9_and_restart_keep_acknowledged_writes(fresh_redis: RedisServer) -> None:
    port, pid = fresh_redis.port, fresh_redis.pid
    assert pid is not None and fresh_redis.url.endswith(f":{port}/0")
    client = redis.Redis.from_url(fresh_redis.url)
    client.set("k", "v")
    client.close()
    fresh_redis.kill9()
    assert fresh_redis.pid is None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    fresh_redis.restart()
    assert fresh_redis.port == port and fresh_redis.pid not in (None, pid)
    client = redis.Redis.from_url(fresh_redis.url)
    assert client.get("k") == b"v"
    assert client.config_get("appendfsync")["appendfsync"] == "always"
    client.close()
    fresh_redis.stop()
    assert not fresh_redis.running
    fresh_redis.stop()  # idempotent


def test_etcd_restart_keeps_port_and_data_dir(fresh_etcd: EtcdServer) -> None:
    endpoint, pid = fresh_etcd.endpoint, fresh_etcd.pid
    assert (fresh_etcd.data_dir / "member").is_dir()
    fresh_etcd.restart()
    assert fresh_etcd.endpoint == endpoint and fresh_etcd.pid != pid
    assert fresh_etcd.running


def _thread_niceness(pid: int) -> set[int]:
    """The niceness of every thread of ``pid`` (field 19 of /proc/<pid>/task/*/stat)."""
    out = set()
    for tid in os.listdir(f"/proc/{pid}/task"):
        stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        out.add(int(stat[stat.rfind(")") + 2:].split()[16]))
    return out


def test_etcd_runs_every_thread_at_the_lease_niceness(fresh_etcd: EtcdServer,
                                                      fresh_redis: RedisServer) -> None:
    """Both ends of a keepalive outrank the Ray workers a burst starts at
    niceness 0: every etcd thread runs at LEASE_NICENESS (as root; without
    CAP_SYS_NICE the inherited one); Redis keeps the inherited niceness (its
    commits are fenced, never on a deadline)."""
    inherited = os.getpriority(os.PRIO_PROCESS, 0)
    expected = LEASE_NICENESS if os.geteuid() == 0 else inherited
    assert fresh_etcd.pid is not None and fresh_redis.pid is not None
    assert _thread_niceness(fresh_etcd.pid) == {expected}
    assert _thread_niceness(fresh_redis.pid) == {inherited}
    fresh_etcd.restart()
    assert fresh_etcd.pid is not None
    assert _thread_niceness(fresh_etcd.pid) == {expected}


def test_local_exports_include_the_server_launchers() -> None:
    assert {"EtcdServer", "RedisServer", "ServerError", "free_port"} <= set(local.__all__)
