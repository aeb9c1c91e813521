"""Versions: start at 0, +1 per committed host transition; inbox append and acknowledge."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pytest

from svit_cluster.control import Receipt
from svit_cluster.errors import ConflictError, ErrorCode, FencedError, InvalidInput
from svit_cluster.process import Change, Process, Transition
from tests._host import Host, RecordingBackend

from .strategies import state


def test_new_process_is_at_version_zero() -> None:
    p = Process.create("svit://v", memory={"a": 1}, scripts={"s": "(x)"})
    assert p.version == 0 and p.position == 0
    assert p.read_versioned("/memory/a") == (1, 0)


def test_each_host_transition_adds_exactly_one() -> None:
    p = Process.create("svit://v")
    steps: list[Callable[[], Change]] = [
        lambda: p.write("/memory/a", 1),
        lambda: p.write("/memory/a", 1),  # unchanged value: still a commit
        lambda: p.remove("/memory/a"),
        lambda: p.inbox_append({"msg": "hi"}),
        lambda: p.inbox_ack(p.inbox_head_hash()),  # type: ignore[arg-type]
        lambda: p.write("/lib/s", {"source": "(x)"}),
    ]
    for expected, step in enumerate(steps, start=1):
        change = step()
        assert change.version == expected == p.version == p.position


def test_failed_operations_do_not_change_the_version() -> None:
    p = Process.create("svit://v", memory={"a": 1})
    p.write("/memory/b", 2)
    before = state(p)
    failing: list[tuple[Callable[[], object], type[Exception]]] = [
        (lambda: p.write("/system/x", 1), InvalidInput),
        (lambda: p.write("/memory/x/y", 1), InvalidInput),
        (lambda: p.write("/memory/x", float("nan")), InvalidInput),
        (lambda: p.remove("/memory/nope"), InvalidInput),
        (lambda: p.inbox_ack("0" * 64), ConflictError),
        (lambda: p.inbox_append(object()), InvalidInput),  # type: ignore[arg-type]
    ]
    for call, exc in failing:
        with pytest.raises(exc):
            call()
        assert state(p) == before


def test_inbox_append_and_acknowledge_by_head_hash() -> None:
    p = Process.create("svit://v")
    assert p.inbox_head_hash() is None
    p.inbox_append("first")
    p.inbox_append({"n": 2})
    assert p.read("/inbox") == ["first", {"n": 2}]
    head = p.inbox_head_hash()
    assert head == p.node("/inbox/0").hex  # type: ignore[union-attr]
    change = p.inbox_ack(head)  # type: ignore[arg-type]
    assert change.version == 3 and change.paths == ("/inbox",)
    assert p.read("/inbox") == [{"n": 2}]
    p.inbox_ack(p.inbox_head_hash())  # type: ignore[arg-type]
    assert p.read("/inbox") == [] and p.version == 4


def test_ack_with_another_head_hash_is_inbox_conflict() -> None:
    p = Process.create("svit://v")
    p.inbox_append("a")
    p.inbox_append("b")
    second = p.node("/inbox/1").hex  # type: ignore[union-attr]
    before = state(p)
    for wrong in (second, "0" * 64, "", None, 5):
        with pytest.raises(ConflictError) as info:
            p.inbox_ack(wrong)  # type: ignore[arg-type]
        assert info.value.code == ErrorCode.INBOX_CONFLICT
        assert state(p) == before


def test_ack_on_an_empty_inbox_is_inbox_conflict() -> None:
    p = Process.create("svit://v")
    for expected in (None, "0" * 64):
        with pytest.raises(ConflictError) as info:
            p.inbox_ack(expected)  # type: ignore[arg-type]
        assert info.value.code == ErrorCode.INBOX_CONFLICT
    assert p.version == 0


def test_the_backend_commits_before_apply_and_a_refused_commit_changes_nothing() -> None:
    """The real path (ProcessController): the durable commit runs first; when the
    backend refuses it (a newer owner fenced us out) the process is unchanged."""
    p = Process.create("svit://v")
    seen: list[int] = []

    class Checking(RecordingBackend):
        refuse = False

        def commit(self, transition: Transition, receipt: Receipt | None = None,
                   intents: Sequence[dict[str, Any]] = (), *,
                   completion: Mapping[str, Any] | None = None) -> None:
            assert p.version == transition.record.process_version_before  # not yet applied
            if self.refuse:
                raise FencedError("fenced out")
            seen.append(transition.record.process_version_after)
            super().commit(transition, receipt, intents, completion=completion)

    backend = Checking()
    host = Host(p, backend)
    host.write("/memory/a", 1)
    assert seen == [1] and p.version == 1
    backend.refuse = True
    before = state(p)
    with pytest.raises(FencedError):
        host.write("/memory/a", 2)
    assert state(p) == before


def test_a_transition_commits_only_on_the_version_and_process_it_was_sealed_for() -> None:
    p = Process.create("svit://v")
    wc = p.working_copy()
    wc.write("/memory/a", 1)
    t = p.seal(wc, "host.write")
    other = Process.create("svit://other")
    with pytest.raises(ConflictError):
        other.commit(t)  # same version and genesis chain head, other process
    p.write("/memory/b", 2)
    with pytest.raises(ConflictError):
        p.commit(t)  # sealed against version 0, process is at 1
    assert p.read("/memory/a") is None and other.version == 0
