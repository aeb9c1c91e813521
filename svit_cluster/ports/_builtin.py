"""The built-in ports: ``http``, ``llm`` and ``spawn`` (reference: docs/ports.md "Built-in ports").

* ``http`` -- one request to an allowlisted host; redirects are returned, never
  followed; the body is read up to ``max_response_bytes``; every request carries
  ``Idempotency-Key`` (see :func:`~svit_cluster.ports.idempotency_key`: it
  covers the process, version, call index, port name and the call's input),
  ``Svit-Fencing-Token`` (the calling owner's token, so a server can tell a
  superseded owner's call apart) and ``Svit-Process`` / ``Svit-Version`` /
  ``Svit-Call-Index`` (where the call was made, so a server can attribute a key
  without recomputing it).
* ``llm`` -- one step of the deployment's configured reasoner (simulated or
  OpenAI-compatible), outside the process transaction.
* ``spawn`` -- fork the last committed state into a child process and run one
  child activation there; the child is a process of its own (its own owner and
  fence on the cluster: :class:`Spawner` implementations create it through the
  normal create path).
"""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any, Protocol
from urllib.parse import quote, urlsplit

from svit_cluster.activation import activate
from svit_cluster.errors import ErrorCode, LimitExceeded, ScriptFailed, SvitError
from svit_cluster.ports._config import HttpPortConfig, LlmPortConfig, PortsConfig
from svit_cluster.ports._registry import CONTRACT_VERSION, Port, PortContext, PortRegistry
from svit_cluster.values import Value, validate_script_name

__all__ = ["HttpPort", "LlmPort", "LocalSpawner", "SpawnPort", "Spawner", "build_registry",
           "child_id"]

_METHODS = ("DELETE", "GET", "HEAD", "PATCH", "POST", "PUT")
_MAX_HEADERS = 32
#: Headers the host sets on every ``http`` request (lower case); a guest's are dropped.
_HOST_HEADERS = frozenset({"idempotency-key", "svit-fencing-token", "svit-process",
                           "svit-version", "svit-call-index"})
#: Characters of a process id sent unescaped in ``Svit-Process`` (RFC 3986
#: unreserved, sub-delims, ``:``, ``@`` and ``/``; ``%`` is always escaped).
_ID_SAFE = "/:@!$&'()*+,;=-._~"


def _fail(port: str, message: str) -> ScriptFailed:
    return ScriptFailed(f"port {port}: {message}")


def _obj(port: str, value: Value) -> dict[str, Value]:
    if not isinstance(value, dict):
        raise _fail(port, "input must be a map")
    return value


