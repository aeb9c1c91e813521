"""Exit codes (0 ok, 1 failed, 2 usage only, 3 unavailable) and one-line failures.

Every failure class runs against something real: the gateway app over loopback
HTTP (``conftest.py``), a port nobody listens on, a gateway that is slower than
``--timeout``, a gateway answering 503. Expected failures print exactly one
``error: …`` line on stderr naming the cause and what to do, and no traceback.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from svit_cluster.cli import cli
from svit_cluster.local import free_port
from tests.cli.conftest import ACME, ADMIN, FakeCluster


def run(args: list[str]) -> Result:
    return CliRunner().invoke(cli, args)


def one_line_failure(result: Result, *needles: str) -> str:
    assert "Traceback" not in result.output + result.stderr
    assert result.exception is None or isinstance(result.exception, SystemExit), \
        repr(result.exception)
    # progress lines ("  … attempt 1/2 failed ...; retrying") may come first
    lines = [ln for ln in result.stderr.splitlines()
             if ln.strip() and not ln.startswith("  … ")]
    assert len(lines) == 1, result.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def test_ok_is_0(fake_cluster: FakeCluster) -> None:
    result = run(["smoke", "--url", fake_cluster.url, "--token", ADMIN])
    assert result.exit_code == 0, result.output
    assert run(["healthcheck", "--url", fake_cluster.url + "/healthz"]).exit_code == 0


def test_401_is_1(fake_cluster: FakeCluster) -> None:
    result = run(["smoke", "--url", fake_cluster.url, "--token", "not-a-token-0123456789"])
    assert result.exit_code == 1
    one_line_failure(result, "unauthenticated", "401", "SVIT_TOKEN")


def test_403_is_1(fake_cluster: FakeCluster) -> None:
    # the acme tenant's token may not create processes of tenant "smoke"
    result = run(["smoke", "--url", fake_cluster.url, "--token", ACME])
    assert result.exit_code == 1
    one_line_failure(result, "forbidden", "403", "tenant")
    letters = run(["dead-letters", "list", "--url", fake_cluster.url, "--token", ACME])
    assert letters.exit_code == 1
    one_line_failure(letters, "forbidden", "403")


def test_404_is_1(fake_cluster: FakeCluster) -> None:
    result = run(["dead-letters", "list", "--url", fake_cluster.url + "/no/such/prefix",
                  "--token", ADMIN])
    assert result.exit_code == 1
    one_line_failure(result, "not_found", "404", "URL")


def test_unhealthy_is_1(fake_cluster: FakeCluster) -> None:
    result = run(["healthcheck", "--url", fake_cluster.url + "/metrics-nope"])
    assert result.exit_code == 1 and "UNHEALTHY" in result.output


def test_connection_refused_is_3(clean_env: Path) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    result = run(["smoke", "--url", dead, "--token", ADMIN, "--attempts", "2"])
    assert result.exit_code == 3
    one_line_failure(result, "unavailable", "ConnectError", "SVIT_URL")
    letters = run(["dead-letters", "list", "--url", dead, "--token", ADMIN])
    assert letters.exit_code == 3
    one_line_failure(letters, "unavailable", "is the cluster up")
    assert run(["healthcheck", "--url", dead + "/healthz"]).exit_code == 3


def test_timeout_is_3(fake_cluster: FakeCluster) -> None:
    fake_cluster.router.slow_create_s = 2.0
    result = run(["smoke", "--url", fake_cluster.url, "--token", ADMIN, "--timeout", "0.3",
                  "--attempts", "1"])
    assert result.exit_code == 3
    one_line_failure(result, "timed out", "--timeout")


def test_503_is_3(fake_cluster: FakeCluster) -> None:
    fake_cluster.router.unavailable = True
    result = run(["smoke", "--url", fake_cluster.url, "--token", ADMIN, "--attempts", "1"])
    assert result.exit_code == 3
    one_line_failure(result, "unavailable", "no live host")


def test_usage_is_2_and_only_usage(clean_env: Path, tmp_path: Path) -> None:
    assert run(["smoke", "--no-such-option"]).exit_code == 2
    assert run(["completion", "tcsh"]).exit_code == 2
    # no SVIT_URL, no --url, no ./.svit/cluster.json
    result = run(["smoke", "--token", ADMIN])
    assert result.exit_code == 2
    one_line_failure(result, "SVIT_URL")
    missing = run(["status", "--state-dir", str(tmp_path / "nothing-here")])
    assert missing.exit_code == 2
    one_line_failure(missing, "svit-cluster up")


def test_a_mistyped_state_dir_never_falls_back_to_the_local_cluster(clean_env: Path) -> None:
    """With ``./.svit/cluster.json`` present, ``--state-dir`` naming a folder
    without one is a usage error naming that folder, not a command against
    ``./.svit``'s cluster."""
    here = clean_env / ".svit"
    here.mkdir()
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens: a fallback would exit 3
    (here / "cluster.json").write_text(
        f'{{"gateway": {{"url": "{url}"}}, "tokens": {{"admin": "{ADMIN}"}}}}')
    typo = clean_env / "svit-typo"
    for args in (["list"], ["state", "svit://local/a"], ["delete", "svit://local/a"]):
        result = run([*args, "--state-dir", str(typo)])
        assert result.exit_code == 2, (args, result.output)
        one_line_failure(result, str(typo))


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_scripts(shell: str) -> None:
    result = run(["completion", shell])
    assert result.exit_code == 0
    assert "_SVIT_CLUSTER_COMPLETE" in result.output
