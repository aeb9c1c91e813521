"""Namespace: root keys, paths, write/remove rules, script names, /system, process ids."""

from __future__ import annotations

import pytest

from svit_cluster.errors import ErrorCode, InvalidInput
from svit_cluster.process import (
    LANGUAGE,
    ROOT_KEYS,
    SNAPSHOT_FORMAT,
    Limits,
    Process,
    Script,
    format_path,
    parse_path,
    validate_process_id,
    validate_script_name,
)

from .strategies import state

DESIGN_ROOT_KEYS = {
    "memory", "lib", "inbox", "thread", "system", "ports", "mounts", "tasks", "children",
}


def test_root_has_exactly_the_design_keys() -> None:
    p = Process.create("svit://n")
    assert set(ROOT_KEYS) == DESIGN_ROOT_KEYS and len(ROOT_KEYS) == len(DESIGN_ROOT_KEYS)
    assert p.discover("/") == sorted(DESIGN_ROOT_KEYS)
    assert p.stat("/inbox") == {  # the reference's facts record (svit_cluster.process._stat)
        "access": "read", "attached": True, "facts": {"content": "array", "entries": 0},
        "hash": p.node("/inbox").hex, "kind": "directory", "locality": "cache",  # type: ignore[union-attr]
        "mount": None, "path": "/inbox", "source": "process",
    }
    for key in DESIGN_ROOT_KEYS - {"inbox"}:
        record = p.stat(f"/{key}")
        assert record is not None and record["kind"] == "directory"
        assert record["facts"]["content"] == "object"  # type: ignore[index,call-overload]
        assert record["access"] == ("read-write" if key == "memory" else "read")
    for reserved in ("ports", "mounts", "tasks", "children", "thread"):
        assert p.read(f"/{reserved}") == {}


# -- paths -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "segments"),
    [
        ("/", ()),
        ("/memory", ("memory",)),
        ("/memory/a/0/b", ("memory", "a", "0", "b")),
        ("/memory/...", ("memory", "...")),
        ("/memory/a.b", ("memory", "a.b")),
        ("/memory/ é ", ("memory", " é ")),
    ],
)
def test_valid_paths_parse_to_segments(text: str, segments: tuple[str, ...]) -> None:
    assert parse_path(text) == segments
    assert format_path(segments) == text


@pytest.mark.parametrize(
    "text",
    ["", "memory", "memory/a", "//", "/memory/", "/memory//a", "/./memory", "/memory/.",
     "/memory/..", "/memory/../system", "/a/./b", "\\memory", "/memory/\ud800"],
)
def test_invalid_paths_are_invalid_path(text: str) -> None:
    with pytest.raises(InvalidInput) as info:
        parse_path(text)
    assert info.value.code == ErrorCode.INVALID_PATH


@pytest.mark.parametrize("bad", [None, 1, b"/memory", ["memory"], ("memory",)], ids=repr)
def test_non_string_paths_are_invalid_path(bad: object) -> None:
    with pytest.raises(InvalidInput) as info:
        parse_path(bad)
    assert info.value.code == ErrorCode.INVALID_PATH


def test_path_length_is_bounded_at_4096_bytes() -> None:
    ok = "/memory/" + "a" * (4096 - 8)
    assert len(parse_path(ok)[1]) == 4088
    for too_long in (ok + "a", "/memory/" + "é" * 2045):  # 8 + 4090 bytes
        with pytest.raises(InvalidInput) as info:
            parse_path(too_long)
        assert info.value.code == ErrorCode.INVALID_PATH


