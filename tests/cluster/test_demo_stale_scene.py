"""The demo's stale-owner scene on a real cluster, on a machine slow to send.

A host whose agent is stopped (SIGSTOP) has its lease revoked by its keeper
within one watch poll (0.2 s), and its processes move at once. The scene
must therefore have its request waiting in the frozen actor before the
agent stops; if the request is still on its way when the owner moves, the
new owner answers it, nothing stale ever tries to commit, and the scene's
check ("live stale owner's commit refused") fails although the fence was
never tested. Here every SIGSTOP is followed by a pause, as on a loaded
machine, and the scene must still prove the refusal.
"""

from __future__ import annotations

import signal
import time

import pytest
from rich.console import Console

from svit_cluster import demo
from svit_cluster.local import LocalCluster

pytestmark = pytest.mark.cluster

#: Longer than the keeper's watch poll (0.2 s) plus its revoke.
SLOW_S = 0.8


def test_the_stale_owner_scene_holds_when_the_request_is_slow_to_leave(
        cluster: LocalCluster, gateway: tuple[str, str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    url, token = gateway
    real_signal = demo._signal
    stops: list[int] = []

    def slow_after_a_stop(pids: list[int], sig: int) -> None:
        real_signal(pids, sig)
        if sig == signal.SIGSTOP:
            stops.append(len(pids))
            time.sleep(SLOW_S)

    monkeypatch.setattr(demo, "_signal", slow_after_a_stop)
    res = demo._stale_owner(cluster, url, token, Console(quiet=True))
    assert stops, "the scene froze nothing"
    assert not res.error, res.error
    assert res.old_token is not None and res.new_token is not None
    assert res.new_token > res.old_token, (res.old_token, res.new_token)
    assert res.refusals, (f"no refusal of the stale owner's commit: the in-flight request "
                          f"was {res.inflight} by token {res.inflight_token}")
    assert res.counted_once, res.count_detail
    assert res.log_ok, res.log_detail
