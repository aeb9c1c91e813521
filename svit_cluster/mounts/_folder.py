"""The ``folder`` mount: a real directory, resolved one node at a time when a path is used.

Nothing below the root is read until a guest or the host addresses it
(reference: ``crates/svit/src/mounts.rs``, ``FolderMount``). The configured
root is the whole file-system authority the mount exercises:

* every path is resolved one validated segment at a time, each segment
  relative to the directory already opened (``openat``-style descriptors),
  with ``lstat`` and ``O_NOFOLLOW``: a symbolic link or a special file (fifo,
  socket, device) anywhere on the path is refused (``mount_denied``), and a
  link swapped in after the check is refused by the open itself, never followed;
* a leaf is read through a descriptor opened with ``O_NOFOLLOW | O_NONBLOCK``
  and checked with ``fstat`` to be a regular file, and at most
  ``max_text_bytes + 1`` bytes are ever read;
* a listing stops as soon as it holds more than ``max_value_entries`` names;
* a write replaces its target atomically (temporary file, ``fsync``, rename,
  directory ``fsync``), so readers and a crash see the old text or the new;
* ``.svit`` directly below the root holds the fence state
  (:class:`~svit_cluster.mounts._fence.FolderFence`): it is hidden from
  listings and every path into it is ``invalid_path``.

Differences from the reference: the fence (the reference has one owner), no
``git`` facts at the root, a removal of an absent leaf is a no-op (a committed
removal is re-applied after a takeover), and ``EACCES`` reads as
``mount_denied`` rather than an unreadable mount.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from svit_cluster.errors import (
    ErrorCode,
    InvalidInput,
    InvalidMount,
    LimitExceeded,
    MountDenied,
    MountUnavailable,
    SvitError,
)
from svit_cluster.mounts._fence import (
    DIRECTORY_FLAGS,
    RESERVED_NAME,
    TEMP_PREFIX,
    FolderFence,
    fsync_directory,
    replace_file,
)
from svit_cluster.mounts._model import MountDescriptor, MountNode, MountPath
from svit_cluster.values import Limits, Value

__all__ = ["FolderMount"]

#: Opens a leaf for reading: never through a link (``ELOOP``), never blocking
#: on a fifo swapped in after the ``lstat`` (``O_NONBLOCK``; the ``fstat``
#: check then refuses it), never acquiring a terminal.
_LEAF_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_READ_CHUNK = 1024 * 1024
_LINK_DENIED = "symbolic links are not followed inside a folder mount"
_SPECIAL_DENIED = "special files (fifo, socket, device) are not readable inside a folder mount"


def _is_reserved(name: str) -> bool:
    """Whether ``name``, directly below the root, is the reserved ``.svit``.

    Compared case-insensitively and without trailing dots and spaces: on a
    case-insensitive share (SMB, macOS) ``.SVIT`` or ``.svit.`` is the same
    directory, and a guest must not reach the fence state by another spelling.
    """
    return name.rstrip(". ").casefold() == RESERVED_NAME


def _denied(st: os.stat_result) -> MountDenied | None:
    """The refusal for a link or a special file; None for a directory or regular file."""
    if stat.S_ISLNK(st.st_mode):
        return MountDenied(_LINK_DENIED)
    if not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
        return MountDenied(_SPECIAL_DENIED)
    return None


def _fs_error(operation: str, exc: OSError) -> SvitError:
    """The error a guest sees for an OSError of ``operation`` (never a traceback).

    ``EACCES``/``EPERM``: the file system denies it (``mount_denied``, retrying
    does not help); ``ELOOP``: a link met by ``O_NOFOLLOW`` (``mount_denied``);
    anything else: the source failed (``mount_unavailable``).
    """
    if exc.errno in (errno.EACCES, errno.EPERM):
        return MountDenied(f"folder mount: the file system denies {operation}")
    if exc.errno == errno.ELOOP:
        return MountDenied(_LINK_DENIED)
    reason = errno.errorcode.get(exc.errno or 0, "error")
    return MountUnavailable(f"folder mount: {operation} failed ({reason})")


@contextmanager
def _fs(operation: str) -> Iterator[None]:
    try:
        yield
    except OSError as exc:
        raise _fs_error(operation, exc) from exc


def _invalid_path(message: str) -> InvalidInput:
    return InvalidInput(message, code=ErrorCode.INVALID_PATH)


def _node(st: os.stat_result) -> MountNode:
    # Whole seconds since the epoch; a time before it has no such number (None).
    modified: Value = st.st_mtime_ns // 1_000_000_000 if st.st_mtime_ns >= 0 else None
    if stat.S_ISDIR(st.st_mode):
        return MountNode("directory", {"content": "object", "modified_unix": modified})
    return MountNode("leaf", {"bytes": st.st_size, "content": "text/plain",
                              "modified_unix": modified})


@dataclass(frozen=True, slots=True)
class _Found:
    """A resolved node: ``dir_fd`` holds it under ``name`` (``name`` None: the
    node is ``dir_fd`` itself, the root); ``st`` is its ``lstat``."""

    dir_fd: int
    name: str | None
    st: os.stat_result


class FolderMount:
    """A directory of the host (or a share every owner's host reaches) as a mount.

    Args:
        root: the directory; canonicalized with ``os.path.realpath`` (every
            link in it resolved once, here, by the operator's choice).
        writable: grant writes (access ``read-write``) or not (``read``).
        fence_lock_timeout_s: the lock wait of the fences this mount hands
            out, in seconds (:class:`FolderFence`).

    Raises:
        InvalidMount: (``invalid_mount``) ``root`` is not a text path, does not
            exist, cannot be resolved or opened, is not a directory, or its
            canonical path is not UTF-8 (it is disclosed as the source).

    The descriptor is ``{kind: "folder", source: <canonical root>, locality:
    "local", access: "read-write" | "read"}``. Content is UTF-8 text: a leaf
    reads as a ``str``; a write takes a ``str``.
    """

    __slots__ = ("_descriptor", "_fence_timeout", "_root", "_writable")

    def __init__(self, root: str | os.PathLike[str], *, writable: bool,
                 fence_lock_timeout_s: float = 10.0) -> None:
        try:
            given = os.fspath(root)
        except TypeError:
            raise InvalidMount("folder mount root must be a path") from None
        if not isinstance(given, str):
            raise InvalidMount("folder mount root must be a text path")
        shown = given[:200]
        try:
            canonical = os.path.realpath(given, strict=True)
            # realpath resolved every link, so this is the directory itself.
            st = os.stat(canonical)
        except (OSError, ValueError):
            raise InvalidMount(f"folder mount root does not exist or cannot be resolved: "
                               f"{shown!r}") from None
        if not stat.S_ISDIR(st.st_mode):
            raise InvalidMount(f"folder mount root is not a directory: {canonical[:200]!r}")
        try:
            canonical.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidMount(f"folder mount root path is not UTF-8: {shown!r}") from None
        try:
            os.close(os.open(canonical, DIRECTORY_FLAGS))
        except OSError as exc:
            raise InvalidMount(f"folder mount root cannot be opened: {canonical[:200]!r} "
                               f"({errno.errorcode.get(exc.errno or 0, 'error')})") from None
        self._root = canonical
        self._writable = bool(writable)
        self._fence_timeout = fence_lock_timeout_s
        self._descriptor = MountDescriptor("folder", canonical, "local",
                                           "read-write" if self._writable else "read")

    @property
    def root(self) -> str:
        """The canonical root directory."""
        return self._root

    def descriptor(self) -> MountDescriptor:
        return self._descriptor

    # -- resolution ------------------------------------------------------------------

    def _check_path(self, path: MountPath) -> None:
        if path.segments and _is_reserved(path.segments[0]):
            raise _invalid_path(f"{path.display()[:200]} is reserved inside a folder mount")

    def _open_root(self) -> int:
        # The root was canonical when the mount was made; opening it without
        # following a link keeps a root replaced by a link afterwards out.
        try:
            return os.open(self._root, DIRECTORY_FLAGS)
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ENOTDIR):
                raise MountUnavailable(f"folder mount root is gone: {self._root[:200]!r}"
                                       ) from exc
            raise _fs_error("opening the root", exc) from exc

    @staticmethod
    def _lstat(dir_fd: int, name: str) -> os.stat_result | None:
        """``lstat`` of ``name`` in ``dir_fd``; None when nothing is there."""
        try:
            return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            raise _fs_error("stat", exc) from exc

    @classmethod
    def _open_child(cls, dir_fd: int, name: str) -> int | None:
        """Open the directory ``name`` in ``dir_fd``; None when it is no longer one.

        Raises:
            MountDenied: it was replaced by a link since it was checked (the
                ``O_NOFOLLOW | O_DIRECTORY`` open fails with ``ENOTDIR``; a
                fresh ``lstat`` tells a link from a file).
        """
        try:
            return os.open(name, DIRECTORY_FLAGS, dir_fd=dir_fd)
        except (FileNotFoundError, NotADirectoryError):
            st = cls._lstat(dir_fd, name)
            denied = _denied(st) if st is not None else None
            if denied is not None:
                raise denied from None
            return None
        except OSError as exc:
            raise _fs_error("opening a directory", exc) from exc

    def _walk(self, segments: tuple[str, ...]) -> tuple[int, _Found | None]:
        """Resolve ``segments`` from the root, one at a time.

        Returns:
            ``(fd, found)``: ``fd`` is the last directory opened (the caller
            closes it), ``found`` the node (its ``dir_fd`` is ``fd``) or None
            when a segment is missing or a non-final one is a regular file.

        Raises:
            MountDenied: a link or special file at any segment.
        """
        fd = self._open_root()
        try:
            with _fs("stat"):
                st = os.fstat(fd)
            last = len(segments) - 1
            for index, segment in enumerate(segments):
                child = self._lstat(fd, segment)
                if child is None:
                    return fd, None
                denied = _denied(child)
                if denied is not None:
                    raise denied
                if index == last:
                    return fd, _Found(fd, segment, child)
                if not stat.S_ISDIR(child.st_mode):
                    return fd, None
                opened = self._open_child(fd, segment)
                if opened is None:
                    return fd, None
                os.close(fd)
                fd = opened
            return fd, _Found(fd, None, st)
        except BaseException:
            os.close(fd)
            raise

    @contextmanager
    def _resolve(self, segments: tuple[str, ...]) -> Iterator[_Found | None]:
        fd, found = self._walk(segments)
        try:
            yield found
        finally:
            os.close(fd)

    @contextmanager
    def _directory(self, segments: tuple[str, ...]) -> Iterator[int | None]:
        """Yield an open descriptor of the directory at ``segments`` (None: no
        directory there); raises like :meth:`_walk`."""
        with self._resolve(segments) as found:
            if found is None or not stat.S_ISDIR(found.st.st_mode):
                yield None
            elif found.name is None:
                yield found.dir_fd
            else:
                fd = self._open_child(found.dir_fd, found.name)
                try:
                    yield fd
                finally:
                    if fd is not None:
                        os.close(fd)

    # -- reads -----------------------------------------------------------------------

    def stat(self, path: MountPath, limits: Limits) -> MountNode | None:
        """Facts of the node at ``path``: ``directory`` ``{content: "object",
        modified_unix}`` or ``leaf`` ``{bytes, content: "text/plain",
        modified_unix}`` (``bytes``: the size in bytes; ``modified_unix``: whole
        seconds since the epoch, None before it); None when nothing is there,
        including a path through a regular file.

        Raises:
            InvalidInput: (``invalid_path``) a path into the reserved ``.svit``.
            MountDenied: a symbolic link or special file on the path, or the
                file system denies access.
            MountUnavailable: the root is gone, or the file system failed.
        """
        self._check_path(path)
        with self._resolve(path.segments) as found:
            return None if found is None else _node(found.st)

    def list(self, path: MountPath, limits: Limits) -> list[str]:
        """Sorted child names of the directory at ``path`` (``.svit`` hidden at the root).

        Reads the directory only until it holds more than
        ``limits.max_value_entries`` names, so a huge directory costs at most
        that many entries. Links and special files are listed (by name only).

        Raises:
            InvalidInput: (``invalid_path``) no directory at ``path`` (nothing,
                or a leaf), or a path into ``.svit``.
            LimitExceeded: (``resource_limit_exceeded``, limit ``mount
                entries``) more than ``max_value_entries`` children.
            InvalidMount: (``invalid_mount``) a child name is not UTF-8.
            MountDenied, MountUnavailable: as :meth:`stat`.
        """
        self._check_path(path)
        names: list[str] = []
        with self._directory(path.segments) as fd:
            if fd is None:
                raise _invalid_path(f"cannot discover {path.display()[:200]}: "
                                    "no directory is there")
            with _fs("listing"), os.scandir(fd) as entries:
                for entry in entries:
                    name = entry.name
                    if (path.is_root and _is_reserved(name)) or name.startswith(TEMP_PREFIX):
                        # The fence state, and a write's temporary file left by
                        # a crash between create and rename, are not content.
                        continue
                    try:
                        name.encode("utf-8")
                    except UnicodeEncodeError:
                        raise InvalidMount("folder entry name is not UTF-8") from None
                    names.append(name)
                    if len(names) > limits.max_value_entries:
                        raise LimitExceeded("mount entries exceed max_value_entries",
                                            limit="mount entries")
        names.sort()
        return names

    def read(self, path: MountPath, limits: Limits) -> Value | None:
        """The text of the leaf at ``path``; None for a directory or nothing.

        Raises:
            LimitExceeded: (``resource_limit_exceeded``, limit ``mount leaf
                bytes``) more than ``max_text_bytes`` bytes; at most
                ``max_text_bytes + 1`` were read.
            InvalidMount: (``invalid_mount``) the content is not UTF-8.
            MountDenied: a link or special file on the path (also one swapped
                in after the check: the open refuses it), or access denied.
            InvalidInput, MountUnavailable: as :meth:`stat`.
        """
        self._check_path(path)
        with self._resolve(path.segments) as found:
            if found is None or found.name is None or stat.S_ISDIR(found.st.st_mode):
                return None
            try:
                fd = os.open(found.name, _LEAF_FLAGS, dir_fd=found.dir_fd)
            except FileNotFoundError:
                return None
            except OSError as exc:
                raise _fs_error("opening a leaf", exc) from exc
            try:
                with _fs("reading a leaf"):
                    st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode):
                    raise _denied(st) or MountDenied(_SPECIAL_DENIED)
                data = _read_bounded(fd, limits.max_text_bytes)
            finally:
                os.close(fd)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidMount("folder mount file is not UTF-8 text") from None

    # -- writes ----------------------------------------------------------------------

    def _check_args(self, path: MountPath, value: Value | None,
                    limits: Limits) -> bytes | None:
        """The bytes to write (None: a removal), after the checks that need no file system."""
        if not self._writable:
            raise MountDenied(f"folder mount {self._root[:120]!r} is read-only")
        self._check_path(path)
        if path.is_root:
            raise _invalid_path("cannot replace the root of a folder mount")
        if value is None:
            return None
        if not isinstance(value, str):
            raise InvalidInput("folder mount writes take text", code=ErrorCode.INVALID_VALUE)
        # A character is at least one byte: more characters than the bound
        # cannot fit, and are refused before encoding them.
        if len(value) > limits.max_text_bytes:
            raise LimitExceeded("mount leaf bytes exceed max_text_bytes",
                                limit="mount leaf bytes")
        try:
            data = value.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidInput("folder mount text is not valid Unicode",
                               code=ErrorCode.INVALID_VALUE) from None
        if len(data) > limits.max_text_bytes:
            raise LimitExceeded("mount leaf bytes exceed max_text_bytes",
                                limit="mount leaf bytes")
        return data

    def _target(self, fd: int, path: MountPath) -> os.stat_result | None:
        """``lstat`` of the last segment in its parent ``fd``; refuses what no
        write or removal may replace (a link, a special file, a directory)."""
        st = self._lstat(fd, path.segments[-1])
        if st is None:
            return None
        denied = _denied(st)
        if denied is not None:
            raise denied
        if stat.S_ISDIR(st.st_mode):
            raise _invalid_path(f"{path.display()[:200]} is a directory")
        return st

    def check_write(self, path: MountPath, value: Value | None, limits: Limits) -> None:
        """Check that writing ``value`` (None: removing) at ``path`` would apply; changes nothing.

        A write needs text of at most ``max_text_bytes`` UTF-8 bytes, a parent
        directory, and no directory at the target; a removal needs a regular
        file at the target.

        Raises:
            MountDenied: the mount is read-only, or a link or special file on
                the path or at the target.
            InvalidInput: (``invalid_path``) the root, a path into ``.svit``, no
                parent directory, a directory target, or (removal) no file at
                the target; (``invalid_value``) a value that is not text.
            LimitExceeded: (limit ``mount leaf bytes``) text over ``max_text_bytes``.
            MountUnavailable: the root is gone, or the file system failed.
        """
        data = self._check_args(path, value, limits)
        with self._directory(path.segments[:-1]) as fd:
            if fd is None:
                raise _invalid_path(f"no directory holds {path.display()[:200]} in the mount "
                                    "(a write creates no directories)")
            if self._target(fd, path) is None and data is None:
                raise _invalid_path(f"nothing to remove at {path.display()[:200]}")

    def write(self, path: MountPath, value: Value, limits: Limits) -> None:
        """Replace the leaf at ``path`` with the text ``value``, atomically and durably.

        Idempotent: writing the same text again leaves the same content. An
        existing file keeps its permission bits; a new one gets 0666 less the
        umask. A link at the target is refused; one swapped in after the check
        is replaced by the rename, never written through.

        Raises:
            the errors of :meth:`check_write` (checked again here: the folder
            may have changed since), and MountUnavailable when a write step
            fails (the old content is then intact).
        """
        data = self._check_args(path, value, limits)
        if data is None:
            raise InvalidInput("folder mount writes take text", code=ErrorCode.INVALID_VALUE)
        with self._directory(path.segments[:-1]) as fd:
            if fd is None:
                raise _invalid_path(f"no directory holds {path.display()[:200]} in the mount "
                                    "(a write creates no directories)")
            existing = self._target(fd, path)
            mode = stat.S_IMODE(existing.st_mode) & 0o777 if existing is not None else None
            with _fs("writing a leaf"):
                replace_file(fd, path.segments[-1], data, create_mode=0o666, mode=mode)

    def remove(self, path: MountPath, limits: Limits) -> None:
        """Remove the file at ``path``; nothing there (or no parent) does nothing,
        so a committed removal applied again converges.

        Raises:
            MountDenied: read-only, or a link or special file on the path or at
                the target (the link is not removed).
            InvalidInput: (``invalid_path``) the root, ``.svit``, or a directory.
            MountUnavailable: the root is gone, or the file system failed.
        """
        self._check_args(path, None, limits)
        with self._directory(path.segments[:-1]) as fd:
            if fd is None or self._target(fd, path) is None:
                return
            with _fs("removing a leaf"):
                try:
                    os.unlink(path.segments[-1], dir_fd=fd)
                except FileNotFoundError:
                    return
                fsync_directory(fd)

    def fence(self, process_id: str) -> FolderFence | None:
        """The fence of ``process_id`` on this folder (None when read-only: a
        mount that takes no writes needs no ordering of them)."""
        if not self._writable:
            return None
        return FolderFence(self._root, process_id, lock_timeout_s=self._fence_timeout)


def _read_bounded(fd: int, max_bytes: int) -> bytes:
    """Read to the end of ``fd``, but never more than ``max_bytes + 1`` bytes.

    Raises:
        LimitExceeded: (limit ``mount leaf bytes``) there were more than ``max_bytes``.
    """
    chunks: list[bytes] = []
    total = 0
    with _fs("reading a leaf"):
        while total <= max_bytes:
            chunk = os.read(fd, min(_READ_CHUNK, max_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    if total > max_bytes:
        raise LimitExceeded("mount leaf bytes exceed max_text_bytes", limit="mount leaf bytes")
    return b"".join(chunks)