def test_array_children_are_decimal_indexes() -> None:
    p = Process.create("svit://n", memory={"arr": [10, 20], "map": {"0": "zero"}})
    assert p.read("/memory/arr/0") == 10 and p.read("/memory/arr/1") == 20
    for not_index in ("01", "-1", "+1", "1.0", " 1", "1 ", "a", "١"):
        with pytest.raises(InvalidInput) as info:  # reference: a non-index is invalid_path
            p.read(f"/memory/arr/{not_index}")
        assert info.value.code == ErrorCode.INVALID_PATH
    assert p.read("/memory/arr/2") is None  # past the end: missing, not malformed
    assert p.read("/memory/map/0") == "zero"  # a map key that looks like an index
    assert p.discover("/memory/arr") == ["0", "1"]
    p.write("/memory/arr/1", 21)
    p.write("/memory", {"arr": [10, 21, 30], "map": {"0": "zero"}})  # no append via set
    assert p.read("/memory/arr") == [10, 21, 30]
    for bad in ("01", "-1", "3", "4", "x"):
        with pytest.raises(InvalidInput) as info:
            p.write(f"/memory/arr/{bad}", 0)
        assert info.value.code == ErrorCode.INVALID_PATH
    p.remove("/memory/arr/0")
    assert p.read("/memory/arr") == [21, 30]
    with pytest.raises(InvalidInput) as info:
        p.remove("/memory/arr/2")
    assert info.value.code == ErrorCode.INVALID_PATH
    assert p.version == 3


def test_reading_a_missing_path_gives_null() -> None:
    p = Process.create("svit://n", memory={"a": 1})
    assert p.read("/memory/b") is None
    assert p.read("/nope/x") is None
    assert p.node("/memory/b") is None and p.stat("/memory/b") is None
    # below a scalar, and discover of a missing path or a scalar: invalid_path
    # (reference: path reads and discover)
    for call in (lambda: p.read("/memory/a/b"), lambda: p.discover("/memory/b"),
                 lambda: p.discover("/memory/a")):
        with pytest.raises(InvalidInput) as info:
            call()
        assert info.value.code == ErrorCode.INVALID_PATH


# -- write / remove rules ------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/memory/x", "/memory/a/b", "/lib/tool"])
def test_writes_below_memory_and_at_lib_name_are_allowed(path: str) -> None:
    p = Process.create("svit://n", memory={"a": {}})
    value = Script("(defn main (input) 1)") if path.startswith("/lib") else 1
    change = p.write(path, value)
    assert change.version == 1 and path in change.paths


@pytest.mark.parametrize(
    "path",
    ["/", "/lib", "/lib/tool/x", "/inbox", "/inbox/0", "/system", "/system/outbox",
     "/system/identity/address", "/thread/x", "/ports/x", "/mounts/x", "/tasks/x",
     "/children/x", "/other"],
)
def test_writes_anywhere_else_are_invalid_path(path: str) -> None:
    p = Process.create("svit://n")
    before = state(p)
    with pytest.raises(InvalidInput) as info:
        p.write(path, Script("x") if path.startswith("/lib") else 1)
    assert info.value.code == ErrorCode.INVALID_PATH
    with pytest.raises(InvalidInput) as info:
        p.remove(path)
    assert info.value.code == ErrorCode.INVALID_PATH
    assert state(p) == before


def test_write_needs_its_parent() -> None:
    p = Process.create("svit://n", memory={"a": {}, "s": "text"})
    p.write("/memory/a/b", {})
    p.write("/memory/a/b/c", 1)
    for path in ("/memory/x/y", "/memory/a/x/y", "/memory/s/x", "/memory/a/b/c/d"):
        with pytest.raises(InvalidInput) as info:
            p.write(path, 1)
        assert info.value.code == ErrorCode.INVALID_PATH
    assert p.version == 2


def test_remove_existing_and_missing() -> None:
    p = Process.create("svit://n", memory={"a": {"b": 1}}, scripts={"t": "(x)"})
    p.remove("/memory/a/b")
    p.remove("/lib/t")
    assert p.read("/memory/a") == {} and p.read("/lib/t") is None
    for missing in ("/memory/a/b", "/memory/nope", "/memory/nope/deeper", "/lib/t"):
        with pytest.raises(InvalidInput) as info:  # reference: invalid_path, not not_found
            p.remove(missing)
        assert info.value.code == ErrorCode.INVALID_PATH
    assert p.version == 2


