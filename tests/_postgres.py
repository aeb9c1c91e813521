"""A throwaway PostgreSQL server for tests: ``initdb`` into a temporary directory,
``postgres`` on a free loopback port, stopped by its PID.

The server binaries come from the Debian package ``postgresql`` (``.ci/setup``
installs it); they live in ``/usr/lib/postgresql/<major>/bin``, which is not on
``PATH``. PostgreSQL refuses to run as root, so under root both ``initdb`` and
``postgres`` run as the ``postgres`` system user (the package creates it) and the
directory is owned by that user. The server is SIGKILLed by Linux when the thread
that started it exits (``PR_SET_PDEATHSIG``, set *after* the user change, which
would clear it), so a killed pytest leaves no server behind.
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import os
import pwd
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from svit_cluster.local import free_port

__all__ = ["PostgresServer", "PostgresUnavailable", "find_bin_dir"]

_PACKAGE_HINT = ("install the Debian package postgresql (`apt-get install postgresql`, "
                 "or `bash .ci/setup`)")


class PostgresUnavailable(RuntimeError):
    """The PostgreSQL server binaries are missing, or the server did not start."""


def _major(path: str) -> tuple[int, ...]:
    found = re.search(r"/postgresql/([0-9.]+)/bin/", path)
    return tuple(int(p) for p in found[1].split(".") if p) if found else (0,)


def find_bin_dir() -> Path:
    """The directory holding ``initdb``, ``postgres`` (newest installed major first).

    Raises:
        PostgresUnavailable: neither on ``PATH`` nor in ``/usr/lib/postgresql/*/bin``;
            the message names the Debian package.
    """
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=_major,
                        reverse=True)
    on_path = shutil.which("initdb")
    if on_path:
        candidates.insert(0, on_path)
    for initdb in candidates:
        bin_dir = Path(initdb).parent
        if os.access(bin_dir / "postgres", os.X_OK):
            return bin_dir
    raise PostgresUnavailable(
        "PostgreSQL server binaries (initdb, postgres) not found on PATH or in "
        f"/usr/lib/postgresql/*/bin: {_PACKAGE_HINT}")