class HttpPort:
    """``(port-call "http" {"url" .. "method" "GET" "headers" {..} "body" ".."})``.

    Result: ``{"status": int, "headers": {"content-type": ..}, "body": str}``
    (the body decoded as UTF-8 with replacement). A 3xx answer is returned as
    is (``location`` among the headers), never followed.

    Headers the host sets on every request (a guest's headers of the same
    names, in any case, are dropped):

    * ``Idempotency-Key``: :func:`~svit_cluster.ports.idempotency_key` of the
      call -- the same for a retried activation of the same request, different
      for a call with another input at the same version (byte-identical calls
      of two requests at the same version still share it);
    * ``Svit-Fencing-Token``: the calling owner's fencing token (decimal);
    * ``Svit-Process``: the calling process id, percent-encoded (RFC 3986;
      an ASCII id without ``%`` is sent unchanged);
    * ``Svit-Version``: the version being computed (decimal);
    * ``Svit-Call-Index``: the call's 0-based index in the activation (decimal).

    Raises (from :meth:`call`):
        ScriptFailed: a malformed input, a URL whose scheme is not http(s) or
            whose host is not allowlisted, a transport error or timeout.
        LimitExceeded: the body exceeds ``max_response_bytes``.
    """

    name = "http"

    def __init__(self, config: HttpPortConfig) -> None:
        self.config = config
        self._allow = {h.lower() for h in config.allow_hosts}

    def descriptor(self) -> dict[str, Value]:
        return {
            "name": self.name,
            "version": CONTRACT_VERSION,
            "description": "One HTTP request to an allowlisted host; redirects are not "
                           "followed; sends Idempotency-Key, Svit-Fencing-Token, "
                           "Svit-Process, Svit-Version and Svit-Call-Index.",
            "input_schema": {
                "type": "object", "required": ["url"], "additionalProperties": False,
                "properties": {"url": {"type": "string"},
                               "method": {"type": "string", "enum": list(_METHODS)},
                               "headers": {"type": "object",
                                           "additionalProperties": {"type": "string"}},
                               "body": {"type": "string"}}},
            "output": {"type": "object", "properties": {"status": {"type": "integer"},
                                                        "headers": {"type": "object"},
                                                        "body": {"type": "string"}}},
            "effect": "external",
            "limits": {"allow_hosts": list[Value](sorted(self._allow)),
                       "max_response_bytes": self.config.max_response_bytes,
                       "timeout_ms": int(self.config.timeout_s * 1000),
                       "redirects": False},
        }

    def allowed(self, url: str) -> bool:
        """Whether ``url`` is http(s) to an allowlisted ``host`` or ``host:port``."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            return False
        host = parts.hostname.lower()
        port = parts.port or (443 if parts.scheme == "https" else 80)
        return host in self._allow or f"{host}:{port}" in self._allow

    def call(self, input: Value, ctx: PortContext) -> Value:
        doc = _obj(self.name, input)
        if not set(doc) <= {"url", "method", "headers", "body"}:
            raise _fail(self.name, "input keys are url, method, headers, body")
        url, method = doc.get("url"), doc.get("method", "GET")
        headers, body = doc.get("headers") or {}, doc.get("body")
        if type(url) is not str or method not in _METHODS:
            raise _fail(self.name, "needs a string url and a method in " + ",".join(_METHODS))
        if (not isinstance(headers, dict) or len(headers) > _MAX_HEADERS
                or not all(type(v) is str for v in headers.values())):
            raise _fail(self.name, "headers must be a map of at most 32 strings")
        if body is not None and type(body) is not str:
            raise _fail(self.name, "body must be a string")
        if not self.allowed(url):
            host = urlsplit(url).netloc[:200]
            raise _fail(self.name, f"HTTP URL is not allowed: host {host!r} is not on the "
                                    "allowlist")
        # The host's headers always win: a guest cannot replace or duplicate them.
        sent = {str(k): str(v) for k, v in headers.items()
                if str(k).lower() not in _HOST_HEADERS}
        sent["Idempotency-Key"] = ctx.idempotency_key
        sent["Svit-Fencing-Token"] = str(ctx.token)
        sent["Svit-Process"] = quote(ctx.process_id, safe=_ID_SAFE)
        sent["Svit-Version"] = str(ctx.version)
        sent["Svit-Call-Index"] = str(ctx.call_index)
        limit = self.config.max_response_bytes
        # Imported here, not at module level: httpx imports its command line
        # (click, rich, pygments) when they are installed, and every process
        # actor builds this registry (its Ray worker must stay light).
        import httpx

        try:
            with httpx.Client(follow_redirects=False, timeout=self.config.timeout_s,
                              trust_env=False) as client, client.stream(
                    method, url, headers=sent,
                    content=None if body is None else body.encode("utf-8")) as resp:
                chunks: list[bytes] = []
                size = 0
                for chunk in resp.iter_bytes():
                    size += len(chunk)
                    if size > limit:
                        raise LimitExceeded(f"port http: response exceeds "
                                            f"max_response_bytes={limit}",
                                            limit="port http response bytes")
                    chunks.append(chunk)
                out_headers: dict[str, Value] = {
                    k: resp.headers[k] for k in ("content-type", "location")
                    if k in resp.headers}
                return {"status": resp.status_code, "headers": out_headers,
                        "body": b"".join(chunks).decode("utf-8", errors="replace")}
        except httpx.TimeoutException:
            raise _fail(self.name, f"request timed out after {self.config.timeout_s}s") from None
        except httpx.HTTPError as exc:
            raise _fail(self.name, f"request failed ({type(exc).__name__})") from None


def _run_async(coro: Any) -> Any:
    """Run a coroutine to completion from synchronous code (a fresh loop, own thread
    when the caller already runs one)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(coro)
        except BaseException as exc:
            box["error"] = exc

    t = threading.Thread(target=target, name="svit-port-llm")
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


