"""The single topology's etcd of several members, on a real 3-member etcd: what
``kill-etcd`` and ``kill-etcd-majority`` do to it, and which schedules may use
the quorum nemesis."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from svit_chaos.cluster import LocalClusterTarget
from svit_chaos.errors import HarnessError
from svit_chaos.proxy import ProxyHub
from svit_chaos.run import RunConfig, validate
from svit_chaos.schedule import build_schedule

from svit_cluster.errors import ConfigurationError
from svit_cluster.local import EtcdClusterServer

HOSTS = ["h1", "h2", "h3"]


def _until(check: Any, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "not within the time limit"
        time.sleep(0.2)


@pytest.fixture
def target(tmp_path: Path) -> Iterator[tuple[LocalClusterTarget, EtcdClusterServer]]:
    members = EtcdClusterServer(tmp_path / "etcd3", members=3, die_with_parent=True)
    members.start()
    # the target reads only etcd_cluster and doc of a LocalCluster here
    cluster = SimpleNamespace(etcd_cluster=members, redis_cluster=None, doc={})
    try:
        with ProxyHub() as hub:
            yield LocalClusterTarget(cluster, hub, 3.0), members
    finally:
        members.stop()


@pytest.mark.servers
def test_kill_etcd_kills_the_leader_only_and_the_majority_nemesis_takes_the_quorum(
        target: tuple[LocalClusterTarget, EtcdClusterServer]) -> None:
    t, members = target
    _until(lambda: t.service_ready("etcd"))
    leader = members.leader()
    assert leader is not None
    t.kill_etcd()
    assert [m.name for m in members.members if not m.running] == [leader.name]
    _until(lambda: members.leader() is not None)  # the two others elect a new leader
    assert not t.service_ready("etcd")
    t.start_etcd()
    _until(lambda: t.service_ready("etcd"))

    killed = t.kill_etcd_majority()
    assert len(killed) == 2 and sorted(m.name for m in members.members if not m.running) \
        == sorted(killed)
    time.sleep(3.0)  # two election timeouts: one member alone elects nobody
    assert members.leader() is None
    t.start_etcd()
    _until(lambda: t.service_ready("etcd"))
    t.start_etcd()  # nothing left to start: a second heal does nothing


def test_the_quorum_nemesis_is_its_own_scenario_and_needs_several_etcd_members() -> None:
    s = build_schedule("kill-etcd-majority", hosts=HOSTS, duration_s=60, lease_ttl_s=2, seed=1)
    assert s.windows and {w.spec.kind for w in s.windows} == {"kill-etcd-majority"}
    for seed in range(20):  # random never draws it: it stops every process
        r = build_schedule("random", hosts=HOSTS, duration_s=300, lease_ttl_s=2, seed=seed)
        assert "kill-etcd-majority" not in {w.spec.kind for w in r.windows}
    validate(RunConfig(scenario="kill-etcd-majority", duration_s=60))  # 3 members by default
    with pytest.raises(ConfigurationError, match="--etcd-members 3"):
        validate(RunConfig(scenario="kill-etcd-majority", duration_s=60, etcd_members=1))
    with pytest.raises(ConfigurationError, match="etcd_members must be one of 1, 3, 5"):
        validate(RunConfig(etcd_members=2))


@pytest.mark.servers
def test_a_leader_fault_drawn_during_an_election_waits_for_the_new_leader(
        target: tuple[LocalClusterTarget, EtcdClusterServer],
        monkeypatch: pytest.MonkeyPatch) -> None:
    t, members = target
    _until(lambda: t.service_ready("etcd"))
    leader = members.leader()
    assert leader is not None
    stores = t._stores()
    stores.kill_etcd_member(leader.name)
    # the survivors name the dead leader for about an election timeout: the
    # fault waits for the new one instead of failing the run
    assert members.leader() is None
    new = stores.etcd_member("leader")
    assert new != leader.name and new in {m.name for m in members.members if m.running}
    stores.start_etcd_member(leader.name)
    _until(lambda: t.service_ready("etcd"))

    # no quorum: no leader comes, and the error says what each member showed
    import svit_chaos.cluster as chaos_cluster
    monkeypatch.setattr(chaos_cluster, "LEADER_WAIT_S", 2.0)
    killed = t.kill_etcd_majority()
    time.sleep(2.5)
    with pytest.raises(HarnessError, match="agreed on no leader within 2 s") as info:
        stores.etcd_member("leader")
    for name in killed:
        assert f"{name}: stopped" in str(info.value)
    t.start_etcd()
    _until(lambda: t.service_ready("etcd"))
