"""Pluggable delivery sinks, chosen by the destination address's scheme.

Every sink receives the intent id as its idempotency key, so a redelivery
(which at-least-once delivery allows) never has a second effect where the sink
can deduplicate:

* ``svit://…`` -- :class:`SvitInboxSink`: ``POST /v1/processes/inbox`` on the
  gateway with ``dedup_key`` = intent id (admin token). The destination
  remembers delivered keys in its own committed state, so it stores one copy.
* ``https://…`` / ``http://…`` -- :class:`WebhookSink`: only hosts on an explicit
  allowlist; ``Idempotency-Key: <intent id>`` on every attempt; redirects are
  never followed.
* ``redis-stream://<name>`` -- :class:`RedisStreamSink`: ``XADD`` to an
  integration stream whose name starts with an allowed prefix, deduplicated by
  intent id (a bounded window in ``<name>:svit-dedup``) in the same Lua script.

A sink's :meth:`Sink.check` refuses what can never be delivered
(:class:`PermanentDeliveryError`) before any I/O; :meth:`Sink.deliver` raises
:class:`RetryableDeliveryError` when a retry may help.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Mapping
from typing import Any, Protocol

import httpx
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.exceptions import RedisError

from svit_cluster import __version__
from svit_cluster.dispatch._errors import PermanentDeliveryError, RetryableDeliveryError
from svit_cluster.dispatch._intent import Intent
from svit_cluster.errors import SvitError
from svit_cluster.process import canonical_json, encode_value, validate_process_id
from svit_cluster.store import AsyncRedisClient

__all__ = [
    "RedisStreamSink",
    "Sink",
    "SinkRegistry",
    "SvitInboxSink",
    "WebhookSink",
    "inbox_message",
    "webhook_payload",
]

_USER_AGENT = f"svit-dispatch/{__version__}"
#: HTTP statuses after which a retry may succeed.
_RETRY_STATUSES = frozenset({404, 408, 409, 425, 429})


class Sink(Protocol):
    """One kind of destination.

    Attributes:
        name: metrics label and dead-letter ``sink`` field (``svit``, ``webhook``, ...).
        concurrency: concurrent deliveries allowed per key returned by :meth:`check`.
    """

    name: str
    concurrency: int

    def check(self, intent: Intent) -> str:
        """Validate the address without I/O; return the concurrency key.

        Raises:
            PermanentDeliveryError: the address can never be delivered to.
        """
        ...

    async def deliver(self, intent: Intent) -> None:
        """Deliver once; return only when the sink confirmed.

        Raises:
            RetryableDeliveryError: not confirmed; retrying with the same key is safe.
            PermanentDeliveryError: the sink refused it for good.
        """
        ...

    async def aclose(self) -> None:
        """Release connections."""
        ...


def _classify(status: int, what: str, detail: str) -> None:
    """Raise for a non-2xx HTTP status (retryable or permanent)."""
    if 200 <= status < 300:
        return
    message = f"{what} answered HTTP {status}: {detail[:200]}"
    if status >= 500 or status in _RETRY_STATUSES:
        raise RetryableDeliveryError(message, reason="http_status", status=status)
    if 300 <= status < 400:
        raise PermanentDeliveryError(f"{what} answered a redirect ({status}); redirects are "
                                     "not followed", reason="redirect", status=status)
    raise PermanentDeliveryError(message, reason="rejected", status=status)


def _tenant(process_id: str) -> str:
    """The tenant of ``svit://<tenant>/…`` (same rule as ``gateway.tenant_of``)."""
    return process_id.partition("://")[2].split("/", 1)[0]


def inbox_message(intent: Intent) -> dict[str, Any]:
    """The item appended to a Svit destination's ``/inbox``: ``{id, from, body, content}``.

    ``content`` is the body as text (the body itself when it is a string, else
    its canonical JSON), so the destination's reasoning loop, which reads text
    messages ``{content, id}``, can take it as a turn.
    """
    body = intent.body
    content = body if isinstance(body, str) else canonical_json(body).decode("utf-8")
    return {"id": intent.id, "from": intent.source, "body": body, "content": content}


def webhook_payload(intent: Intent) -> bytes:
    """The webhook request body: canonical JSON ``{body, from, id, to, version}``."""
    return canonical_json({"id": intent.id, "from": intent.source, "to": intent.to,
                           "version": intent.version, "body": intent.body})


