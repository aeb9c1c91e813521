"""One real local cluster (etcd, Redis, Ray head + 3 hosts, gateway) for the tests of
this package, down once its last test ran: left up, it would idle beside every
later test (its agents, keepalives and Ray daemons take about a quarter of a
core). ``__init__.py`` makes this folder a package, which ``scope="package"``
needs (without it the fixture lives as long as the session).

Each host reaches etcd through its own user-space TCP proxy (``svit_chaos``'s
:class:`~svit_chaos.proxy_process.ProcessProxyHub`, PASS by default; served from a
child process, so keepalives never wait for this test process's GIL), so a test can cut one
host off from etcd (``etcd_links[host].set_mode(LinkMode.DROP)``). Redis is
reached directly.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from svit_chaos.proxy_process import ProcessProxyHub, RemoteProxy

from svit_cluster.local import ClusterSpec, LocalCluster

os.environ.setdefault("RAY_AUTH_MODE", "disabled")

#: Processes whose id starts with this get the ``workspace`` mount (``workspace``).
MOUNTED_PREFIX = "svit://local/mounts-"
#: ... and these the ``late`` mount (a folder a test removes and creates again).
LATE_PREFIX = "svit://local/late-mount-"


@pytest.fixture(scope="package")
def _etcd_hub() -> Iterator[tuple[ProcessProxyHub, dict[str, RemoteProxy]]]:
    hub = ProcessProxyHub().start()
    try:
        yield hub, {}
    finally:
        hub.close()


@pytest.fixture(scope="package")
def cluster(tmp_path_factory: pytest.TempPathFactory,
            _etcd_hub: tuple[ProcessProxyHub, dict[str, RemoteProxy]]) -> Iterator[LocalCluster]:
    # A short state path: Ray's socket paths (``.../ray/session_<date>_<pid>/sockets/
    # plasma_store.<n>``, n growing with every restart_host) must stay under the
    # 107-byte AF_UNIX limit, which pytest's numbered basetemp can push past.
    state = Path(tempfile.mkdtemp(prefix="svc-"))
    hub, links = _etcd_hub

    def etcd_proxy(host: str, etcd_endpoint: str, redis_url: str) -> tuple[str, str]:
        link = links.get(host)
        if link is None:
            address, _, port = etcd_endpoint.rpartition(":")
            link = links[host] = hub.proxy(f"{host}/etcd", address, int(port))
        return link.address, redis_url

    # A writable folder every host reaches (here: one directory of this
    # machine), granted to the processes of test_mounts_cluster.py only.
    workspace = state / "workspace"
    workspace.mkdir()
    late = state / "late"
    late.mkdir()
    mounts = [{"name": "workspace", "kind": "writable_folder", "source": str(workspace),
               "processes": [f"{MOUNTED_PREFIX}*"]},
              {"name": "late", "kind": "writable_folder", "source": str(late),
               "processes": [f"{LATE_PREFIX}*"]}]
    lc = LocalCluster.up(ClusterSpec(state_dir=state, hosts=3, lease_ttl_s=3,
                                     snapshot_every=20, passivate_after_s=4.0,
                                     mounts=mounts),
                         proxy_factory=etcd_proxy)
    try:
        yield lc
    finally:
        lc.down()
        shutil.rmtree(state, ignore_errors=True)


@pytest.fixture(scope="package")
def etcd_links(cluster: LocalCluster,
               _etcd_hub: tuple[ProcessProxyHub, dict[str, RemoteProxy]]) -> dict[str, RemoteProxy]:
    """Host name -> the proxy of that host's link to etcd."""
    return _etcd_hub[1]


@pytest.fixture(scope="package")
def workspace(cluster: LocalCluster) -> Path:
    """The directory granted as the writable folder mount ``workspace`` to the
    processes whose id starts with :data:`MOUNTED_PREFIX`."""
    return Path(cluster.doc["mounts"][0]["source"])


@pytest.fixture(scope="package")
def gateway(cluster: LocalCluster) -> tuple[str, str]:
    return cluster.doc["gateway"]["url"], cluster.doc["tokens"]["admin"]
