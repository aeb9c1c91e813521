"""``svit-cluster chat`` when turns fail, block or time out, and when it is interactive.

A real gateway app under uvicorn on loopback with the in-memory router and
the simulated reasoner (``/fail`` always fails, ``/sleep S`` is a slow model),
one per module; each test uses its own process.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import shlex
import time
from collections.abc import Iterator

import httpx
import pytest
from click.testing import CliRunner, Result

import svit_cluster.cli.chat as chat_module
from svit_cluster.cli import cli
from svit_cluster.client import SvitClient
from svit_cluster.gateway import Principal, TokenStore, create_app
from svit_cluster.inprocess import InProcessRouter
from svit_cluster.reasoning import ReasonerConfig, build_reasoner
from tests.events._server import serve

TOKEN = "chat-failures-token-0123456789"
_n = itertools.count(1)


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    config = ReasonerConfig()  # the simulated reasoner
    router = InProcessRouter(reasoner=lambda: build_reasoner(config), reasoner_config=config)
    tokens = TokenStore()
    tokens.add(TOKEN, Principal(tenant=None, admin=True))
    with serve(create_app(router, tokens)) as base:
        yield base
    asyncio.run(router.aclose())


@pytest.fixture
def pid(url: str) -> str:
    pid = f"svit://acme/chat-fail-{next(_n)}"
    httpx.post(url + "/v1/processes", json={"process_id": pid},
               headers={"Authorization": f"Bearer {TOKEN}"}).raise_for_status()
    return pid


def chat(url: str, *args: str, stdin: str | None = None) -> Result:
    return CliRunner().invoke(cli, ["chat", *args, "--url", url, "--token", TOKEN],
                              input=stdin)


def drop_line(output: str) -> str:
    (line,) = [ln.strip() for ln in output.splitlines() if "inbox drop" in ln]
    return line


def test_a_failed_turn_names_its_message_and_the_drop_command_that_works(
        url: str, pid: str, monkeypatch: pytest.MonkeyPatch) -> None:
    failed = chat(url, pid, "/fail", "--message-id", "m-bad", "--timeout", "30")
    assert failed.exit_code == 1, failed.output
    assert "turn failed: reasoner_failed: the reasoner raised an error (message m-bad)" \
        in failed.stdout
    command = drop_line(failed.stderr)
    assert command == (f"svit-cluster inbox drop {pid} --message-id m-bad --reason "
                       f"'turn failed: reasoner_failed' --url {url}")
    # the printed command is the recovery: run it as printed (token from SVIT_TOKEN)
    monkeypatch.setenv("SVIT_TOKEN", TOKEN)
    dropped = CliRunner().invoke(cli, shlex.split(command)[1:])
    assert dropped.exit_code == 0, dropped.output
    assert "dropped m-bad" in dropped.output
    after = chat(url, pid, "hello", "--timeout", "30")
    assert after.exit_code == 0 and "assistant> echo: hello" in after.output


def test_a_message_behind_a_failed_head_is_reported_at_once(url: str, pid: str) -> None:
    assert chat(url, pid, "/fail", "--message-id", "m-head", "--timeout", "30").exit_code == 1
    began = time.monotonic()
    blocked = chat(url, pid, "next", "--message-id", "m-next", "--timeout", "60")
    took = time.monotonic() - began
    assert blocked.exit_code == 1, blocked.output
    assert took < 15, took  # not the 60 s timeout
    assert ("inbox head m-head failed: reasoner_failed: the reasoner raised an error; "
            "message m-next waits behind it") in blocked.stdout
    assert "--message-id m-head" in drop_line(blocked.stderr)
    as_json = chat(url, pid, "again", "--timeout", "60", "--output", "json")
    assert as_json.exit_code == 1
    docs = [json.loads(line) for line in as_json.stdout.splitlines()]
    (event,) = [d for d in docs if d["event"] == "blocked"]
    assert event["head_message_id"] == "m-head" and event["code"] == "reasoner_failed"
    assert docs[-1]["event"] == "turn" and docs[-1]["failure"]["blocking"] is True
    with SvitClient(url, TOKEN) as client:
        inbox, _ = client.state(pid, "/inbox")
    assert [m["id"] for m in inbox][:2] == ["m-head", "m-next"]  # nothing lost


def test_a_timeout_exits_3_and_names_the_message(url: str, pid: str) -> None:
    result = chat(url, pid, "/sleep 5", "--message-id", "m-slow", "--timeout", "0.5")
    assert result.exit_code == 3, result.output
    (line,) = [ln for ln in result.stderr.splitlines() if ln.startswith("error:")]
    assert line.startswith("error: timeout: no answer to message m-slow within 0.5 s")


def test_interactive_chat_prompts_and_says_how_to_quit(
        url: str, pid: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chat_module, "_stdin_is_terminal", lambda: True)
    result = chat(url, pid, "--timeout", "30", stdin="hello\n\n")
    assert result.exit_code == 0, result.output
    assert "empty line or Ctrl-D quits" in result.stderr
    assert result.stderr.count("you> ") == 2  # before the message and before the end
    assert "you> hello" not in result.stdout  # typed after the prompt: not echoed again
    assert "assistant> echo: hello" in result.stdout


def test_message_id_needs_one_message(url: str, pid: str) -> None:
    assert chat(url, pid, "--message-id", "m-x", stdin="a\n\n").exit_code == 2