def test_removing_memory_itself_is_an_error() -> None:
    p = Process.create("svit://n", memory={"a": 1})
    with pytest.raises(InvalidInput) as info:
        p.remove("/memory")
    assert info.value.code == ErrorCode.INVALID_PATH
    assert p.read("/memory") == {"a": 1} and p.version == 0


# -- script names ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["a", "Z", "0", "a_b-c.d", "...", "x" * 64, "A-Za-z0-9_.-"])
def test_valid_script_names(name: str) -> None:
    assert validate_script_name(name) == name
    p = Process.create("svit://n")
    p.write(f"/lib/{name}", Script("(x)"))
    assert name in p.scripts()


@pytest.mark.parametrize("name", ["x" * 65, "a b", "é", "a:b", "a+b", "a\x00", "\t", "a\n"])
def test_invalid_script_names(name: str) -> None:
    with pytest.raises(InvalidInput) as info:
        validate_script_name(name)
    assert info.value.code == ErrorCode.INVALID_SCRIPT_NAME
    p = Process.create("svit://n")
    with pytest.raises(InvalidInput) as info:
        p.write(f"/lib/{name}", Script("(x)"))
    assert info.value.code == ErrorCode.INVALID_SCRIPT_NAME
    with pytest.raises(InvalidInput):
        Process.create("svit://n", scripts={name: "(x)"})
    assert p.version == 0


@pytest.mark.parametrize("name", ["", ".", "..", None, 5])
def test_empty_dot_and_non_text_script_names_are_invalid(name: object) -> None:
    with pytest.raises(InvalidInput) as info:
        validate_script_name(name)
    assert info.value.code == ErrorCode.INVALID_SCRIPT_NAME


# -- /system ---------------------------------------------------------------------------------


def test_system_holds_identity_lineage_limits_runtime_and_outbox() -> None:
    limits = Limits(max_fuel=5000)
    p = Process.create("svit://sys/one", limits=limits)
    system = p.read("/system")
    assert isinstance(system, dict)
    assert {"identity", "lineage", "limits", "runtime", "outbox"} <= set(system)
    # never authenticated: process metadata is not a credential (reference identity)
    assert system["identity"] == {"address": "svit://sys/one", "authenticated": False}
    assert system["lineage"] == {"parent": None}
    assert system["limits"] == limits.to_dict()
    runtime = system["runtime"]
    assert isinstance(runtime, dict)
    assert runtime["language"] == LANGUAGE == "svit-lisp@2"
    assert runtime["snapshot_format"] == SNAPSHOT_FORMAT
    assert system["outbox"] == []
    assert Process.create("svit://sys/two").read("/system/identity/authenticated") is False


# -- process ids -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "pid",
    ["svit://a", "svit://tenant/agent-1", "svit://x?y=z#w", "svit://" + "a" * 249,
     "svit://" + "é" * 124, "svit://svit://"],
)
def test_valid_process_ids(pid: str) -> None:
    assert validate_process_id(pid) == pid
    assert Process.create(pid).id == pid


@pytest.mark.parametrize(
    "pid",
    ["svit://", "svit:/a", "svit:a", "http://a", "SVIT://a", " svit://a", "svit://a b",
     "svit://a\tb", "svit://a\n", "svit://a\u00a0b", "svit://a\x00", "svit://" + "a" * 250,
     "svit://" + "é" * 125, "svit://\ud800", "", None, 7, b"svit://a"],
    ids=repr,
)
def test_invalid_process_ids(pid: object) -> None:
    with pytest.raises(InvalidInput) as info:
        validate_process_id(pid)
    assert info.value.code == ErrorCode.INVALID_PROCESS_ID
    with pytest.raises(InvalidInput):
        Process.create(pid)  # type: ignore[arg-type]
    p = Process.create("svit://ok")
    with pytest.raises(InvalidInput):
        p.fork(pid)  # type: ignore[arg-type]
