"""The fence of one process on one writable folder mount, kept in the folder itself.

Successive owners of a process may run on different hosts that all reach the
same shared directory. Each applies the process's committed mount writes after
its commit, so two owners could both be writing: the one that took over, and a
stale one (frozen after its commit, resumed after the takeover). The fence
orders them the way the commit log does:

* the state of one (process, folder) pair is one JSON file,
  ``<root>/.svit/fences/<sha256(process_id)>.json`` = ``{"process_id": str,
  "token": int, "applied_version": int}``: the highest fencing token the folder
  has seen and the highest committed version whose writes were applied (the
  watermark; -1: none);
* every read-modify-write of that state, and every apply step, runs under an
  exclusive ``flock`` of the sibling ``<sha256(process_id)>.lock``: the check
  "is my token still the highest?" and the writes it admits are one critical
  section, so no newer owner can take the fence between them;
* a newer owner announces itself before it waits for the lock, in
  ``<sha256(process_id)>.want`` (the highest token that asked): an apply
  under a lower token then refuses at once, so an owner applying a long
  backlog cannot starve the takeover. A waiter holds nothing while it
  waits: an owner frozen (SIGSTOP) while waiting for the lock blocks no one;
  one frozen *holding* it blocks a takeover until it resumes or dies (the
  takeover fails after ``lock_timeout_s`` and is retried);
* a token lower than the stored one applies nothing (:meth:`FolderFence.apply`
  returns False) and cannot take the fence (:meth:`FolderFence.begin` raises).

The shared directory must give ``flock`` and ``rename`` their local meaning on
every host that mounts it (a local file system; NFSv4, where the Linux client
maps ``flock`` onto byte-range locks the server arbitrates). ``.svit`` directly
below the root is invisible to guests (``svit_cluster.mounts._folder``), so no
guest write can forge the state.

This module also holds the two file-system helpers the folder mount shares:
:func:`open_directory` (never follows a link) and :func:`replace_file` (atomic,
durable replacement).
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import secrets
import stat
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

from svit_cluster.errors import MountUnavailable

__all__ = ["FENCE_DIR", "RESERVED_NAME", "TEMP_PREFIX", "FolderFence", "fsync_directory",
           "open_directory", "replace_file"]

#: The name directly below a folder mount's root that holds the runtime's state.
RESERVED_NAME = ".svit"
#: Where the fence states live, relative to the root.
FENCE_DIR = (RESERVED_NAME, "fences")
#: Prefix of the temporary files :func:`replace_file` creates next to its target.
TEMP_PREFIX = ".svit-tmp-"

#: Opens a directory and nothing else; a symbolic link in the last component
#: fails (``ENOTDIR`` on Linux) instead of being followed.
DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_STATE_KEYS = frozenset({"process_id", "token", "applied_version"})
#: A state file is about 150 bytes; anything past this bound is not one.
_MAX_STATE_BYTES = 64 * 1024
_LOCK_FLAGS = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
#: Lock polling backs off from 1 ms to 20 ms between attempts.
_POLL_FIRST_S = 0.001
_POLL_MAX_S = 0.02


def open_directory(name: str, dir_fd: int | None, *, create: bool = False) -> int:
    """Open the directory ``name`` (relative to ``dir_fd``; None: to the working
    directory or absolute) without following a symbolic link.

    Args:
        name: one path component, or an absolute canonical path when ``dir_fd``
            is None.
        dir_fd: an open directory, or None.
        create: make the directory first (mode 0700) when it is absent.

    Returns:
        A new descriptor (close-on-exec) the caller closes.

    Raises:
        OSError: as ``mkdir``/``open`` raise it; ``ENOTDIR`` when ``name`` is a
            link or not a directory.
    """
    if create:
        try:
            os.mkdir(name, 0o700, dir_fd=dir_fd)
        except FileExistsError:
            pass
    return os.open(name, DIRECTORY_FLAGS, dir_fd=dir_fd)


def fsync_directory(dir_fd: int) -> None:
    """Make the entries of ``dir_fd`` (a rename, an unlink) durable.

    A file system that cannot sync a directory (``EINVAL``) has nothing more
    to make durable there, so that error is ignored; any other is raised.
    """
    try:
        os.fsync(dir_fd)
    except OSError as exc:
        if exc.errno != errno.EINVAL:
            raise


def replace_file(dir_fd: int, name: str, data: bytes, *, create_mode: int,
                 mode: int | None = None) -> None:
    """Atomically and durably replace ``name`` in ``dir_fd`` with ``data``.

    A reader sees the old content or the new one, never a mix, and after a
    crash the name holds one of them: the bytes go to a fresh temporary file
    in the same directory (``O_CREAT | O_EXCL | O_NOFOLLOW``, so it can be
    neither an existing file nor a link), are synced, renamed onto ``name``
    (a rename replaces a link at ``name`` itself and never writes through it)
    and the directory is synced. A failure removes the temporary file.

    Args:
        dir_fd: the directory holding ``name``.
        name: one path component.
        data: the complete new content.
        create_mode: the permission bits of a new file (before the umask).
        mode: when given, the exact permission bits to set (keeps an existing
            file's mode across the replacement).

    Raises:
        OSError: the file system refused a step (nothing was replaced unless
            the rename itself succeeded).
    """
    temp = TEMP_PREFIX + secrets.token_hex(8)
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 create_mode, dir_fd=dir_fd)
    try:
        try:
            if mode is not None:
                os.fchmod(fd, mode)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        try:
            os.unlink(temp, dir_fd=dir_fd)
        except OSError:
            pass
        raise
    fsync_directory(dir_fd)


class FolderFence:
    """The fence of ``process_id`` on the folder at ``root`` (a :class:`MountFence`).

    Args:
        root: the folder mount's canonical root (``FolderMount`` passes it).
        process_id: the process whose committed writes this fence orders.
        lock_timeout_s: how long one operation waits for the lock, in seconds
            (default 10); a holder that keeps it longer (a stalled owner)
            makes the operation fail with :class:`MountUnavailable`, to be
            retried.

    Attributes:
        state_path: ``<root>/.svit/fences/<sha256(process_id) hex>.json``.
        lock_path: the same with ``.lock`` in place of ``.json`` (and
            ``.want`` beside it, the highest token that asked for the fence).

    Every operation opens the directories again (without following links,
    creating them with mode 0700), takes the lock, and releases it by closing
    the lock file; the state, lock and want files are created with mode 0600.
    The rule is the commit log's: a lower fencing token than one already seen
    changes nothing. The reference (``crates/svit/src/mounts.rs``,
    ``FolderMount``) has a single owner and no fence.
    """

    __slots__ = ("_digest", "_process_id", "_root", "_timeout", "lock_path", "state_path")

    def __init__(self, root: str, process_id: str, *, lock_timeout_s: float = 10.0) -> None:
        if not lock_timeout_s >= 0:
            raise ValueError("lock_timeout_s must be a non-negative number of seconds")
        self._root = root
        self._process_id = process_id
        # The file name is a digest: a process id may hold characters a file
        # name cannot, and its length is bounded by nothing the file system knows.
        self._digest = hashlib.sha256(process_id.encode("utf-8", "surrogatepass")).hexdigest()
        self._timeout = float(lock_timeout_s)
        fences = os.path.join(root, *FENCE_DIR)
        self.state_path = os.path.join(fences, f"{self._digest}.json")
        self.lock_path = os.path.join(fences, f"{self._digest}.lock")

    # -- the MountFence contract ---------------------------------------------------

    def begin(self, token: int) -> int:
        """Take the fence with ``token`` and return the watermark (-1: nothing applied).

        Raises:
            MountUnavailable: the stored token is higher (this owner is stale;
                nothing changed), the lock was not granted within
                ``lock_timeout_s``, the state is corrupt, or the file system
                failed.
            ValueError: ``token`` is not a non-negative integer.
        """
        _check_int("token", token, 0)
        self._announce(token)
        with self._locked() as fences:
            state = self._read(fences)
            stored, applied = state if state is not None else (0, -1)
            if stored > token:
                raise MountUnavailable(
                    f"folder mount {self._root[:200]!r} is fenced by a newer owner "
                    f"(token {stored} > {token})", token=token, fence=stored)
            if state is None or stored != token:
                self._write(fences, token, applied)
            return applied

    def apply(self, token: int, version: int, step: Callable[[], None]) -> bool:
        """Run ``step`` (the writes of the committed ``version``) unless fenced
        or already applied, then advance the watermark to ``version``.

        ``step`` runs holding the lock, so no newer owner can take the fence
        while it writes. The stored token becomes ``max(stored, token)``.

        Returns:
            False when the stored token, or a token that asked for the fence
            (:meth:`begin`), is higher than ``token`` (``step`` did not run);
            True when ``step`` ran or ``version`` was already applied (``step``
            did not run).

        Raises:
            whatever ``step`` raises: the watermark is then not advanced, so the
                version is applied again later (its writes must converge).
            MountUnavailable: the lock was not granted in time, the state is
                corrupt, or the file system failed (if after ``step`` ran, the
                watermark is not advanced either).
            ValueError: ``token`` or ``version`` is not an integer in range.
        """
        _check_int("token", token, 0)
        _check_int("version", version, -1)
        with self._locked() as fences:
            state = self._read(fences)
            stored, applied = state if state is not None else (0, -1)
            if stored > token or self._wanted(fences) > token:
                return False
            if applied >= version:
                return True
            step()
            self._write(fences, max(stored, token), version)
            return True

    def state(self) -> tuple[int, int]:
        """``(token, applied_version)`` as stored now (``(0, -1)``: none yet), read under the lock.

        Raises:
            MountUnavailable: as :meth:`begin`.
        """
        with self._locked() as fences:
            state = self._read(fences)
            return state if state is not None else (0, -1)

    # -- the lock ------------------------------------------------------------------

    @contextmanager
    def _fences(self) -> Iterator[int]:
        """The open fences directory (created if missing, never through a link)."""
        with ExitStack() as stack:
            with _unavailable("open the fence directory", self.lock_path):
                root = os.open(self._root, DIRECTORY_FLAGS)
                stack.callback(os.close, root)
                reserved = open_directory(FENCE_DIR[0], root, create=True)
                stack.callback(os.close, reserved)
                fences = open_directory(FENCE_DIR[1], reserved, create=True)
                stack.callback(os.close, fences)
            yield fences

    @contextmanager
    def _locked(self) -> Iterator[int]:
        """Hold the exclusive lock and yield the open fences directory.

        Only this block's own file-system errors become MountUnavailable: an
        error raised by the caller's body (``step``) propagates unchanged.
        """
        with ExitStack() as stack:
            fences = stack.enter_context(self._fences())
            with _unavailable("open the fence lock", self.lock_path):
                lock = os.open(f"{self._digest}.lock", _LOCK_FLAGS, 0o600, dir_fd=fences)
                # Closing the descriptor releases the lock (flock belongs to the
                # open file description, which only this descriptor holds).
                stack.callback(os.close, lock)
            self._acquire(lock, time.monotonic() + self._timeout)
            yield fences

    def _announce(self, token: int) -> None:
        """Record that ``token`` asks for the fence (``.want`` = the highest such
        token), before waiting for the lock: from now on every apply under a
        lower token refuses, so a takeover is not starved by a stale owner's
        backlog. Written without the lock (only ever raised: two newer owners
        racing both leave a token above the stale one)."""
        with self._fences() as fences:
            if self._wanted(fences) >= token:
                return
            with _unavailable("announce the fence token", self.lock_path):
                replace_file(fences, f"{self._digest}.want", str(token).encode("ascii"),
                             create_mode=0o600)

    def _wanted(self, fences: int) -> int:
        """The highest token that asked for the fence (0: none; an unreadable
        file counts as none: the stored token still fences)."""
        try:
            fd = os.open(f"{self._digest}.want",
                         os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                         dir_fd=fences)
        except OSError:
            return 0
        try:
            text = os.read(fd, 32).decode("ascii", "replace").strip()
        except OSError:
            return 0
        finally:
            os.close(fd)
        return int(text) if text.isdecimal() else 0

    def _acquire(self, fd: int, deadline: float) -> None:
        """Take an exclusive flock of ``fd``, polling until ``deadline`` (monotonic seconds)."""
        delay = _POLL_FIRST_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                pass
            except OSError as exc:
                raise _os_failure("lock", self.lock_path, exc) from exc
            now = time.monotonic()
            if now >= deadline:
                raise MountUnavailable(
                    f"fence lock {self.lock_path[:300]} is still held after "
                    f"{self._timeout:g} s (another owner is applying writes, or stalled "
                    "holding it); retry later")
            time.sleep(min(delay, deadline - now))
            delay = min(delay * 2, _POLL_MAX_S)

    # -- the state -----------------------------------------------------------------

    def _read(self, fences: int) -> tuple[int, int] | None:
        """``(token, applied_version)``, None when no state exists yet.

        A state that does not parse is never reset: resetting would forget a
        newer owner's token and let a stale owner write again.
        """
        name = f"{self._digest}.json"
        with _unavailable("read the fence state", self.state_path):
            try:
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                             dir_fd=fences)
            except FileNotFoundError:
                return None
            try:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    raise self._corrupt("not a regular file")
                data = b""
                while len(data) <= _MAX_STATE_BYTES:
                    chunk = os.read(fd, _MAX_STATE_BYTES + 1 - len(data))
                    if not chunk:
                        break
                    data += chunk
            finally:
                os.close(fd)
        if len(data) > _MAX_STATE_BYTES:
            raise self._corrupt(f"larger than {_MAX_STATE_BYTES} bytes")
        try:
            doc: Any = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            raise self._corrupt("not JSON") from None
        if not isinstance(doc, dict) or set(doc) != _STATE_KEYS:
            raise self._corrupt("not a map of exactly process_id, token, applied_version")
        if doc["process_id"] != self._process_id:
            raise self._corrupt("it names another process")
        token, applied = doc["token"], doc["applied_version"]
        if type(token) is not int or token < 0:
            raise self._corrupt("token is not a non-negative integer")
        if type(applied) is not int or applied < -1:
            raise self._corrupt("applied_version is not an integer >= -1")
        return token, applied

    def _write(self, fences: int, token: int, applied: int) -> None:
        data = json.dumps({"applied_version": applied, "process_id": self._process_id,
                           "token": token}, sort_keys=True).encode("utf-8")
        with _unavailable("write the fence state", self.state_path):
            replace_file(fences, f"{self._digest}.json", data, create_mode=0o600)

    def _corrupt(self, why: str) -> MountUnavailable:
        return MountUnavailable(
            f"fence state {self.state_path[:300]} is corrupt ({why}); it is not reset "
            "automatically: repair or remove it once no owner of the process is running")


def _check_int(name: str, value: object, minimum: int) -> None:
    if type(value) is not int or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}")


def _os_failure(operation: str, path: str, exc: OSError) -> MountUnavailable:
    reason = errno.errorcode.get(exc.errno or 0, "error")
    return MountUnavailable(f"folder fence: {operation} failed at {path[:300]} ({reason})")


@contextmanager
def _unavailable(operation: str, path: str) -> Iterator[None]:
    """Turn an OSError of ``operation`` into MountUnavailable naming it (no traceback
    reaches a guest; the chained cause stays for the host's log)."""
    try:
        yield
    except OSError as exc:
        raise _os_failure(operation, path, exc) from exc
