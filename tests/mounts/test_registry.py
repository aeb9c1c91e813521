"""The mount registry's ordering rules, with an in-memory provider (pure logic).

The providers' own behaviour against real folders and a real PostgreSQL is in
test_folder.py, test_fence.py and test_sql_query.py; the registry inside a real
process in tests/conformance/reference/test_mounts.py and
tests/process/test_mount_records.py.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

from svit_cluster.errors import MountDenied, MountUnavailable, SvitError
from svit_cluster.mounts import (
    MountDescriptor,
    MountNode,
    MountOp,
    MountPath,
    MountRegistry,
)
from svit_cluster.values import Limits, Value

LIMITS = Limits()


class Fence:
    """The MountFence contract in memory: token, watermark, refusals."""

    def __init__(self) -> None:
        self.token = 0
        self.applied = -1

    def begin(self, token: int) -> int:
        if self.token > token:
            raise MountUnavailable("fenced by a newer owner")
        self.token = token
        return self.applied

    def apply(self, token: int, version: int, step: Callable[[], None]) -> bool:
        if self.token > token:
            return False
        if self.applied >= version:
            return True
        step()
        self.applied = version
        self.token = max(self.token, token)
        return True


class Files:
    """A writable in-memory 'folder'; ``fail`` makes the next writes raise."""

    def __init__(self, fence: Fence | None = None) -> None:
        self.files: dict[str, Value] = {}
        self.fail = 0
        self._fence = fence

    def descriptor(self) -> MountDescriptor:
        return MountDescriptor("folder", "/mem", "local", "read-write")

    def stat(self, path: MountPath, limits: Limits) -> MountNode | None:
        if path.is_root:
            return MountNode("directory", {})
        return MountNode("leaf", {}) if path.display() in self.files else None

    def list(self, path: MountPath, limits: Limits) -> list[str]:
        return sorted(p[1:] for p in self.files)

    def read(self, path: MountPath, limits: Limits) -> Value:
        return self.files.get(path.display())

    def check_write(self, path: MountPath, value: Value | None, limits: Limits) -> None:
        return None

    def write(self, path: MountPath, value: Value, limits: Limits) -> None:
        if self.fail:
            self.fail -= 1
            raise OSError("disk full")
        self.files[path.display()] = value

    def remove(self, path: MountPath, limits: Limits) -> None:
        self.files.pop(path.display(), None)

    def fence(self, process_id: str) -> Fence | None:
        return self._fence


COMMITTED = {"ws": MountDescriptor("folder", "/mem", "local", "read-write")}


def put(name: str, text: str) -> MountOp:
    return MountOp("mount_write", "ws", MountPath.of((name,)), text)


def test_a_failed_apply_is_kept_and_blocks_the_next_transaction_until_it_applies() -> None:
    files = Files()
    reg = MountRegistry()
    reg.attach("ws", files)
    files.fail = 2
    reg.apply(1, [put("a", "1")], LIMITS)  # fails: kept, not raised
    reg.apply(2, [put("a", "2")], LIMITS)  # queued behind it, in order
    assert files.files == {}
    with pytest.raises(MountUnavailable):
        reg.flush()  # the second failure
    reg.flush()
    assert files.files == {"/a": "2"}


def test_a_stale_token_applies_nothing() -> None:
    fence = Fence()
    files = Files(fence)
    old, new = MountRegistry(), MountRegistry()
    old.attach("ws", files, process_id="p", token=1)
    new.attach("ws", files, process_id="p", token=2)
    new.apply(5, [put("a", "new")], LIMITS)
    old.apply(4, [put("a", "old")], LIMITS)
    assert files.files == {"/a": "new"}
    with pytest.raises(MountUnavailable):
        MountRegistry().attach("ws", files, process_id="p", token=1)


def test_a_new_owner_reapplies_the_committed_writes_above_the_watermark() -> None:
    fence = Fence()
    files = Files(fence)
    first = MountRegistry()
    first.attach("ws", files, process_id="p", token=1)
    first.apply(1, [put("a", "1")], LIMITS)
    # version 2 committed, never applied (the owner died); version 3 touched no mount
    history = [(2, [put("a", "2"), put("b", "x")]), (3, [])]
    second = MountRegistry()
    second.attach("ws", files, process_id="p", token=2, head_version=3,
                  history=lambda after: [h for h in history if h[0] > after])
    assert files.files == {"/a": "2", "/b": "x"}
    assert fence.applied == 3 and fence.token == 2


def test_a_trimmed_gap_above_the_watermark_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    fence = Fence()
    fence.token, fence.applied = 1, 3  # an earlier owner applied up to version 3
    files = Files(fence)
    reg = MountRegistry()
    with caplog.at_level(logging.ERROR, logger="svit_cluster.mounts"):
        reg.attach("ws", files, process_id="p", token=2, head_version=30,
                   history=lambda after: [(25, [put("a", "25")])])
    assert "versions 4..24 were trimmed" in caplog.text
    assert files.files == {"/a": "25"} and fence.applied == 30


def test_a_new_fence_reports_no_gap_and_an_idle_owner_keeps_its_watermark_in_the_tail(
        caplog: pytest.LogCaptureFixture) -> None:
    fence = Fence()
    files = Files(fence)
    reg = MountRegistry()
    with caplog.at_level(logging.ERROR, logger="svit_cluster.mounts"):
        # A grant added to a process whose log starts at 500: nothing is missing.
        reg.attach("ws", files, process_id="p", token=1, head_version=510,
                   history=lambda after: [(v, []) for v in range(500, 511)])
    assert "trimmed" not in caplog.text and fence.applied == 510
    for version in range(511, 560):  # commits without mount writes
        reg.apply(version, [], LIMITS)
    assert fence.applied == 544  # the last multiple of WATERMARK_EVERY
    files.fail = 1
    reg.apply(560, [put("a", "x")], LIMITS)  # fails: pending
    reg.apply(576, [], LIMITS)
    assert fence.applied == 544  # never past a pending write


def test_a_failed_attach_is_retried_when_the_mount_is_next_used() -> None:
    now = [0.0]
    reg = MountRegistry(clock=lambda: now[0])
    attempts: list[float] = []

    def attempt() -> None:
        attempts.append(now[0])
        if len(attempts) < 2:
            raise MountUnavailable("source down")
        reg.attach("ws", Files())

    reg.attach_later("ws", attempt)
    with pytest.raises(MountUnavailable):
        reg.read(COMMITTED, "ws", MountPath.of(("a",)), LIMITS)
    with pytest.raises(MountUnavailable):  # within RETRY_S: not tried again
        reg.read(COMMITTED, "ws", MountPath.of(("a",)), LIMITS)
    assert attempts == [0.0]
    now[0] = MountRegistry.RETRY_S + 0.1
    assert reg.read(COMMITTED, "ws", MountPath.of(("a",)), LIMITS) is None
    assert len(attempts) == 2 and reg.attached("ws")


def test_read_only_and_unknown_mounts_refuse_writes_before_anything_is_recorded() -> None:
    reg = MountRegistry()
    reg.attach("ro", Files())
    committed = {"ro": MountDescriptor("folder", "/mem", "local", "read")}
    with pytest.raises(MountDenied):
        reg.check_write(committed, "ro", MountPath.of(("a",)), "x", LIMITS)
    with pytest.raises(SvitError) as unknown:
        reg.check_write(committed, "nope", MountPath.of(("a",)), "x", LIMITS)
    assert unknown.value.code == "invalid_path"
    with pytest.raises(SvitError) as root:
        reg.check_write(COMMITTED | committed, "ro", MountPath(), "x", LIMITS)
    assert root.value.code == "mount_denied"
