"""FolderFence on real files: token order, the applied watermark, the bounded lock,
corrupt state, and owners in separate OS processes (one of them frozen with SIGSTOP)."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from svit_cluster.errors import MountUnavailable
from svit_cluster.mounts._fence import FolderFence
from svit_cluster.mounts._folder import FolderMount
from svit_cluster.mounts._model import MountPath
from svit_cluster.values import Limits
from tests._support import wait_for

REPO = Path(__file__).resolve().parents[2]
PID = "svit://tenant/fenced"
NOTE = MountPath.of(("note.txt",))


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "shared"
    r.mkdir()
    return r


@pytest.fixture
def mount(root: Path) -> FolderMount:
    return FolderMount(root, writable=True)


def fence_of(mount: FolderMount, **kw: float) -> FolderFence:
    return FolderFence(mount.root, PID, **kw)


def writer(mount: FolderMount, text: str, calls: list[str]) -> Callable[[], None]:
    def step() -> None:
        calls.append(text)
        mount.write(NOTE, text, Limits())
    return step


def stored(fence: FolderFence) -> dict[str, object]:
    doc: dict[str, object] = json.loads(Path(fence.state_path).read_text())
    return doc


# -- token order and the watermark -----------------------------------------------------


def test_a_fresh_fence_starts_at_minus_one_and_stores_the_token(mount: FolderMount) -> None:
    fence = fence_of(mount)
    assert fence.begin(4) == -1
    assert stored(fence) == {"applied_version": -1, "process_id": PID, "token": 4}
    fences = os.path.dirname(fence.state_path)
    assert stat.S_IMODE(os.stat(fence.state_path).st_mode) & 0o077 == 0
    assert stat.S_IMODE(os.stat(fence.lock_path).st_mode) & 0o077 == 0
    assert stat.S_IMODE(os.stat(fences).st_mode) & 0o077 == 0
    assert stat.S_IMODE(os.stat(os.path.dirname(fences)).st_mode) & 0o077 == 0
    # Another process on the same folder has its own state.
    assert FolderFence(mount.root, "svit://tenant/other").begin(1) == -1
    assert fence.state() == (4, -1)


def test_a_lower_token_applies_nothing_after_a_higher_one(mount: FolderMount,
                                                          root: Path) -> None:
    calls: list[str] = []
    fence = fence_of(mount)
    assert fence.begin(2) == -1
    assert fence.apply(2, 1, writer(mount, "from B", calls))
    stale = fence_of(mount)
    assert stale.apply(1, 2, writer(mount, "from A", calls)) is False
    assert stale.apply(1, 1, writer(mount, "from A", calls)) is False
    assert calls == ["from B"]
    assert (root / "note.txt").read_text() == "from B"
    assert fence.state() == (2, 1)


def test_begin_with_a_lower_token_raises_and_changes_nothing(mount: FolderMount) -> None:
    fence = fence_of(mount)
    fence.begin(7)
    fence.apply(7, 3, lambda: None)
    before = Path(fence.state_path).read_bytes()
    with pytest.raises(MountUnavailable) as info:
        fence.begin(6)
    assert "newer owner (token 7 > 6)" in info.value.message
    assert info.value.fields == {"token": 6, "fence": 7}
    assert Path(fence.state_path).read_bytes() == before
    assert fence.begin(7) == 3  # the same owner again
    assert fence.begin(9) == 3  # a newer one takes over
    assert fence.state() == (9, 3)


def test_the_watermark_makes_reapplying_a_no_op(mount: FolderMount) -> None:
    fence = fence_of(mount)
    fence.begin(1)
    ran: list[int] = []
    assert fence.apply(1, 3, lambda: ran.append(3))
    assert fence.apply(1, 3, lambda: ran.append(-3))
    assert fence.apply(1, 2, lambda: ran.append(-2))
    assert fence.apply(1, 4, lambda: ran.append(4))
    assert ran == [3, 4]
    assert fence.begin(2) == 4  # the next owner re-applies from version 5
    assert fence.apply(1, 5, lambda: ran.append(-5)) is False
    assert ran == [3, 4]


def test_apply_raises_the_stored_token_without_begin(mount: FolderMount) -> None:
    fence = fence_of(mount)
    fence.begin(1)
    assert fence.apply(5, 0, lambda: None)
    assert fence.state() == (5, 0)
    with pytest.raises(MountUnavailable):
        fence.begin(4)


@pytest.mark.parametrize("error", [RuntimeError("boom"), OSError(5, "EIO in the step")])
def test_a_step_that_raises_leaves_the_watermark(mount: FolderMount, error: Exception) -> None:
    fence = fence_of(mount)
    fence.begin(1)
    fence.apply(1, 4, lambda: None)

    def failing() -> None:
        raise error

    with pytest.raises(type(error)) as info:
        fence.apply(1, 5, failing)
    assert info.value is error  # propagated as it was raised, not wrapped
    assert fence.state() == (1, 4)
    ran: list[int] = []
    assert fence.apply(1, 5, lambda: ran.append(5))
    assert ran == [5] and fence.state() == (1, 5)


def test_the_lock_is_released_after_a_failing_step(mount: FolderMount) -> None:
    fence = fence_of(mount, lock_timeout_s=0.2)
    fence.begin(1)
    def failing() -> None:
        raise ZeroDivisionError

    with pytest.raises(ZeroDivisionError):
        fence.apply(1, 1, failing)
    assert fence.begin(1) == -1  # would time out if the lock were still held


@pytest.mark.parametrize("bad", [-1, True, 1.0, "1"])
def test_bad_tokens_are_programming_errors(mount: FolderMount, bad: object) -> None:
    with pytest.raises(ValueError):
        fence_of(mount).begin(bad)
    with pytest.raises(ValueError):
        fence_of(mount).apply(bad, 1, lambda: None)


# -- the bounded lock ------------------------------------------------------------------


@pytest.fixture
def held_lock(mount: FolderMount) -> Iterator[FolderFence]:
    """A fence whose lock file another open file description holds exclusively."""
    fence = fence_of(mount, lock_timeout_s=0.3)
    fence.begin(1)
    fd = os.open(fence.lock_path, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        yield fence
    finally:
        os.close(fd)


def test_a_held_lock_times_out_quickly_with_mount_unavailable(held_lock: FolderFence) -> None:
    ran: list[int] = []
    for call in (lambda: held_lock.begin(2), lambda: held_lock.apply(2, 1, lambda: ran.append(1))):
        started = time.monotonic()
        with pytest.raises(MountUnavailable) as info:
            call()
        elapsed = time.monotonic() - started
        assert 0.25 <= elapsed < 2.0
        assert held_lock.lock_path in info.value.message
    assert ran == []


def test_the_lock_is_granted_once_released(mount: FolderMount) -> None:
    fence = fence_of(mount, lock_timeout_s=5)
    fence.begin(1)
    fd = os.open(fence.lock_path, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(0.3)"], pass_fds=(fd,))
    os.close(fd)  # the child holds the last descriptor of the locked description
    try:
        started = time.monotonic()
        assert fence.begin(2) == -1
        assert 0.2 <= time.monotonic() - started < 4
    finally:
        proc.wait(timeout=10)


# -- corrupt or hostile state ----------------------------------------------------------


@pytest.mark.parametrize("content", [
    b"", b"{not json", b"\xff\xfe", b"[]", b'{"token": 1, "applied_version": 1}',
    b'{"process_id": "svit://tenant/other", "token": 1, "applied_version": 1}',
    b'{"process_id": "svit://tenant/fenced", "token": true, "applied_version": 1}',
    b'{"process_id": "svit://tenant/fenced", "token": -1, "applied_version": 1}',
    b'{"process_id": "svit://tenant/fenced", "token": 1, "applied_version": -2}',
    b'{"process_id": "svit://tenant/fenced", "token": 1, "applied_version": 1.5}',
    b'{"process_id": "svit://tenant/fenced", "token": 1, "applied_version": 1, "x": 1}',
    b" " * (65 * 1024),
])
def test_corrupt_state_is_refused_never_reset(mount: FolderMount, content: bytes) -> None:
    fence = fence_of(mount)
    fence.begin(1)
    Path(fence.state_path).write_bytes(content)
    ran: list[int] = []
    with pytest.raises(MountUnavailable) as info:
        fence.begin(5)
    assert "corrupt" in info.value.message
    with pytest.raises(MountUnavailable):
        fence.apply(5, 1, lambda: ran.append(1))
    assert ran == []
    assert Path(fence.state_path).read_bytes() == content


def test_a_link_planted_as_the_state_directory_is_refused(mount: FolderMount, root: Path,
                                                          tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (root / ".svit").symlink_to(elsewhere)
    with pytest.raises(MountUnavailable) as info:
        fence_of(mount).begin(1)
    assert "fence directory" in info.value.message
    assert list(elsewhere.iterdir()) == []


def test_a_link_planted_as_the_state_file_is_refused(mount: FolderMount,
                                                     tmp_path: Path) -> None:
    fence = fence_of(mount)
    fence.begin(1)
    target = tmp_path / "target.json"
    target.write_text(json.dumps({"applied_version": 99, "process_id": PID, "token": 1}))
    os.unlink(fence.state_path)
    os.symlink(target, fence.state_path)
    with pytest.raises(MountUnavailable):
        fence.begin(1)


def test_a_vanished_root_is_unavailable(mount: FolderMount, root: Path) -> None:
    fence = fence_of(mount)
    root.rmdir()
    with pytest.raises(MountUnavailable) as info:
        fence.begin(1)
    assert "fence directory" in info.value.message


# -- owners in separate OS processes ---------------------------------------------------


def _worker(*args: str) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.Popen([sys.executable, "-m", "tests.mounts._fence_worker", *args],
                            cwd=REPO, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _stop(*procs: subprocess.Popen[str]) -> None:
    for proc in procs:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)
            proc.kill()
        proc.wait(timeout=30)


def _log(path: Path) -> list[tuple[int, int, int]]:
    if not path.exists():
        return []
    entries = []
    for line in path.read_text().splitlines():
        pid, token, version = (int(x) for x in line.split())
        entries.append((pid, token, version))
    return entries


@pytest.mark.timeout(120)
def test_two_processes_with_one_token_serialize_and_keep_the_watermark_monotonic(
        mount: FolderMount, tmp_path: Path) -> None:
    """Both owners apply through the fence at once (strides 1 and 3 over the same
    versions): steps never overlap (each holds an O_EXCL marker), the applied
    versions strictly increase (no version twice, none behind the watermark),
    every version of the stride-1 schedule is covered up to the last, and the
    watermark ends at the last version."""
    log, go = tmp_path / "log", tmp_path / "go"
    n = 150
    procs = [_worker("race", mount.root, PID, "1", "0", str(n), "1", str(log), str(go)),
             _worker("race", mount.root, PID, "1", "0", str(n // 3), "3", str(log), str(go))]
    try:
        time.sleep(0.5)  # both interpreters started (they wait for `go`)
        go.touch()
        outs = [proc.communicate(timeout=90) for proc in procs]
    finally:
        _stop(*procs)
    for proc, (out, err) in zip(procs, outs, strict=True):
        assert proc.returncode == 0, err  # 3: two steps overlapped
        assert out.strip() == "done"
    entries = _log(log)
    versions = [v for _, _, v in entries]
    assert versions == sorted(set(versions))
    assert versions[-1] == n - 1
    # Every version the stride-1 owner skipped was already below the watermark:
    # the union of both schedules' applied versions leaves no gap it could see.
    assert set(range(n)) - set(versions) <= {v for v in range(n) if v % 3 != 0}
    assert fence_of(mount).state() == (1, n - 1)


@pytest.mark.timeout(120)
def test_an_owner_frozen_while_waiting_for_the_lock_blocks_no_takeover(
        mount: FolderMount, tmp_path: Path) -> None:
    """An old owner waits for the lock to apply its committed version (the lock is
    held here), and is frozen there (SIGSTOP). A newer owner takes the fence at
    once: a waiter holds nothing. Resumed, the old owner applies nothing."""
    log, go = tmp_path / "log", tmp_path / "go"
    fence = fence_of(mount, lock_timeout_s=30.0)
    fence.begin(1)
    go.touch()
    with open(fence.lock_path, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        old = _worker("race", mount.root, PID, "1", "7", "1", "1", str(log), str(go))
        try:
            time.sleep(1.0)  # the worker started and polls the held lock
            assert old.poll() is None and _log(log) == []
            os.kill(old.pid, signal.SIGSTOP)
            fcntl.flock(held, fcntl.LOCK_UN)
            started = time.monotonic()
            assert fence_of(mount, lock_timeout_s=5.0).begin(2) == -1
            assert time.monotonic() - started < 2.0
            os.kill(old.pid, signal.SIGCONT)
            out, err = old.communicate(timeout=60)
        finally:
            _stop(old)
    assert out.strip() == "refused 7", err
    assert _log(log) == []
    assert fence_of(mount).state() == (2, -1)


@pytest.mark.timeout(120)
def test_a_newer_owner_in_another_process_stops_the_older_one(
        mount: FolderMount, tmp_path: Path) -> None:
    log, go = tmp_path / "log", tmp_path / "go"
    go.touch()
    old = _worker("race", mount.root, PID, "1", "0", "1000000", "1", str(log), str(go))
    new: subprocess.Popen[str] | None = None
    try:
        wait_for(lambda: len(_log(log)) >= 20, timeout_s=60, what="the old owner applying")
        new = _worker("race", mount.root, PID, "2", "-1", "30", "1", str(log), str(go),
                      "--begin")
        new_out, new_err = new.communicate(timeout=90)
        old_out, old_err = old.communicate(timeout=90)
    finally:
        _stop(old, *([new] if new is not None else []))
    assert new.returncode == 0, new_err
    assert old.returncode == 0, old_err
    watermark = int(new_out.splitlines()[0].split()[1])
    assert new_out.splitlines()[-1] == "done"
    assert old_out.startswith("refused ")  # the stale owner was refused and stopped
    entries = _log(log)
    tokens = [t for _, t, _ in entries]
    versions = [v for _, _, v in entries]
    assert versions == sorted(set(versions))  # strictly increasing: no version twice
    first_new = tokens.index(2)
    assert set(tokens[:first_new]) == {1} and set(tokens[first_new:]) == {2}
    assert versions[first_new - 1] == watermark  # the old owner's last applied one
    assert versions[first_new:] == list(range(watermark + 1, watermark + 31))
    assert watermark >= 19
    assert fence_of(mount).state() == (2, watermark + 30)


@pytest.mark.timeout(60)
def test_a_stale_owner_frozen_with_sigstop_writes_nothing(mount: FolderMount,
                                                          root: Path) -> None:
    old = _worker("stale", mount.root, PID, "1")
    try:
        assert old.stdout is not None and old.stdin is not None
        assert old.stdout.readline().strip() == "ready"  # it holds the fence (token 1)
        os.kill(old.pid, signal.SIGSTOP)  # frozen after its commit, before its apply
        # A newer owner takes over and applies the same committed version.
        fence = fence_of(mount)
        assert fence.begin(2) == -1
        calls: list[str] = []
        assert fence.apply(2, 5, writer(mount, "from B", calls))
        old.stdin.write("go\n")
        old.stdin.flush()
        os.kill(old.pid, signal.SIGCONT)
        out, err = old.communicate(timeout=30)
    finally:
        _stop(old)
    assert old.returncode == 0, err
    assert out.strip() == "False"  # the resumed owner's apply was refused
    assert calls == ["from B"]
    assert (root / "note.txt").read_text() == "from B"
    assert fence.state() == (2, 5)
