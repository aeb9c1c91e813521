"""A third-party OpenAI-compatible model server (LLMock) as a separate process.

LLMock (PyPI ``llmock``, pinned in the ``dev`` extra) is a mock model server
that someone else wrote: a real HTTP server speaking the OpenAI
chat-completions wire format, scripted over its own admin API. The tests of
the OpenAI-compatible reasoner and the agent benchmarks run our reasoner
against it, so what they exercise is our HTTP client and loop against a
server whose replies we did not shape.

Use::

    from benchmarks._llm import start_llm_server

    llm = start_llm_server(latency_ms=50)          # tool_mode="auto"
    try:
        config = ReasonerConfig(kind="openai", base_url=llm.base_url, model="gpt-4o-mini",
                                api_key="unused")
        ...                                        # run agents with that config
        llm.script({"type": "fail", "status": 429, "retry_after": 1})   # one 429 next
        print(len(llm.requests()))
    finally:
        llm.stop()                                 # or stop_llm_server(llm.pid) elsewhere

What the server answers (``tool_mode="auto"``, the default): a request that
offers tools and whose LAST message is not a tool result gets one tool call;
a request whose last message is a tool result gets a final text answer. So an
agent doing tool-calling turns gets "call, then answer" on every turn, for as
long as it runs: one tool call and two requests per turn. The tool is the
offered one whose name and description share most words with the whole
conversation, system prompt included (with our generated system prompt that
is ``write`` whatever the user says), and its arguments are generated from
the tool's JSON Schema: strings are ``"mock-<property>"``, e.g. ``write
{"path": "mock-path", "value": "mock-value"}``. Our tools answer that with an
``{"error": {"code": "invalid_path", ...}}`` result and commit nothing; the
model reads it and the turn completes (``reply`` text ``"Mock response from
<model>."``). LLMock cannot make the call depend on the process (a real path,
a committing write) and keep "then answer": a scripted reply is taken by the
next request whatever its last message is. ``tool_mode="off"`` answers every
request with text.

Queued behaviours (:meth:`LLMServer.script`, the JSON of LLMock's
``POST /_llmock/scenario``) override that for the next matching requests:
``{"type": "reply", "text": ...}``, ``{"type": "reply", "tool_calls": [{"name",
"arguments"}, ...]}`` (several calls in one reply), ``{"type": "fail",
"status": 500}`` (any 4xx/5xx; ``"retry_after": S`` adds the header),
``{"type": "delay", "seconds": S}``, ``{"type": "tool_fault", "kind":
"malformed_arguments" | "unknown_tool"}``; each takes ``"times": N`` (default
1; null: until :meth:`LLMServer.reset`). A plain (non-streamed) reply is always
well-formed JSON: LLMock cannot send a body that is not JSON, nor JSON of
another shape, to a non-streaming client.

Memory: LLMock journals every request with its body (bodies up to 256 KiB,
the newest 10,000 requests). A long soak should call
:meth:`LLMServer.clear_requests` now and then (each call frees the journal).
The admin API has no authentication: the server binds 127.0.0.1 only.

Lifetime: the server exits by itself when the process that started it exits
(a watchdog in the server process polls its parent every second), so a
crashed benchmark leaves no server behind.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from svit_cluster.local import free_port

__all__ = ["LLMOCK_VERSION", "LLMServer", "start_llm_server", "stop_llm_server"]

#: The LLMock version this helper was written against (the ``dev`` extra pins it).
LLMOCK_VERSION = "0.2.2"

# The server process: a watchdog thread that exits when the parent is gone,
# then LLMock's own command line (``llmock serve ...``), unchanged.
_LAUNCH = """\
import os, sys, threading, time
parent = os.getppid()
def _watch():
    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(0)
threading.Thread(target=_watch, daemon=True).start()
from llmock.cli import app
sys.argv = ["llmock", *sys.argv[1:]]
app()
"""


@dataclass(frozen=True)
class LLMServer:
    """A running LLMock server process.

    Attributes:
        url: the root URL, ``http://127.0.0.1:<port>`` (admin API under ``/_llmock``).
        base_url: ``url + "/v1"``: the OpenAI-compatible base URL
            (``ReasonerConfig.base_url``, ``--reasoner-url``).
        pid: the server process id (stop it with :func:`stop_llm_server`).
        port: the TCP port on 127.0.0.1.
        log_path: the file that receives the server's stdout and stderr.
        version: the LLMock version the server reported on ``/health``.
    """

    url: str
    base_url: str
    pid: int
    port: int
    log_path: str
    version: str

    def _admin(self, method: str, path: str, body: Any = None) -> Any:
        with httpx.Client(trust_env=False, timeout=10.0) as client:
            resp = client.request(method, self.url + "/_llmock" + path, json=body)
        resp.raise_for_status()
        return resp.json()

    def script(self, *behaviors: Mapping[str, Any]) -> None:
        """Queue behaviours for the next matching requests (FIFO per kind).

        Args:
            behaviors: LLMock behaviour objects, e.g. ``{"type": "fail",
                "status": 503, "times": 2}`` (see the module docstring).

        Raises:
            httpx.HTTPStatusError: LLMock refused a behaviour (400, with its reason).
        """
        self._admin("POST", "/scenario", {"behaviors": [dict(b) for b in behaviors]})

    def reset(self) -> None:
        """Forget queued behaviours and the request journal."""
        self._admin("POST", "/reset")

    def requests(self) -> list[dict[str, Any]]:
        """Every request served since the last reset, oldest first.

        Each is LLMock's record: ``path``, ``status``, ``body`` (the request
        JSON), ``fault`` (the injected fault or None), ``started_at`` and
        ``ended_at`` (server monotonic seconds), ``duration`` (seconds), ...
        """
        records: list[dict[str, Any]] = self._admin("GET", "/requests")["requests"]
        return records

    def clear_requests(self) -> None:
        """Forget the request journal (keeps queued behaviours)."""
        self._admin("DELETE", "/requests")

    def verdict(self) -> dict[str, Any]:
        """LLMock's verdict on how the client handled the injected faults
        (``findings``: e.g. ``retry_after_ignored``, ``retry_storm``)."""
        result: dict[str, Any] = self._admin("GET", "/verdict")
        return result

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop the server (see :func:`stop_llm_server`)."""
        stop_llm_server(self.pid, timeout_s)


