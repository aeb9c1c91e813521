"""The dispatcher's options: one frozen, validated dataclass (units in every name)."""

from __future__ import annotations

import dataclasses
import json
import os
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from svit_cluster.dispatch._deadbound import DEFAULT_MAX_AGE_S, DEFAULT_MAX_COUNT, DeadLetterBound
from svit_cluster.dispatch._keys import DEFAULT_GROUP, DispatchKeys
from svit_cluster.errors import ConfigurationError, InvalidInput
from svit_cluster.store import DEFAULT_PREFIX

__all__ = ["DispatchConfig", "default_worker_id", "read_cluster_json"]


def read_cluster_json(path: str | Path) -> dict[str, Any]:
    """The document a local cluster records in ``<state dir>/cluster.json``.

    Read as a plain file so the dispatcher never imports the dev cluster
    (``svit_cluster.local`` starts dispatchers, not the reverse).

    Raises:
        ConfigurationError: the file is missing, unreadable, or not a JSON object.
    """
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ConfigurationError(f"cannot read cluster file {path}: {exc}") from exc
    if not isinstance(doc, dict):
        raise ConfigurationError(f"cluster file {path} is not a JSON object")
    return doc


def default_worker_id() -> str:
    """``<hostname>-<pid>``: unique per live OS process on one machine."""
    return f"{socket.gethostname()}-{os.getpid()}"


