"""``svit-cluster chat`` end to end: gateway in-process over real Redis, an
OpenAI-compatible test server on loopback, the reasoning loop with the model's
``write`` tool, and the CLI streaming the turn."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from click.testing import CliRunner
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from svit_cluster.cli import cli
from svit_cluster.cli.local import reasoner_options
from svit_cluster.client import SvitClient
from svit_cluster.control import ProcessController
from svit_cluster.errors import ConfigurationError
from svit_cluster.events import RedisEventLog, RedisSignalSource, SignalSource
from svit_cluster.gateway import Principal, TokenStore, create_app
from svit_cluster.inprocess import InProcessRouter
from svit_cluster.local import ClusterSpec
from svit_cluster.local._servers import RedisServer
from svit_cluster.process import Process
from svit_cluster.reasoning import ReasonerConfig, TurnLoop, build_reasoner
from svit_cluster.store import RedisBackend, StoreConfig
from tests.events._server import serve

pytestmark = pytest.mark.servers

TOKEN = "chat-tenant-token-0123456789"
KEY = "sk-chat-test-KEY-0123456789"
KEY_ENV = "SVIT_TEST_CHAT_KEY"
PREFIX = "chat-test"


class Model:
    """A tiny OpenAI-compatible chat completions endpoint: for "save X" it calls the
    write tool once, then answers; anything else is echoed."""

    def __init__(self) -> None:
        self.seen: list[tuple[dict[str, str], dict[str, Any]]] = []

    async def chat(self, request: Request) -> JSONResponse:
        body = await request.json()
        self.seen.append((dict(request.headers), body))
        user = [m for m in body["messages"] if m["role"] == "user"][-1]["content"]
        last = body["messages"][-1]
        if user.startswith("save ") and last["role"] == "user":
            args = {"path": "/memory/status", "value": user.removeprefix("save ")}
            return JSONResponse({"choices": [{"message": {
                "role": "assistant", "content": None, "tool_calls": [{
                    "id": "call_1", "type": "function",
                    "function": {"name": "write", "arguments": json.dumps(args)}}]}}]})
        if last["role"] == "tool":
            return JSONResponse({"choices": [{"message": {
                "role": "assistant", "content": "status saved"}}]})
        return JSONResponse({"choices": [{"message": {
            "role": "assistant", "content": f"you said: {user}"}}]})


class RedisRouter(InProcessRouter):
    """:class:`InProcessRouter` whose processes commit to the fenced Redis log and whose
    events go through Redis (owner token 1), so the gateway observes real streams."""

    def __init__(self, url: str, config: ReasonerConfig) -> None:
        super().__init__(reasoner=lambda: build_reasoner(config), reasoner_config=config)
        self._url = url
        self._client = redis.Redis.from_url(url)
        self._source: RedisSignalSource | None = None

    def _controller(self, proc: Process) -> ProcessController:
        backend = RedisBackend(self._client, proc.id, 1, StoreConfig(prefix=PREFIX))
        backend.claim()
        backend.create(proc)
        ctrl = ProcessController(proc, backend)
        assert self._reasoner is not None
        loop = TurnLoop(ctrl, RedisEventLog(self._client, proc.id, 1, prefix=PREFIX),
                        self._reasoner(), config=self._reasoner_config)
        self.loops[proc.id] = loop
        loop.start()
        return ctrl

    def signal_source(self) -> SignalSource:
        if self._source is None:
            self._source = RedisSignalSource.from_url(self._url, PREFIX)
        return self._source


@pytest.fixture(scope="module")
def model() -> Iterator[tuple[Model, str]]:
    m = Model()
    app = Starlette(routes=[Route("/v1/chat/completions", m.chat, methods=["POST"])])
    with serve(app) as url:
        yield m, url + "/v1"


@pytest.fixture
def gateway(redis_server: RedisServer, model: tuple[Model, str],
            monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv(KEY_ENV, KEY)
    redis.Redis.from_url(redis_server.url).flushdb()
    config = ReasonerConfig(kind="openai", base_url=model[1], model="stub-model",
                            api_key_env=KEY_ENV, instructions="Keep answers short.")
    tokens = TokenStore()
    tokens.add(TOKEN, Principal(tenant="acme"))
    with serve(create_app(RedisRouter(redis_server.url, config), tokens)) as url:
        httpx.post(url + "/v1/processes", json={"process_id": "svit://acme/agent",
                                                "memory": {"status": "idle"}},
                   headers={"Authorization": f"Bearer {TOKEN}"}).raise_for_status()
        yield url


def _state(url: str, path: str) -> Any:
    with SvitClient(url, TOKEN) as client:
        return client.state("svit://acme/agent", path)[0]


def test_chat_sends_a_message_and_streams_the_turn_until_completion(
        gateway: str, model: tuple[Model, str]) -> None:
    result = CliRunner().invoke(cli, ["chat", "svit://acme/agent", "save done", "--url",
                                      gateway, "--token", TOKEN, "--timeout", "30"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == "you> save done"
    assert any(line.startswith("  calls write ") and "/memory/status" in line
               for line in lines)
    assert any(line.startswith("  [write] ") and '"status":"committed"' in line
               for line in lines)
    assert lines[-1] == "assistant> status saved"
    assert _state(gateway, "/memory/status") == "done"
    assert _state(gateway, "/inbox") == []
    assert _state(gateway, "/thread/instructions") == "Keep answers short."
    headers, body = model[0].seen[-1]
    assert headers["authorization"] == f"Bearer {KEY}"  # from the environment variable
    assert body["model"] == "stub-model"
    assert "write" in {t["function"]["name"] for t in body["tools"]}
    assert body["messages"][0]["content"].endswith(
        "<instructions>\nKeep answers short.\n</instructions>")


def test_chat_reads_messages_line_by_line(gateway: str) -> None:
    result = CliRunner().invoke(cli, ["chat", "svit://acme/agent", "--url", gateway,
                                      "--token", TOKEN, "--timeout", "30"],
                                input="hello\nsave twice\n\n")
    assert result.exit_code == 0, result.output
    answers = [line for line in result.output.splitlines()
               if line.startswith("assistant> ")]
    assert answers == ["assistant> you said: hello", "assistant> status saved"]
    assert _state(gateway, "/memory/status") == "twice"


def test_chat_reports_a_refused_message(gateway: str) -> None:
    result = CliRunner().invoke(cli, ["chat", "svit://acme/missing", "hi", "--url", gateway,
                                      "--token", TOKEN, "--timeout", "10"])
    assert result.exit_code != 0
    assert "not_found" in result.output or "unknown process" in result.output


def test_up_reasoner_options_are_validated_and_keep_the_key_out(tmp_path: Path) -> None:
    doc = reasoner_options("openai", "http://127.0.0.1:9/v1", "m", "MY_KEY", None)
    assert doc == {"kind": "openai", "api_key_env": "MY_KEY",
                   "base_url": "http://127.0.0.1:9/v1", "model": "m"}
    with pytest.raises(ConfigurationError):
        reasoner_options("openai", None, "m", "MY_KEY", None)
    with pytest.raises(ConfigurationError):
        reasoner_options("simulated", "http://x", None, "MY_KEY", None)
    with pytest.raises(ConfigurationError):
        ClusterSpec(state_dir=tmp_path, reasoner={"kind": "openai", "base_url": "u",
                                                  "model": "m", "api_key": "sk"}).validate()
    # refused before anything is started (no cluster.json written)
    result = CliRunner().invoke(cli, ["up", "--state-dir", str(tmp_path / "s"),
                                      "--reasoner", "openai", "--model", "m"])
    assert result.exit_code != 0 and "base_url" in result.output
    assert not (tmp_path / "s" / "cluster.json").exists()
    assert "--api-key" not in CliRunner().invoke(cli, ["up", "--help"]).output


def test_chat_finds_the_local_cluster_in_its_state_dir(gateway: str, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    state = tmp_path / ".svit"
    state.mkdir()
    (state / "cluster.json").write_text(json.dumps(
        {"gateway": {"url": gateway}, "tokens": {"local": TOKEN}}))
    monkeypatch.chdir(tmp_path)  # the default --state-dir is ./.svit
    result = CliRunner().invoke(cli, ["chat", "svit://acme/agent", "ping", "--timeout", "30"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[-1] == "assistant> you said: ping"
    missing = CliRunner().invoke(cli, ["chat", "svit://acme/agent", "x", "--state-dir",
                                       str(tmp_path / "nowhere")])
    assert missing.exit_code != 0 and "no cluster" in missing.output
