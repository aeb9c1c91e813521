"""FolderMount on real files: the reference behaviour, then hostile trees and races.

Reference: ``crates/svit/src/mounts.rs`` (``FolderMount`` and its tests). The
hostile cases prove the root is the whole authority: a sentinel outside the
root keeps its bytes and mtime, and no descriptor the mount opens is ever the
sentinel's inode.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from svit_cluster.errors import (
    ErrorCode,
    InvalidInput,
    InvalidMount,
    LimitExceeded,
    MountDenied,
    MountUnavailable,
)
from svit_cluster.mounts._fence import TEMP_PREFIX, FolderFence
from svit_cluster.mounts._folder import FolderMount
from svit_cluster.mounts._model import MountPath
from svit_cluster.values import Limits

LIMITS = Limits()


def p(text: str) -> MountPath:
    return MountPath.of(tuple(s for s in text.split("/") if s))


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "root"
    r.mkdir()
    return r


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory beside the root holding ``sentinel.txt``."""
    o = tmp_path / "outside"
    o.mkdir()
    (o / "sentinel.txt").write_text("secret outside the root")
    return o


def fingerprint(path: Path) -> tuple[bytes, int]:
    st = os.stat(path)
    return path.read_bytes(), st.st_mtime_ns


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """Every ``(st_dev, st_ino)`` the code under test opens with ``os.open``."""
    seen: list[tuple[int, int]] = []
    real_open = os.open

    def spy(path: Any, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        fd = real_open(path, flags, mode, dir_fd=dir_fd)
        st = os.fstat(fd)
        seen.append((st.st_dev, st.st_ino))
        return fd

    monkeypatch.setattr(os, "open", spy)
    return seen


def inode(path: Path) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_dev, st.st_ino


def swap_before_open(monkeypatch: pytest.MonkeyPatch, when: Callable[[Any, int], bool],
                     swap: Callable[[], None]) -> list[bool]:
    """Patch ``os.open`` to run ``swap`` once, just before the first open that
    ``when(path, flags)`` selects (the race window after the mount's lstat)."""
    real_open = os.open
    done: list[bool] = []

    def racing(path: Any, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        if not done and when(path, flags):
            done.append(True)
            swap()
        return real_open(path, flags, mode, dir_fd=dir_fd)

    monkeypatch.setattr(os, "open", racing)
    return done


# -- construction and descriptor -------------------------------------------------------


def test_descriptor_names_the_canonical_root(tmp_path: Path, root: Path) -> None:
    (tmp_path / "alias").symlink_to(root)
    ro = FolderMount(tmp_path / "alias", writable=False)
    rw = FolderMount(str(root), writable=True)
    assert ro.descriptor().to_value() == {"access": "read", "kind": "folder",
                                          "locality": "local", "source": str(root.resolve())}
    assert rw.descriptor().access == "read-write"
    assert ro.root == rw.root == str(root.resolve())


@pytest.mark.parametrize("make", ["missing", "file", "bytes", "nul"])
def test_bad_roots_are_invalid_mounts(tmp_path: Path, make: str) -> None:
    target: Any
    if make == "missing":
        target, needle = tmp_path / "nope", "does not exist"
    elif make == "file":
        target = tmp_path / "f.txt"
        target.write_text("x")
        needle = "not a directory"
    elif make == "bytes":
        target, needle = os.fsencode(tmp_path), "text path"
    else:
        target, needle = f"{tmp_path}/a\0b", "does not exist"
    with pytest.raises(InvalidMount) as info:
        FolderMount(target, writable=False)
    assert needle in info.value.message
    assert info.value.code == ErrorCode.INVALID_MOUNT


# -- reference behaviour ---------------------------------------------------------------


def test_folder_mounts_are_lazy_and_expose_node_facts(root: Path) -> None:
    (root / "docs").mkdir()
    (root / "docs" / "readme.md").write_text("hello")
    os.utime(root / "docs" / "readme.md", (1_700_000_000.7, 1_700_000_000.7))
    mount = FolderMount(root, writable=False)

    directory = mount.stat(p("docs"), LIMITS)
    leaf = mount.stat(p("docs/readme.md"), LIMITS)
    assert directory is not None and directory.kind == "directory"
    assert directory.facts["content"] == "object"
    assert isinstance(directory.facts["modified_unix"], int)
    assert leaf is not None and leaf.kind == "leaf"
    assert leaf.facts == {"bytes": 5, "content": "text/plain", "modified_unix": 1_700_000_000}
    root_node = mount.stat(p(""), LIMITS)
    assert root_node is not None and root_node.kind == "directory"
    assert mount.list(p("docs"), LIMITS) == ["readme.md"]
    assert mount.read(p("docs/readme.md"), LIMITS) == "hello"
    assert mount.stat(p("docs/absent.md"), LIMITS) is None
    assert mount.read(p("docs/absent.md"), LIMITS) is None
    # A directory has no content (the registry falls back to its facts).
    assert mount.read(p("docs"), LIMITS) is None
    assert mount.read(p(""), LIMITS) is None


def test_laziness_a_bad_subtree_fails_only_when_addressed(root: Path) -> None:
    (root / "good.txt").write_text("ok")
    (root / "bad").mkdir()
    (root / "bad" / "loop").symlink_to("/")
    mount = FolderMount(root, writable=False)  # does not walk the tree
    assert mount.read(p("good.txt"), LIMITS) == "ok"
    with pytest.raises(MountDenied):
        mount.stat(p("bad/loop"), LIMITS)


def test_listing_is_sorted_and_nested_reads_resolve(root: Path) -> None:
    for name in ["b", "a", "C", "é", "10", "2"]:
        (root / name).write_text(name)
    (root / "sub").mkdir()
    (root / "sub" / "deeper").mkdir()
    (root / "sub" / "deeper" / "x.txt").write_text("deep")
    mount = FolderMount(root, writable=False)
    assert mount.list(p(""), LIMITS) == sorted(["b", "a", "C", "é", "10", "2", "sub"])
    assert mount.read(p("sub/deeper/x.txt"), LIMITS) == "deep"
    assert mount.read(p("é"), LIMITS) == "é"


def test_a_path_through_a_file_is_nothing(root: Path) -> None:
    (root / "f.txt").write_text("x")
    mount = FolderMount(root, writable=True)
    assert mount.stat(p("f.txt/inner"), LIMITS) is None
    assert mount.read(p("f.txt/inner"), LIMITS) is None
    with pytest.raises(InvalidInput) as info:
        mount.list(p("f.txt/inner"), LIMITS)
    assert info.value.code == ErrorCode.INVALID_PATH
    with pytest.raises(InvalidInput) as info:
        mount.check_write(p("f.txt/inner"), "y", LIMITS)
    assert info.value.code == ErrorCode.INVALID_PATH


@pytest.mark.parametrize("where", ["missing", "f.txt"])
def test_listing_nothing_or_a_leaf_is_invalid_path(root: Path, where: str) -> None:
    (root / "f.txt").write_text("x")
    with pytest.raises(InvalidInput) as info:
        FolderMount(root, writable=False).list(p(where), LIMITS)
    assert info.value.code == ErrorCode.INVALID_PATH


def test_read_only_folder_denies_writes_and_removals(root: Path) -> None:
    (root / "note.txt").write_text("original")
    before = fingerprint(root / "note.txt")
    mount = FolderMount(root, writable=False)
    for attempt in (lambda: mount.check_write(p("note.txt"), "replaced", LIMITS),
                    lambda: mount.check_write(p("note.txt"), None, LIMITS),
                    lambda: mount.write(p("note.txt"), "replaced", LIMITS),
                    lambda: mount.remove(p("note.txt"), LIMITS)):
        with pytest.raises(MountDenied):
            attempt()
    assert fingerprint(root / "note.txt") == before
    assert mount.fence("svit://t/p") is None


def test_writable_folder_replaces_and_removes_leaves(root: Path) -> None:
    (root / "note.txt").write_text("original")
    mount = FolderMount(root, writable=True)
    mount.check_write(p("note.txt"), "replaced", LIMITS)
    assert (root / "note.txt").read_text() == "original"  # a check changes nothing
    mount.write(p("note.txt"), "replaced", LIMITS)
    assert (root / "note.txt").read_text() == "replaced"
    mount.write(p("new.txt"), "fresh ✓", LIMITS)
    assert (root / "new.txt").read_text(encoding="utf-8") == "fresh ✓"
    mount.check_write(p("note.txt"), None, LIMITS)
    mount.remove(p("note.txt"), LIMITS)
    assert not (root / "note.txt").exists()
    # No temporary file is left behind.
    assert sorted(os.listdir(root)) == ["new.txt"]


def test_rewriting_the_same_text_converges_and_keeps_the_mode(root: Path) -> None:
    (root / "note.txt").write_text("v0")
    os.chmod(root / "note.txt", 0o640)
    mount = FolderMount(root, writable=True)
    for _ in range(3):
        mount.write(p("note.txt"), "v1", LIMITS)
    assert (root / "note.txt").read_text() == "v1"
    assert stat.S_IMODE(os.stat(root / "note.txt").st_mode) == 0o640
    assert os.listdir(root) == ["note.txt"]


def test_removing_an_absent_leaf_converges_but_checking_it_does_not(root: Path) -> None:
    mount = FolderMount(root, writable=True)
    mount.remove(p("gone.txt"), LIMITS)
    mount.remove(p("no/parent/gone.txt"), LIMITS)
    with pytest.raises(InvalidInput) as info:
        mount.check_write(p("gone.txt"), None, LIMITS)
    assert info.value.code == ErrorCode.INVALID_PATH


def test_write_checks(root: Path) -> None:
    (root / "dir").mkdir()
    (root / "dir" / "keep.txt").write_text("keep")
    mount = FolderMount(root, writable=True)
    small = Limits(max_text_bytes=4)

    def code_of(call: Callable[[], None]) -> str:
        with pytest.raises((InvalidInput, LimitExceeded)) as info:
            call()
        return str(info.value.code) + ":" + str(info.value.fields.get("limit", ""))

    assert code_of(lambda: mount.check_write(p(""), "x", LIMITS)) == "invalid_path:"
    assert code_of(lambda: mount.write(p(""), "x", LIMITS)) == "invalid_path:"
    assert code_of(lambda: mount.remove(p(""), LIMITS)) == "invalid_path:"
    assert code_of(lambda: mount.check_write(p("dir"), "x", LIMITS)) == "invalid_path:"
    assert code_of(lambda: mount.write(p("dir"), "x", LIMITS)) == "invalid_path:"
    assert code_of(lambda: mount.remove(p("dir"), LIMITS)) == "invalid_path:"
    assert code_of(lambda: mount.check_write(p("dir"), None, LIMITS)) == "invalid_path:"
    assert code_of(lambda: mount.check_write(p("nope/x.txt"), "x", LIMITS)) == "invalid_path:"
    assert code_of(lambda: mount.write(p("nope/x.txt"), "x", LIMITS)) == "invalid_path:"
    for bad in (1, 1.5, True, ["x"], {"a": "b"}):
        assert code_of(lambda bad=bad: mount.check_write(p("v.txt"), bad, LIMITS)) \
            == "invalid_value:"
    assert code_of(lambda: mount.write(p("v.txt"), None, LIMITS)) == "invalid_value:"
    assert code_of(lambda: mount.check_write(p("v.txt"), "\ud800", LIMITS)) == "invalid_value:"
    over = "resource_limit_exceeded:mount leaf bytes"
    assert code_of(lambda: mount.check_write(p("v.txt"), "12345", small)) == over
    assert code_of(lambda: mount.check_write(p("v.txt"), "ééé", small)) == over  # 6 bytes
    assert code_of(lambda: mount.write(p("v.txt"), "12345", small)) == over
    mount.write(p("v.txt"), "1234", small)  # exactly the bound
    mount.write(p("v.txt"), "éé", small)  # 4 bytes
    assert (root / "v.txt").read_text(encoding="utf-8") == "éé"
    assert sorted(os.listdir(root)) == ["dir", "v.txt"]
    assert os.listdir(root / "dir") == ["keep.txt"]


def test_a_file_the_file_system_denies_reads_as_mount_denied(
        root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """EACCES from the file system is mount_denied. Tests run as root, which
    ignores permission bits, so the refusal is injected where the leaf is opened."""
    (root / "locked.txt").write_text("x")
    os.chmod(root / "locked.txt", 0)
    real_open = os.open

    def deny(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if path == "locked.txt":
            raise PermissionError(errno.EACCES, "Permission denied", path)
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", deny)
    with pytest.raises(MountDenied):
        FolderMount(root, writable=False).read(p("locked.txt"), LIMITS)


def test_a_root_that_vanished_is_unavailable(tmp_path: Path, root: Path) -> None:
    mount = FolderMount(root, writable=True)
    root.rmdir()
    with pytest.raises(MountUnavailable):
        mount.stat(p(""), LIMITS)
    with pytest.raises(MountUnavailable):
        mount.write(p("x.txt"), "x", LIMITS)


def test_a_root_replaced_by_a_link_is_refused(tmp_path: Path, root: Path,
                                              outside: Path) -> None:
    mount = FolderMount(root, writable=True)
    root.rmdir()
    root.symlink_to(outside)
    before = fingerprint(outside / "sentinel.txt")
    with pytest.raises((MountUnavailable, MountDenied)):
        mount.read(p("sentinel.txt"), LIMITS)
    with pytest.raises((MountUnavailable, MountDenied)):
        mount.write(p("sentinel.txt"), "owned", LIMITS)
    assert fingerprint(outside / "sentinel.txt") == before


# -- hostile trees ---------------------------------------------------------------------


@pytest.mark.parametrize("target", ["/", "sentinel"])
def test_a_link_at_the_leaf_is_denied_for_every_operation(
        root: Path, outside: Path, opened: list[tuple[int, int]], target: str) -> None:
    sentinel = outside / "sentinel.txt"
    (root / "link").symlink_to("/" if target == "/" else sentinel)
    before = fingerprint(sentinel)
    mount = FolderMount(root, writable=True)
    for op in (lambda: mount.stat(p("link"), LIMITS),
               lambda: mount.read(p("link"), LIMITS),
               lambda: mount.list(p("link"), LIMITS),
               lambda: mount.check_write(p("link"), "owned", LIMITS),
               lambda: mount.check_write(p("link"), None, LIMITS),
               lambda: mount.write(p("link"), "owned", LIMITS),
               lambda: mount.remove(p("link"), LIMITS)):
        with pytest.raises(MountDenied) as info:
            op()
        assert "symbolic links" in info.value.message
    assert fingerprint(sentinel) == before
    assert (root / "link").is_symlink()  # the removal did not remove the link either
    assert inode(sentinel) not in opened
    assert inode(Path("/")) not in opened
    # The link is listed by name, never followed.
    assert mount.list(p(""), LIMITS) == ["link"]


@pytest.mark.parametrize("target", ["/", "outside"])
def test_a_link_as_an_intermediate_directory_is_denied(
        root: Path, outside: Path, opened: list[tuple[int, int]], target: str) -> None:
    sentinel = outside / "sentinel.txt"
    (root / "d").symlink_to("/" if target == "/" else outside)
    before = fingerprint(sentinel)
    mount = FolderMount(root, writable=True)
    inner = "etc/hostname" if target == "/" else "sentinel.txt"
    for op in (lambda: mount.stat(p(f"d/{inner}"), LIMITS),
               lambda: mount.read(p(f"d/{inner}"), LIMITS),
               lambda: mount.list(p("d"), LIMITS),
               lambda: mount.check_write(p("d/new.txt"), "x", LIMITS),
               lambda: mount.write(p("d/new.txt"), "x", LIMITS),
               lambda: mount.write(p(f"d/{inner}"), "x", LIMITS),
               lambda: mount.remove(p(f"d/{inner}"), LIMITS)):
        with pytest.raises(MountDenied):
            op()
    assert fingerprint(sentinel) == before
    assert sorted(os.listdir(outside)) == ["sentinel.txt"]
    assert not Path("/new.txt").exists()
    assert inode(sentinel) not in opened and inode(outside) not in opened


def test_a_link_swapped_in_as_the_write_target_is_replaced_not_followed(
        monkeypatch: pytest.MonkeyPatch, root: Path, outside: Path) -> None:
    sentinel = outside / "sentinel.txt"
    (root / "note.txt").write_text("original")
    before = fingerprint(sentinel)

    def swap() -> None:
        os.unlink(root / "note.txt")
        os.symlink(sentinel, root / "note.txt")

    done = swap_before_open(monkeypatch,
                            lambda path, _f: str(path).startswith(TEMP_PREFIX), swap)
    FolderMount(root, writable=True).write(p("note.txt"), "from the guest", LIMITS)
    assert done  # the race happened after the mount's checks
    assert fingerprint(sentinel) == before
    assert not (root / "note.txt").is_symlink()
    assert (root / "note.txt").read_text() == "from the guest"


def test_a_link_swapped_in_before_the_leaf_open_is_refused_by_o_nofollow(
        monkeypatch: pytest.MonkeyPatch, root: Path, outside: Path) -> None:
    sentinel = outside / "sentinel.txt"
    (root / "note.txt").write_text("original")

    def swap() -> None:
        os.unlink(root / "note.txt")
        os.symlink(sentinel, root / "note.txt")

    done = swap_before_open(monkeypatch, lambda path, _f: path == "note.txt", swap)
    with pytest.raises(MountDenied):
        FolderMount(root, writable=False).read(p("note.txt"), LIMITS)
    assert done


def test_a_link_swapped_in_for_an_intermediate_directory_is_refused(
        monkeypatch: pytest.MonkeyPatch, root: Path, outside: Path) -> None:
    (root / "d").mkdir()
    (root / "d" / "sentinel.txt").write_text("inside")

    def swap() -> None:
        os.rename(root / "d", root / "d-moved")
        os.symlink(outside, root / "d")

    done = swap_before_open(monkeypatch, lambda path, _f: path == "d", swap)
    mount = FolderMount(root, writable=True)
    with pytest.raises(MountDenied):
        mount.write(p("d/new.txt"), "x", LIMITS)
    assert done
    assert sorted(os.listdir(outside)) == ["sentinel.txt"]
    monkeypatch.undo()
    with pytest.raises(MountDenied):
        mount.read(p("d/sentinel.txt"), LIMITS)


@pytest.mark.timeout(20)
def test_a_fifo_is_denied_without_blocking(root: Path) -> None:
    os.mkfifo(root / "pipe")
    mount = FolderMount(root, writable=True)
    for op in (lambda: mount.stat(p("pipe"), LIMITS),
               lambda: mount.read(p("pipe"), LIMITS),
               lambda: mount.list(p("pipe"), LIMITS),
               lambda: mount.write(p("pipe"), "x", LIMITS),
               lambda: mount.remove(p("pipe"), LIMITS)):
        with pytest.raises(MountDenied) as info:
            op()
        assert "special files" in info.value.message
    assert stat.S_ISFIFO(os.lstat(root / "pipe").st_mode)


@pytest.mark.timeout(20)
def test_a_fifo_swapped_in_before_the_open_neither_blocks_nor_reads(
        monkeypatch: pytest.MonkeyPatch, root: Path) -> None:
    (root / "note.txt").write_text("original")

    def swap() -> None:
        os.unlink(root / "note.txt")
        os.mkfifo(root / "note.txt")

    done = swap_before_open(monkeypatch, lambda path, _f: path == "note.txt", swap)
    with pytest.raises(MountDenied):
        FolderMount(root, writable=False).read(p("note.txt"), LIMITS)
    assert done


def test_a_socket_is_denied(root: Path) -> None:
    import socket

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    cwd = os.getcwd()
    try:
        os.chdir(root)  # a socket path is limited to ~108 bytes; bind it relative
        sock.bind("s")
    finally:
        os.chdir(cwd)
    try:
        with pytest.raises(MountDenied):
            FolderMount(root, writable=False).read(p("s"), LIMITS)
    finally:
        sock.close()


def test_a_huge_sparse_file_is_refused_after_reading_only_the_bound(
        monkeypatch: pytest.MonkeyPatch, root: Path) -> None:
    big = root / "big.txt"
    big.touch()
    os.truncate(big, 100 * 1024 * 1024)
    read_bytes: list[int] = []
    real_read = os.read

    def counting(fd: int, n: int) -> bytes:
        chunk = real_read(fd, n)
        read_bytes.append(len(chunk))
        return chunk

    monkeypatch.setattr(os, "read", counting)
    mount = FolderMount(root, writable=False)
    started = time.monotonic()
    with pytest.raises(LimitExceeded) as info:
        mount.read(p("big.txt"), LIMITS)
    assert info.value.fields["limit"] == "mount leaf bytes"
    assert sum(read_bytes) == LIMITS.max_text_bytes + 1
    assert time.monotonic() - started < 5
    node = mount.stat(p("big.txt"), LIMITS)
    assert node is not None and node.facts["bytes"] == 100 * 1024 * 1024


def test_a_leaf_at_exactly_the_bound_reads(root: Path) -> None:
    (root / "edge.txt").write_bytes(b"x" * 16)
    (root / "over.txt").write_bytes(b"x" * 17)
    mount = FolderMount(root, writable=False)
    assert mount.read(p("edge.txt"), Limits(max_text_bytes=16)) == "x" * 16
    with pytest.raises(LimitExceeded):
        mount.read(p("over.txt"), Limits(max_text_bytes=16))


def test_a_listing_stops_at_the_entry_bound(monkeypatch: pytest.MonkeyPatch,
                                            root: Path) -> None:
    for i in range(1000):
        (root / f"f{i:04}").touch()
    yielded: list[str] = []
    real_scandir = os.scandir

    class Counting:
        def __init__(self, fd: int) -> None:
            self._it = real_scandir(fd)

        def __enter__(self) -> Counting:
            return self

        def __exit__(self, *exc: object) -> None:
            self._it.close()

        def __iter__(self) -> Counting:
            return self

        def __next__(self) -> os.DirEntry[str]:
            entry = next(self._it)
            yielded.append(entry.name)
            return entry

    monkeypatch.setattr(os, "scandir", Counting)
    mount = FolderMount(root, writable=False)
    with pytest.raises(LimitExceeded) as info:
        mount.list(p(""), Limits(max_value_entries=3))
    assert info.value.fields["limit"] == "mount entries"
    assert len(yielded) == 4
    monkeypatch.undo()
    exact = root / "exact"
    exact.mkdir()
    for name in "abc":
        (exact / name).touch()
    assert mount.list(p("exact"), Limits(max_value_entries=3)) == ["a", "b", "c"]


def test_the_reserved_svit_directory_is_invisible_and_unaddressable(root: Path) -> None:
    (root / ".svit" / "fences").mkdir(parents=True)
    (root / ".svit" / "fences" / "x.json").write_text("{}")
    (root / "sub").mkdir()
    (root / "sub" / ".svit").write_text("an ordinary name below the root")
    mount = FolderMount(root, writable=True)
    assert mount.list(p(""), LIMITS) == ["sub"]
    # Hidden entries do not count against the bound either.
    assert mount.list(p(""), Limits(max_value_entries=1)) == ["sub"]
    for spelling in (".svit", ".svit/fences", ".svit/fences/x.json", ".SVIT", ".Svit.",
                     ".svit /fences"):
        for op in (lambda s=spelling: mount.stat(p(s), LIMITS),
                   lambda s=spelling: mount.read(p(s), LIMITS),
                   lambda s=spelling: mount.list(p(s), LIMITS),
                   lambda s=spelling: mount.check_write(p(s), "{}", LIMITS),
                   lambda s=spelling: mount.write(p(s), "{}", LIMITS),
                   lambda s=spelling: mount.remove(p(s), LIMITS)):
            with pytest.raises(InvalidInput) as info:
                op()
            assert info.value.code == ErrorCode.INVALID_PATH
    assert (root / ".svit" / "fences" / "x.json").read_text() == "{}"
    assert mount.read(p("sub/.svit"), LIMITS) == "an ordinary name below the root"


def test_a_non_utf8_file_is_an_invalid_mount(root: Path) -> None:
    (root / "latin1.txt").write_bytes("café".encode("latin-1"))
    with pytest.raises(InvalidMount) as info:
        FolderMount(root, writable=False).read(p("latin1.txt"), LIMITS)
    assert "UTF-8" in info.value.message


def test_a_non_utf8_name_fails_the_listing(root: Path) -> None:
    fd = os.open(os.fsencode(root) + b"/bad-\xff", os.O_CREAT | os.O_WRONLY, 0o600)
    os.close(fd)
    mount = FolderMount(root, writable=False)
    with pytest.raises(InvalidMount) as info:
        mount.list(p(""), LIMITS)
    assert "UTF-8" in info.value.message


def test_no_descriptor_leaks_on_success_or_refusal(root: Path, outside: Path) -> None:
    (root / "d").mkdir()
    (root / "d" / "x.txt").write_text("x")
    (root / "d" / "link").symlink_to(outside)
    os.mkfifo(root / "d" / "pipe")
    mount = FolderMount(root, writable=True)
    before = sorted(os.listdir("/proc/self/fd"))
    for _ in range(20):
        mount.read(p("d/x.txt"), LIMITS)
        mount.list(p("d"), LIMITS)
        mount.stat(p("d/x.txt"), LIMITS)
        mount.write(p("d/y.txt"), "y", LIMITS)
        mount.remove(p("d/y.txt"), LIMITS)
        for bad in ("d/link/sentinel.txt", "d/pipe", "d/link"):
            with pytest.raises(MountDenied):
                mount.read(p(bad), LIMITS)
        with pytest.raises(LimitExceeded):
            mount.list(p("d"), Limits(max_value_entries=1))
    assert sorted(os.listdir("/proc/self/fd")) == before


def test_a_writable_folder_hands_out_a_fence_on_its_root(root: Path) -> None:
    fence = FolderMount(root, writable=True, fence_lock_timeout_s=1.5).fence("svit://t/p")
    assert isinstance(fence, FolderFence)
    assert fence.state_path.startswith(str(root.resolve()) + "/.svit/fences/")
    assert fence.begin(3) == -1
    # The fence state is written below the root, and stays invisible to guests.
    assert os.path.exists(fence.state_path)
    assert FolderMount(root, writable=True).list(p(""), LIMITS) == []
