"""An OpenAI-compatible chat-completions reasoner over HTTP.

``POST <base_url>/chat/completions`` with ``{model, messages, tools}`` and a
bearer key; reads ``choices[0].message`` (``content`` and ``tool_calls``). The
key is sent only in the ``Authorization`` header: it is never logged, never in
``repr``, and never in an error message (HTTP error bodies are not echoed).

A refusal that asks for a wait (``retry-after-ms`` or ``Retry-After``, as
OpenAI sends with 429 and 503) carries that wait to the loop, which does not
retry the turn sooner.
"""

from __future__ import annotations

import json
import math
import time
from email.utils import parsedate_to_datetime
from typing import Any

import httpx

from svit_cluster.errors import ConfigurationError
from svit_cluster.reasoning._model import ReasonerError, ReasonReply, ReasonRequest

__all__ = ["OpenAICompatReasoner", "retry_after_s"]

#: The longest wait read from a response, in seconds (the loop caps it again
#: at ``ReasonerConfig.max_retry_after_s``).
MAX_RETRY_AFTER_S = 86400.0


def retry_after_s(headers: httpx.Headers) -> float | None:
    """The wait a refusal asks for, in seconds (0 .. :data:`MAX_RETRY_AFTER_S`).

    ``retry-after-ms`` (milliseconds; OpenAI's header) wins over ``Retry-After``
    (delay seconds, or an HTTP date: RFC 9110 section 10.2.3). None when
    neither is present or readable.
    """
    raw_ms = headers.get("retry-after-ms")
    if raw_ms is not None:
        wait = _finite(raw_ms)
        if wait is not None:
            return min(max(wait / 1000.0, 0.0), MAX_RETRY_AFTER_S)
    raw = headers.get("retry-after")
    if raw is None:
        return None
    wait = _finite(raw)
    if wait is None:
        try:
            wait = parsedate_to_datetime(raw).timestamp() - time.time()
        except (TypeError, ValueError, IndexError, OverflowError):
            return None
    return min(max(wait, 0.0), MAX_RETRY_AFTER_S)


def _finite(text: str) -> float | None:
    try:
        value = float(text.strip())
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _to_openai(message: dict[str, Any]) -> dict[str, Any]:
    role = message.get("role")
    if role == "assistant" and message.get("tool_calls"):
        return {"role": "assistant", "content": message.get("content") or None,
                "tool_calls": [{"id": c["id"], "type": "function",
                                "function": {"name": c["name"],
                                             "arguments": json.dumps(c["arguments"])}}
                               for c in message["tool_calls"]]}
    if role == "tool":
        return {"role": "tool", "tool_call_id": message.get("tool_call_id"),
                "content": message.get("content", "")}
    return {"role": role, "content": message.get("content", "")}


class OpenAICompatReasoner:
    """A chat-completions endpoint as a :class:`~svit_cluster.reasoning.Reasoner`.

    Args:
        base_url: e.g. ``https://api.example.com/v1`` (``/chat/completions`` is appended).
        model: the model name sent in every request.
        api_key: bearer key; None sends no ``Authorization`` header.
        timeout_s: HTTP timeout per step in seconds (default 30); the loop's
            step timeout applies as well.
        transport: optional httpx transport (tests).

    Raises:
        ConfigurationError: empty base URL or model.
    """

    def __init__(self, base_url: str, model: str, api_key: str | None = None, *,
                 timeout_s: float = 30.0, transport: httpx.AsyncBaseTransport | None = None
                 ) -> None:
        if not base_url or not model:
            raise ConfigurationError("an OpenAI-compatible reasoner needs base_url and model")
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self._headers = {"Content-Type": "application/json"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._http = httpx.AsyncClient(timeout=timeout_s, transport=transport)

    def __repr__(self) -> str:
        return f"OpenAICompatReasoner(url={self.url!r}, model={self.model!r})"

    async def aclose(self) -> None:
        await self._http.aclose()

    async def reason(self, request: ReasonRequest) -> ReasonReply:
        """One chat completion.

        Raises:
            ReasonerError: ``reasoner_timeout`` (HTTP timeout),
                ``reasoner_failed`` (unreachable, an HTTP status other than 2xx --
                redirects are not followed --, not JSON; a refusal's
                ``Retry-After`` is its ``retry_after_s``),
                ``reasoner_malformed`` (no ``choices[0].message`` of the right shape).
        """
        body: dict[str, Any] = {"model": self.model,
                                "messages": [_to_openai(m) for m in request.messages]}
        if request.tools:
            body["tools"] = request.tools
        try:
            resp = await self._http.post(self.url, json=body, headers=self._headers)
        except httpx.TimeoutException:
            raise ReasonerError("the reasoner did not answer in time",
                                cause="reasoner_timeout") from None
        except httpx.HTTPError:
            raise ReasonerError("the reasoner could not be reached") from None
        if resp.status_code >= 300:
            wait = retry_after_s(resp.headers)
            hint = "" if wait is None else f" (retry after {wait:g} s)"
            raise ReasonerError(f"the reasoner answered HTTP {resp.status_code}{hint}",
                                retry_after_s=wait)
        try:
            doc = resp.json()
        except ValueError:
            raise ReasonerError("the reasoner answered with invalid JSON") from None
        try:
            message = doc["choices"][0]["message"]
            content = message.get("content")
            raw_calls = message.get("tool_calls") or []
            calls = [{"id": c.get("id"), "name": (c.get("function") or {}).get("name"),
                      "arguments": (c.get("function") or {}).get("arguments", "{}")}
                     for c in raw_calls]
        except (KeyError, IndexError, TypeError, AttributeError):
            raise ReasonerError("the reasoner's answer has no usable message",
                                cause="reasoner_malformed") from None
        if content is not None and not isinstance(content, str):
            raise ReasonerError("the reasoner's content is not text",
                                cause="reasoner_malformed")
        return ReasonReply(content, calls)
