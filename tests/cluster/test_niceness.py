"""Process actors lower their own priority on every thread.

Linux keeps a niceness per thread: ``os.nice`` in an actor's event-loop thread
leaves Ray's core-worker threads, started before, at the node's niceness, so
every thread must be lowered. Runs in a child process,
so this test process keeps its own priority.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

CHILD = """
import os, threading
from svit_cluster.cluster._config import lower_priority
start = os.nice(0)   # this child inherits the test process's niceness
target = start + 2
ready, stop = threading.Event(), threading.Event()
def low():
    os.setpriority(os.PRIO_PROCESS, 0, 19)   # this thread already lower than asked
    ready.set(); stop.wait()
threading.Thread(target=stop.wait).start()
t = threading.Thread(target=low); t.start(); ready.wait()
got = lower_priority(target)
prios = sorted(os.getpriority(os.PRIO_PROCESS, int(x)) for x in os.listdir("/proc/self/task"))
stop.set()
print(target, got, *prios)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread niceness is Linux's")
@pytest.mark.skipif(os.nice(0) > 17, reason="needs room to lower the priority by 2")
def test_lower_priority_reaches_every_thread_and_never_raises_one() -> None:
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                         check=True, timeout=60).stdout.split()
    target, got, prios = int(out[0]), int(out[1]), [int(p) for p in out[2:]]
    assert got == target
    assert prios == [target, target, 19], prios  # main and idle thread lowered; 19 kept


def test_an_actor_built_in_process_leaves_its_host_alone() -> None:
    """Unit tests and in-process use build ``ProcessActor`` directly: without
    ``niceness`` it must not lower the priority of the process it runs in (the
    whole test run went to niceness 15 when the constructor always did)."""
    from svit_cluster.cluster import ClusterConfig, ProcessActor

    before = os.nice(0)
    ProcessActor(ClusterConfig(cluster="unit"), "h1", "", 0, "agent:h1")
    assert os.nice(0) == before