class LlmPort:
    """``(port-call "llm" {"messages": [{"role": "user", "content": ..}]})``, or ``{"prompt": ..}``.

    Result: ``{"content": str|null, "tool_calls": [...]}`` from one step of the
    configured reasoner (``reasoner`` builds a fresh one per call, closed after).
    """

    name = "llm"

    def __init__(self, config: LlmPortConfig, reasoner_config: Any) -> None:
        self.config = config
        self.reasoner_config = reasoner_config

    def descriptor(self) -> dict[str, Value]:
        kind = getattr(self.reasoner_config, "kind", "simulated")
        return {
            "name": self.name,
            "version": CONTRACT_VERSION,
            "description": "One call of the host's configured model; outside the process "
                           "transaction.",
            "input_schema": {
                "type": "object", "additionalProperties": False,
                "properties": {"prompt": {"type": "string"},
                               "messages": {"type": "array", "items": {"type": "object"}}}},
            "output": {"type": "object", "properties": {"content": {"type": ["string", "null"]},
                                                        "tool_calls": {"type": "array"}}},
            "effect": "external",
            "limits": {"max_messages": self.config.max_messages, "reasoner": kind},
        }

    def call(self, input: Value, ctx: PortContext) -> Value:
        from svit_cluster.reasoning import ReasonRequest, TurnFailed, build_reasoner

        doc = _obj(self.name, input)
        if "prompt" in doc and type(doc["prompt"]) is str and set(doc) == {"prompt"}:
            messages: list[dict[str, Any]] = [{"role": "user", "content": doc["prompt"]}]
        elif set(doc) == {"messages"} and isinstance(doc["messages"], list):
            messages = []
            for m in doc["messages"]:
                if (not isinstance(m, dict) or m.get("role") not in ("system", "user",
                                                                       "assistant")
                        or type(m.get("content")) is not str):
                    raise _fail(self.name, "each message is {role, content} with role "
                                           "system, user or assistant")
                messages.append({"role": m["role"], "content": m["content"]})
        else:
            raise _fail(self.name, "input is {prompt} or {messages}")
        if not messages or len(messages) > self.config.max_messages:
            raise LimitExceeded(f"port llm: 1..{self.config.max_messages} messages",
                                limit="port llm messages")

        async def once() -> Any:
            reasoner = build_reasoner(self.reasoner_config)
            try:
                return await asyncio.wait_for(
                    reasoner.reason(ReasonRequest(ctx.process_id, ctx.call_index + 1,
                                                  messages, [])),
                    timeout=float(self.reasoner_config.step_timeout_s))
            finally:
                await reasoner.aclose()

        try:
            reply = _run_async(once())
        except TurnFailed as exc:
            raise _fail(self.name, exc.message) from None
        except TimeoutError:
            raise _fail(self.name, "the model did not answer in time") from None
        calls = []
        for c in reply.tool_calls:
            if isinstance(c, dict):
                args = c.get("arguments")
                if isinstance(args, str):
                    try:
                        args = json.loads(args)
                    except ValueError:
                        pass
                calls.append({"id": str(c.get("id", "")), "name": str(c.get("name", "")),
                              "arguments": args})
        return {"content": reply.content, "tool_calls": calls}


def child_id(parent_id: str, key: str) -> str:
    """The child process id of one spawn: ``<parent>/spawn-<first 16 hex of the key>``.

    Deterministic in the idempotency key (which covers the parent, the version
    being computed, the call index and the spawn input), so a retried
    activation of the same request names the same child (and a spawner finds
    it instead of forking twice), while another request spawning with another
    input at the same version names another child. Two requests spawning with
    byte-identical inputs at the same version name the same child (see
    :func:`~svit_cluster.ports.idempotency_key`).
    """
    return f"{parent_id}/spawn-{key.removeprefix('svit-')[:16]}"