class SvitInboxSink:
    """``svit://`` destinations: append to the process inbox through the gateway.

    The sink holds an admin token, so it enforces the tenant boundary itself:
    a sender may only reach processes of its own tenant (the authority of
    ``svit://<tenant>/…``, the gateway's rule) unless ``cross_tenant`` is set.

    Args:
        gateway_url: gateway base URL; None refuses every intent (``no_gateway``).
        token: an admin bearer token (the dispatcher writes to every tenant).
        http: the shared async HTTP client.
        concurrency: concurrent deliveries per worker (one key for all).
        cross_tenant: allow deliveries to another tenant's processes (default False).
    """

    name = "svit"

    def __init__(self, gateway_url: str | None, token: str | None, *,
                 http: httpx.AsyncClient, concurrency: int = 16,
                 cross_tenant: bool = False) -> None:
        self._url = gateway_url.rstrip("/") + "/v1/processes/inbox" if gateway_url else None
        self._headers = {"Authorization": f"Bearer {token}", "User-Agent": _USER_AGENT}
        self._http = http
        self._cross_tenant = cross_tenant
        self.concurrency = concurrency

    def check(self, intent: Intent) -> str:
        try:
            validate_process_id(intent.to)
        except SvitError as exc:
            raise PermanentDeliveryError(f"bad svit address: {exc.message}",
                                         reason="bad_address") from exc
        if not self._cross_tenant and _tenant(intent.to) != _tenant(intent.source):
            raise PermanentDeliveryError(
                f"{intent.source[:100]} may not send to another tenant's process",
                reason="cross_tenant")
        if self._url is None:
            raise PermanentDeliveryError("no gateway configured for svit:// destinations",
                                         reason="no_gateway")
        return "svit"

    async def deliver(self, intent: Intent) -> None:
        assert self._url is not None
        try:
            message = encode_value(inbox_message(intent))
        except SvitError as exc:
            raise PermanentDeliveryError(f"body is not a Svit value: {exc.message}",
                                         reason="bad_body") from exc
        body = {"process_id": intent.to, "message": message, "message_encoding": "tagged",
                "dedup_key": intent.id}
        try:
            resp = await self._http.post(self._url, json=body, headers=self._headers)
        except httpx.HTTPError as exc:
            raise RetryableDeliveryError(f"gateway unreachable: {type(exc).__name__}: {exc}",
                                         reason="transport") from exc
        _classify(resp.status_code, "gateway", resp.text)
        try:
            doc = resp.json()
        except ValueError as exc:
            raise RetryableDeliveryError("gateway answered non-JSON", reason="garbage") from exc
        if not isinstance(doc, dict) or not isinstance(doc.get("appended"), bool):
            raise RetryableDeliveryError("gateway answer has no boolean 'appended'",
                                         reason="garbage")

    async def aclose(self) -> None:
        return None


class WebhookSink:
    """``http(s)://`` destinations on an explicit host allowlist.

    Args:
        allow_hosts: ``host`` (any port) or ``host:port`` entries, case-insensitive.
        http: the shared async HTTP client (redirects off).
        concurrency: concurrent deliveries per destination host:port per worker.
    """

    name = "webhook"

    def __init__(self, allow_hosts: tuple[str, ...] | frozenset[str], *,
                 http: httpx.AsyncClient, concurrency: int = 8) -> None:
        self._allowed = frozenset(h.lower() for h in allow_hosts)
        self._http = http
        self.concurrency = concurrency

    def _target(self, intent: Intent) -> tuple[httpx.URL, str]:
        try:
            url = httpx.URL(intent.to)
        except (httpx.InvalidURL, TypeError, ValueError) as exc:
            raise PermanentDeliveryError(f"bad webhook URL: {exc}", reason="bad_address") from exc
        if url.scheme not in ("http", "https") or not url.host:
            raise PermanentDeliveryError("bad webhook URL", reason="bad_address")
        host = url.host.lower()
        port = url.port or (443 if url.scheme == "https" else 80)
        if host not in self._allowed and f"{host}:{port}" not in self._allowed:
            raise PermanentDeliveryError(f"webhook host {host}:{port} is not on the allowlist",
                                         reason="host_not_allowed", host=host, port=port)
        return url, f"webhook:{host}:{port}"

    def check(self, intent: Intent) -> str:
        return self._target(intent)[1]

    async def deliver(self, intent: Intent) -> None:
        url, _ = self._target(intent)
        headers = {"Idempotency-Key": intent.id, "Content-Type": "application/json",
                   "User-Agent": _USER_AGENT}
        try:
            resp = await self._http.post(url, content=webhook_payload(intent), headers=headers,
                                         follow_redirects=False)
        except httpx.HTTPError as exc:
            raise RetryableDeliveryError(f"webhook unreachable: {type(exc).__name__}: {exc}",
                                         reason="transport") from exc
        _classify(resp.status_code, "webhook", resp.text)

    async def aclose(self) -> None:
        return None


# KEYS: stream, dedup zset.  ARGV: id, now_ms, window, from, to, version, body
_XADD_ONCE = """
if redis.call('ZSCORE', KEYS[2], ARGV[1]) then
  return 0
end
redis.call('XADD', KEYS[1], '*', 'id', ARGV[1], 'from', ARGV[4], 'to', ARGV[5],
  'version', ARGV[6], 'body', ARGV[7])
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
local n = redis.call('ZCARD', KEYS[2])
if n > tonumber(ARGV[3]) then
  redis.call('ZREMRANGEBYRANK', KEYS[2], 0, n - tonumber(ARGV[3]) - 1)
end
return 1
"""
_STREAM_NAME = re.compile(r"[A-Za-z0-9_.:\-{}]{1,200}")


