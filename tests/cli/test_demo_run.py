"""The README's main command, ``svit-cluster demo``, run for real (Ray, etcd, Redis).

The demo checks its own scenes (e.g. the stale-owner scene's expectation of
what happens to the frozen owner's in-flight request), and those checks depend
on the gateway's behaviour; only a real run notices when they stop holding.
This test keeps the README's command true.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import pytest
from rich.console import Console

from svit_cluster import demo
from svit_cluster.demo import run_demo


@pytest.mark.cluster
@pytest.mark.timeout(600)
def test_the_demo_passes_every_check_and_says_what_it_proved(
        capsys: pytest.CaptureFixture[str]) -> None:
    # a short path: Ray's socket paths under it must stay below the 107-byte
    # AF_UNIX limit, which pytest's tmp_path can exceed
    state = Path(tempfile.mkdtemp(prefix="demo-"))
    try:
        ok = run_demo(state_dir=state, json_summary=True)
    finally:
        shutil.rmtree(state, ignore_errors=True)
    doc = json.loads(capsys.readouterr().out)
    failed = [c for c in doc["checks"] if not c["ok"]]
    if not (ok and doc["ok"]) or failed:  # the whole detail: pytest would cut the repr
        pytest.fail(json.dumps({"error": doc.get("error"), "failed": failed}, indent=1))
    names = {c["name"] for c in doc["checks"]}
    assert {"live stale owner's commit refused", "stale owner's request applied at most once",
            "log chain verifies", "owner moved off the killed host"} <= names
    stale = doc["metrics"]["stale_owner"]
    assert stale["refused_by_fence"] + stale["refused_by_own_guard"] >= 1
    assert stale["new_token"] > stale["old_token"]
    assert doc["proven"].startswith("Proven:")


def _scene_stub(voids: int, calls: list[str]):  # type: ignore[no-untyped-def]
    """A stand-in for ``_stale_scene``: void for its first ``voids`` calls."""
    def scene(cluster, url, token, console, process_id, *, wait_refusal_s):  # type: ignore[no-untyped-def]
        calls.append(process_id)
        res = demo._StaleResult(process_id=process_id)
        if len(calls) <= voids:
            res.void = f"moved before the freeze ({len(calls)})"
        return res
    return scene


@pytest.mark.parametrize("voids", [0, 1, demo.STALE_ATTEMPTS])
def test_a_void_stale_owner_scene_is_staged_again_on_a_fresh_process(
        monkeypatch: pytest.MonkeyPatch, voids: int) -> None:
    # On a busy machine the cluster can move the process before the freeze; the
    # scene then proved nothing, and must be staged again, never counted as a
    # failed fence nor as a pass.
    calls: list[str] = []
    monkeypatch.setattr(demo, "_stale_scene", _scene_stub(voids, calls))
    res = demo._stale_owner(None, "http://x", "t", Console(quiet=True))  # type: ignore[arg-type]
    assert len(calls) == min(voids + 1, demo.STALE_ATTEMPTS)
    assert len(set(calls)) == len(calls) and calls[0] == demo.STALE_ID
    if voids < demo.STALE_ATTEMPTS:
        assert not res.void and not res.error and len(res.voided) == voids
    else:
        assert res.void and f"all {demo.STALE_ATTEMPTS} attempts" in res.error
        assert "moved before the freeze (3)" in res.error
