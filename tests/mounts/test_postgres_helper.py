"""The test PostgreSQL helper finds the Debian binaries off PATH and fails loudly
without them (tests/_postgres.py)."""

from __future__ import annotations

import glob
import shutil
from pathlib import Path

import pytest

from tests import _postgres
from tests._postgres import PostgresServer, PostgresUnavailable, find_bin_dir


def test_the_debian_binaries_are_found_off_path(monkeypatch: pytest.MonkeyPatch) -> None:
    installed = glob.glob("/usr/lib/postgresql/*/bin/initdb")
    assert installed, "the Debian package postgresql is not installed (bash .ci/setup)"
    monkeypatch.setenv("PATH", "/nonexistent")
    found = find_bin_dir()
    assert str(found).startswith("/usr/lib/postgresql/") and found.name == "bin"
    assert (found / "postgres").exists()


def test_the_newest_major_wins(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for major in ("9.6", "15", "16"):
        bin_dir = tmp_path / "postgresql" / major / "bin"
        bin_dir.mkdir(parents=True)
        for name in ("initdb", "postgres"):
            (bin_dir / name).write_text("#!/bin/sh\n")
            (bin_dir / name).chmod(0o755)
    pattern = str(tmp_path / "postgresql" / "*" / "bin" / "initdb")
    real_glob = glob.glob
    monkeypatch.setattr(_postgres.glob, "glob",
                        lambda p: real_glob(pattern) if "postgresql" in p else real_glob(p))
    monkeypatch.setattr(shutil, "which", lambda _name: None)
    assert find_bin_dir() == tmp_path / "postgresql" / "16" / "bin"


def test_missing_binaries_fail_naming_the_debian_package(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_postgres.glob, "glob", lambda _p: [])
    monkeypatch.setattr(shutil, "which", lambda _name: None)
    with pytest.raises(PostgresUnavailable, match="Debian package postgresql"):
        find_bin_dir()
    with pytest.raises(PostgresUnavailable, match="apt-get install postgresql"):
        PostgresServer().start()


def test_the_shared_server_runs_unprivileged_on_loopback(postgres: PostgresServer) -> None:
    assert postgres.pid is not None
    status = Path(f"/proc/{postgres.pid}/status").read_text()
    uid = next(line.split()[1] for line in status.splitlines() if line.startswith("Uid:"))
    assert uid != "0"
    assert f"-p {postgres.port}" in " ".join(
        Path(f"/proc/{postgres.pid}/cmdline").read_bytes().decode().split("\0"))
    assert "listen_addresses=127.0.0.1" in Path(f"/proc/{postgres.pid}/cmdline").read_bytes(
        ).decode()