def _has_hash_tag(key: str) -> bool:
    """Whether Redis Cluster hashes ``key`` by a tag (a non-empty ``{...}``)."""
    start = key.find("{")
    end = key.find("}", start + 1) if start >= 0 else -1
    return start >= 0 and end > start + 1


class RedisStreamSink:
    """``redis-stream://<name>``: ``XADD`` to an integration stream, once per intent id.

    The entry has fields ``id``, ``from``, ``to``, ``version`` and ``body``
    (canonical JSON). The append and the dedup record are one Lua script, so
    a redelivery within the last ``dedup_window`` ids of that stream adds
    nothing. The dedup record is the sorted set ``<name>:svit-dedup``; on a
    Redis Cluster client, when ``<name>`` has no hash tag, it is
    ``{<name>}:svit-dedup`` instead, whose slot is the slot of ``<name>``
    (Redis hashes an untagged key whole, and a tagged key by its tag), so the
    script never spans two slots.

    Args:
        client: an async Redis client (the dispatcher's).
        allowed_prefixes: a name must start with one of these.
        store_prefix: names under ``<store_prefix>:`` are always refused.
        concurrency: concurrent deliveries per worker.
        dedup_window: ids remembered per stream (default 100 000).
    """

    name = "redis-stream"

    def __init__(self, client: AsyncRedisClient, *, allowed_prefixes: tuple[str, ...],
                 store_prefix: str, concurrency: int = 16, dedup_window: int = 100_000) -> None:
        self._client = client
        self._allowed = allowed_prefixes
        self._store = f"{store_prefix}:"
        self._script = client.register_script(_XADD_ONCE)
        self._window = dedup_window
        self.concurrency = concurrency

    def _stream(self, intent: Intent) -> str:
        name = intent.to.partition("://")[2]
        if not _STREAM_NAME.fullmatch(name):
            raise PermanentDeliveryError("bad redis stream name", reason="bad_address")
        if name.startswith(self._store) or not name.startswith(self._allowed):
            raise PermanentDeliveryError(f"redis stream {name!r} is not allowed",
                                         reason="stream_not_allowed")
        return name

    def check(self, intent: Intent) -> str:
        self._stream(intent)
        return "redis-stream"

    def _dedup_key(self, stream: str) -> str:
        if isinstance(self._client, AsyncRedisCluster) and not _has_hash_tag(stream):
            return f"{{{stream}}}:svit-dedup"
        return f"{stream}:svit-dedup"

    async def deliver(self, intent: Intent) -> None:
        stream = self._stream(intent)
        try:
            await self._script(
                keys=[stream, self._dedup_key(stream)],
                args=[intent.id, int(time.time() * 1000), self._window, intent.source,
                      intent.to, intent.version, canonical_json(intent.body)],
            )
        except RedisError as exc:
            raise RetryableDeliveryError(f"redis stream append failed: {exc}",
                                         reason="transport") from exc

    async def aclose(self) -> None:
        return None


class SinkRegistry:
    """Scheme -> sink, plus one semaphore per concurrency key.

    Args:
        sinks: ``{"svit": ..., "https": ..., "http": ..., "redis-stream": ...}``.
        max_body_bytes: bodies larger than this (canonical JSON) are refused
            (default 256 KiB).
    """

    def __init__(self, sinks: Mapping[str, Sink], *, max_body_bytes: int = 256 * 1024) -> None:
        self._sinks = {k.lower(): v for k, v in sinks.items()}
        self._max_body = max_body_bytes
        self._limits: dict[str, asyncio.Semaphore] = {}

    @property
    def schemes(self) -> tuple[str, ...]:
        return tuple(sorted(self._sinks))

    def resolve(self, intent: Intent) -> tuple[Sink, asyncio.Semaphore]:
        """The sink for ``intent`` and its concurrency semaphore.

        Raises:
            PermanentDeliveryError: unknown scheme (``unknown_scheme``), a
                refused address, or a body over the size cap (``body_too_large``).
        """
        sink = self._sinks.get(intent.scheme)
        if sink is None:
            raise PermanentDeliveryError(
                f"no sink for address scheme {intent.scheme or '(none)'!r}",
                reason="unknown_scheme",
            )
        key = sink.check(intent)
        try:
            size = intent.body_bytes()
        except SvitError as exc:
            raise PermanentDeliveryError(f"body is not canonical JSON: {exc.message}",
                                         reason="bad_body") from exc
        if size > self._max_body:
            raise PermanentDeliveryError(
                f"body of {size} bytes exceeds max_body_bytes {self._max_body}",
                reason="body_too_large", size=size,
            )
        sem = self._limits.get(key)
        if sem is None:
            sem = self._limits[key] = asyncio.Semaphore(sink.concurrency)
        return sink, sem

    async def aclose(self) -> None:
        for sink in set(self._sinks.values()):
            await sink.aclose()
