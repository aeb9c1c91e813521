"""Point 1: restore, fork and snapshot import run one full root validation.

Reference: process.rs, restore / fork / root validation (the whole root is checked
before the hash: system keys exactly, generated metadata, lineage, outbox entries,
every /lib script compiles, reserved sections empty, version range).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis

from svit_cluster.errors import CorruptData, ErrorCode, InvalidInput
from svit_cluster.process import Process
from svit_cluster.process._namespace import with_system
from svit_cluster.process._tree import MapNode, node_from_value
from svit_cluster.store import RedisBackend, StoreConfig
from tests._commit_log import new_log
from tests._support import unique
from tests.conformance._support import counter_process, sys_section, tampered

Edit = Callable[[dict[str, Any]], None]


def _set(section: str, value: dict[str, Any]) -> Edit:
    def edit(doc: dict[str, Any]) -> None:
        doc["root"]["value"][section] = value
    return edit


def _sys(key: str, value: dict[str, Any]) -> Edit:
    def edit(doc: dict[str, Any]) -> None:
        sys_section(doc)[key] = value
    return edit


def _sys_path(keys: tuple[str, ...], value: dict[str, Any]) -> Edit:
    def edit(doc: dict[str, Any]) -> None:
        node = sys_section(doc)
        for k in keys[:-1]:
            node = node[k]["value"]
        node[keys[-1]] = value
    return edit


def _lib(source: str) -> Edit:
    def edit(doc: dict[str, Any]) -> None:
        doc["root"]["value"]["lib"]["value"]["broken"] = {
            "type": "script", "value": {"source": source, "documentation": None}}
    return edit


def _outbox(entry: dict[str, Any]) -> Edit:
    return _sys("outbox", {"type": "array", "value": [entry]})


def _version(v: int) -> Edit:
    def edit(doc: dict[str, Any]) -> None:
        doc["version"] = v
    return edit


_ONE = {"type": "integer", "value": 1}
_STR = lambda s: {"type": "string", "value": s}  # noqa: E731

CASES: list[tuple[str, Edit, str]] = [
    ("children not empty", _set("children", {"type": "map", "value": {"c": _ONE}}), "/children"),
    ("tasks not empty", _set("tasks", {"type": "map", "value": {"t": _ONE}}), "/tasks"),
    ("ports not empty", _set("ports", {"type": "map", "value": {"p": _ONE}}), "/ports"),
    ("authenticated true",
     _sys_path(("identity", "authenticated"), {"type": "bool", "value": True}),
     "/system/identity"),
    ("runtime language changed",
     _sys_path(("runtime", "language"), _STR("other-lisp@9")), "/system/runtime"),
    ("api changed", _sys_path(("api", "control"), _STR("svit-control@9")), "/system/api"),
    ("capabilities added", _sys("capabilities", {"type": "array", "value": [_STR("x")]}),
     "/system/capabilities"),
    ("extra system key", _sys("extra", _ONE), "/system"),
    ("parent not a process id",
     _sys("lineage", {"type": "map", "value": {"parent": _STR("not-an-id")}}),
     "/system/lineage/parent"),
    ("lineage extra key",
     _sys("lineage", {"type": "map", "value": {"parent": {"type": "null"}, "x": _ONE}}),
     "/system/lineage"),
    ("outbox entry not a map", _outbox(_ONE), "/system/outbox/0"),
    ("outbox entry bad address", _outbox({"type": "map", "value": {
        "id": _STR("svit://conformance/counter:1:0"), "to": _STR("not-an-address"),
        "body": _ONE}}), "/system/outbox/0/to"),
    ("outbox entry missing field", _outbox({"type": "map", "value": {
        "to": _STR("svit://peer"), "body": _ONE}}), "/system/outbox/0"),
    ("lib script does not compile", _lib("((("), "/lib/broken"),
    ("version 2^64", _version(2**64), "version"),
    ("version 2^63", _version(2**63), "version"),
]


@pytest.mark.parametrize(("edit", "where"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_1_restore_rejects_invalid_roots_even_with_a_recomputed_hash(edit: Edit,
                                                                     where: str) -> None:
    proc = counter_process()
    with pytest.raises(InvalidInput) as info:
        Process.restore(tampered(proc, edit))
    assert info.value.code == ErrorCode.INVALID_SNAPSHOT
    assert where in info.value.message, info.value.message


def test_1_restore_accepts_the_untampered_snapshot_and_the_largest_version() -> None:
    """Negative control for the row above: the same helper without an edit restores."""
    proc = counter_process()
    assert Process.restore(tampered(proc, lambda doc: None)).root_hash == proc.root_hash
    top = Process.restore(tampered(proc, _version(2**63 - 1)))
    assert top.version == 2**63 - 1


def test_1_fork_runs_the_same_root_validation() -> None:
    proc = counter_process()
    root = proc.root
    assert isinstance(root, MapNode)
    bad_root = root.with_key("tasks", node_from_value({"t": 1}))
    invalid = Process(proc.id, bad_root, limits=proc.limits)  # low-level: no validation
    with pytest.raises(InvalidInput) as info:
        invalid.fork("svit://conformance/child")
    assert info.value.code == ErrorCode.INVALID_SNAPSHOT and "/tasks" in info.value.message
    # a valid parent forks; the child is never authenticated and names its parent
    child = proc.fork("svit://conformance/child")
    assert child.read("/system/lineage/parent") == proc.id
    assert Process.restore(child.snapshot()).root_hash == child.root_hash
    assert with_system(root, child.id, proc.limits, proc.id).hex == child.root_hash


def test_1_invalid_snapshot_in_redis_is_corrupt_log_never_served(rclient: redis.Redis) -> None:
    config = StoreConfig(prefix=unique("conf"), snapshot_every=8, trim_margin=2,
                         max_receipts=16)
    pid = f"svit://conformance/{unique('p')}"
    backend, proc = new_log(rclient, pid, 1, config)
    assert RedisBackend(rclient, pid, 2, config).restore() is not None  # control: serves
    bad = tampered(proc, _set("children", {"type": "map", "value": {"c": _ONE}}))
    import json

    new_hash = json.loads(bad)["root_hash"]
    rclient.hset(backend.keys.snapshot, mapping={"data": bad, "root_hash": new_hash})
    rclient.hset(backend.keys.head, "root_hash", new_hash)
    with pytest.raises(CorruptData) as info:
        RedisBackend(rclient, pid, 3, config).restore()
    assert info.value.code == ErrorCode.CORRUPT_LOG
    assert "/children" in info.value.message and pid in info.value.message
