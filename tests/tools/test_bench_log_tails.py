"""benchmarks._cluster: the error lines of a cluster's logs, printed when a
benchmark's block fails (pure: log files in tmp_path, a fake cluster)."""

from __future__ import annotations

import io
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import benchmarks._cluster
from benchmarks._cluster import (
    error_lines,
    local_cluster,
    log_tails,
    print_log_tails,
    running,
)

GATEWAY_LOG = """\
INFO:     started
unhandled RuntimeError on POST /v1/control
Traceback (most recent call last):
  File "x.py", line 1, in f
    raise RuntimeError("boom")
RuntimeError: boom
INFO:     a later, healthy line
ERROR:    Exception in ASGI application
Traceback (most recent call last):
  File "y.py", line 2, in g
    d["k"]
KeyError: 'k'

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "z.py", line 3, in h
ValueError: wrapped
2026-12-03 19:00:00 INFO svit: fine
"""


def test_error_lines(tmp_path: Path) -> None:
    log = tmp_path / "gateway.log"
    log.write_text(GATEWAY_LOG)
    assert error_lines(log) == [
        "unhandled RuntimeError on POST /v1/control",
        "Traceback (most recent call last):",
        '  File "x.py", line 1, in f',
        '    raise RuntimeError("boom")',
        "RuntimeError: boom",
        "ERROR:    Exception in ASGI application",
        "Traceback (most recent call last):",
        '  File "y.py", line 2, in g',
        '    d["k"]',
        "KeyError: 'k'",
        "The above exception was the direct cause of the following exception:",
        "Traceback (most recent call last):",
        '  File "z.py", line 3, in h',
        "ValueError: wrapped",
    ]


def test_error_lines_keep_only_the_newest(tmp_path: Path) -> None:
    log = tmp_path / "host.log"
    log.write_text("".join(f"2026 ERROR svit: n{i}\n" for i in range(200)))
    kept = error_lines(log, max_lines=80)
    assert len(kept) == 80
    assert kept[0] == "2026 ERROR svit: n120" and kept[-1] == "2026 ERROR svit: n199"


def test_error_lines_replace_bytes_that_are_not_utf8(tmp_path: Path) -> None:
    log = tmp_path / "ray-head.log"
    log.write_bytes(b"x ERROR \xff\n")
    assert error_lines(log) == ["x ERROR \ufffd"]


def test_log_tails_gateway_first_then_by_name_each_named(tmp_path: Path) -> None:
    (tmp_path / "a.log").write_text("all well\n")
    (tmp_path / "gateway.log").write_text("t ERROR gw\n")
    (tmp_path / "b.log").write_text("t ERROR b\n")
    (tmp_path / "sub").mkdir()
    assert log_tails(tmp_path) == (
        "==> gateway.log <==\nt ERROR gw\n"
        "==> a.log <==\n(no errors)\n"
        "==> b.log <==\nt ERROR b\n")


def test_log_tails_of_a_missing_or_empty_dir(tmp_path: Path) -> None:
    assert "no such directory" in log_tails(tmp_path / "nope")
    assert "no log files" in log_tails(tmp_path)


class FakeCluster:
    """What :func:`running` uses of a LocalCluster: ``spec.state_dir``, ``down()``."""

    def __init__(self, state_dir: Path) -> None:
        self.spec = SimpleNamespace(state_dir=state_dir)
        self.downs = 0

    def down(self) -> None:
        self.downs += 1


def test_running_prints_the_tails_reraises_and_downs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "gateway.log").write_text("t ERROR the cause\n")
    cluster: Any = FakeCluster(tmp_path)
    with pytest.raises(RuntimeError, match="500"), running(cluster):
        raise RuntimeError("500")
    assert cluster.downs == 1
    err = capsys.readouterr().err
    assert "==> gateway.log <==\nt ERROR the cause\n" in err


def test_running_without_an_error_prints_nothing_and_downs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cluster: Any = FakeCluster(tmp_path)
    with running(cluster) as c:
        assert c is cluster
    assert cluster.downs == 1
    assert capsys.readouterr().err == ""


def test_print_log_tails_writes_to_the_given_stream(tmp_path: Path) -> None:
    out = io.StringIO()
    print_log_tails(tmp_path, out)
    assert "no log files" in out.getvalue()


def test_local_cluster_prints_the_tails_when_up_fails(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "gateway.log").write_text("t ERROR cannot bind\n")

    class NeverUp:
        @staticmethod
        def up(spec: Any) -> Any:
            raise TimeoutError("gateway not healthy")

    monkeypatch.setattr(benchmarks._cluster, "LocalCluster", NeverUp)
    spec: Any = SimpleNamespace(state_dir=tmp_path)
    with pytest.raises(TimeoutError), local_cluster(spec):
        pytest.fail("the block runs only once the cluster is up")
    assert "==> gateway.log <==\nt ERROR cannot bind\n" in capsys.readouterr().err