def _as_user(uid: int | None, gid: int | None, die_with_parent: bool) -> None:  # pragma: no cover
    """Runs in the child before exec: drop to ``uid``/``gid``, then ask for SIGKILL
    when the starting thread exits (a credential change clears that request)."""
    if uid is not None and gid is not None:
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)
    if die_with_parent:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class PostgresServer:
    """One PostgreSQL cluster with a superuser ``postgres`` whose password is
    :attr:`password` (password authentication over TCP, trust over the socket).

    Args:
        database: created after the start; :meth:`dsn` connects to it.
        startup_timeout_s: how long :meth:`start` waits for connections.
        die_with_parent: SIGKILL the server when the starting thread exits.
    """

    user = "postgres"

    def __init__(self, *, database: str = "svit_test", startup_timeout_s: float = 60.0,
                 die_with_parent: bool = True) -> None:
        self.database = database
        self.startup_timeout_s = startup_timeout_s
        self.die_with_parent = die_with_parent
        self.password = "pg-Secret-" + os.urandom(6).hex()
        self.port = 0
        self.root: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    # -- addresses ---------------------------------------------------------------

    def dsn(self, *, password: str | None = None, database: str | None = None) -> str:
        """A libpq URI to the database over TCP, with the password in it."""
        pw = self.password if password is None else password
        return (f"postgresql://{self.user}:{pw}@127.0.0.1:{self.port}/"
                f"{database or self.database}")

    def admin_dsn(self, database: str | None = None) -> str:
        """Key/value conninfo over the unix socket (trust: no password)."""
        assert self.root is not None
        return (f"host={self.root / 'sock'} port={self.port} user={self.user} "
                f"dbname={database or self.database}")

    @property
    def pid(self) -> int | None:
        if self._proc is None or self._proc.poll() is not None:
            return None
        return self._proc.pid

    @property
    def log_path(self) -> Path:
        assert self.root is not None
        return self.root / "postgres.log"

    # -- lifecycle ---------------------------------------------------------------

    def _credentials(self) -> tuple[int | None, int | None]:
        if os.geteuid() != 0:
            return None, None
        try:
            entry = pwd.getpwnam("postgres")
        except KeyError:
            raise PostgresUnavailable(
                "running as root and there is no `postgres` system user to run the "
                f"server as: {_PACKAGE_HINT}") from None
        return entry.pw_uid, entry.pw_gid

    def start(self) -> None:
        """initdb, start the server, wait until it accepts connections, create the database.

        Raises:
            PostgresUnavailable: binaries missing, initdb failed, or the server
                exited or was not ready in time (it is stopped first).
        """
        bin_dir = find_bin_dir()
        uid, gid = self._credentials()
        # Not below pytest's basetemp: its directories are 0700 root, which the
        # postgres user could not traverse.
        self.root = Path(tempfile.mkdtemp(prefix="svit-pg-"))
        (self.root / "sock").mkdir()
        pwfile = self.root / "pwfile"
        pwfile.write_text(self.password + "\n")
        if uid is not None and gid is not None:
            for path in (self.root, self.root / "sock", pwfile):
                os.chown(path, uid, gid)
        data = self.root / "data"
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C", "LANG": "C"}
        init = subprocess.run(
            [str(bin_dir / "initdb"), "-D", str(data), "-U", self.user, "-E", "UTF8",
             "--locale=C", "--auth-local=trust", "--auth-host=scram-sha-256",
             f"--pwfile={pwfile}", "--no-sync", "--no-instructions"],
            cwd=self.root, env=env, stdin=subprocess.DEVNULL, capture_output=True,
            preexec_fn=lambda: _as_user(uid, gid, False), timeout=120, check=False)
        if init.returncode != 0:
            raise PostgresUnavailable(
                f"initdb failed ({init.returncode}): "
                f"{(init.stderr or init.stdout).decode(errors='replace')[-800:]}")
        for _attempt in range(3):
            self.port = free_port()
            if self._start_once(bin_dir, data, env, uid, gid):
                break
        else:
            raise PostgresUnavailable(f"postgres exited at start: {self._log_tail()}")
        self._create_database()

    def _log_tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-800:]
        except OSError:
            return ""

    def _start_once(self, bin_dir: Path, data: Path, env: dict[str, str],
                    uid: int | None, gid: int | None) -> bool:
        """True once it accepts connections; False when it exited (a port race)."""
        assert self.root is not None
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(
                [str(bin_dir / "postgres"), "-D", str(data), "-p", str(self.port),
                 "-c", "listen_addresses=127.0.0.1",
                 "-c", f"unix_socket_directories={self.root / 'sock'}",
                 "-c", "fsync=off", "-c", "synchronous_commit=off",
                 "-c", "full_page_writes=off", "-c", "max_connections=40",
                 "-c", "shared_buffers=16MB", "-c", "logging_collector=off"],
                cwd=self.root, env=env, stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True,
                preexec_fn=lambda: _as_user(uid, gid, self.die_with_parent))
        import psycopg  # the tests that use this server need the driver anyway

        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                return False
            try:
                with psycopg.connect(self.admin_dsn("postgres"), connect_timeout=2):
                    return True
            except psycopg.OperationalError:
                time.sleep(0.05)
        tail = self._log_tail()
        self.stop()
        raise PostgresUnavailable(
            f"postgres not ready within {self.startup_timeout_s} s: {tail}")

    def _create_database(self) -> None:
        import psycopg

        with psycopg.connect(self.admin_dsn("postgres"), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{self.database}"')

    def stop(self, *, grace_s: float = 15.0) -> None:
        """Fast shutdown by PID (SIGINT), SIGKILL after ``grace_s``; remove the directory.

        Safe to repeat.
        """
        proc = self._proc
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        self._proc = None
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None
