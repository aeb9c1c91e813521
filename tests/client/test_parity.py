"""The sync and async SDK clients expose the same public methods and parameters."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from svit_cluster.client import AsyncSvitClient, SvitClient
from svit_cluster.errors import ConfigurationError

#: Lifecycle methods that differ by design (``close``/``with`` vs ``aclose``/``async with``).
LIFECYCLE = {"close", "aclose"}


def _public(cls: type) -> dict[str, inspect.Signature]:
    return {name: inspect.signature(member) for name, member in inspect.getmembers(cls)
            if callable(member) and not name.startswith("_") and name not in LIFECYCLE}


def test_same_public_methods() -> None:
    sync, asyn = _public(SvitClient), _public(AsyncSvitClient)
    assert set(sync) == set(asyn), (set(sync) ^ set(asyn))
    # the named gaps, explicitly
    for name in ("initialize", "snapshot", "fork", "events", "outbox"):
        assert name in sync and name in asyn


@pytest.mark.parametrize("name", sorted(_public(SvitClient)))
def test_same_parameters(name: str) -> None:
    s = _public(SvitClient)[name]
    a = _public(AsyncSvitClient)[name]
    assert [(p.name, p.kind, p.default) for p in s.parameters.values()] == \
        [(p.name, p.kind, p.default) for p in a.parameters.values()], name


@pytest.mark.parametrize("name", sorted(_public(SvitClient)))
def test_every_call_takes_a_timeout(name: str) -> None:
    assert "timeout_s" in _public(SvitClient)[name].parameters, name


def test_coroutines_match() -> None:
    for name in _public(SvitClient):
        sync_fn = getattr(SvitClient, name)
        async_fn = getattr(AsyncSvitClient, name)
        assert not inspect.iscoroutinefunction(sync_fn), name
        # iterators (events/outbox) are plain methods returning async iterators
        if name not in ("events", "outbox"):
            assert inspect.iscoroutinefunction(async_fn), name


def test_clients_read_svit_url_and_token(monkeypatch: pytest.MonkeyPatch,
                                         tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SVIT_URL", raising=False)
    monkeypatch.delenv("SVIT_TOKEN", raising=False)
    with pytest.raises(ConfigurationError):
        SvitClient()
    (tmp_path / ".svit").mkdir()
    (tmp_path / ".svit" / "cluster.json").write_text(
        '{"gateway": {"url": "http://127.0.0.1:9/"}, "tokens": {"admin": "file-token"}}')
    with SvitClient() as c:
        assert c.url == "http://127.0.0.1:9" and c.headers["Authorization"] == \
            "Bearer file-token"
    monkeypatch.setenv("SVIT_URL", "http://127.0.0.1:7")
    monkeypatch.setenv("SVIT_TOKEN", "env-token")
    with SvitClient() as c:
        assert c.url == "http://127.0.0.1:7" and c.headers["Authorization"] == "Bearer env-token"
    a = AsyncSvitClient()
    assert a.url == "http://127.0.0.1:7" and a.headers["Authorization"] == "Bearer env-token"
    with SvitClient("http://explicit:1", "arg-token") as c:
        assert c.url == "http://explicit:1" and c.headers["Authorization"] == "Bearer arg-token"


def test_sync_client_methods_added_for_parity_work_over_http() -> None:
    """The sync client's new ``events``/``outbox`` and the async client's new
    ``initialize``/``snapshot``/``fork`` against a real gateway (uvicorn, loopback)."""
    import asyncio

    from svit_cluster.events import Signal
    from svit_cluster.gateway import Principal, TokenStore, create_app
    from svit_cluster.inprocess import InProcessRouter
    from svit_cluster.reasoning import SimulatedReasoner
    from tests.events._server import serve

    token = "acme-token-0123456789"
    tokens = TokenStore()
    tokens.add(token, Principal(tenant="acme"))
    pid = "svit://acme/parity"
    with serve(create_app(InProcessRouter(reasoner=SimulatedReasoner), tokens)) as base:
        with SvitClient(base, token) as c:
            c.create_process(pid, memory={"n": 1})
            with c.events(pid, timeout_s=10) as sub, c.outbox(pid, timeout_s=10) as outbox:
                c.inbox(pid, {"content": "hi", "id": "m-1"})
                kinds: list[str] = []
                for item in sub:
                    assert isinstance(item, Signal)
                    kinds.append(item.kind)
                    if item.kind == "completion":
                        break
                done = next(outbox)
            assert kinds[0] == "committed" and kinds[-1] == "completion"
            assert isinstance(done, Signal) and done.kind == "completion"
            assert done.data["message_id"] == "m-1"

        async def run() -> None:
            async with AsyncSvitClient(base, token) as a:
                assert (await a.initialize())["protocol"] == "svit-control@1"
                snap = await a.snapshot(pid)
                assert snap["process_id"] == pid and snap["version"] >= 1
                forked = await a.fork(pid, "svit://acme/parity-fork")
                assert forked
                _, version = await a.state("svit://acme/parity-fork", "/")
                assert version == snap["version"]

        asyncio.run(run())
