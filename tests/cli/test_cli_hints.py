"""The commands a CLI hint prints must run as printed (a new user's venv is not activated)."""

from __future__ import annotations

from pathlib import Path

import pytest

from svit_cluster.cli._util import invoked_as


def _program(folder: Path) -> Path:
    folder.mkdir()
    exe = folder / "svit-cluster"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    return exe


def test_a_hint_names_the_path_when_the_program_is_not_on_path(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    exe = _program(tmp_path / "venv-bin")
    monkeypatch.setenv("PATH", str(tmp_path / "elsewhere"))
    monkeypatch.setattr("sys.argv", [str(exe)])
    assert invoked_as() == str(exe)


def test_a_hint_uses_the_bare_name_when_path_finds_this_program(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    exe = _program(tmp_path / "venv-bin")
    monkeypatch.setenv("PATH", str(exe.parent))
    monkeypatch.setattr("sys.argv", [str(exe)])
    assert invoked_as() == "svit-cluster"
    other = _program(tmp_path / "other-bin")  # another install found first: name the path
    monkeypatch.setenv("PATH", str(other.parent))
    assert invoked_as() == str(exe)


def test_a_hint_from_python_dash_m_or_a_test_runner_says_svit_cluster(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.argv", ["/usr/lib/python3/site-packages/svit_cluster/cli/__main__.py"])
    assert invoked_as() == "svit-cluster"
