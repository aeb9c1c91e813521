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
import email.utils
import json
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar, cast

import httpx
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential_jitter,
)

from svit_cluster import tracing
from svit_cluster.control import Conflict, ControlResponse, decode_response
from svit_cluster.defaults import (
    DEFAULT_HTTP_TIMEOUT_S,
    DEFAULT_PROCESS_PAGE,
    DEFAULT_TIMER_PAGE,
)
from svit_cluster.errors import (
    ConflictError,
    ErrorCode,
    NotFound,
    OutcomeUnknownError,
    SvitError,
    UnavailableError,
)
from svit_cluster.events import BoundedFeed, Lagged, Signal
from svit_cluster.process import (
    PROTOCOL,
    Script,
    Value,
    decode_value,
    encode_value,
    from_plain_json,
)

__all__ = [
    "CLIENT_CAPABILITIES",
    "AsyncSvitClient",
    "ProcessEntry",
    "ProcessPage",
    "RecoveredCommit",
    "Subscription",
    "SvitClient",
    "SyncSubscription",
    "Timer",
    "TimerCancelOutcome",
    "TimerPage",
    "new_request_id",
    "raise_for_response",
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


def _retry_after_s(resp: httpx.Response) -> float | None:
    """``Retry-After`` in seconds (delta-seconds or HTTP date), or None."""
    raw = resp.headers.get("Retry-After")
    if raw is None:
        return None
    raw = raw.strip()
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _raise_for(resp: httpx.Response) -> None:
    """Raise the typed error for a 4xx/5xx answer (the class registered for its code).

    Every field the gateway sent (``error.fields`` and any extra keys of the
    ``error`` object) is kept in ``exc.fields``, plus ``status`` (HTTP status)
    and ``retry_after_s`` when the answer carried ``Retry-After``.
    """
    if resp.status_code < 400:
        return
    fields: dict[str, Any] = {}
    try:
        err = resp.json()["error"]
        code, message = str(err["code"]), str(err["message"])
        for key, value in err.items():
            if key == "fields" and isinstance(value, dict):
                fields.update(value)
            elif key not in ("code", "message"):
                fields[key] = value
    except (ValueError, KeyError, TypeError):
        code, message = "", f"HTTP {resp.status_code}: {resp.text[:200]}"
    fields["status"] = resp.status_code
    retry_after = _retry_after_s(resp)
    if retry_after is not None:
        fields["retry_after_s"] = retry_after
    if code not in _KNOWN_CODES:
        # No JSON error (a proxy's HTML page) or a code this SDK does not know (a
        # newer gateway's): the HTTP status decides the class, so that a proxy's
        # 503 stays retryable; an unknown code is kept in ``fields["wire_code"]``.
        if code:
            fields["wire_code"] = code[:64]
        code = _CODE_FOR_STATUS.get(resp.status_code, ErrorCode.INTERNAL)
    raise SvitError.from_wire({"code": code, "message": message, "fields": fields})


#: The class of an error answer that carries no code this SDK knows, by HTTP
#: status. 429 (a rate limiter in front of the gateway, e.g. an ingress) and the
#: proxy statuses 502/503/504 are ``unavailable``: retried, honouring
#: ``Retry-After``. Any other status is ``internal``.
_CODE_FOR_STATUS = {
    401: ErrorCode.UNAUTHENTICATED, 403: ErrorCode.FORBIDDEN, 404: ErrorCode.NOT_FOUND,
    409: ErrorCode.CONFLICT, 413: ErrorCode.PAYLOAD_TOO_LARGE, 429: ErrorCode.UNAVAILABLE,
    502: ErrorCode.UNAVAILABLE, 503: ErrorCode.UNAVAILABLE, 504: ErrorCode.UNAVAILABLE,
}


_KNOWN_CODES = frozenset(str(c) for c in ErrorCode)

#: Public name of the SDK's error mapping, for callers making their own HTTP calls
#: (the CLI's admin commands): raise the typed error for a 4xx/5xx answer.
raise_for_response = _raise_for


def _transport_unavailable(url: str, attempts: int, exc: httpx.TransportError
                           ) -> UnavailableError:
    kind = "timed out" if isinstance(exc, httpx.TimeoutException) else "unreachable"
    err = UnavailableError(
        f"gateway {url} {kind} after {attempts} attempt(s): {type(exc).__name__}: {exc}",
        cause=type(exc).__name__, url=url, attempts=attempts,
        timeout=isinstance(exc, httpx.TimeoutException))
    err.__cause__ = exc
    return err


_RETRYABLE = (httpx.TransportError, UnavailableError)


@contextlib.contextmanager
def _noting_failures(failed: list[BaseException] | None) -> Iterator[None]:
    """Append a retryable failure (:data:`_RETRYABLE`) raised in the block to
    ``failed`` when given, and raise it on."""
    try:
        yield
    except _RETRYABLE as exc:
        if failed is not None:
            failed.append(exc)
        raise


def _drop_body(process_id: str, reason: str, message_id: str | None,
               head_hash: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {"process_id": process_id, "reason": reason}
    if message_id is not None:
        body["message_id"] = message_id
    if head_hash is not None:
        body["head_hash"] = head_hash
    return body


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


@dataclass(frozen=True, slots=True)
class Timer:
    """One pending durable timer of a process (a delayed ``send!``).

    Attributes:
        id: the delayed intent's id ``<process_id>:<version>:<index>`` (its
            idempotency key at the sink; what :meth:`SvitClient.cancel_timer` takes).
        to: destination address.
        due_ms: not delivered before this time (ms since the epoch, Redis clock).
        state: ``"pending"`` (parked until due) or ``"firing"`` (being delivered now).
        version: the process version whose activation armed it.
    """

    id: str
    to: str
    due_ms: int
    state: str
    version: int


@dataclass(frozen=True, slots=True)
class TimerPage:
    """One page of :meth:`SvitClient.timers`: ``timers`` in due order and the
    cursor of the next page (``next_after``, None on the last page)."""

    timers: list[Timer]
    next_after: str | None


@dataclass(frozen=True, slots=True)
class ProcessEntry:
    """One process of :meth:`SvitClient.list_processes`.

    Attributes:
        process_id: the ``svit://`` id.
        version: its version when the gateway read it (it may have moved since).
        active: whether an owner serves it now (the gateway's route cache);
            an inactive process is activated by its next request.
        host: that owner's host, or None.
        token: the fencing token that owner serves it under, or None.
        last_commit_at: when it last committed (unix seconds, Redis clock), or
            None when the gateway does not know (see ``GET /v1/processes``).
    """

    process_id: str
    version: int
    active: bool
    host: str | None
    token: int | None = None
    last_commit_at: float | None = None


@dataclass(frozen=True, slots=True)
class ProcessPage:
    """One page of :meth:`SvitClient.list_processes` and the cursor of the next
    page (``next_after``, None on the last page). A page may hold fewer
    processes than asked for, even none, before the last page."""

    processes: list[ProcessEntry]
    next_after: str | None


def _process_page(doc: dict[str, Any]) -> ProcessPage:
    return ProcessPage([ProcessEntry(str(p["process_id"]), int(p["version"]),
                                     bool(p.get("active")),
                                     None if p.get("host") is None else str(p["host"]),
                                     None if p.get("token") is None else int(p["token"]),
                                     None if p.get("last_commit_at") is None
                                     else float(p["last_commit_at"]))
                        for p in doc["processes"]], doc.get("next"))


def _list_params(tenant: str | None, limit: int, after: str | None) -> dict[str, Any]:
    params: dict[str, Any] = {"limit": limit}
    if tenant is not None:
        params["tenant"] = tenant
    if after is not None:
        params["after"] = after
    return params


#: What a cancel did, decided atomically against the firing: ``cancelled``
#: (never delivered), ``too_late`` (firing or fired), ``already_cancelled``,
#: ``unknown`` (never parked for this process, not parked yet, or forgotten).
TimerCancelOutcome = Literal["cancelled", "too_late", "already_cancelled", "unknown"]


def _timer_page(doc: dict[str, Any]) -> TimerPage:
    return TimerPage([Timer(str(t["id"]), str(t["to"]), int(t["due_ms"]), str(t["state"]),
                            int(t["version"])) for t in doc["timers"]],
                     doc.get("next"))


def _timers_params(process_id: str, limit: int, after: str | None) -> dict[str, Any]:
    params: dict[str, Any] = {"process_id": process_id, "limit": limit}
    if after is not None:
        params["after"] = after
    return params


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


def _same_creation(memory: Any, scripts: dict[str, str] | None, memory_now: Value,
                   lib_now: Value) -> bool:
    """Whether an existing process holds exactly what a create asked for.

    ``memory`` is compared as the gateway decodes it (plain JSON, ``None`` =
    ``{}``); ``scripts`` by source text.
    """
    want_memory = from_plain_json(memory) if memory is not None else {}
    if memory_now != want_memory or not isinstance(lib_now, dict):
        return False
    have = {name: s.source for name, s in lib_now.items() if isinstance(s, Script)}
    return len(have) == len(lib_now) and have == dict(scripts or {})


TraceHook = Callable[[], str | None]
#: ``(attempt, error, wait_s)``: attempt ``attempt`` (1-based) failed with a
#: retryable ``error``; the next one starts in ``wait_s`` seconds.
RetryHook = Callable[[int, BaseException, float], None]


#: The HTTP client type a client sends with: ``httpx.Client`` or ``httpx.AsyncClient``.
_Http = TypeVar("_Http", httpx.Client, httpx.AsyncClient)


class _Base(ABC, Generic[_Http]):
    """What the sync and async clients share: the constructor, headers, retry policy."""

    def __init__(
        self, url: str | None = None, token: str | None = None, *,
        client_id: str | None = None, timeout_s: float = DEFAULT_HTTP_TIMEOUT_S, attempts: int = 8,
        max_wait_s: float = 2.0, http_client: _Http | None = None,
        traceparent: TraceHook | None = tracing.current_traceparent,
        on_retry: RetryHook | None = None,
    ) -> None:
        from svit_cluster.settings import resolve_gateway

        url, token = resolve_gateway(url, token)
        self.url = url.rstrip("/")
        self.client_id = client_id or f"sdk-{uuid.uuid4().hex[:12]}"
        self.headers = {"Content-Type": "application/json"}
        if token:
            self.headers["Authorization"] = f"Bearer {token}"
        self.attempts = attempts
        self.max_wait_s = max_wait_s
        self.traceparent = traceparent
        self.on_retry = on_retry
        #: The owner's fencing token from the last ``/v1/control`` answer
        #: (``X-Svit-Token``), or None when the gateway did not send one.
        #: Per client object: meaningful when one caller uses it at a time.
        self.last_owner_token: int | None = None
        self._owns_http = http_client is None
        self._http: _Http = http_client if http_client is not None else self._new_http(timeout_s)

    @staticmethod
    @abstractmethod
    def _new_http(timeout_s: float) -> _Http:
        """The HTTP client made (and later closed) when none is given as ``http_client``."""

    def _headers(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        """The headers of one request: auth, content type, ``traceparent`` from the hook."""
        headers = dict(self.headers)
        if extra:
            headers.update(extra)
        parent = self.traceparent() if self.traceparent is not None else None
        if parent:
            headers["traceparent"] = parent
            ctx = tracing.current()
            if ctx is not None and ctx.tracestate and ctx.traceparent == parent:
                headers["tracestate"] = ctx.tracestate
        return headers

    def _note_token(self, resp: httpx.Response) -> None:
        raw = resp.headers.get("X-Svit-Token")
        self.last_owner_token = int(raw) if raw is not None and raw.isdigit() else None

    def _answer(self, path: str, resp: httpx.Response) -> Any:
        """The JSON body of a successful answer to ``path``; an answer of
        ``/v1/control`` sets :attr:`last_owner_token` first."""
        if path == "/v1/control":
            self._note_token(resp)
        return resp.json()

    def _retry_kwargs(self) -> dict[str, Any]:
        backoff = wait_exponential_jitter(multiplier=0.05, max=self.max_wait_s, jitter=0.05)

        def wait(state: RetryCallState) -> float:
            # Honour the server's Retry-After (capped at max_wait_s) when it asks
            # for longer than our own backoff.
            delay = float(backoff(state))
            exc = state.outcome.exception() if state.outcome is not None else None
            if isinstance(exc, SvitError):
                hint = exc.fields.get("retry_after_s")
                if isinstance(hint, int | float):
                    delay = max(delay, min(float(hint), self.max_wait_s))
            return delay

        def before_sleep(state: RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome is not None else None
            if self.on_retry is not None and exc is not None:
                sleep = state.next_action.sleep if state.next_action is not None else 0.0
                self.on_retry(state.attempt_number, exc, float(sleep))

        return {
            "stop": stop_after_attempt(self.attempts),
            "wait": wait,
            "retry": retry_if_exception_type(_RETRYABLE),
            "reraise": True,
            "before_sleep": before_sleep,
        }

    @staticmethod
    def _timeout(kw: dict[str, Any], timeout_s: float | None) -> dict[str, Any]:
        if timeout_s is not None:
            kw["timeout"] = timeout_s
        return kw


class SvitClient(_Base[httpx.Client]):
    """Blocking client.

    Args:
        url: gateway base URL, e.g. ``http://127.0.0.1:8080``; default ``SVIT_URL``,
            then ``./.svit/cluster.json`` (see :mod:`svit_cluster.settings`).
        token: bearer token (tenant or admin); default ``SVIT_TOKEN``, then the
            cluster file's admin token.
        client_id: idempotency namespace; a random one by default.
        timeout_s: per-HTTP-call timeout in seconds
            (``defaults.DEFAULT_HTTP_TIMEOUT_S``); every method
            also takes ``timeout_s=`` to override it for one call.
        attempts: tries per call for transport errors and ``unavailable``
            (default 8), with exponential backoff capped at ``max_wait_s``;
            a ``Retry-After`` answer waits that long (capped at ``max_wait_s``).
        http_client: an ``httpx.Client`` to send every request with (your own
            transport, proxies, event hooks, instrumentation). It is yours:
            :meth:`close` leaves it open, and its own timeout applies unless a
            call passes ``timeout_s``. None (default): the SDK makes one with
            ``timeout_s`` and closes it.
        traceparent: ``() -> str | None``, called for every request; a string
            is sent as the W3C ``traceparent`` header (with ``tracestate`` when
            it is the current :mod:`svit_cluster.tracing` context's). Default:
            :func:`svit_cluster.tracing.current_traceparent` -- the context set
            with ``tracing.use_traceparent(...)`` around a call, else the current
            OpenTelemetry span when the application uses OpenTelemetry. None:
            never send one.
        on_retry: ``(attempt, error, wait_s) -> None``, called before each
            retry's backoff (progress display, logging); None (default): silent.

    Errors: a 4xx/5xx answer raises the class registered for its stable code
    (:func:`svit_cluster.errors.error_class`) with every field the gateway
    sent; transport failures still failing after the retries raise
    :class:`~svit_cluster.errors.UnavailableError` (the httpx error chained as
    ``__cause__``).

    Raises:
        ConfigurationError: no URL given and none in the environment or cluster file.
    """

    @staticmethod
    def _new_http(timeout_s: float) -> httpx.Client:
        return httpx.Client(timeout=timeout_s)

    def close(self) -> None:
        """Close the HTTP client, unless it was given as ``http_client``."""
        if self._owns_http:
            self._http.close()

    def __enter__(self) -> SvitClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, method: str, path: str, *, failed: list[BaseException] | None = None,
              timeout_s: float | None = None, **kw: Any) -> Any:
        self._timeout(kw, timeout_s)
        try:
            for attempt in Retrying(**self._retry_kwargs()):
                with attempt:
                    with _noting_failures(failed):
                        resp = self._http.request(method, self.url + path,
                                                  headers=self._headers(), **kw)
                        _raise_for(resp)
                    return self._answer(path, resp)
        except httpx.TransportError as exc:
            raise _transport_unavailable(self.url, self.attempts, exc) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def initialize(self, *, timeout_s: float | None = None) -> dict[str, Any]:
        """Negotiate with ``POST /v1/initialize`` (offers :data:`CLIENT_CAPABILITIES`)."""
        result: dict[str, Any] = self._call(
            "POST", "/v1/initialize", timeout_s=timeout_s,
            json={"protocols": [PROTOCOL], "capabilities": list(CLIENT_CAPABILITIES)},
        )
        return result

    def create_process(
        self, process_id: str, *, memory: Any = None, scripts: dict[str, str] | None = None,
        timeout_s: float | None = None,
    ) -> dict[str, Any]:
        """Create a process (plain-JSON memory, scripts by name).

        Safe to retry: an attempt whose outcome was unknown (a transport error
        or ``unavailable``, retried by this call) may have created the process,
        so a later attempt's "already exists" is checked: when the process's
        ``/memory`` and ``/lib`` sources equal this request's, the create is
        reported as done (``{"process_id", "version", "recovered": True}``,
        ``version`` as observed). Otherwise it is a real conflict. When the
        process is then not found, the "already exists" came from an earlier
        attempt that had claimed the process but not created it (it was still
        under way, or it failed and released the claim): the create is sent
        again, up to ``attempts`` times in all, so a retried create is never
        answered ``unknown process`` for a process it was still creating.

        Raises:
            ConflictError: (409) it already exists with other content, or
                existed before this call's first attempt.
            UnavailableError: every attempt's outcome stayed unknown.
            Forbidden: (403) the token may not act on this tenant.
        """
        failed: list[BaseException] = []
        body = {"process_id": process_id, "memory": memory, "scripts": scripts or {}}
        for round_ in range(1, self.attempts + 1):
            try:
                result: dict[str, Any] = self._call(
                    "POST", "/v1/processes", timeout_s=timeout_s, failed=failed, json=body)
                return result
            except ConflictError:
                if not failed:
                    raise
                try:
                    memory_now, version = self.state(process_id, "/memory",
                                                     timeout_s=timeout_s)
                    lib_now, _ = self.state(process_id, "/lib", timeout_s=timeout_s)
                except NotFound:
                    time.sleep(min(self.max_wait_s, 0.1 * round_))
                    continue  # claimed by an earlier attempt, not created: again
                if not _same_creation(memory, scripts, memory_now, lib_now):
                    raise
                return {"process_id": process_id, "version": version, "recovered": True}
        raise UnavailableError(
            f"create of {process_id}: {self.attempts} attempts, outcome unknown "
            "(an earlier attempt claimed it and never created it); retry",
            process_id=process_id, attempts=self.attempts)

    def state(self, process_id: str, path: str = "/memory", *,
              timeout_s: float | None = None) -> tuple[Value, int]:
        """``(value, version)`` of ``path`` from one observation.

        Raises:
            NotFound: (404) no such process.
        """
        doc = self._call("GET", "/v1/processes/state", timeout_s=timeout_s,
                         params={"process_id": process_id, "path": path})
        return decode_value(doc["value"]), int(doc["version"])

    def snapshot(self, process_id: str, *, timeout_s: float | None = None) -> dict[str, Any]:
        """The process snapshot: ``{process_id, version, snapshot}``."""
        result: dict[str, Any] = self._call("POST", "/v1/processes/snapshot",
                                            timeout_s=timeout_s,
                                            json={"process_id": process_id})
        return result

    def read_versioned(self, process_id: str, path: str = "/", *,
                       timeout_s: float | None = None) -> tuple[Value, int]:
        """``(value, version)`` of ``path`` from one observation (same as :meth:`state`)."""
        return self.state(process_id, path, timeout_s=timeout_s)

    def inbox(self, process_id: str, message: Any, *, dedup_key: str | None = None,
              timeout_s: float | None = None) -> dict[str, Any]:
        """Commit ``message`` (plain JSON) to the process inbox: ``{appended, version}``.

        Safe to retry only with a ``dedup_key`` (otherwise a retry may append twice).
        """
        body: dict[str, Any] = {"process_id": process_id, "message": message}
        if dedup_key is not None:
            body["dedup_key"] = dedup_key
        result: dict[str, Any] = self._call("POST", "/v1/processes/inbox", json=body,
                                            timeout_s=timeout_s)
        return result

    def inbox_drop(self, process_id: str, *, reason: str, message_id: str | None = None,
                   head_hash: str | None = None, timeout_s: float | None = None
                   ) -> dict[str, Any]:
        """Dead-letter the inbox head named by ``message_id`` and/or ``head_hash``:
        ``{process_id, dropped: {inbox_hash, message_id, message, reason, version},
        version}``.

        Raises:
            ConflictError: (``inbox_conflict``) the head is another message or
                the inbox is empty (nothing committed).
            InvalidInput: neither name given, or an empty reason.
        """
        result: dict[str, Any] = self._call("POST", "/v1/processes/inbox/drop",
                                            json=_drop_body(process_id, reason, message_id,
                                                            head_hash), timeout_s=timeout_s)
        return result

    def recent_events(self, process_id: str, limit: int = 64, *, session: str | None = None,
                      timeout_s: float | None = None) -> list[dict[str, Any]]:
        """The newest ``limit`` (1..4096) canonical events, oldest first:
        ``[{session, seq, token, event}]``."""
        params: dict[str, Any] = {"process_id": process_id, "limit": limit}
        if session:
            params["session"] = session
        doc = self._call("GET", "/v1/processes/events/recent", params=params,
                         timeout_s=timeout_s)
        return list(doc["events"])

    def recent_messages(self, process_id: str, limit: int = 64, *, session: str | None = None,
                        timeout_s: float | None = None) -> list[dict[str, Any]]:
        """Messages projected from the newest canonical events: ``[{session, seq, message}]``."""
        params: dict[str, Any] = {"process_id": process_id, "limit": limit}
        if session:
            params["session"] = session
        doc = self._call("GET", "/v1/processes/messages/recent", params=params,
                         timeout_s=timeout_s)
        return list(doc["messages"])

    def fork(self, process_id: str, new_process_id: str, *, history: bool = False,
             timeout_s: float | None = None) -> dict[str, Any]:
        """Fork a process into ``new_process_id`` (same version, new identity).

        ``history=True`` also gives the child the parent's reasoning history:
        the events of its acknowledged turns at the forked version, which the
        child's turns continue after (``POST /v1/processes/fork`` with
        ``"history": true``). Raises ``SvitError`` ``not_found`` (unknown
        parent) or ``conflict`` (the child exists)."""
        body: dict[str, Any] = {"process_id": process_id, "new_process_id": new_process_id}
        if history:
            body["history"] = True
        result: dict[str, Any] = self._call(
            "POST", "/v1/processes/fork", timeout_s=timeout_s, json=body)
        return result

    def observe_token(self, process_id: str, *, ttl_s: int = 300,
                      timeout_s: float | None = None) -> dict[str, Any]:
        """Mint a short-lived, read-only observe token for a browser ``EventSource``.

        ``POST /v1/processes/observe-token``; answers ``{process_id, token,
        expires_at, ttl_s}`` (``expires_at`` in unix seconds). The token is
        accepted only on ``GET /v1/processes/events?process_id=…&observe_token=…``
        (or as the ``svit_observe_token`` cookie), for this process only, until
        it expires. Hand it to the page; never log it. Safe to retry (each
        attempt mints an independent token).

        Args:
            ttl_s: lifetime in seconds, 1..3600 (default 300).

        Raises:
            Forbidden: (403) the token may not act on this process.
            NotFound: (404) no such process.
            DecodeError: (400) ``ttl_s`` out of range.
        """
        result: dict[str, Any] = self._call(
            "POST", "/v1/processes/observe-token", timeout_s=timeout_s,
            json={"process_id": process_id, "ttl_s": ttl_s})
        return result

    def delete_process(self, process_id: str, *, timeout_s: float | None = None
                       ) -> dict[str, Any]:
        """Delete a process (``DELETE /v1/processes``): ``{process_id, deleted, version}``.

        The current owner deletes under its fencing token and the fence stays
        as a tombstone, so an older owner can never write the process back;
        intents not yet delivered are dropped (see the gateway's route).

        Safe to retry: when an attempt's outcome was unknown (a transport
        error or ``unavailable``, retried by this call) and a later attempt
        answers 404, that attempt deleted it: reported as
        ``{"process_id", "deleted": True, "version": None, "recovered": True}``.

        Raises:
            NotFound: (404) no such process before this call.
            Forbidden: (403) the token may not act on this tenant.
            UnavailableError: (503) still unknown after every attempt; retry.
        """
        failed: list[BaseException] = []
        try:
            result: dict[str, Any] = self._call(
                "DELETE", "/v1/processes", timeout_s=timeout_s, failed=failed,
                params={"process_id": process_id})
        except NotFound:
            if not failed:
                raise
            return {"process_id": process_id, "deleted": True, "version": None,
                    "recovered": True}
        return result

    def list_processes(self, *, tenant: str | None = None, limit: int = DEFAULT_PROCESS_PAGE,
                       after: str | None = None, timeout_s: float | None = None
                       ) -> ProcessPage:
        """One page of the existing processes (``GET /v1/processes``).

        A tenant token sees its own tenant's processes only; an admin token
        sees every tenant's, or one tenant's with ``tenant``. Each page does a
        bounded amount of work on the gateway, so it may hold fewer than
        ``limit`` processes (even none) while ``next_after`` is not None: keep
        passing ``next_after`` as ``after`` until it is None. The order is the
        store's, not sorted. A process that exists for the whole listing is
        listed at least once (rarely twice); one created or deleted meanwhile
        may or may not be. Read-only and safe to retry.

        Args:
            tenant: only this tenant's processes (admin tokens; a tenant token
                may name only its own tenant).
            limit: processes per page, 1..``defaults.PROCESS_PAGE_MAX``
                (``defaults.DEFAULT_PROCESS_PAGE``).
            after: the previous page's ``next_after``; None: the first page.

        Returns:
            :class:`ProcessPage`.

        Raises:
            Forbidden: (403) a tenant token named another tenant.
            DecodeError: (400) ``limit`` out of range or a malformed ``tenant``.
            InvalidInput: (400) a cursor the gateway did not issue.
            UnavailableError: (503) the store or gateway unavailable after the retries.
        """
        doc = self._call("GET", "/v1/processes", timeout_s=timeout_s,
                         params=_list_params(tenant, limit, after))
        return _process_page(doc)

    def set_passivation(self, process_id: str, passivate_after_s: float | None, *,
                        timeout_s: float | None = None) -> dict[str, Any]:
        """Set how long ``process_id`` stays active while idle
        (``PUT /v1/processes/residency``): after ``passivate_after_s`` idle
        seconds (1 to 604800) it releases its actor; None restores the
        cluster's default. Stored with the process, it follows it to every host.
        An agent that waits on a person for hours should not hold a worker of
        its host's budget meanwhile: give it a short timeout.

        Returns:
            ``{"process_id", "passivate_after_s": effective seconds, "default": bool}``.

        Raises:
            InvalidInput: (400) out of range. NotFound: (404) no such process.
            UnavailableError: (503) still unknown after every attempt (retrying
                is safe: setting a value twice is harmless).
        """
        result: dict[str, Any] = self._call(
            "PUT", "/v1/processes/residency", timeout_s=timeout_s,
            json={"process_id": process_id, "passivate_after_s": passivate_after_s})
        return result

    def timers(self, process_id: str, *, limit: int = DEFAULT_TIMER_PAGE,
               after: str | None = None,
               timeout_s: float | None = None) -> TimerPage:
        """The process's pending durable timers, in due order, one page
        (``GET /v1/processes/timers``).

        The first page starts with the timers being delivered right now
        (``state="firing"``), then the parked ones by due time. Read-only and
        safe to retry; a timer that fires or is cancelled between two pages is
        not listed again.

        Args:
            limit: parked timers per page, 1..``defaults.TIMER_PAGE_MAX``
                (``defaults.DEFAULT_TIMER_PAGE``).
            after: the previous page's ``next_after``; None: the first page.

        Returns:
            :class:`TimerPage`; a process without timers (or that does not
            exist) gives an empty page.

        Raises:
            Forbidden: (403) the token may not act on this process.
            DecodeError: (400) ``limit`` out of range. InvalidInput: (400) a
                malformed ``after`` cursor or process id.
            UnavailableError: (503) Redis or the gateway unavailable after the retries.
        """
        doc = self._call("GET", "/v1/processes/timers", timeout_s=timeout_s,
                         params=_timers_params(process_id, limit, after))
        return _timer_page(doc)

    def cancel_timer(self, process_id: str, timer_id: str, *,
                     timeout_s: float | None = None) -> TimerCancelOutcome:
        """Cancel one pending timer of ``process_id`` (``POST /v1/processes/timers/cancel``).

        The dispatcher decides between this cancel and the timer's firing in
        one atomic step, so ``"cancelled"`` means it will never be delivered
        and a timer that is delivered never answers ``"cancelled"``.

        Returns:
            :data:`TimerCancelOutcome`. Safe to retry: a retry of a cancel that
            applied (its reply lost, retried by this call) answers
            ``"already_cancelled"``.

        Raises:
            InvalidInput: (400) ``timer_id`` is not ``<process_id>:<version>:<index>``
                of this process.
            Forbidden: (403) the token may not act on this process.
            UnavailableError: (503) still unknown after every attempt (the
                cancel may or may not have applied; retry).
        """
        doc = self._call("POST", "/v1/processes/timers/cancel", timeout_s=timeout_s,
                         json={"process_id": process_id, "timer_id": timer_id})
        return cast(TimerCancelOutcome, str(doc["outcome"]))

    def send_raw(self, body: bytes, *, timeout_s: float | None = None) -> ControlResponse:
        """POST one encoded request; retried byte-for-byte on transport errors."""
        return decode_response(self._call("POST", "/v1/control", content=body,
                                          timeout_s=timeout_s))

    def activate(
        self, process_id: str, script: str, input: Value, *, expected_version: int,
        request_id: str | None = None, timeout_s: float | None = None,
    ) -> ControlResponse:
        """One activation request (retried only with the same request id)."""
        body = _control_body(self.client_id, request_id or new_request_id(), process_id,
                             expected_version, script, input)
        return self.send_raw(body, timeout_s=timeout_s)

    def request_status(self, process_id: str, request_id: str, *,
                       client_id: str | None = None, timeout_s: float | None = None,
                       ) -> dict[str, Any]:
        """Did this principal's request commit? (``GET /v1/processes/requests``)

        Returns:
            ``{process_id, client_id, request_id, committed, version,
            retained_from_version}``; ``committed: false`` is definitive only
            for versions ``>= retained_from_version``.
        """
        result: dict[str, Any] = self._call(
            "GET", "/v1/processes/requests", timeout_s=timeout_s,
            params={"process_id": process_id, "client_id": client_id or self.client_id,
                    "request_id": request_id})
        return result

    def events(self, process_id: str, *, after: str = "$",
               kinds: Iterable[str] | None = None, buffer: int = 256,
               timeout_s: float | None = None) -> SyncSubscription:
        """A blocking observer of ``process_id``'s signals (iterator).

        Use as ``with client.events(pid) as sub: for s in sub: ...``. Same
        arguments and semantics as :meth:`AsyncSvitClient.events`; ``buffer``
        is accepted for parity (a blocking reader applies back-pressure
        through the connection, the gateway reports lag as ``Lagged``).
        ``timeout_s`` bounds each connect and each wait for a line (default 60 s).
        """
        return SyncSubscription(self, process_id, after=after, kinds=kinds,
                                timeout_s=timeout_s)

    def outbox(self, process_id: str, *, after: str = "$", buffer: int = 256,
               timeout_s: float | None = None) -> SyncSubscription:
        """A blocking observer of completed turns (``completion`` signals only)."""
        return self.events(process_id, after=after, kinds=("completion",), buffer=buffer,
                           timeout_s=timeout_s)

    def activate_until_committed(
        self, process_id: str, script: str, compute: Compute | Value, *,
        observe_path: str = "/memory", max_attempts: int = 50,
        timeout_s: float | None = None,
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
        up to about ``snapshot_every + trim_margin`` (default 116) of the
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
            UnavailableError: still failing after the retries (the last
                attempt's outcome is unknown; a transport error is chained as
                ``__cause__``).
        """
        for _ in range(max_attempts):
            value, version = self.state(process_id, observe_path, timeout_s=timeout_s)
            inp = compute(value, version) if callable(compute) else compute
            request_id = new_request_id()
            failed: list[BaseException] = []
            resp = decode_response(self._call(
                "POST", "/v1/control", failed=failed, timeout_s=timeout_s,
                content=_control_body(self.client_id, request_id, process_id, version,
                                      script, inp)))
            if not isinstance(resp.outcome, Conflict):
                return resp
            if failed:
                try:
                    doc = self.request_status(process_id, request_id, timeout_s=timeout_s)
                except NotFound as exc:  # e.g. a gateway without the endpoint
                    doc = {"error": exc.message}
                recovered = _settle_unknown(process_id, self.client_id, request_id, version,
                                            resp.outcome, doc)
                if recovered is not None:
                    return recovered
        raise ConflictError(f"still conflicting after {max_attempts} attempts")


class AsyncSvitClient(_Base[httpx.AsyncClient]):
    """Asyncio client with the same methods as :class:`SvitClient` (awaitable).

    Same arguments, defaults (``SVIT_URL``/``SVIT_TOKEN``), errors and retries
    as :class:`SvitClient` (``http_client`` is an ``httpx.AsyncClient``);
    ``tests/client/test_parity.py`` keeps the two method sets equal.
    """

    @staticmethod
    def _new_http(timeout_s: float) -> httpx.AsyncClient:
        return httpx.AsyncClient(timeout=timeout_s)

    async def aclose(self) -> None:
        """Close the HTTP client, unless it was given as ``http_client``."""
        if self._owns_http:
            await self._http.aclose()

    async def __aenter__(self) -> AsyncSvitClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _call(self, method: str, path: str, *,
                    failed: list[BaseException] | None = None,
                    timeout_s: float | None = None, **kw: Any) -> Any:
        self._timeout(kw, timeout_s)
        try:
            async for attempt in AsyncRetrying(**self._retry_kwargs()):
                with attempt:
                    with _noting_failures(failed):
                        resp = await self._http.request(method, self.url + path,
                                                        headers=self._headers(), **kw)
                        _raise_for(resp)
                    return self._answer(path, resp)
        except httpx.TransportError as exc:
            raise _transport_unavailable(self.url, self.attempts, exc) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    async def initialize(self, *, timeout_s: float | None = None) -> dict[str, Any]:
        """Async form of :meth:`SvitClient.initialize`."""
        result: dict[str, Any] = await self._call(
            "POST", "/v1/initialize", timeout_s=timeout_s,
            json={"protocols": [PROTOCOL], "capabilities": list(CLIENT_CAPABILITIES)},
        )
        return result

    async def create_process(
        self, process_id: str, *, memory: Any = None, scripts: dict[str, str] | None = None,
        timeout_s: float | None = None,
    ) -> dict[str, Any]:
        """Async form of :meth:`SvitClient.create_process` (same retry rule)."""
        failed: list[BaseException] = []
        body = {"process_id": process_id, "memory": memory, "scripts": scripts or {}}
        for round_ in range(1, self.attempts + 1):
            try:
                result: dict[str, Any] = await self._call(
                    "POST", "/v1/processes", timeout_s=timeout_s, failed=failed, json=body)
                return result
            except ConflictError:
                if not failed:
                    raise
                try:
                    memory_now, version = await self.state(process_id, "/memory",
                                                           timeout_s=timeout_s)
                    lib_now, _ = await self.state(process_id, "/lib", timeout_s=timeout_s)
                except NotFound:
                    await asyncio.sleep(min(self.max_wait_s, 0.1 * round_))
                    continue  # claimed by an earlier attempt, not created: again
                if not _same_creation(memory, scripts, memory_now, lib_now):
                    raise
                return {"process_id": process_id, "version": version, "recovered": True}
        raise UnavailableError(
            f"create of {process_id}: {self.attempts} attempts, outcome unknown "
            "(an earlier attempt claimed it and never created it); retry",
            process_id=process_id, attempts=self.attempts)

    async def state(self, process_id: str, path: str = "/memory", *,
                    timeout_s: float | None = None) -> tuple[Value, int]:
        """Async form of :meth:`SvitClient.state`."""
        doc = await self._call("GET", "/v1/processes/state", timeout_s=timeout_s,
                               params={"process_id": process_id, "path": path})
        return decode_value(doc["value"]), int(doc["version"])

    async def snapshot(self, process_id: str, *, timeout_s: float | None = None
                       ) -> dict[str, Any]:
        """Async form of :meth:`SvitClient.snapshot`."""
        result: dict[str, Any] = await self._call("POST", "/v1/processes/snapshot",
                                                  timeout_s=timeout_s,
                                                  json={"process_id": process_id})
        return result

    async def fork(self, process_id: str, new_process_id: str, *, history: bool = False,
                   timeout_s: float | None = None) -> dict[str, Any]:
        """Async form of :meth:`SvitClient.fork`."""
        body: dict[str, Any] = {"process_id": process_id, "new_process_id": new_process_id}
        if history:
            body["history"] = True
        result: dict[str, Any] = await self._call(
            "POST", "/v1/processes/fork", timeout_s=timeout_s, json=body)
        return result

    async def observe_token(self, process_id: str, *, ttl_s: int = 300,
                            timeout_s: float | None = None) -> dict[str, Any]:
        """Async form of :meth:`SvitClient.observe_token`."""
        result: dict[str, Any] = await self._call(
            "POST", "/v1/processes/observe-token", timeout_s=timeout_s,
            json={"process_id": process_id, "ttl_s": ttl_s})
        return result

    async def delete_process(self, process_id: str, *, timeout_s: float | None = None
                             ) -> dict[str, Any]:
        """Async form of :meth:`SvitClient.delete_process` (same retry rule)."""
        failed: list[BaseException] = []
        try:
            result: dict[str, Any] = await self._call(
                "DELETE", "/v1/processes", timeout_s=timeout_s, failed=failed,
                params={"process_id": process_id})
        except NotFound:
            if not failed:
                raise
            return {"process_id": process_id, "deleted": True, "version": None,
                    "recovered": True}
        return result

    async def list_processes(self, *, tenant: str | None = None,
                             limit: int = DEFAULT_PROCESS_PAGE,
                             after: str | None = None, timeout_s: float | None = None
                             ) -> ProcessPage:
        """Async form of :meth:`SvitClient.list_processes`."""
        doc = await self._call("GET", "/v1/processes", timeout_s=timeout_s,
                               params=_list_params(tenant, limit, after))
        return _process_page(doc)

    async def set_passivation(self, process_id: str, passivate_after_s: float | None, *,
                              timeout_s: float | None = None) -> dict[str, Any]:
        """Async form of :meth:`SvitClient.set_passivation`."""
        result: dict[str, Any] = await self._call(
            "PUT", "/v1/processes/residency", timeout_s=timeout_s,
            json={"process_id": process_id, "passivate_after_s": passivate_after_s})
        return result

    async def timers(self, process_id: str, *, limit: int = DEFAULT_TIMER_PAGE,
                     after: str | None = None,
                     timeout_s: float | None = None) -> TimerPage:
        """Async form of :meth:`SvitClient.timers`."""
        doc = await self._call("GET", "/v1/processes/timers", timeout_s=timeout_s,
                               params=_timers_params(process_id, limit, after))
        return _timer_page(doc)

    async def cancel_timer(self, process_id: str, timer_id: str, *,
                           timeout_s: float | None = None) -> TimerCancelOutcome:
        """Async form of :meth:`SvitClient.cancel_timer`."""
        doc = await self._call("POST", "/v1/processes/timers/cancel", timeout_s=timeout_s,
                               json={"process_id": process_id, "timer_id": timer_id})
        return cast(TimerCancelOutcome, str(doc["outcome"]))

    async def send_raw(self, body: bytes, *, timeout_s: float | None = None
                       ) -> ControlResponse:
        """Async form of :meth:`SvitClient.send_raw`."""
        return decode_response(await self._call("POST", "/v1/control", content=body,
                                                timeout_s=timeout_s))

    async def read_versioned(self, process_id: str, path: str = "/", *,
                             timeout_s: float | None = None) -> tuple[Value, int]:
        """``(value, version)`` of ``path`` from one observation."""
        return await self.state(process_id, path, timeout_s=timeout_s)

    async def inbox(self, process_id: str, message: Any, *, dedup_key: str | None = None,
                    timeout_s: float | None = None) -> dict[str, Any]:
        """Async form of :meth:`SvitClient.inbox`."""
        body: dict[str, Any] = {"process_id": process_id, "message": message}
        if dedup_key is not None:
            body["dedup_key"] = dedup_key
        result: dict[str, Any] = await self._call("POST", "/v1/processes/inbox", json=body,
                                                  timeout_s=timeout_s)
        return result

    async def inbox_drop(self, process_id: str, *, reason: str, message_id: str | None = None,
                         head_hash: str | None = None, timeout_s: float | None = None
                         ) -> dict[str, Any]:
        """Async form of :meth:`SvitClient.inbox_drop`."""
        result: dict[str, Any] = await self._call(
            "POST", "/v1/processes/inbox/drop",
            json=_drop_body(process_id, reason, message_id, head_hash), timeout_s=timeout_s)
        return result

    async def recent_events(self, process_id: str, limit: int = 64, *,
                            session: str | None = None, timeout_s: float | None = None,
                            ) -> list[dict[str, Any]]:
        """Async form of :meth:`SvitClient.recent_events`."""
        params: dict[str, Any] = {"process_id": process_id, "limit": limit}
        if session:
            params["session"] = session
        doc = await self._call("GET", "/v1/processes/events/recent", params=params,
                               timeout_s=timeout_s)
        return list(doc["events"])

    async def recent_messages(self, process_id: str, limit: int = 64, *,
                              session: str | None = None, timeout_s: float | None = None,
                              ) -> list[dict[str, Any]]:
        """Async form of :meth:`SvitClient.recent_messages`."""
        params: dict[str, Any] = {"process_id": process_id, "limit": limit}
        if session:
            params["session"] = session
        doc = await self._call("GET", "/v1/processes/messages/recent", params=params,
                               timeout_s=timeout_s)
        return list(doc["messages"])

    def events(self, process_id: str, *, after: str = "$",
               kinds: Iterable[str] | None = None, buffer: int = 256,
               timeout_s: float | None = None) -> Subscription:
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
        return Subscription(self, process_id, after=after, kinds=kinds, buffer=buffer,
                            timeout_s=timeout_s)

    def outbox(self, process_id: str, *, after: str = "$", buffer: int = 256,
               timeout_s: float | None = None) -> Subscription:
        """An independent observer of completed turns (``completion`` signals only)."""
        return self.events(process_id, after=after, kinds=("completion",), buffer=buffer,
                           timeout_s=timeout_s)

    async def activate(
        self, process_id: str, script: str, input: Value, *, expected_version: int,
        request_id: str | None = None, timeout_s: float | None = None,
    ) -> ControlResponse:
        """Async form of :meth:`SvitClient.activate`."""
        body = _control_body(self.client_id, request_id or new_request_id(), process_id,
                             expected_version, script, input)
        return await self.send_raw(body, timeout_s=timeout_s)

    async def request_status(self, process_id: str, request_id: str, *,
                             client_id: str | None = None, timeout_s: float | None = None,
                             ) -> dict[str, Any]:
        """Async form of :meth:`SvitClient.request_status`."""
        result: dict[str, Any] = await self._call(
            "GET", "/v1/processes/requests", timeout_s=timeout_s,
            params={"process_id": process_id, "client_id": client_id or self.client_id,
                    "request_id": request_id})
        return result

    async def activate_until_committed(
        self, process_id: str, script: str, compute: Compute | Value, *,
        observe_path: str = "/memory", max_attempts: int = 50,
        timeout_s: float | None = None,
    ) -> ControlResponse | RecoveredCommit:
        """Async form of :meth:`SvitClient.activate_until_committed` (same guarantee)."""
        for _ in range(max_attempts):
            value, version = await self.state(process_id, observe_path, timeout_s=timeout_s)
            inp = compute(value, version) if callable(compute) else compute
            request_id = new_request_id()
            failed: list[BaseException] = []
            resp = decode_response(await self._call(
                "POST", "/v1/control", failed=failed, timeout_s=timeout_s,
                content=_control_body(self.client_id, request_id, process_id, version,
                                      script, inp)))
            if not isinstance(resp.outcome, Conflict):
                return resp
            if failed:
                try:
                    doc = await self.request_status(process_id, request_id,
                                                    timeout_s=timeout_s)
                except NotFound as exc:  # e.g. a gateway without the endpoint
                    doc = {"error": exc.message}
                recovered = _settle_unknown(process_id, self.client_id, request_id, version,
                                            resp.outcome, doc)
                if recovered is not None:
                    return recovered
        raise ConflictError(f"still conflicting after {max_attempts} attempts")



class _SseParser:
    """Server-Sent Events line parser: ``feed(line)`` returns a finished event or None."""

    def __init__(self) -> None:
        self.event = ""
        self.data: list[str] = []
        self.eid: str | None = None

    def feed(self, line: str) -> tuple[str, str, str | None] | None:
        if line == "":
            done = (self.event or "message", "\n".join(self.data), self.eid) \
                if (self.event or self.data) else None
            self.event, self.data, self.eid = "", [], None
            return done
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "event":
            self.event = value
        elif name == "data":
            self.data.append(value)
        elif name == "id":
            self.eid = value
        return None


def _decode_sse(event: str, data: str) -> tuple[str, Any]:
    """``("ready", cursor) | ("lagged", Lagged) | ("signal", Signal)``; raises on ``error``."""
    doc = json.loads(data) if data else {}
    if event == "ready":
        return "ready", str(doc["cursor"])
    if event == "lagged":
        return "lagged", Lagged(resume=str(doc["resume"]), oldest=doc.get("oldest"),
                                source="server")
    if event == "error":
        raise UnavailableError(str(doc.get("message", "event stream failed")))
    return "signal", Signal.from_json(doc)


def _events_params(process_id: str, cursor: str, kinds: str | None) -> dict[str, Any]:
    params: dict[str, Any] = {"process_id": process_id, "after": cursor}
    if kinds:
        params["kinds"] = kinds
    return params


class Subscription:
    """One observer of one process over SSE: own cursor, bounded buffer, resumes.

    Created by :meth:`AsyncSvitClient.events`. The background reader follows
    the gateway's stream and reconnects after transport errors from its last
    cursor (``Last-Event-ID``), so nothing is skipped except what it reports
    as :class:`~svit_cluster.events.Lagged`.
    """

    def __init__(self, client: AsyncSvitClient, process_id: str, *, after: str,
                 kinds: Iterable[str] | None, buffer: int,
                 timeout_s: float | None = None) -> None:
        self.client = client
        self.timeout_s = timeout_s
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
        params = _events_params(self.process_id, self.cursor, self.kinds)
        timeout = httpx.Timeout(self.timeout_s or 10.0, read=self.timeout_s or 60.0)
        parser = _SseParser()
        async with self.client._http.stream(
            "GET", self.client.url + "/v1/processes/events", params=params,
            headers=self.client._headers({"Accept": "text/event-stream"}), timeout=timeout,
        ) as resp:
            if resp.status_code >= 400:
                await resp.aread()
                _raise_for(resp)
            async for line in resp.aiter_lines():
                done = parser.feed(line)
                if done is not None:
                    self._dispatch(*done)
        raise UnavailableError("event stream ended")

    def _dispatch(self, event: str, data: str, eid: str | None) -> None:
        kind, item = _decode_sse(event, data)
        if kind == "ready":
            self.cursor = item
            if not self._ready.done():
                self._ready.set_result(self.cursor)
        elif kind == "lagged":
            self.cursor = item.resume
            self._feed.offer_lagged(item)
        else:
            self.cursor = item.id
            self._feed.offer(item, item.id)


class SyncSubscription:
    """Blocking observer of one process over SSE (from :meth:`SvitClient.events`).

    Iterating yields :class:`~svit_cluster.events.Signal` or
    :class:`~svit_cluster.events.Lagged` in stream order. After a transport
    error it reconnects from its cursor (``after=<last id>``), up to the
    client's ``attempts`` consecutive failures, then raises
    :class:`~svit_cluster.errors.UnavailableError`. A refusal (401/403/404)
    raises its typed error.
    """

    def __init__(self, client: SvitClient, process_id: str, *, after: str,
                 kinds: Iterable[str] | None, timeout_s: float | None = None) -> None:
        self.client = client
        self.process_id = process_id
        self.cursor: str = after
        self.kinds = ",".join(kinds) if kinds else None
        self.timeout_s = timeout_s
        self._lines: Iterator[str] | None = None
        self._resp: Any = None
        self._parser = _SseParser()

    def __enter__(self) -> SyncSubscription:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __iter__(self) -> SyncSubscription:
        return self

    def start(self) -> str:
        """Connect and wait for the gateway's ``ready``; returns the confirmed cursor.

        Raises:
            SvitError: the subscription was refused (typed) or the gateway is unreachable.
        """
        failures = 0
        while True:
            try:
                self._connect()
                while True:
                    done = self._next_event()
                    kind, item = _decode_sse(*done[:2])
                    if kind == "ready":
                        self.cursor = str(item)
                        return self.cursor
            except httpx.TransportError as exc:
                failures += 1
                self._disconnect()
                if failures >= self.client.attempts:
                    raise _transport_unavailable(self.client.url, failures, exc) from exc
                time.sleep(min(self.client.max_wait_s, 0.05 * 2 ** failures))

    def close(self) -> None:
        self._disconnect()

    def _connect(self) -> None:
        self._disconnect()
        timeout = httpx.Timeout(self.timeout_s or 10.0, read=self.timeout_s or 60.0)
        request = self.client._http.build_request(
            "GET", self.client.url + "/v1/processes/events",
            params=_events_params(self.process_id, self.cursor, self.kinds),
            headers=self.client._headers({"Accept": "text/event-stream"}), timeout=timeout)
        resp = self.client._http.send(request, stream=True)
        if resp.status_code >= 400:
            resp.read()
            resp.close()
            _raise_for(resp)
        self._resp = resp
        self._lines = resp.iter_lines()
        self._parser = _SseParser()

    def _disconnect(self) -> None:
        resp, self._resp, self._lines = self._resp, None, None
        if resp is not None:
            resp.close()

    def _next_event(self) -> tuple[str, str, str | None]:
        assert self._lines is not None
        for line in self._lines:
            done = self._parser.feed(line)
            if done is not None:
                return done
        raise httpx.RemoteProtocolError("event stream ended")

    def __next__(self) -> Signal | Lagged:
        failures = 0
        while True:
            try:
                if self._lines is None:
                    self._connect()
                kind, item = _decode_sse(*self._next_event()[:2])
            except (httpx.TransportError, UnavailableError) as exc:
                failures += 1
                self._disconnect()
                if failures >= self.client.attempts:
                    if isinstance(exc, UnavailableError):
                        raise
                    raise _transport_unavailable(self.client.url, failures, exc) from exc
                time.sleep(min(self.client.max_wait_s, 0.05 * 2 ** failures))
                continue
            if kind == "ready":
                self.cursor = str(item)
                continue
            if kind == "lagged":
                self.cursor = item.resume
                return item  # type: ignore[no-any-return]
            self.cursor = item.id
            return item  # type: ignore[no-any-return]
