"""Pausing a host's processes with real children in each state a pause can meet.

Each test starts its own processes and kills them by PID at teardown. The
uninterruptible sleep (``D``) is real: a C helper ``vfork``s, and the parent
sleeps uninterruptibly until the child exits (``wait_for_vfork_done``); a
SIGSTOP takes effect only then. The child dies with the parent.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from svit_cluster.errors import UnavailableError
from svit_cluster.local._servers import wait_stopped
from svit_cluster.local._stop import continue_processes, stop_processes

VFORK_C = r"""
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
int main(int argc, char **argv) {
    unsigned ms = (unsigned)atoi(argv[1]);
    pid_t c = vfork();
    if (c == 0) { prctl(PR_SET_PDEATHSIG, SIGKILL); usleep(ms * 1000); _exit(0); }
    waitpid(c, 0, 0);
    for (;;) pause();
}
"""


class Procs:
    """Children started by a test, killed (SIGKILL) and reaped by PID at teardown."""

    def __init__(self) -> None:
        self.started: list[subprocess.Popen[bytes]] = []

    def start(self, *argv: str, **kw: object) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(list(argv), **kw)  # type: ignore[call-overload]
        self.started.append(proc)
        return proc

    def close(self) -> None:
        for proc in self.started:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
            proc.wait(10)


@pytest.fixture
def procs() -> Iterator[Procs]:
    p = Procs()
    try:
        yield p
    finally:
        p.close()


@pytest.fixture(scope="module")
def vfork_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc is not None, "no C compiler for the vfork helper (.ci/setup installs gcc)"
    src = tmp_path_factory.mktemp("vfork") / "vf.c"
    src.write_text(VFORK_C)
    subprocess.run([cc, "-O0", "-o", str(src.with_suffix("")), str(src)], check=True)
    return src.with_suffix("")


def state(pid: int) -> str:
    return psutil.Process(pid).status()


def wait_state(pid: int, wanted: str, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while state(pid) != wanted:
        assert time.monotonic() < deadline, f"pid {pid} is {state(pid)}, not {wanted}"
        time.sleep(0.01)


def sleeper(procs: Procs) -> subprocess.Popen[bytes]:
    return procs.start("sleep", "300")


def test_a_zombie_counts_as_stopped_beside_a_live_process(procs: Procs) -> None:
    live, dead = sleeper(procs), sleeper(procs)
    dead.send_signal(signal.SIGKILL)  # not reaped: a zombie, as under a stopped raylet
    wait_state(dead.pid, psutil.STATUS_ZOMBIE)
    # the check that pause-host used: a zombie never reaches T
    with pytest.raises(UnavailableError):
        wait_stopped_old_rule([dead.pid], timeout_s=0.3)
    seen = stop_processes(lambda: [live.pid, dead.pid], timeout_s=2.0)
    assert {s.pid: s.status for s in seen} == {live.pid: "stopped", dead.pid: "zombie"}
    assert state(live.pid) == psutil.STATUS_STOPPED
    wait_stopped([live.pid, dead.pid], timeout_s=1.0)  # the server check accepts it too
    continue_processes(lambda: [live.pid, dead.pid])
    assert state(live.pid) in (psutil.STATUS_SLEEPING, psutil.STATUS_RUNNING)


def wait_stopped_old_rule(pids: list[int], timeout_s: float) -> None:
    """Stopped means T or t, nothing else (the rule the pause used to apply)."""
    deadline = time.monotonic() + timeout_s
    for pid in pids:
        while psutil.Process(pid).status() not in ("stopped", "tracing-stop"):
            if time.monotonic() > deadline:
                raise UnavailableError(f"pid {pid} did not stop")
            time.sleep(0.005)


def test_a_child_forked_after_the_listing_is_stopped_too(procs: Procs) -> None:
    first = sleeper(procs)
    later: list[int] = []

    def listing() -> list[int]:
        if not later:  # the first listing: the fork has not happened yet
            later.append(-1)
            return [first.pid]
        if later == [-1]:
            later[0] = sleeper(procs).pid  # forked after the first listing
        return [first.pid, later[0]]

    seen = stop_processes(listing, timeout_s=2.0)
    assert [s.pid for s in seen] == [first.pid, later[0]]
    assert state(first.pid) == state(later[0]) == psutil.STATUS_STOPPED


def test_uninterruptible_sleep_is_waited_for_until_it_stops(procs: Procs,
                                                            vfork_bin: Path) -> None:
    parent = procs.start(str(vfork_bin), "1500")
    wait_state(parent.pid, psutil.STATUS_DISK_SLEEP)
    began = time.monotonic()
    seen = stop_processes(lambda: [parent.pid], timeout_s=0.3, uninterruptible_s=10.0)
    took = time.monotonic() - began
    assert seen[0].status == "stopped" and state(parent.pid) == psutil.STATUS_STOPPED
    assert 0.5 < took < 5.0  # it stopped when the vfork child exited (~1.5 s in)


def test_negative_control_a_process_stuck_past_the_bound_is_named(procs: Procs,
                                                                  vfork_bin: Path) -> None:
    parent = procs.start(str(vfork_bin), "4000")
    wait_state(parent.pid, psutil.STATUS_DISK_SLEEP)
    with pytest.raises(UnavailableError) as err:
        stop_processes(lambda: [parent.pid], timeout_s=0.2, uninterruptible_s=1.0)
    msg = err.value.message
    assert f"pid {parent.pid} (disk-sleep, " in msg and str(vfork_bin) in msg, msg
    assert err.value.fields["stragglers"] == [
        {"pid": parent.pid, "status": "disk-sleep", "command": f"{vfork_bin} 4000"}]


def test_wait_stopped_names_pid_state_and_command(procs: Procs, vfork_bin: Path) -> None:
    parent = procs.start(str(vfork_bin), "4000")
    wait_state(parent.pid, psutil.STATUS_DISK_SLEEP)
    parent.send_signal(signal.SIGSTOP)
    with pytest.raises(UnavailableError) as err:
        wait_stopped([parent.pid], timeout_s=0.1, uninterruptible_s=0.5)
    assert f"pid {parent.pid} (state D, command '{vfork_bin} 4000')" in err.value.message


def _traceme() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.ptrace(0, 0, None, None) != 0:  # PTRACE_TRACEME
        raise OSError(ctypes.get_errno(), "ptrace")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="ptrace is Linux here")
def test_a_process_stopped_by_its_tracer_counts_as_stopped(procs: Procs) -> None:
    traced = procs.start("sleep", "300", preexec_fn=_traceme)  # stops at exec (SIGTRAP)
    try:
        wait_state(traced.pid, psutil.STATUS_TRACING_STOP)
        seen = stop_processes(lambda: [traced.pid], timeout_s=1.0)
        assert [s.status for s in seen] == ["tracing-stop"]
        # continuing leaves it to its tracer (this test): not an error
        assert [s.status for s in continue_processes(lambda: [traced.pid])] == ["tracing-stop"]
    finally:
        # Popen.poll would take the trace stop for an exit and never kill it; a
        # tracee left behind runs on once this process (its tracer) exits
        os.kill(traced.pid, signal.SIGKILL)
        os.waitpid(traced.pid, 0)
        traced.returncode = -signal.SIGKILL


def test_a_pid_that_exited_before_the_signal_is_skipped(procs: Procs) -> None:
    gone = sleeper(procs)
    gone.send_signal(signal.SIGKILL)
    gone.wait(5)  # reaped: the PID names nothing now
    live = sleeper(procs)
    seen = stop_processes(lambda: [gone.pid, live.pid], timeout_s=2.0)
    assert [(s.pid, s.status) for s in seen] == [(live.pid, "stopped")]


def test_a_node_pause_and_resume_cover_its_whole_tree(procs: Procs, tmp_path: Path) -> None:
    from svit_cluster.local import RayNode

    # a root with two children; one child is a zombie (its parent never reaps it)
    root = procs.start(sys.executable, "-c",
                       "import subprocess, time\n"
                       "a = subprocess.Popen(['sleep', '300'])\n"
                       "b = subprocess.Popen(['sleep', '300'])\n"
                       "print(a.pid, b.pid, flush=True)\n"
                       "time.sleep(300)\n", stdout=subprocess.PIPE)
    assert root.stdout is not None
    a, b = (int(x) for x in root.stdout.readline().split())
    try:
        os_kill(b)
        wait_state(b, psutil.STATUS_ZOMBIE)
        node = RayNode("h9", tmp_path, tmp_path / "log", pid=root.pid)
        paused = node.pause(timeout_s=2.0)
        assert sorted(paused) == sorted([root.pid, a])  # the zombie is not listed
        assert state(root.pid) == state(a) == psutil.STATUS_STOPPED
        resumed = node.resume(timeout_s=2.0)
        assert sorted(resumed) == sorted([root.pid, a])
        assert psutil.STATUS_STOPPED not in (state(root.pid), state(a))
    finally:
        for pid in (a, b):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def os_kill(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)