@dataclass(frozen=True, slots=True)
class DispatchConfig:
    """Options of one dispatcher worker; validated on construction.

    Attributes:
        redis_url: the commit log's Redis (``redis://host:port/db``); required.
        gateway_url: base URL of the gateway, for ``svit://`` destinations
            (None: such intents retry, then dead-letter as "no gateway").
        gateway_token: an **admin** bearer token for that gateway.
        prefix: the store's key prefix (default ``"svit"``).
        group: consumer group name on every source stream (default ``"svit-dispatch"``).
        worker_id: this worker's consumer name (default ``<hostname>-<pid>``).
        scan_interval_s: period of the ``SCAN`` that discovers outbox streams (2 s).
        heartbeat_interval_s: period of the membership heartbeat and claim renewal (1 s).
        worker_ttl_s: a worker without a heartbeat for this long leaves the hash ring (5 s).
        claim_ttl_s: TTL of a per-stream claim; a crashed owner's streams move after
            this long (10 s). Must exceed 2 x ``heartbeat_interval_s``.
        claim_idle_s: a pending entry of another consumer is reclaimed
            (``XAUTOCLAIM``) once it has been idle this long (30 s).
        batch_size: entries read per ``XREADGROUP`` (64).
        poll_interval_s: fallback poll period of an idle stream when no wake-up
            arrives (1 s).
        max_attempts: delivery attempts per intent and claim before it is
            dead-lettered (8).
        retry_initial_s, retry_max_s: exponential backoff with jitter between
            attempts: first wait and cap, seconds (0.1 s, 5 s).
        max_deliveries: an entry handed to consumers this many times without an
            ack (workers crashing on it) is dead-lettered at once (10).
        sink_timeout_s: timeout of one delivery attempt, seconds (10 s).
        max_body_bytes: largest intent body (canonical JSON bytes) accepted;
            larger ones are dead-lettered at once (256 KiB).
        webhook_hosts: allowlist for ``http(s)://`` destinations: ``host`` (any
            port) or ``host:port``, case-insensitive. Empty: no webhooks.
        redis_stream_prefixes: allowed name prefixes for ``redis-stream://``
            destinations (default ``("integrations:",)``); names under the
            store prefix are always refused.
        svit_cross_tenant: let ``svit://`` intents reach another tenant's
            processes (default False: dead-lettered as ``cross_tenant``).
        svit_concurrency: concurrent ``svit://`` deliveries per worker (16).
        webhook_concurrency: concurrent webhook deliveries per host per worker (8).
        redis_stream_concurrency: concurrent ``redis-stream://`` deliveries (16).
        metrics_port: serve Prometheus metrics on ``0.0.0.0:<port>`` (None: off).
        shutdown_grace_s: on stop, time given to in-flight batches (5 s).
        trim_acked: after each acknowledged batch, trim the source stream below
            what every consumer group acknowledged (``XTRIM MINID``, one
            single-key script; see ``svit_cluster.dispatch._trim``), so an outbox
            stream holds only unacknowledged entries plus one (default True).
        dead_letter_max_count: the dead-letter stream keeps at most this many
            letters, the oldest removed first (``_deadbound.DEFAULT_MAX_COUNT``).
        dead_letter_max_age_s: and none older than this many seconds, by the
            letter id's Redis time (``_deadbound.DEFAULT_MAX_AGE_S``, 7 days). Both are
            enforced at every dead-letter write and by every scan (so also
            while no letter arrives); see ``_deadbound.py``.

    Raises:
        ConfigurationError: a value is missing or out of range.
    """

    redis_url: str
    gateway_url: str | None = None
    gateway_token: str | None = None
    prefix: str = DEFAULT_PREFIX
    group: str = DEFAULT_GROUP
    worker_id: str = field(default_factory=default_worker_id)
    scan_interval_s: float = 2.0
    heartbeat_interval_s: float = 1.0
    worker_ttl_s: float = 5.0
    claim_ttl_s: float = 10.0
    claim_idle_s: float = 30.0
    batch_size: int = 64
    poll_interval_s: float = 1.0
    max_attempts: int = 8
    retry_initial_s: float = 0.1
    retry_max_s: float = 5.0
    max_deliveries: int = 10
    sink_timeout_s: float = 10.0
    max_body_bytes: int = 256 * 1024
    webhook_hosts: tuple[str, ...] = ()
    redis_stream_prefixes: tuple[str, ...] = ("integrations:",)
    svit_cross_tenant: bool = False
    svit_concurrency: int = 16
    webhook_concurrency: int = 8
    redis_stream_concurrency: int = 16
    metrics_port: int | None = None
    shutdown_grace_s: float = 5.0
    trim_acked: bool = True
    dead_letter_max_count: int = DEFAULT_MAX_COUNT
    dead_letter_max_age_s: float = DEFAULT_MAX_AGE_S

    def __post_init__(self) -> None:
        if not isinstance(self.redis_url, str) or not self.redis_url.startswith(
            ("redis://", "rediss://", "unix://")
        ):
            raise ConfigurationError(f"redis_url must be a redis:// URL, got {self.redis_url!r}")
        try:
            DispatchKeys(self.prefix)
        except InvalidInput as exc:
            raise ConfigurationError(exc.message) from exc
        if not self.group or not self.worker_id:
            raise ConfigurationError("group and worker_id must be non-empty")
        for name in ("scan_interval_s", "heartbeat_interval_s", "worker_ttl_s", "claim_ttl_s",
                     "poll_interval_s", "retry_initial_s", "retry_max_s", "sink_timeout_s"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or isinstance(value, bool) or value <= 0:
                raise ConfigurationError(f"{name} must be a positive number of seconds")
        for name in ("claim_idle_s", "shutdown_grace_s"):
            if getattr(self, name) < 0:
                raise ConfigurationError(f"{name} must be >= 0 seconds")
        for name in ("batch_size", "max_attempts", "max_deliveries", "max_body_bytes",
                     "svit_concurrency", "webhook_concurrency", "redis_stream_concurrency"):
            value = getattr(self, name)
            if type(value) is not int or value < 1:
                raise ConfigurationError(f"{name} must be a positive integer, got {value!r}")
        if type(self.trim_acked) is not bool:
            raise ConfigurationError(f"trim_acked must be a boolean, got {self.trim_acked!r}")
        DeadLetterBound(self.dead_letter_max_count, self.dead_letter_max_age_s)  # validates
        if self.claim_ttl_s <= 2 * self.heartbeat_interval_s:
            raise ConfigurationError("claim_ttl_s must exceed 2 x heartbeat_interval_s")
        if self.worker_ttl_s <= self.heartbeat_interval_s:
            raise ConfigurationError("worker_ttl_s must exceed heartbeat_interval_s")
        if self.retry_max_s < self.retry_initial_s:
            raise ConfigurationError("retry_max_s must be >= retry_initial_s")
        if self.metrics_port is not None and not 0 <= self.metrics_port <= 65535:
            raise ConfigurationError("metrics_port must be a TCP port")
        for host in self.webhook_hosts:
            if not isinstance(host, str) or not host or "/" in host or "@" in host:
                raise ConfigurationError(f"webhook host {host!r} must be host or host:port")
        for p in self.redis_stream_prefixes:
            if not isinstance(p, str) or not p or p.startswith(f"{self.prefix}:"):
                raise ConfigurationError(
                    f"redis stream prefix {p!r} must be non-empty and outside the store prefix"
                )

    @property
    def dead_letter_bound(self) -> DeadLetterBound:
        """The dead-letter stream's bounds (:attr:`dead_letter_max_count`,
        :attr:`dead_letter_max_age_s`)."""
        return DeadLetterBound(self.dead_letter_max_count, self.dead_letter_max_age_s)

    @property
    def keys(self) -> DispatchKeys:
        """The dispatcher's key names under :attr:`prefix`."""
        return DispatchKeys(self.prefix)

    def replace(self, **changes: Any) -> DispatchConfig:
        """A copy with ``changes`` applied (validated again)."""
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_mapping(cls, doc: dict[str, Any]) -> DispatchConfig:
        """Build from a JSON-like mapping (lists become tuples; unknown keys refused;
        ``lease_ttl_s``, the old name of ``claim_ttl_s``, is accepted).

        Raises:
            ConfigurationError: unknown option or bad value.
        """
        names = {f.name for f in dataclasses.fields(cls)}
        doc = dict(doc)
        if "lease_ttl_s" in doc:  # the option's name before the rename (old cluster.json)
            if "claim_ttl_s" in doc:
                raise ConfigurationError("give claim_ttl_s or its old name lease_ttl_s, not both")
            doc["claim_ttl_s"] = doc.pop("lease_ttl_s")
        unknown = sorted(set(doc) - names)
        if unknown:
            raise ConfigurationError(f"unknown dispatcher option(s): {', '.join(unknown)}")
        values: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v
                                  for k, v in doc.items()}
        try:
            return cls(**values)
        except TypeError as exc:
            raise ConfigurationError(f"bad dispatcher options: {exc}") from exc

    @classmethod
    def from_cluster_json(cls, path: str | Path, **overrides: Any) -> DispatchConfig:
        """Options for a local cluster from its ``cluster.json`` (see
        :meth:`from_cluster_json_doc`).

        Raises:
            ConfigurationError: the file is missing or malformed.
        """
        return cls.from_cluster_json_doc(read_cluster_json(path), **overrides)

    @classmethod
    def from_cluster_json_doc(cls, doc: dict[str, Any], **overrides: Any) -> DispatchConfig:
        """Redis, gateway and admin token of a local cluster document, then the
        ``dispatch.options`` recorded by ``svit-cluster up``, then ``overrides``
        (None values ignored).

        Raises:
            ConfigurationError: the document is malformed or an option is bad.
        """
        try:
            base: dict[str, Any] = {
                "redis_url": doc["redis"]["url"],
                "gateway_url": (doc.get("gateway") or {}).get("url"),
                "gateway_token": doc["tokens"]["admin"],
            }
            base.update((doc.get("dispatch") or {}).get("options") or {})
        except (KeyError, TypeError, AttributeError) as exc:
            raise ConfigurationError(f"malformed cluster document: {exc!r}") from exc
        base.update({k: v for k, v in overrides.items() if v is not None})
        return cls.from_mapping(base)
