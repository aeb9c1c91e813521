"""Python SDK for the gateway, sync (:class:`SvitClient`) and async (:class:`AsyncSvitClient`).

Retry contract (control protocol: retry safety): a transport error or an
``unavailable`` answer may or may not have committed. The SDK retries it with
tenacity using the **same request bytes** (same ``client_id`` and
``request_id``), so a retained receipt replays the original outcome and the
version precondition stops any second commit. It never invents a new request
id for a retry.

:meth:`SvitClient.activate_until_committed` is the one documented helper for
"observe and recompute on conflict": each attempt reads the state, computes the
input, and sends a *new* request against the observed version.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import httpx
from tenacity import (
    AsyncRetrying,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential_jitter,
)

from svit_cluster.control import ControlResponse, decode_response
from svit_cluster.errors import (
    ConflictError,
    ErrorCode,
    NotFound,
    SvitError,
    UnavailableError,
)
from svit_cluster.process import PROTOCOL, Value, decode_value, encode_value

__all__ = ["AsyncSvitClient", "SvitClient", "new_request_id"]

Compute = Callable[[Value, int], Value]


def new_request_id() -> str:
    """A fresh idempotency key (32 hex characters)."""
    return uuid.uuid4().hex


def _control_body(
    client_id: str, request_id: str, process_id: str, expected_version: int, script: str,
    input: Value,
) -> bytes:
    return json.dumps(
        {
            "protocol": PROTOCOL,
            "client_id": client_id,
            "request_id": request_id,
            "process_id": process_id,
            "expected_version": expected_version,
            "command": {"operation": "activate", "script": script, "input": encode_value(input)},
        }
    ).encode()


def _raise_for(resp: httpx.Response) -> None:
    if resp.status_code < 400:
        return
    try:
        err = resp.json()["error"]
        code, message = str(err["code"]), str(err["message"])
    except (ValueError, KeyError, TypeError):
        code, message = "internal", resp.text[:200]
    if resp.status_code in (502, 503, 504):
        raise UnavailableError(message, retry_after_s=resp.headers.get("Retry-After"))
    if resp.status_code == 404:
        raise NotFound(message)
    if resp.status_code == 409:
        raise ConflictError(message)
    try:
        ecode = ErrorCode(code)
    except ValueError:
        ecode = ErrorCode.INTERNAL
    raise SvitError(message, code=ecode, status=resp.status_code)


_RETRYABLE = (httpx.TransportError, UnavailableError)


class _Base:
    def __init__(
        self, url: str, token: str | None, *, client_id: str | None, attempts: int,
        max_wait_s: float,
    ) -> None:
        self.url = url.rstrip("/")
        self.client_id = client_id or f"sdk-{uuid.uuid4().hex[:12]}"
        self.headers = {"Content-Type": "application/json"}
        if token:
            self.headers["Authorization"] = f"Bearer {token}"
        self.attempts = attempts
        self.max_wait_s = max_wait_s

    def _retry_kwargs(self) -> dict[str, Any]:
        return {
            "stop": stop_after_attempt(self.attempts),
            "wait": wait_exponential_jitter(multiplier=0.05, max=self.max_wait_s, jitter=0.05),
            "retry": retry_if_exception_type(_RETRYABLE),
            "reraise": True,
        }


class SvitClient(_Base):
    """Blocking client.

    Args:
        url: gateway base URL, e.g. ``http://127.0.0.1:8080``.
        token: bearer token (tenant or admin).
        client_id: idempotency namespace; a random one by default.
        timeout_s: per-HTTP-call timeout in seconds (default 10).
        attempts: tries per call for transport errors and ``unavailable``
            (default 8), with exponential backoff capped at ``max_wait_s``.
    """

    def __init__(
        self, url: str, token: str | None = None, *, client_id: str | None = None,
        timeout_s: float = 10.0, attempts: int = 8, max_wait_s: float = 2.0,
    ) -> None:
        super().__init__(url, token, client_id=client_id, attempts=attempts,
                         max_wait_s=max_wait_s)
        self._http = httpx.Client(timeout=timeout_s)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> SvitClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, method: str, path: str, **kw: Any) -> Any:
        for attempt in Retrying(**self._retry_kwargs()):
            with attempt:
                resp = self._http.request(method, self.url + path, headers=self.headers, **kw)
                _raise_for(resp)
                return resp.json()
        raise AssertionError("unreachable")  # pragma: no cover

    def initialize(self) -> dict[str, Any]:
        """Negotiate with ``POST /v1/initialize``."""
        result: dict[str, Any] = self._call("POST", "/v1/initialize",
                                            json={"protocols": [PROTOCOL]})
        return result

    def create_process(
        self, process_id: str, *, memory: Any = None, scripts: dict[str, str] | None = None
    ) -> dict[str, Any]:
        """Create a process (plain-JSON memory, scripts by name).

        Raises:
            SvitError: e.g. ``conflict`` (409) when it already exists.
        """
        result: dict[str, Any] = self._call(
            "POST", "/v1/processes",
            json={"process_id": process_id, "memory": memory, "scripts": scripts or {}},
        )
        return result

    def state(self, process_id: str, path: str = "/memory") -> tuple[Value, int]:
        """``(value, version)`` of ``path`` from one observation."""
        doc = self._call("GET", "/v1/processes/state",
                         params={"process_id": process_id, "path": path})
        return decode_value(doc["value"]), int(doc["version"])

    def snapshot(self, process_id: str) -> dict[str, Any]:
        result: dict[str, Any] = self._call("POST", "/v1/processes/snapshot",
                                            json={"process_id": process_id})
        return result

    def fork(self, process_id: str, new_process_id: str) -> dict[str, Any]:
        result: dict[str, Any] = self._call(
            "POST", "/v1/processes/fork",
            json={"process_id": process_id, "new_process_id": new_process_id},
        )
        return result

    def send_raw(self, body: bytes) -> ControlResponse:
        """POST one encoded request; retried byte-for-byte on transport errors."""
        return decode_response(self._call("POST", "/v1/control", content=body))

    def activate(
        self, process_id: str, script: str, input: Value, *, expected_version: int,
        request_id: str | None = None,
    ) -> ControlResponse:
        """One activation request (retried only with the same request id)."""
        body = _control_body(self.client_id, request_id or new_request_id(), process_id,
                             expected_version, script, input)
        return self.send_raw(body)

    def activate_until_committed(
        self, process_id: str, script: str, compute: Compute | Value, *,
        observe_path: str = "/memory", max_attempts: int = 50,
    ) -> ControlResponse:
        """Observe, compute the input, activate; on conflict observe again and recompute.

        Args:
            compute: ``compute(observed_value, version) -> input``, or a fixed input.
            observe_path: what to read before each attempt (default ``/memory``).
            max_attempts: conflicts tolerated before giving up (default 50).

        Returns:
            The ``committed`` (or ``rejected``) response.

        Raises:
            ConflictError: still conflicting after ``max_attempts``.
        """
        for _ in range(max_attempts):
            value, version = self.state(process_id, observe_path)
            inp = compute(value, version) if callable(compute) else compute
            resp = self.activate(process_id, script, inp, expected_version=version)
            if resp.outcome.status != "conflict":
                return resp
        raise ConflictError(f"still conflicting after {max_attempts} attempts")


class AsyncSvitClient(_Base):
    """Asyncio client with the same methods as :class:`SvitClient` (awaitable)."""

    def __init__(
        self, url: str, token: str | None = None, *, client_id: str | None = None,
        timeout_s: float = 10.0, attempts: int = 8, max_wait_s: float = 2.0,
    ) -> None:
        super().__init__(url, token, client_id=client_id, attempts=attempts,
                         max_wait_s=max_wait_s)
        self._http = httpx.AsyncClient(timeout=timeout_s)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncSvitClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _call(self, method: str, path: str, **kw: Any) -> Any:
        async for attempt in AsyncRetrying(**self._retry_kwargs()):
            with attempt:
                resp = await self._http.request(method, self.url + path, headers=self.headers,
                                                **kw)
                _raise_for(resp)
                return resp.json()
        raise AssertionError("unreachable")  # pragma: no cover

    async def create_process(
        self, process_id: str, *, memory: Any = None, scripts: dict[str, str] | None = None
    ) -> dict[str, Any]:
        result: dict[str, Any] = await self._call(
            "POST", "/v1/processes",
            json={"process_id": process_id, "memory": memory, "scripts": scripts or {}},
        )
        return result

    async def state(self, process_id: str, path: str = "/memory") -> tuple[Value, int]:
        doc = await self._call("GET", "/v1/processes/state",
                               params={"process_id": process_id, "path": path})
        return decode_value(doc["value"]), int(doc["version"])

    async def send_raw(self, body: bytes) -> ControlResponse:
        return decode_response(await self._call("POST", "/v1/control", content=body))

    async def activate(
        self, process_id: str, script: str, input: Value, *, expected_version: int,
        request_id: str | None = None,
    ) -> ControlResponse:
        body = _control_body(self.client_id, request_id or new_request_id(), process_id,
                             expected_version, script, input)
        return await self.send_raw(body)

    async def activate_until_committed(
        self, process_id: str, script: str, compute: Compute | Value, *,
        observe_path: str = "/memory", max_attempts: int = 50,
    ) -> ControlResponse:
        """Async form of :meth:`SvitClient.activate_until_committed`."""
        for _ in range(max_attempts):
            value, version = await self.state(process_id, observe_path)
            inp = compute(value, version) if callable(compute) else compute
            resp = await self.activate(process_id, script, inp, expected_version=version)
            if resp.outcome.status != "conflict":
                return resp
        raise ConflictError(f"still conflicting after {max_attempts} attempts")

