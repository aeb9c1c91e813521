"""The etcd key layout, defined once in ``ownership._keys``.

Pure logic first; then, on the real etcd the fixtures start, that what an owner
and a host registration actually write is what the layout says and what
``parse_key`` reads back.
"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

import pytest

from svit_cluster.local import EtcdServer
from svit_cluster.ownership import (
    HostLease,
    Owners,
    cluster_prefix,
    epoch_key,
    host_key,
    hosts_prefix,
    open_client,
    owner_key,
    owners_prefix,
    parse_key,
    read_epoch,
)

ROOT = Path(__file__).resolve().parents[2]


def test_every_key_lives_under_the_cluster_prefix() -> None:
    assert cluster_prefix("c1") == b"/svit/c1/"
    assert owner_key("c1", "svit://a/b") == b"/svit/c1/owners/svit://a/b"
    assert host_key("c1", "h-1") == b"/svit/c1/hosts/h-1"
    assert epoch_key("c1") == b"/svit/c1/fence-epoch"
    for key in (owner_key("c1", "svit://x"), host_key("c1", "h"), epoch_key("c1"),
                owners_prefix("c1"), hosts_prefix("c1")):
        assert key.startswith(cluster_prefix("c1"))


def test_parse_key_reads_back_owners_and_hosts_only() -> None:
    assert parse_key("c1", owner_key("c1", "svit://a/b/c")) == ("owner", "svit://a/b/c")
    assert parse_key("c1", host_key("c1", "h-1")) == ("host", "h-1")
    assert parse_key("c1", epoch_key("c1")) is None
    assert parse_key("c1", owner_key("c2", "svit://a")) is None  # another cluster
    assert parse_key("c1", owner_key("c1x", "svit://a")) is None  # a prefix-sharing name
    assert parse_key("c1", b"/svit/c1/other/x") is None


def test_no_module_spells_the_etcd_layout_itself() -> None:
    """Only ``ownership/_keys.py`` writes ``/svit/<cluster>/...`` (the five files the
    issue lists used to; chaos's observer included)."""
    pattern = re.compile(r"""["']/svit/""")
    offenders = [
        str(path.relative_to(ROOT))
        for base in ("svit_cluster", "chaos")
        for path in sorted((ROOT / base).rglob("*.py"))
        if path.name != "_keys.py" and pattern.search(path.read_text())
    ]
    assert offenders == []


@pytest.mark.servers
async def test_an_owner_record_and_a_host_registration_are_where_the_layout_says(
        etcd_server: EtcdServer) -> None:
    cluster = f"k{uuid.uuid4().hex[:8]}"
    pid = f"svit://test/{uuid.uuid4().hex[:8]}"
    client = open_client(etcd_server.endpoint, request_timeout_s=2.0)
    lease = HostLease(client, ttl_s=5, safety_margin_s=1.0)
    await lease.grant()
    try:
        own = await Owners(lease, cluster=cluster, host="h1", address="h1:1").acquire(pid)
        assert own.key == owner_key(cluster, pid)
        await client.put(host_key(cluster, "h1"), json.dumps({"host": "h1"}).encode(),
                         lease=lease.lease_id)
        assert await read_epoch(client, cluster, timeout_s=2.0) == 0  # no epoch key yet
        got = await client.get_prefix(cluster_prefix(cluster))
        parsed = sorted(parse_key(cluster, bytes(kv.key)) for kv in got)
        assert parsed == [("host", "h1"), ("owner", pid)]
    finally:
        await lease.close()
        await client.close()
