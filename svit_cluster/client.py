"""Python SDK for the gateway, sync (:class:`SvitClient`) and async (:class:`AsyncSvitClient`).

Retry contract (control protocol: retry safety): a transport error or an
``unavailable`` answer may or may not have committed. The SDK retries it with
tenacity using the **same request bytes** (same ``client_id`` and
``request_id``), so a retained receipt replays the original outcome and the
version precondition stops any second commit. It never invents a new request
id for a retry.

:meth:`SvitClient.activate_until_committed` is the one documented helper for
"observe and recompute on conflict": each attempt reads the state, computes the
input, and sends a *new* request against the observed version. It never turns
an unknown outcome into a second application: when an attempt's outcome was
unknown and its same-id retry then met ``conflict`` (the receipt was evicted),
it asks the owner whether that request committed
(``GET /v1/processes/requests``) before recomputing, and raises
:class:`~svit_cluster.errors.OutcomeUnknownError` when the owner can no longer
tell.

Observers (reference: events.md): :meth:`AsyncSvitClient.events` and
:meth:`AsyncSvitClient.outbox` are async iterators over Server-Sent Events,
each with its own cursor and bounded buffer; a slow consumer gets
:class:`~svit_cluster.events.Lagged` and recovers with ``recent_events`` /
``recent_messages`` and ``read_versioned``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import httpx
from tenacity import (
    AsyncRetrying,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential_jitter,
)

from svit_cluster.control import Conflict, ControlResponse, decode_response
from svit_cluster.errors import (
    ConflictError,
    ErrorCode,
    NotFound,
    OutcomeUnknownError,
    SvitError,
    UnavailableError,
)
from svit_cluster.events import BoundedFeed, Lagged, Signal
from svit_cluster.process import PROTOCOL, Value, decode_value, encode_value

__all__ = [
    "CLIENT_CAPABILITIES",
    "AsyncSvitClient",
    "RecoveredCommit",
    "Subscription",
    "SvitClient",
    "new_request_id",
]

#: Gateway capabilities this client supports and offers in ``initialize``; the
#: gateway answers with the ones both sides list (an omitted one is unsupported).
CLIENT_CAPABILITIES: tuple[str, ...] = ("host-api", "fenced-receipts", "events")

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


@dataclass(frozen=True, slots=True)
class RecoveredCommit:
    """``activate_until_committed``'s result when a lost reply's request did commit.

    The attempt's reply was lost (transport error or ``unavailable``), its
    receipt was evicted before the retry (which got ``conflict``), and the
    owner's retained log names the request as the committer of ``version``.
    The activation's output, logs and messages were in the lost reply and are
    not stored, so they are not available here; read the state (at or after
    ``version``) if you need the result.

    Attributes:
        process_id, client_id, request_id: the request that committed.
        version: the version it committed.
    """

    process_id: str
    client_id: str
    request_id: str
    version: int


def _settle_unknown(
    process_id: str, client_id: str, request_id: str, expected_version: int,
    conflict: Conflict, doc: dict[str, Any],
) -> RecoveredCommit | None:
    """Decide an unknown outcome from ``GET /v1/processes/requests``.

    Returns the recovered commit, or None when the request certainly did not
    commit (safe to recompute). Raises OutcomeUnknownError otherwise.
    """
    if doc.get("committed") is True and isinstance(doc.get("version"), int):
        return RecoveredCommit(process_id, client_id, request_id, int(doc["version"]))
    retained_from = doc.get("retained_from_version")
    # The request could only commit expected_version + 1; it is certainly not
    # committed if that version exists (the head moved past expected_version)
    # and is retained without naming it.
    if (doc.get("committed") is False and isinstance(retained_from, int)
            and conflict.actual_version > expected_version
            and retained_from <= expected_version + 1):
        return None
    raise OutcomeUnknownError(
        f"request {request_id} on {process_id}: its reply was lost, its receipt was "
        f"evicted, and version {expected_version + 1} is no longer retained "
        f"(retained from {retained_from}); it may or may not have committed",
        process_id=process_id, client_id=client_id, request_id=request_id,
        expected_version=expected_version, retained_from_version=retained_from,
    )


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
        #: The owner's fencing token from the last ``/v1/control`` answer
        #: (``X-Svit-Token``), or None when the gateway did not send one.
        #: Per client object: meaningful when one caller uses it at a time.
        self.last_owner_token: int | None = None

    def _note_token(self, resp: httpx.Response) -> None:
        raw = resp.headers.get("X-Svit-Token")
        self.last_owner_token = int(raw) if raw is not None and raw.isdigit() else None

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

    def _call(self, method: str, path: str, *, failed: list[BaseException] | None = None,
              **kw: Any) -> Any:
        for attempt in Retrying(**self._retry_kwargs()):
            with attempt:
                try:
                    resp = self._http.request(method, self.url + path, headers=self.headers,
                                              **kw)
                    _raise_for(resp)
                except _RETRYABLE as exc:
                    if failed is not None:
                        failed.append(exc)
                    raise
                if path == "/v1/control":
                    self._note_token(resp)
                return resp.json()
        raise AssertionError("unreachable")  # pragma: no cover

    def initialize(self) -> dict[str, Any]:
        """Negotiate with ``POST /v1/initialize`` (offers :data:`CLIENT_CAPABILITIES`)."""
        result: dict[str, Any] = self._call(
            "POST", "/v1/initialize",
            json={"protocols": [PROTOCOL], "capabilities": list(CLIENT_CAPABILITIES)},
        )
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

    def read_versioned(self, process_id: str, path: str = "/") -> tuple[Value, int]:
        """``(value, version)`` of ``path`` from one observation (same as :meth:`state`)."""
        return self.state(process_id, path)

    def inbox(self, process_id: str, message: Any, *, dedup_key: str | None = None
              ) -> dict[str, Any]:
        """Commit ``message`` (plain JSON) to the process inbox: ``{appended, version}``.

        Safe to retry only with a ``dedup_key`` (otherwise a retry may append twice).
        """
        body: dict[str, Any] = {"process_id": process_id, "message": message}
        if dedup_key is not None:
            body["dedup_key"] = dedup_key
        result: dict[str, Any] = self._call("POST", "/v1/processes/inbox", json=body)
        return result

    def recent_events(self, process_id: str, limit: int = 64, *, session: str | None = None
                      ) -> list[dict[str, Any]]:
        """The newest ``limit`` (1..4096) canonical events, oldest first:
        ``[{session, seq, token, event}]``."""
        params: dict[str, Any] = {"process_id": process_id, "limit": limit}
        if session:
            params["session"] = session
        doc = self._call("GET", "/v1/processes/events/recent", params=params)
        return list(doc["events"])

    def recent_messages(self, process_id: str, limit: int = 64, *, session: str | None = None
                        ) -> list[dict[str, Any]]:
        """Messages projected from the newest canonical events: ``[{session, seq, message}]``."""
        params: dict[str, Any] = {"process_id": process_id, "limit": limit}
        if session:
            params["session"] = session
        doc = self._call("GET", "/v1/processes/messages/recent", params=params)
        return list(doc["messages"])

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

    def request_status(self, process_id: str, request_id: str, *,
                       client_id: str | None = None) -> dict[str, Any]:
        """Did this principal's request commit? (``GET /v1/processes/requests``)

        Returns:
            ``{process_id, client_id, request_id, committed, version,
            retained_from_version}``; ``committed: false`` is definitive only
            for versions ``>= retained_from_version``.
        """
        result: dict[str, Any] = self._call(
            "GET", "/v1/processes/requests",
            params={"process_id": process_id, "client_id": client_id or self.client_id,
                    "request_id": request_id})
        return result

    def activate_until_committed(
        self, process_id: str, script: str, compute: Compute | Value, *,
        observe_path: str = "/memory", max_attempts: int = 50,
    ) -> ControlResponse | RecoveredCommit:
        """Observe, compute the input, activate; on conflict observe again and recompute.

        Each attempt is a new request against the observed version, retried
        with the same request id on transport errors and ``unavailable``.

        Guarantee: one call applies the change at most once. If an attempt's
        outcome was unknown (a retried transport error or ``unavailable``) and
        its retry got ``conflict`` -- the receipt was evicted (receipts are a
        FIFO of 256 per process by default) -- the helper asks the owner
        whether that request committed before recomputing. The owner knows for
        as long as the log entry of the version the request would have
        committed is retained: the in-memory gateway keeps the last 1024
        versions; the Redis log keeps at least ``trim_margin`` (default 16) and
        up to about ``snapshot_every + trim_margin`` (default 80) of the
        newest versions, plus the receipt itself while retained. Outside that
        window it raises :class:`OutcomeUnknownError` instead of guessing.

        Args:
            compute: ``compute(observed_value, version) -> input``, or a fixed input.
            observe_path: what to read before each attempt (default ``/memory``).
            max_attempts: conflicts tolerated before giving up (default 50).

        Returns:
            The ``committed`` (or ``rejected``) response; or a
            :class:`RecoveredCommit` (request ids and committed version, no
            activation output) when a lost reply's request turned out to have
            committed.

        Raises:
            ConflictError: still conflicting after ``max_attempts``.
            OutcomeUnknownError: an attempt's outcome was unknown and can no
                longer be established (fields ``process_id``, ``client_id``,
                ``request_id``, ``expected_version``, ``retained_from_version``).
            UnavailableError, httpx.TransportError: still failing after the
                retries (the last attempt's outcome is unknown).
        """
        for _ in range(max_attempts):
            value, version = self.state(process_id, observe_path)
            inp = compute(value, version) if callable(compute) else compute
            request_id = new_request_id()
            failed: list[BaseException] = []
            resp = decode_response(self._call(
                "POST", "/v1/control", failed=failed,
                content=_control_body(self.client_id, request_id, process_id, version,
                                      script, inp)))
            if not isinstance(resp.outcome, Conflict):
                return resp
            if failed:
                try:
                    doc = self.request_status(process_id, request_id)
                except NotFound as exc:  # e.g. a gateway without the endpoint
                    doc = {"error": exc.message}
                recovered = _settle_unknown(process_id, self.client_id, request_id, version,
                                            resp.outcome, doc)
                if recovered is not None:
                    return recovered
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

    async def _call(self, method: str, path: str, *,
                    failed: list[BaseException] | None = None, **kw: Any) -> Any:
        async for attempt in AsyncRetrying(**self._retry_kwargs()):
            with attempt:
                try:
                    resp = await self._http.request(method, self.url + path,
                                                    headers=self.headers, **kw)
                    _raise_for(resp)
                except _RETRYABLE as exc:
                    if failed is not None:
                        failed.append(exc)
                    raise
                if path == "/v1/control":
                    self._note_token(resp)
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

    async def read_versioned(self, process_id: str, path: str = "/") -> tuple[Value, int]:
        """``(value, version)`` of ``path`` from one observation."""
        return await self.state(process_id, path)

    async def inbox(self, process_id: str, message: Any, *, dedup_key: str | None = None
                    ) -> dict[str, Any]:
        """Async form of :meth:`SvitClient.inbox`."""
        body: dict[str, Any] = {"process_id": process_id, "message": message}
        if dedup_key is not None:
            body["dedup_key"] = dedup_key
        result: dict[str, Any] = await self._call("POST", "/v1/processes/inbox", json=body)
        return result

    async def recent_events(self, process_id: str, limit: int = 64, *,
                            session: str | None = None) -> list[dict[str, Any]]:
        """Async form of :meth:`SvitClient.recent_events`."""
        params: dict[str, Any] = {"process_id": process_id, "limit": limit}
        if session:
            params["session"] = session
        doc = await self._call("GET", "/v1/processes/events/recent", params=params)
        return list(doc["events"])

    async def recent_messages(self, process_id: str, limit: int = 64, *,
                              session: str | None = None) -> list[dict[str, Any]]:
        """Async form of :meth:`SvitClient.recent_messages`."""
        params: dict[str, Any] = {"process_id": process_id, "limit": limit}
        if session:
            params["session"] = session
        doc = await self._call("GET", "/v1/processes/messages/recent", params=params)
        return list(doc["messages"])

    def events(self, process_id: str, *, after: str = "$",
               kinds: Iterable[str] | None = None, buffer: int = 256) -> Subscription:
        """An independent observer of ``process_id``'s signals (async iterator).

        Use as ``async with client.events(pid) as sub: async for s in sub: ...``;
        entering waits until the gateway confirmed the subscription, so
        signals committed afterwards are all seen.

        Args:
            after: ``"$"`` (from now, default), ``"0"`` (oldest retained) or a
                signal id to resume after.
            kinds: only these signal kinds (``Lagged`` is always delivered).
            buffer: signals buffered before the subscription lags (default 256).

        Yields:
            :class:`~svit_cluster.events.Signal` in stream order, or
            :class:`~svit_cluster.events.Lagged` where signals were missed.

        Raises (while iterating):
            UnavailableError: the gateway stayed unreachable after the retries.
            SvitError: the gateway refused the subscription (401/403/404).
        """
        return Subscription(self, process_id, after=after, kinds=kinds, buffer=buffer)

    def outbox(self, process_id: str, *, after: str = "$", buffer: int = 256) -> Subscription:
        """An independent observer of completed turns (``completion`` signals only)."""
        return self.events(process_id, after=after, kinds=("completion",), buffer=buffer)

    async def activate(
        self, process_id: str, script: str, input: Value, *, expected_version: int,
        request_id: str | None = None,
    ) -> ControlResponse:
        body = _control_body(self.client_id, request_id or new_request_id(), process_id,
                             expected_version, script, input)
        return await self.send_raw(body)

    async def request_status(self, process_id: str, request_id: str, *,
                             client_id: str | None = None) -> dict[str, Any]:
        """Async form of :meth:`SvitClient.request_status`."""
        result: dict[str, Any] = await self._call(
            "GET", "/v1/processes/requests",
            params={"process_id": process_id, "client_id": client_id or self.client_id,
                    "request_id": request_id})
        return result

    async def activate_until_committed(
        self, process_id: str, script: str, compute: Compute | Value, *,
        observe_path: str = "/memory", max_attempts: int = 50,
    ) -> ControlResponse | RecoveredCommit:
        """Async form of :meth:`SvitClient.activate_until_committed` (same guarantee)."""
        for _ in range(max_attempts):
            value, version = await self.state(process_id, observe_path)
            inp = compute(value, version) if callable(compute) else compute
            request_id = new_request_id()
            failed: list[BaseException] = []
            resp = decode_response(await self._call(
                "POST", "/v1/control", failed=failed,
                content=_control_body(self.client_id, request_id, process_id, version,
                                      script, inp)))
            if not isinstance(resp.outcome, Conflict):
                return resp
            if failed:
                try:
                    doc = await self.request_status(process_id, request_id)
                except NotFound as exc:  # e.g. a gateway without the endpoint
                    doc = {"error": exc.message}
                recovered = _settle_unknown(process_id, self.client_id, request_id, version,
                                            resp.outcome, doc)
                if recovered is not None:
                    return recovered
        raise ConflictError(f"still conflicting after {max_attempts} attempts")



class Subscription:
    """One observer of one process over SSE: own cursor, bounded buffer, resumes.

    Created by :meth:`AsyncSvitClient.events`. The background reader follows
    the gateway's stream and reconnects after transport errors from its last
    cursor (``Last-Event-ID``), so nothing is skipped except what it reports
    as :class:`~svit_cluster.events.Lagged`.
    """

    def __init__(self, client: AsyncSvitClient, process_id: str, *, after: str,
                 kinds: Iterable[str] | None, buffer: int) -> None:
        self.client = client
        self.process_id = process_id
        self.cursor: str = after
        self.kinds = ",".join(kinds) if kinds else None
        self._feed: BoundedFeed[Signal] = BoundedFeed(buffer)
        self._ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Subscription:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> Signal | Lagged:
        return await self._feed.get()

    async def start(self) -> str:
        """Connect and wait until the gateway confirmed the cursor; returns it.

        Raises:
            SvitError: the subscription was refused or the gateway is unreachable.
        """
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())
        return await asyncio.shield(self._ready)

    async def aclose(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _run(self) -> None:
        failures = 0
        while True:
            try:
                await self._stream()
                failures = 0
            except asyncio.CancelledError:
                raise
            except (httpx.TransportError, UnavailableError) as exc:
                failures += 1
                if failures >= self.client.attempts:
                    self._fail(UnavailableError(f"event stream unavailable: "
                                                f"{type(exc).__name__}"))
                    return
                await asyncio.sleep(min(self.client.max_wait_s, 0.05 * 2 ** failures))
            except SvitError as exc:
                self._fail(exc)
                return

    def _fail(self, exc: SvitError) -> None:
        if not self._ready.done():
            self._ready.set_exception(exc)
            self._ready.exception()
        self._feed.fail(exc)

    async def _stream(self) -> None:
        params: dict[str, Any] = {"process_id": self.process_id, "after": self.cursor}
        if self.kinds:
            params["kinds"] = self.kinds
        timeout = httpx.Timeout(10.0, read=60.0)
        async with self.client._http.stream(
            "GET", self.client.url + "/v1/processes/events", params=params,
            headers={**self.client.headers, "Accept": "text/event-stream"}, timeout=timeout,
        ) as resp:
            if resp.status_code >= 400:
                await resp.aread()
                _raise_for(resp)
            event, eid = "", None
            data: list[str] = []
            async for line in resp.aiter_lines():
                if line == "":
                    if event or data:
                        self._dispatch(event or "message", "\n".join(data), eid)
                    event, data, eid = "", [], None
                elif line.startswith(":"):
                    continue
                else:
                    name, _, value = line.partition(":")
                    value = value[1:] if value.startswith(" ") else value
                    if name == "event":
                        event = value
                    elif name == "data":
                        data.append(value)
                    elif name == "id":
                        eid = value
        raise UnavailableError("event stream ended")

    def _dispatch(self, event: str, data: str, eid: str | None) -> None:
        doc = json.loads(data) if data else {}
        if event == "ready":
            self.cursor = str(doc["cursor"])
            if not self._ready.done():
                self._ready.set_result(self.cursor)
        elif event == "lagged":
            lagged = Lagged(resume=str(doc["resume"]), oldest=doc.get("oldest"),
                            source="server")
            self.cursor = lagged.resume
            self._feed.offer_lagged(lagged)
        elif event == "error":
            raise UnavailableError(str(doc.get("message", "event stream failed")))
        else:
            signal = Signal.from_json(doc)
            self.cursor = signal.id
            self._feed.offer(signal, signal.id)
