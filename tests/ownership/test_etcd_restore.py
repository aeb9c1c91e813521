"""etcd restored from a backup, on a real etcd and a real Redis.

A restore takes etcd revisions back to the backup's (etcd 3.4 cannot bump
them), so new fencing tokens fall below the Redis fences, and ownership records
of the backup's time come back under leases that may still be renewed. A claim
must recover in one call; ``svit-cluster etcd-restored`` must repair the whole
cluster; no restored record may pin a process to a host that does not serve it.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner

from svit_cluster.cli import cli
from svit_cluster.errors import FencedError
from svit_cluster.local import EtcdServer
from svit_cluster.ownership import (
    EPOCH_SHIFT,
    MAX_EPOCH,
    MAX_REVISION,
    LeaseState,
    Owners,
    fencing_token,
    read_epoch,
    recover_after_restore,
    split_token,
)
from svit_cluster.store import RedisBackend, RedisFences, StoreConfig
from tests._support import unique
from tests.conftest import RedisTarget

pytestmark = pytest.mark.servers

MakeLease = Callable[..., Any]


def backup(etcd: EtcdServer, path: Path) -> None:
    """``etcdctl snapshot save`` of the running etcd."""
    subprocess.run(["etcdctl", "--endpoints", etcd.url, "snapshot", "save", str(path)],
                   check=True, capture_output=True, timeout=30,
                   env={**os.environ, "ETCDCTL_API": "3"})


def restore(etcd: EtcdServer, path: Path) -> None:
    """Stop etcd, ``etcdctl snapshot restore`` into a new data dir, start it there."""
    etcd.stop()
    shutil.rmtree(etcd.data_dir)
    peer = f"http://127.0.0.1:{etcd.peer_port}"
    subprocess.run(["etcdctl", "snapshot", "restore", str(path), "--data-dir",
                    str(etcd.data_dir), "--name", "svit", "--initial-cluster", f"svit={peer}",
                    "--initial-advertise-peer-urls", peer],
                   check=True, capture_output=True, timeout=30,
                   env={**os.environ, "ETCDCTL_API": "3"})
    etcd.start()


async def churn(owners: Owners, fences: RedisFences, pids: list[str], rounds: int) -> None:
    """Many ownership changes: acquire, claim, release, ``rounds`` times per process."""
    for _ in range(rounds):
        for pid in pids:
            own = await owners.acquire(pid)
            await fences.claim(pid, own.token)
            assert await owners.release(own)


async def restored_cluster(
    fresh_etcd: EtcdServer, make_lease: MakeLease, fences: RedisFences, cluster: str,
    tmp_path: Path,
) -> tuple[Owners, str, str, int]:
    """A owns P (token t) when the backup is taken; later A releases P and 40
    ownership changes per process raise the fences of P and Q far above the
    backup's revision; then etcd is restored. A keeps renewing its lease.

    Returns ``(a, p, q, t)``.
    """
    p, q = f"svit://test/{unique('p')}", f"svit://test/{unique('q')}"
    a = Owners(await make_lease(fresh_etcd, ttl_s=30, safety_margin_s=1), cluster=cluster,
               host="a")
    c = Owners(await make_lease(fresh_etcd, ttl_s=30, safety_margin_s=1), cluster=cluster,
               host="c")
    own_p = await a.acquire(p)
    await fences.claim(p, own_p.token)
    await churn(c, fences, [q], 1)
    snapshot = tmp_path / "etcd-backup.db"
    backup(fresh_etcd, snapshot)
    assert await a.release(own_p)  # A no longer serves P
    await churn(c, fences, [p, q], 40)
    assert await fences.fence(p) > own_p.token + 100
    restore(fresh_etcd, snapshot)
    return a, p, q, own_p.token


@pytest.fixture
def fences(rclient: redis.Redis, config: StoreConfig) -> RedisFences:
    return RedisFences(rclient, prefix=config.prefix)


async def test_claim_after_an_etcd_restore_recovers_in_one_call(
    fresh_etcd: EtcdServer, make_lease: MakeLease, fences: RedisFences, cluster: str,
    tmp_path: Path,
) -> None:
    a, p, q, token_p = await restored_cluster(fresh_etcd, make_lease, fences, cluster,
                                              tmp_path)
    b = Owners(await make_lease(fresh_etcd, ttl_s=30, safety_margin_s=1), cluster=cluster,
               host="b")
    # The restore brought back A's record of P, under A's lease, which A still renews.
    pinned = await b.owner_of(p)
    assert pinned is not None and (pinned.host, pinned.token) == ("a", token_p)
    assert a.lease.state is LeaseState.HELD and pinned.lease_id == a.lease.lease_id
    # ... and revisions went back: a plain acquisition of Q gets a token below its fence.
    fence_q = await fences.fence(q)
    plain = await b.acquire(q)
    assert plain.token < fence_q
    with pytest.raises(FencedError):
        await fences.claim(q, plain.token)
    assert await b.release(plain)

    async def revision() -> int:
        return int((await b.lease.client.get_prefix(b"/svit/")).header.revision)

    before = await revision()
    own_q = await b.claim(q, fences)  # ONE call, a handful of etcd writes (no cycling)
    assert await revision() - before <= 4  # put record, raise epoch, release, put record
    assert own_q.token > fence_q and await fences.fence(q) == own_q.token
    assert split_token(own_q.token)[0] >= 1 and await read_epoch(
        b.lease.client, cluster, timeout_s=2) == split_token(own_q.token)[0]
    record = await b.owner_of(q)
    assert record is not None and (record.host, record.token) == ("b", own_q.token)

    # P is not pinned to A: the restored record is below P's fence, so it is released.
    fence_p = await fences.fence(p)
    own_p = await b.claim(p, fences)
    assert own_p.token > fence_p and await fences.fence(p) == own_p.token
    record = await b.owner_of(p)
    assert record is not None and (record.host, record.token) == ("b", own_p.token)


async def test_etcd_restored_command_raises_the_epoch_and_releases_stale_records(
    fresh_etcd: EtcdServer, redis_target: RedisTarget, make_lease: MakeLease,
    fences: RedisFences, config: StoreConfig, cluster: str, tmp_path: Path,
) -> None:
    a, p, q, _ = await restored_cluster(fresh_etcd, make_lease, fences, cluster, tmp_path)
    # A is registered (as its agent does) under the lease of its records: they are valid.
    await a.lease.client.put(f"/svit/{cluster}/hosts/a".encode(), b'{"host": "a"}',
                             lease=a.lease.lease_id)
    kept = await a.acquire(f"svit://test/{unique('kept')}")
    # Host z has no registration: its record is orphaned, whatever its lease.
    z = Owners(await make_lease(fresh_etcd, ttl_s=30, safety_margin_s=1), cluster=cluster,
               host="z")
    orphan = await z.acquire(f"svit://test/{unique('orphan')}")
    highest = max(fence for _, fence in fences.scan())
    result = await asyncio.to_thread(
        CliRunner().invoke, cli,
        ["etcd-restored", "--etcd", fresh_etcd.endpoint, "--redis", redis_target.url,
         "--cluster", cluster, "--prefix", fences.config.prefix, "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["epoch_before"] == 0 and report["highest_fence"] >= highest
    assert report["epoch_after"] == split_token(report["highest_fence"])[0] + 1
    assert report["released"] == {p: "superseded", orphan.process_id: "orphaned"}
    assert report["kept"] == 1
    assert (await a.owner_of(p)) is None
    assert await a.owner_of(kept.process_id) is not None

    # After the command, the plain path works at once: acquire, then claim.
    b = Owners(await make_lease(fresh_etcd, ttl_s=30, safety_margin_s=1), cluster=cluster,
               host="b")
    await b.lease.client.put(f"/svit/{cluster}/hosts/b".encode(), b'{"host": "b"}',
                             lease=b.lease.lease_id)
    for pid in (p, q):
        fence = await fences.fence(pid)
        own = await b.acquire(pid)
        assert own.token > fence
        assert RedisBackend(fences.client, pid, own.token, config).claim() == own.token

    # Running it again is safe: the epoch rises by one, nothing valid is released.
    again = await recover_after_restore(b.lease.client, cluster, fences)
    assert again.epoch_after == report["epoch_after"] + 1 and again.released == {}


async def test_a_record_of_this_host_that_it_does_not_serve_is_released(
    fresh_etcd: EtcdServer, make_lease: MakeLease, fences: RedisFences, cluster: str,
    tmp_path: Path,
) -> None:
    """The restored record's token still holds the fence (nobody claimed P after
    the backup), but A released P after the backup and does not serve it: A's
    agent releases it when a route to it fails (``release_unserved``)."""
    p = f"svit://test/{unique('p')}"
    a = Owners(await make_lease(fresh_etcd, ttl_s=30, safety_margin_s=1), cluster=cluster,
               host="a")
    b = Owners(await make_lease(fresh_etcd, ttl_s=30, safety_margin_s=1), cluster=cluster,
               host="b")
    own = await a.acquire(p)
    await fences.claim(p, own.token)
    snapshot = tmp_path / "etcd-backup.db"
    backup(fresh_etcd, snapshot)
    assert await a.release(own)
    restore(fresh_etcd, snapshot)
    record = await b.owner_of(p)
    assert record is not None and record.host == "a" and record.token == await fences.fence(p)
    assert not await b.release_unserved(p)  # not B's record: left alone
    assert await a.release_unserved(p)
    own_b = await b.claim(p, fences)
    assert own_b.host == "b" and await fences.fence(p) == own_b.token


async def test_two_processes_fenced_at_once_both_recover(
    fresh_etcd: EtcdServer, make_lease: MakeLease, fences: RedisFences, cluster: str,
    tmp_path: Path,
) -> None:
    """Concurrent recoveries raise the epoch with compare-and-set: both claims
    succeed and the epoch is raised once per fence epoch, not once per process."""
    _a, p, q, _t = await restored_cluster(fresh_etcd, make_lease, fences, cluster, tmp_path)
    hosts = [Owners(await make_lease(fresh_etcd, ttl_s=30, safety_margin_s=1),
                    cluster=cluster, host=f"h{i}") for i in range(2)]
    owns = await asyncio.gather(hosts[0].claim(q, fences), hosts[1].claim(p, fences))
    for own in owns:
        assert await fences.fence(own.process_id) == own.token
    assert await read_epoch(hosts[0].lease.client, cluster, timeout_s=2) == 1


def test_token_format_bounds() -> None:
    assert fencing_token(0, 7) == 7  # epoch 0: the create revision, as before epochs
    assert split_token(fencing_token(3, 12345)) == (3, 12345)
    top = fencing_token(MAX_EPOCH, MAX_REVISION)
    assert top == 2**53 - 1 and EPOCH_SHIFT == 40
    assert fencing_token(1, 0) > fencing_token(0, MAX_REVISION)
    from svit_cluster.errors import ConfigurationError

    with pytest.raises(ConfigurationError):
        fencing_token(0, MAX_REVISION + 1)
    with pytest.raises(ConfigurationError):
        fencing_token(MAX_EPOCH + 1, 0)


def test_the_largest_tokens_compare_exactly_in_redis_lua(rclient: redis.Redis,
                                                         config: StoreConfig) -> None:
    """Lua numbers are doubles: tokens up to 2**53 - 1 must still differ by one."""
    pid = f"svit://test/{unique('lua')}"
    top = fencing_token(MAX_EPOCH, MAX_REVISION)
    assert RedisBackend(rclient, pid, top, config).claim() == top
    with pytest.raises(FencedError) as err:
        RedisBackend(rclient, pid, top - 1, config).claim()
    assert err.value.fields["fence"] == top


async def test_agent_reconcile_releases_a_restored_record_it_does_not_serve(
    fresh_etcd: EtcdServer, make_lease: MakeLease, cluster: str, tmp_path: Path,
) -> None:
    """The router asks the owner's agent to reconcile when a route fails; an agent
    with no actor for the process releases a record under its own lease (and no
    other host's record). No Ray is started: this path only talks to etcd."""
    from svit_cluster.cluster import ClusterConfig
    from svit_cluster.cluster._agent import HostAgent

    p = f"svit://test/{unique('p')}"
    cfg = ClusterConfig(cluster=cluster, etcd_endpoint=fresh_etcd.endpoint)
    agent_a, agent_b = HostAgent(cfg, "a"), HostAgent(cfg, "b")
    agent_a.lease = await make_lease(fresh_etcd, ttl_s=30, safety_margin_s=1)
    agent_b.lease = await make_lease(fresh_etcd, ttl_s=30, safety_margin_s=1)
    a = Owners(agent_a.lease, cluster=cluster, host="a")
    own = await a.acquire(p)
    snapshot = tmp_path / "etcd-backup.db"
    backup(fresh_etcd, snapshot)
    assert await a.release(own)
    restore(fresh_etcd, snapshot)
    assert (await a.owner_of(p)) is not None  # back under A's still renewed lease
    assert await agent_b.reconcile(p)
    assert (await a.owner_of(p)) is not None  # B leaves A's record alone
    assert await agent_a.reconcile(p)
    assert (await a.owner_of(p)) is None