def start_llm_server(*, tool_mode: str = "auto", latency_ms: int = 0,
                     error_rates: Mapping[int, float] | None = None,
                     startup_timeout_s: float = 20.0, attempts: int = 3) -> LLMServer:
    """Start LLMock on a free 127.0.0.1 port, as a child process, and wait until it serves.

    Args:
        tool_mode: ``"auto"`` (default: a tool call, then a text answer once
            the tool result is back; see the module docstring) or ``"off"``
            (always text).
        latency_ms: milliseconds added before every answer (default 0).
        error_rates: HTTP status -> probability of answering it instead of a
            completion, e.g. ``{429: 0.05, 503: 0.01}`` (default: none).
        startup_timeout_s: seconds to wait for ``/health`` (default 20).
        attempts: ports tried when the chosen one is taken meanwhile (default 3).

    Returns:
        The running server; stop it with :meth:`LLMServer.stop` or
        :func:`stop_llm_server` with its ``pid``.

    Raises:
        ValueError: an unknown ``tool_mode``, or a negative ``latency_ms``.
        RuntimeError: the server did not start (the message ends with its log).
    """
    if tool_mode not in ("auto", "off"):
        raise ValueError("tool_mode must be 'auto' or 'off'")
    if latency_ms < 0:
        raise ValueError("latency_ms must be >= 0")
    args = ["--log-level", "warning", "--tool-mode", tool_mode, "--latency-ms",
            str(int(latency_ms)), "--response-style", "static"]
    for status, rate in (error_rates or {}).items():
        args += ["--error-rate", f"{int(status)}={float(rate)}"]
    # settings reach the server through its flags only
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLMOCK_")}
    failure = "not started"
    for _ in range(max(1, attempts)):
        port = free_port()
        log = tempfile.NamedTemporaryFile(prefix=f"llmock-{port}-", suffix=".log", delete=False)
        with log:
            proc = subprocess.Popen(
                [sys.executable, "-c", _LAUNCH, "serve", "--host", "127.0.0.1",
                 "--port", str(port), *args],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env)
        server = LLMServer(url=f"http://127.0.0.1:{port}",
                           base_url=f"http://127.0.0.1:{port}/v1", pid=proc.pid, port=port,
                           log_path=log.name, version="")
        version = _wait_healthy(server, proc, startup_timeout_s)
        if version is not None:
            return LLMServer(url=server.url, base_url=server.base_url, pid=proc.pid,
                             port=port, log_path=log.name, version=version)
        stop_llm_server(proc.pid)
        with open(log.name, encoding="utf-8", errors="replace") as f:
            failure = f.read()[-2000:]
    raise RuntimeError(f"llmock did not start; its log ends with:\n{failure}")


def _wait_healthy(server: LLMServer, proc: subprocess.Popen[bytes], timeout_s: float
                  ) -> str | None:
    deadline = time.monotonic() + timeout_s
    with httpx.Client(trust_env=False, timeout=2.0) as client:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                return None  # exited: e.g. the port was taken meanwhile
            with contextlib.suppress(httpx.HTTPError):
                resp = client.get(server.url + "/health")
                if resp.status_code == 200:
                    return str(resp.json().get("version", ""))
            time.sleep(0.05)
    return None


def stop_llm_server(pid: int, timeout_s: float = 5.0) -> None:
    """Stop the server process ``pid``: SIGTERM, then SIGKILL after ``timeout_s`` seconds.

    Returns once the process is gone (reaped when it is this process's child).
    A pid that no longer exists, or that now names a process other than an
    LLMock server (a reused pid), is left alone and is not an error. Only that
    one process is signalled, never its group.
    """
    if not _is_llmock(pid):
        _reap(pid)
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        _reap(pid)
        return
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if _gone(pid):
            return
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    while not _gone(pid):
        time.sleep(0.05)


def _is_llmock(pid: int) -> bool:
    """True when ``pid`` runs this module's launcher (or cannot be inspected:
    no ``/proc``); False when it is gone or runs anything else."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read()
    except FileNotFoundError:
        return not os.path.isdir("/proc/self")
    except OSError:
        return True
    return b"from llmock.cli import app" in cmdline


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def _gone(pid: int) -> bool:
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return True
    except ChildProcessError:
        pass  # not our child: fall back to probing it
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False
