"""Deleting a process through the gateway: HTTP route, SDK (sync + async), CLI, smoke --delete.

The real gateway app under uvicorn on loopback (``gateway`` fixture: auth,
error bodies) in front of the in-memory ``InProcessRouter``. The store-level
safety (fenced delete, tombstone, no resurrection) is in
tests/store/test_store_delete.py; the actor-level one in
tests/cluster/test_actor_delete.py.
"""

from __future__ import annotations

import itertools

import pytest
from click.testing import CliRunner

from svit_cluster.cli import cli
from svit_cluster.client import AsyncSvitClient, SvitClient
from svit_cluster.errors import Forbidden, NotFound, UnavailableError
from svit_cluster.gateway import Principal, TokenStore, create_app
from svit_cluster.inprocess import InProcessRouter
from tests.cli.conftest import ACME, ADMIN, CliRouter
from tests.events._server import serve

_n = itertools.count(1)


def _pid(tenant: str = "acme") -> str:
    return f"svit://{tenant}/del-{next(_n)}"


def test_sdk_deletes_and_a_second_delete_is_not_found(
        gateway: tuple[str, CliRouter]) -> None:
    url, router = gateway
    pid = _pid()
    with SvitClient(url, ADMIN) as client:
        client.create_process(pid, memory={"n": 1})
        client.inbox(pid, "hello")
        assert client.delete_process(pid) == {"process_id": pid, "deleted": True,
                                              "version": 1}
        assert pid not in router._controllers
        with pytest.raises(NotFound):
            client.state(pid)
        with pytest.raises(NotFound):
            client.delete_process(pid)
        client.create_process(pid, memory={"n": 2})  # the id may be used again
        assert client.state(pid, "/memory/n")[0] == 2


async def test_async_sdk_deletes(gateway: tuple[str, CliRouter]) -> None:
    url, _ = gateway
    pid = _pid()
    async with AsyncSvitClient(url, ADMIN) as client:
        await client.create_process(pid, memory={})
        result = await client.delete_process(pid)
        assert result["deleted"] is True and result["version"] == 0
        with pytest.raises(NotFound):
            await client.delete_process(pid)


def test_a_tenant_may_delete_only_its_own(gateway: tuple[str, CliRouter]) -> None:
    url, router = gateway
    other = _pid("globex")
    with SvitClient(url, ADMIN) as admin:
        admin.create_process(other, memory={})
    with SvitClient(url, ACME) as acme:
        with pytest.raises(Forbidden):
            acme.delete_process(other)
        own = _pid("acme")
        acme.create_process(own, memory={})
        assert acme.delete_process(own)["deleted"]
    assert other in router._controllers


class LostAnswerRouter(InProcessRouter):
    """Deletes, then answers ``unavailable`` once (the answer was lost)."""

    lost = 0

    async def delete(self, process_id: str) -> dict[str, object]:
        result = await super().delete(process_id)
        if not self.lost:
            self.lost += 1
            raise UnavailableError("owner did not answer; outcome unknown")
        return result


def test_sdk_retry_after_an_unknown_outcome_reports_the_delete() -> None:
    tokens = TokenStore()
    tokens.add(ADMIN, Principal(tenant=None, admin=True))
    router = LostAnswerRouter()
    pid = _pid()
    with serve(create_app(router, tokens)) as url, SvitClient(url, ADMIN,
                                                              max_wait_s=0.05) as client:
        client.create_process(pid, memory={})
        result = client.delete_process(pid)
        assert result == {"process_id": pid, "deleted": True, "version": None,
                          "recovered": True}
        assert router.lost == 1 and pid not in router._controllers


def test_cli_delete_and_missing_ok(gateway: tuple[str, CliRouter]) -> None:
    url, router = gateway
    pid = _pid()
    with SvitClient(url, ADMIN) as client:
        client.create_process(pid, memory={})
    run = CliRunner().invoke
    ok = run(cli, ["delete", pid, "--url", url, "--token", ADMIN, "--json"])
    assert ok.exit_code == 0, ok.output
    assert '"deleted": true' in ok.output and pid not in router._controllers
    again = run(cli, ["delete", pid, "--url", url, "--token", ADMIN])
    assert again.exit_code == 1 and "not_found" in again.output
    missing = run(cli, ["delete", pid, "--url", url, "--token", ADMIN, "--missing-ok"])
    assert missing.exit_code == 0, missing.output


def test_smoke_delete_leaves_nothing_behind(gateway: tuple[str, CliRouter]) -> None:
    url, router = gateway
    pid = _pid("smoke")
    run = CliRunner().invoke
    kept = run(cli, ["smoke", "--url", url, "--token", ADMIN, "--process-id", pid])
    assert kept.exit_code == 0, kept.output
    assert pid in router._controllers  # the default keeps it (reused by the next run)
    deleted = run(cli, ["smoke", "--delete", "--url", url, "--token", ADMIN,
                        "--process-id", pid, "--json"])
    assert deleted.exit_code == 0, deleted.output
    assert '"deleted": true' in deleted.output
    assert pid not in router._controllers
