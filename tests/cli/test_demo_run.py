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

from svit_cluster.demo import run_demo

pytestmark = pytest.mark.cluster


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
    assert ok and doc["ok"] and not failed, (doc.get("error"), failed)
    names = {c["name"] for c in doc["checks"]}
    assert {"live stale owner's commit refused", "stale owner's request applied at most once",
            "log chain verifies", "owner moved off the killed host"} <= names
    stale = doc["metrics"]["stale_owner"]
    assert stale["refused_by_fence"] + stale["refused_by_own_guard"] >= 1
    assert stale["new_token"] > stale["old_token"]
    assert doc["proven"].startswith("Proven:")
