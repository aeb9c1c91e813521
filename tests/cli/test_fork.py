"""``svit-cluster fork [--history]`` against the real gateway app (uvicorn on
loopback) over the in-memory router (``gateway`` fixture). What the shared
history holds is tested in tests/gateway/test_fork_history.py."""

from __future__ import annotations

import itertools
import json

from click.testing import CliRunner

from svit_cluster.cli import cli
from svit_cluster.client import SvitClient
from tests.cli.conftest import ADMIN, CliRouter

_n = itertools.count(1)


def test_cli_fork_with_and_without_history(gateway: tuple[str, CliRouter]) -> None:
    url, router = gateway
    n = next(_n)
    parent, child, plain = (f"svit://acme/fork-{n}-{x}" for x in ("p", "c", "q"))
    with SvitClient(url, ADMIN) as client:
        client.create_process(parent, memory={"n": 1})
    run = CliRunner().invoke
    auth = ["--url", url, "--token", ADMIN]
    ok = run(cli, ["fork", parent, child, "--history", "--json", *auth])
    assert ok.exit_code == 0, ok.output
    doc = json.loads(ok.output)
    assert doc["process_id"] == child
    assert doc["history"] == {"events": 0, "upto_seq": 0}  # no acknowledged turn yet
    assert child in router._controllers
    text = run(cli, ["fork", parent, plain, *auth])
    assert text.exit_code == 0, text.output
    assert text.output.strip() == f"forked {parent} -> {plain}"
    again = run(cli, ["fork", parent, child, "--history", *auth])
    assert again.exit_code == 1 and "conflict" in again.output
    unknown = run(cli, ["fork", f"svit://acme/fork-{n}-none", f"svit://acme/fork-{n}-x",
                        "--history", *auth])
    assert unknown.exit_code == 1 and "not_found" in unknown.output
