"""`svit-cluster smoke`, the chart's `helm test` command.

The gateway has no way to delete a process, so the hook must not create a new
one per run: it creates ``svit://smoke/helm-test`` once and reuses it. Real
gateway app under uvicorn (in-memory router), real CLI.
"""

from __future__ import annotations

from click.testing import CliRunner

from svit_cluster.cli import cli
from svit_cluster.client import SvitClient
from svit_cluster.gateway import Principal, TokenStore, create_app
from svit_cluster.inprocess import InProcessRouter
from tests.events._server import serve

ADMIN = "smoke-admin-token-0123456789"


def test_repeated_helm_test_runs_leave_one_process() -> None:
    router = InProcessRouter()
    tokens = TokenStore()
    tokens.add(ADMIN, Principal(tenant=None, admin=True))
    with serve(create_app(router, tokens)) as url:
        for n in (1, 2, 3):
            got = CliRunner().invoke(cli, ["smoke", "--url", url], env={"SVIT_TOKEN": ADMIN})
            assert got.exit_code == 0, got.output
            assert got.output.strip() == "smoke svit://smoke/helm-test: committed"
            assert list(router._controllers) == ["svit://smoke/helm-test"]  # one, reused
            with SvitClient(url, ADMIN) as client:
                assert client.state("svit://smoke/helm-test", "/memory/n")[0] == n
        out = CliRunner().invoke(cli, ["smoke", "--url", url, "--process-id",
                                       "svit://smoke/other"], env={"SVIT_TOKEN": ADMIN})
        assert out.exit_code == 0, out.output
        assert sorted(router._controllers) == ["svit://smoke/helm-test", "svit://smoke/other"]


def test_smoke_fails_with_a_bad_token() -> None:
    tokens = TokenStore()
    tokens.add(ADMIN, Principal(tenant=None, admin=True))
    with serve(create_app(InProcessRouter(), tokens)) as url:
        got = CliRunner().invoke(cli, ["smoke", "--url", url],
                                 env={"SVIT_TOKEN": "wrong-token-0123456789"})
        assert got.exit_code != 0