class Spawner(Protocol):
    """Creates a forked child process and runs one activation in it."""

    def spawn(self, parent: Any, child: str, script: str, input: Value,
              request_id: str) -> dict[str, Value]:
        """Fork ``parent`` (a committed :class:`~svit_cluster.process.Process`)
        into ``child``, run ``/lib/<script>`` once with ``input`` (idempotent by
        ``request_id``) and return ``{"output", "version"}``.

        Raises:
            SvitError: the child could not be created or its activation failed.
        """
        ...


class LocalSpawner:
    """An in-process spawner (single host, no durability): children live in :attr:`children`.

    The cluster uses a spawner that creates the child through the normal
    create path instead (``svit_cluster.cluster``).
    """

    def __init__(self) -> None:
        self.children: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._done: dict[str, dict[str, Value]] = {}

    def spawn(self, parent: Any, child: str, script: str, input: Value,
              request_id: str) -> dict[str, Value]:
        with self._lock:
            if request_id in self._done:
                return self._done[request_id]
            proc = self.children.get(child)
            if proc is None:
                proc = parent.fork(child)
                self.children[child] = proc
            result = activate(proc, script, input)
            out: dict[str, Value] = {"output": result.output, "version": result.version}
            self._done[request_id] = out
            return out


class SpawnPort:
    """``(port-call "spawn" {"script" "name" "input" value})``.

    Result: ``{"child": id, "output": value, "version": int}``.
    """

    name = "spawn"

    def __init__(self, spawner: Spawner) -> None:
        self.spawner = spawner

    def descriptor(self) -> dict[str, Value]:
        return {
            "name": self.name,
            "version": CONTRACT_VERSION,
            "description": "Fork the last committed state into a child process and run one "
                           "child activation there.",
            "input_schema": {"type": "object", "required": ["script"],
                             "additionalProperties": False,
                             "properties": {"script": {"type": "string"}, "input": {}}},
            "output": {"type": "object", "properties": {"child": {"type": "string"},
                                                        "output": {},
                                                        "version": {"type": "integer"}}},
            "effect": "process",
            "limits": {"activations_per_call": 1},
        }

    def call(self, input: Value, ctx: PortContext) -> Value:
        doc = _obj(self.name, input)
        script = doc.get("script")
        if type(script) is not str or not set(doc) <= {"script", "input"}:
            raise _fail(self.name, "input is {script, input}")
        try:
            validate_script_name(script)
        except SvitError as exc:
            raise _fail(self.name, exc.message) from None
        child = child_id(ctx.process_id, ctx.idempotency_key)
        try:
            out = self.spawner.spawn(ctx.committed, child, script, doc.get("input"),
                                     ctx.idempotency_key)
        except LimitExceeded:
            raise
        except SvitError as exc:
            code = str(exc.code) if exc.code != ErrorCode.INTERNAL else "internal"
            raise _fail(self.name, f"child {child}: {code}: {exc.message}") from None
        return {"child": child, "output": out.get("output"), "version": out.get("version")}


def build_registry(config: PortsConfig, *, reasoner_config: Any = None,
                   spawner: Spawner | None = None,
                   on_call: Any = None) -> PortRegistry:
    """The registry of the ports ``config`` enables.

    Args:
        config: the deployment's ports.
        reasoner_config: the :class:`~svit_cluster.reasoning.ReasonerConfig`
            the ``llm`` port uses (default: the simulated reasoner).
        spawner: the ``spawn`` port's spawner (default: :class:`LocalSpawner`).
        on_call: see :class:`PortRegistry`.
    """
    ports: dict[str, Port] = {}
    if config.http.enabled:
        ports["http"] = HttpPort(config.http)
    if config.llm.enabled:
        if reasoner_config is None:
            from svit_cluster.reasoning import ReasonerConfig

            reasoner_config = ReasonerConfig()
        ports["llm"] = LlmPort(config.llm, reasoner_config)
    if config.spawn.enabled:
        ports["spawn"] = SpawnPort(spawner if spawner is not None else LocalSpawner())
    return PortRegistry(ports, config, on_call)
