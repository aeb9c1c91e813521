"""One dispatcher worker: discover outbox streams, hold claims, deliver, ack.

Control plane (loops that never die; each logs and retries on Redis errors):

* **scan** -- every ``scan_interval_s``: ``SCAN MATCH <prefix>:{*}:outbox TYPE
  stream``, create the consumer group (``XGROUP CREATE … 0``; ``BUSYGROUP`` is
  fine), refresh the lag gauges, enforce the dead-letter stream's bounds (count
  and age, so old letters also go while none arrives) and, after letters went
  or every ``_PRUNE_EVERY_SCANS`` scans, prune the ``:dead-settled`` fields of
  letters no longer in the stream (``_deadbound.py``).
* **membership** -- every ``heartbeat_interval_s``: heartbeat, renew held
  claims, take the claims of streams the hash ring now gives this worker, and
  ask runners of streams it no longer wins to hand them over.
* **wake-up** -- one blocking ``XREAD`` over idle owned streams, so a new
  commit wakes its runner without polling (falls back to ``poll_interval_s``).

Data path: one runner task per owned stream, strictly in stream order:

1. If the stream has pending entries (``XPENDING``): the prefix owned by this
   worker is delivered again (a redelivery, same key). If the oldest pending
   entry belongs to another consumer, it is reclaimed with ``XAUTOCLAIM`` once
   idle ``claim_idle_s``; until then the runner waits -- nothing newer is read,
   so a takeover never overtakes the crashed worker's entries.
2. Otherwise ``XREADGROUP … >`` reads a batch.
3. A batch is split by destination; each destination's intents go one after
   another (commit order); different destinations run concurrently, each
   under its sink's concurrency semaphore.
4. Per intent: up to ``max_attempts`` attempts with exponential backoff and
   jitter (tenacity); ``XACK`` only after the sink confirmed. A permanent
   failure, or exhausted retries, writes a dead letter and then acks.

Timers (``_timers.py``): a delayed intent read from an outbox stream is
parked (fenced script: sorted set + ``XACK``), so it never blocks the stream;
a cancel entry is applied by the fenced cancel script. Each runner keeps the
due time of its stream's earliest timer in memory (loaded when the claim is
taken, lowered by each park, and replaced by the head every take returns), so
a tick sends a take only when that time has come, and waits until
``min(earliest due, next entry)``. A new holder first redelivers what the
previous one left in ``firing``.

Guarantees: an entry leaves the pending list only after its sink confirmed or
its dead letter was written (or, for a delayed intent, it was parked; for a
cancel entry, the cancel was applied), so a worker or host dying at any point
loses nothing; the price is a possible redelivery, always with the same
intent id.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
from prometheus_client import start_http_server
from redis.exceptions import RedisError, ResponseError
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential,
    wait_random,
)

from svit_cluster.dispatch._claim import StreamClaims, shard_of
from svit_cluster.dispatch._config import DispatchConfig
from svit_cluster.dispatch._deadbound import BOUND_SCRIPT, PRUNE_SETTLED_SCRIPT, Trimmed
from svit_cluster.dispatch._deadletter import write_dead_letter
from svit_cluster.dispatch._errors import PermanentDeliveryError, RetryableDeliveryError
from svit_cluster.dispatch._intent import CancelEntry, Intent, parse_cancel, parse_entry
from svit_cluster.dispatch._metrics import DispatchMetrics
from svit_cluster.dispatch._redisutil import async_client, text
from svit_cluster.dispatch._sinks import (
    RedisStreamSink,
    SinkRegistry,
    SvitInboxSink,
    WebhookSink,
)
from svit_cluster.dispatch._timers import (
    UNSAFE_IGNORE_CANCELS_ENV,
    TimerScripts,
    decode_parked,
    timer_keys,
)
from svit_cluster.dispatch._trim import TRIM_ACKED_SCRIPT, parse_trim_reply
from svit_cluster.store import AsyncRedisClient

__all__ = ["DispatchWorker", "default_sinks", "run_worker"]

log = logging.getLogger(__name__)

_NOTIFY_BLOCK_MS = 25
#: Old consumer names are pruned from owned streams, and ``:dead-settled``
#: fields of letters no longer kept from every stream, every this many scans.
_PRUNE_EVERY_SCANS = 30
#: ... when idle for this many claim TTLs with nothing pending.
_PRUNE_IDLE_CLAIMS = 10.0
#: Fraction of the claim TTL after which an unrenewed claim counts as lost locally.
_CLAIM_SAFETY = 0.8


class ClaimLost(Exception):
    """Internal: the runner's claim is no longer HELD; stop without acking."""


def default_sinks(config: DispatchConfig, client: AsyncRedisClient,
                  http: httpx.AsyncClient) -> SinkRegistry:
    """The standard sinks: ``svit``, ``http``/``https`` (allowlisted), ``redis-stream``."""
    webhook = WebhookSink(config.webhook_hosts, http=http,
                          concurrency=config.webhook_concurrency)
    return SinkRegistry({
        "svit": SvitInboxSink(config.gateway_url, config.gateway_token, http=http,
                              concurrency=config.svit_concurrency,
                              cross_tenant=config.svit_cross_tenant),
        "http": webhook,
        "https": webhook,
        "redis-stream": RedisStreamSink(client, allowed_prefixes=config.redis_stream_prefixes,
                                        store_prefix=config.prefix,
                                        concurrency=config.redis_stream_concurrency),
    }, max_body_bytes=config.max_body_bytes)


@dataclass(eq=False)
class _Stream:
    """A stream this worker holds (or is about to hold) the claim of."""

    key: str
    process: str | None
    valid_until: float
    token: int = 0  # the claim's fencing token (see _claim.py)
    release: bool = False
    idle: bool = False
    cursor: str | None = None
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    # Timers of an outbox stream (None for the re-drive stream):
    timer_keys: list[str] | None = None
    timers_loaded: bool = False  # ``firing`` redelivered and the head read under this claim
    next_due_ms: int | None = None  # earliest pending due time known (Redis clock)
    clock_offset_ms: float = 0.0  # Redis TIME - local wall clock, from the last reply
    pending_timers: int = 0

    def redis_now_ms(self) -> float:
        return time.time() * 1000 + self.clock_offset_ms

    def saw_redis_ms(self, redis_ms: int) -> None:
        self.clock_offset_ms = redis_ms - time.time() * 1000

    def check(self) -> None:
        if time.monotonic() >= self.valid_until:
            raise ClaimLost(self.key)


@dataclass(frozen=True, slots=True)
class _Firing:
    """A timer taken for delivery: finished by the *done* script, not an ``XACK``."""

    timer_id: str
    due_ms: int


class DispatchWorker:
    """A dispatcher worker; run several (any host) to scale out.

    Args:
        config: see :class:`DispatchConfig`.
        metrics: a metrics registry (a fresh one by default).
        sinks: a factory ``(config, redis, http) -> SinkRegistry`` to plug in
            other sinks (default :func:`default_sinks`).

    Use ``await worker.run()`` (returns after :meth:`stop`) or
    :func:`svit_cluster.dispatch.run_worker` in a process of its own.
    """

    def __init__(self, config: DispatchConfig, *, metrics: DispatchMetrics | None = None,
                 sinks: Any = None) -> None:
        self.config = config
        self.keys = config.keys
        self.name = config.worker_id
        self.metrics = metrics or DispatchMetrics()
        self._sink_factory = sinks or default_sinks
        self._stopping = asyncio.Event()
        self._streams: set[str] = set()
        self._grouped: set[str] = set()
        self._owned: dict[str, _Stream] = {}
        self._live: list[str] = []
        self._scans = 0
        self._client: AsyncRedisClient | None = None
        self._registry: SinkRegistry | None = None
        self._claims: StreamClaims | None = None
        self._trim_script: Any = None
        self._bound_script: Any = None
        self._prune_settled_script: Any = None
        self._timers: TimerScripts | None = None
        self._prune_due = False  # a dead-letter write removed letters: prune at the next scan

    # -- lifecycle ----------------------------------------------------------------

    def stop(self) -> None:
        """Ask :meth:`run` to finish (in-flight batches get ``shutdown_grace_s``)."""
        self._stopping.set()

    @property
    def owned_streams(self) -> list[str]:
        """Source streams this worker currently holds the claim of."""
        return sorted(self._owned)

    async def run(self) -> None:
        """Serve until :meth:`stop`; never raises on Redis or sink failures."""
        c = self.config
        client = self._client = async_client(c.redis_url, timeout_s=5.0)
        http = httpx.AsyncClient(timeout=httpx.Timeout(c.sink_timeout_s),
                                 follow_redirects=False, trust_env=False)
        self._registry = self._sink_factory(c, client, http)
        self._trim_script = client.register_script(TRIM_ACKED_SCRIPT)
        self._bound_script = client.register_script(BOUND_SCRIPT)
        self._prune_settled_script = client.register_script(PRUNE_SETTLED_SCRIPT)
        unsafe = os.environ.get(UNSAFE_IGNORE_CANCELS_ENV) == "1"
        if unsafe:
            log.warning("%s: %s=1: committed cancels are IGNORED (test-only negative "
                        "control; cancelled timers still fire)", self.name,
                        UNSAFE_IGNORE_CANCELS_ENV)
        self._timers = TimerScripts(client, unsafe_ignore_cancels=unsafe)
        self._claims = StreamClaims(client, self.keys, self.name, claim_ttl_s=c.claim_ttl_s,
                                  worker_ttl_s=c.worker_ttl_s)
        loops = [asyncio.create_task(coro, name=f"dispatch-{n}") for n, coro in (
            ("scan", self._scan_loop()), ("membership", self._membership_loop()),
            ("wakeup", self._wakeup_loop()))]
        try:
            await self._stopping.wait()
        finally:
            for task in loops:
                task.cancel()
            await asyncio.gather(*loops, return_exceptions=True)
            await self._shutdown()
            await self._registry.aclose()
            await http.aclose()
            await client.aclose()

    async def _shutdown(self) -> None:
        for st in self._owned.values():
            st.release = True
            st.wake.set()
        tasks = [st.task for st in self._owned.values() if st.task is not None]
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=self.config.shutdown_grace_s)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        assert self._claims is not None
        with contextlib.suppress(RedisError, OSError):
            for key in list(self._owned):
                await self._claims.release(key)
            await self._claims.leave()

    # -- control plane --------------------------------------------------------------

    async def _forever(self, what: str, period_s: float, step: Any) -> None:
        while not self._stopping.is_set():
            try:
                await step()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a control loop never dies
                log.warning("%s %s failed: %s: %s", self.name, what, type(exc).__name__, exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), timeout=period_s)

    async def _scan_loop(self) -> None:
        await self._forever("scan", self.config.scan_interval_s, self._scan_once)

    async def _scan_once(self) -> None:
        client, c = self._client, self.config
        assert client is not None
        found: set[str] = set()
        async for raw in client.scan_iter(match=self.keys.outbox_pattern, count=1000,
                                          _type="stream"):
            found.add(text(raw))
        found.add(self.keys.redrive)
        for key in sorted(found - self._grouped):
            try:
                await client.xgroup_create(key, c.group, id="0",
                                           mkstream=key == self.keys.redrive)
            except ResponseError as exc:
                if "BUSYGROUP" not in str(exc):
                    log.warning("cannot create group on %s: %s", key, exc)
                    found.discard(key)
                    continue
            self._grouped.add(key)
        self._streams = found
        self._grouped &= found
        await self._update_lag()
        await self._bound_dead_letters()

    async def _bound_dead_letters(self) -> None:
        """Enforce the dead-letter bounds (one script, O(1) when nothing is due),
        then prune ``:dead-settled`` when letters went or every
        ``_PRUNE_EVERY_SCANS`` scans."""
        client = self._client
        assert client is not None
        reply = await self._bound_script(keys=[self.keys.dead, self.keys.dead_trim],
                                         args=self.config.dead_letter_bound.args)
        trimmed = Trimmed.from_reply(reply)
        self._count_trimmed(trimmed)
        due = self._prune_due or trimmed.total or self._scans % _PRUNE_EVERY_SCANS == 0
        if trimmed.below and due:
            self._prune_due = False
            await self._prune_settled(trimmed.below)

    async def _prune_settled(self, below: str) -> None:
        """Delete, in every ``<stream>:dead-settled`` hash, the fields naming a
        letter below ``below`` (the oldest kept letter's id): such a letter left
        the dead-letter stream for good, and only a letter in the stream needs
        its field (``delivery_status`` counts it through it). One script per
        hash, in the hash's own slot."""
        client = self._client
        assert client is not None
        pruned = 0
        async for raw in client.scan_iter(match=self.keys.settled_pattern, count=1000,
                                          _type="hash"):
            pruned += int(await self._prune_settled_script(keys=[text(raw)], args=[below]))
        if pruned:
            self.metrics.settled_pruned.inc(pruned)
            log.info("%s pruned %d dead-settled fields of letters below %s", self.name,
                     pruned, below)

    def _count_trimmed(self, trimmed: Trimmed) -> None:
        if not trimmed.total:
            return
        self._prune_due = True
        bound = self.config.dead_letter_bound
        if trimmed.by_age:
            self.metrics.dead_trimmed.labels("age").inc(trimmed.by_age)
        if trimmed.by_count:
            self.metrics.dead_trimmed.labels("count").inc(trimmed.by_count)
        log.warning("%s: the dead-letter bounds removed %d letters (%d older than %g s, "
                    "%d beyond the newest %d); every letter below %s is gone",
                    self.name, trimmed.total, trimmed.by_age, bound.max_age_s,
                    trimmed.by_count, bound.max_count, trimmed.below)

    async def _update_lag(self) -> None:
        client = self._client
        assert client is not None
        self._scans += 1
        prune = self._scans % _PRUNE_EVERY_SCANS == 0
        for key, st in list(self._owned.items()):
            try:
                groups = await client.xinfo_groups(key)
                if prune:
                    await self._prune_consumers(key)
            except ResponseError:
                continue
            for g in groups:
                if text(g.get("name")) == self.config.group:
                    lag = g.get("lag") or 0
                    pending = g.get("pending") or 0
                    self.metrics.lag.labels(st.process or "redrive").set(int(lag) + int(pending))

    async def _prune_consumers(self, key: str) -> None:
        """Forget consumers (old worker names) with nothing pending, idle for long.

        Safe: only the claim holder (this worker) reads the stream, so a
        consumer with no pending entry can never gain one meanwhile; a worker
        that later takes the claim is re-created by its first read.
        """
        client, c = self._client, self.config
        assert client is not None
        idle_limit_ms = int(_PRUNE_IDLE_CLAIMS * c.claim_ttl_s * 1000)
        consumers: Any = await client.xinfo_consumers(key, c.group)
        for entry in consumers:
            name = text(entry.get("name"))
            if (name != self.name and int(entry.get("pending") or 0) == 0
                    and int(entry.get("idle") or 0) > idle_limit_ms):
                await client.xgroup_delconsumer(key, c.group, name)

    async def _membership_loop(self) -> None:
        await self._forever("membership", self.config.heartbeat_interval_s,
                            self._membership_once)

    async def _membership_once(self) -> None:
        claims = self._claims
        assert claims is not None
        sent = time.monotonic()
        live = await claims.heartbeat()
        if self.name not in live:
            live = sorted([*live, self.name])
        self._live = live
        renewed = await claims.claim(list(self._owned))
        valid_until = sent + _CLAIM_SAFETY * self.config.claim_ttl_s
        for key, token in renewed.items():
            st = self._owned.get(key)
            if st is None:
                continue
            if token and token == st.token:
                st.valid_until = valid_until
            else:
                log.warning("%s lost the claim of %s", self.name, key)
                st.valid_until = 0.0
                st.release = True
                st.wake.set()
        desired = {s for s in self._streams if shard_of(s, live) == self.name}
        for key, st in self._owned.items():
            if key not in desired and not st.release:
                st.release = True  # hand over after the current batch
                st.wake.set()
        wanted = sorted(desired - set(self._owned))
        if self._stopping.is_set() or not wanted:
            self.metrics.owned.set(len(self._owned))
            return
        sent = time.monotonic()
        taken = await claims.claim(wanted)
        for key, token in taken.items():
            if token and not self._stopping.is_set():
                st = _Stream(key, self.keys.process_of(key),
                             sent + _CLAIM_SAFETY * self.config.claim_ttl_s, token)
                if st.process is not None:
                    st.timer_keys = timer_keys(self.config.prefix, st.process)
                self._owned[key] = st
                st.task = asyncio.create_task(self._run_stream(st), name=f"stream-{key}")
        self.metrics.owned.set(len(self._owned))

    async def _wakeup_loop(self) -> None:
        client = self._client
        assert client is not None
        while not self._stopping.is_set():
            idle: Any = {k: st.cursor for k, st in self._owned.items()
                         if st.idle and st.cursor is not None}
            if not idle:
                await asyncio.sleep(_NOTIFY_BLOCK_MS / 1000)
                continue
            try:
                reply: Any = await client.xread(idle, count=1, block=_NOTIFY_BLOCK_MS)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # e.g. CROSSSLOT on Redis Cluster: fall back to polling
                log.debug("wake-up read failed: %s", exc)
                await asyncio.sleep(self.config.poll_interval_s)
                continue
            for raw_key, _ in reply or ():
                st = self._owned.get(text(raw_key))
                if st is not None:
                    st.wake.set()

    # -- data path ------------------------------------------------------------------

    async def _run_stream(self, st: _Stream) -> None:
        claims = self._claims
        assert claims is not None
        try:
            while not st.release and not self._stopping.is_set():
                try:
                    st.check()
                    processed, wait_s = await self._step(st)
                except ClaimLost:
                    break
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # Redis down, a bug: entries stay pending; retry
                    log.warning("%s: stream %s: %s: %s", self.name, st.key,
                                type(exc).__name__, exc)
                    processed, wait_s = 0, self.config.poll_interval_s
                    st.timers_loaded = False  # redeliver what is left in ``firing``
                if processed:
                    continue
                st.wake.clear()
                st.idle = True
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(st.wake.wait(), timeout=wait_s)
                st.idle = False
        finally:
            self._owned.pop(st.key, None)
            self.metrics.owned.set(len(self._owned))
            if st.process is not None:
                with contextlib.suppress(KeyError):
                    self.metrics.lag.remove(st.process)
            self._count_pending_timers()
            with contextlib.suppress(RedisError, OSError, RuntimeError):
                await claims.release(st.key)

    async def _step(self, st: _Stream) -> tuple[int, float]:
        """One round on ``st``: returns (entries and timers handled, seconds to
        wait when 0). Due timers fire first; a tick sends no timer command
        unless the earliest known due time has come."""
        fired = 0
        if st.timer_keys is not None:
            if not st.timers_loaded:
                fired += await self._load_timers(st)
            if st.next_due_ms is not None and st.next_due_ms <= st.redis_now_ms():
                fired += await self._fire_due(st)
        processed, wait_s = await self._step_outbox(st)
        if st.next_due_ms is not None:
            wait_s = min(wait_s, max(0.001, (st.next_due_ms - st.redis_now_ms()) / 1000))
        return processed + fired, wait_s

    # -- timers ---------------------------------------------------------------------

    def _count_pending_timers(self) -> None:
        self.metrics.timers_pending.set(sum(s.pending_timers for s in self._owned.values()))

    async def _load_timers(self, st: _Stream) -> int:
        """Under a new claim (or after an error): read the zset's head and
        redeliver every timer left in ``firing`` (by a crashed or stale holder,
        or by this runner before the error), with the same idempotency key."""
        timers = self._timers
        assert timers is not None and st.timer_keys is not None
        now, head, pending, firing = await timers.load(st.timer_keys)
        st.saw_redis_ms(now)
        st.next_due_ms = head
        st.pending_timers = pending
        self._count_pending_timers()
        st.timers_loaded = True
        if firing:
            log.info("%s: redelivering %d firing timers of %s", self.name, len(firing), st.key)
            await self._deliver_timers(st, firing)
        return len(firing)

    async def _fire_due(self, st: _Stream) -> int:
        """Take the due timers (one fenced script) and deliver them."""
        timers = self._timers
        assert timers is not None and st.timer_keys is not None
        st.check()
        taken = await timers.take(st.timer_keys, st.token, self.config.batch_size)
        if taken is None:
            self.metrics.fenced.labels("timer_take").inc()
            raise ClaimLost(st.key)
        st.saw_redis_ms(taken.redis_ms)
        st.next_due_ms = taken.head_ms
        st.pending_timers = taken.pending
        self._count_pending_timers()
        if taken.timers:
            await self._deliver_timers(st, taken.timers)
        return len(taken.timers)

    async def _deliver_timers(self, st: _Stream, items: list[tuple[str, Any]]) -> None:
        """Deliver firing timers: by destination, like a batch (due order within one)."""
        parsed_items = []
        for timer_id, raw in items:
            try:
                fields, entry_id, due_ms = decode_parked(raw)
                parsed: Intent | PermanentDeliveryError = parse_entry(
                    st.key, entry_id, fields, st.process)
            except PermanentDeliveryError as exc:
                parsed, fields, entry_id, due_ms = exc, {b"intent": b""}, "0-0", 0
            except (ValueError, KeyError, TypeError) as exc:
                parsed = PermanentDeliveryError(f"stored timer {timer_id} does not decode: {exc}",
                                                reason="malformed_intent")
                fields, entry_id, due_ms = {b"intent": b""}, "0-0", 0
            parsed_items.append((due_ms, timer_id, entry_id, fields, parsed))
        parsed_items.sort(key=lambda t: (t[0], t[1]))
        by_destination: dict[str, list[Any]] = {}
        for due_ms, timer_id, entry_id, fields, parsed in parsed_items:
            dest = parsed.to if isinstance(parsed, Intent) else ""
            by_destination.setdefault(dest, []).append(
                (entry_id, fields, parsed, _Firing(timer_id, due_ms)))
        results = await asyncio.gather(
            *(self._deliver_in_order(st, group, {}) for group in by_destination.values()),
            return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result

    async def _timer_done(self, st: _Stream, timer: _Firing, outcome: str, entry_id: str,
                          dead_id: str = "") -> str:
        """Finish a firing timer (fenced); counts it. Returns the script's answer:
        ``ok``, ``settled`` (another holder finished it) or, for a dead letter,
        ``fenced`` (the caller deletes the refused letter and stops).

        Raises:
            ClaimLost: a newer claim holder exists, after a delivery (it
                redelivers the timer).
        """
        timers = self._timers
        assert timers is not None and st.timer_keys is not None
        late_ms = max(0, int(st.redis_now_ms() - timer.due_ms))
        answer = await timers.done(st.timer_keys, st.token, timer.timer_id, outcome, entry_id,
                                   dead_id, late_ms)
        if answer == "fenced" and outcome == "fired":
            self.metrics.fenced.labels("timer_done").inc()
            raise ClaimLost(st.key)
        if answer == "ok" and outcome == "fired":
            self.metrics.timers_fired.inc()
            self.metrics.timer_lateness.observe(late_ms / 1000)
        return answer

    async def _park(self, st: _Stream, items: list[tuple[str, Intent]]) -> None:
        """Park delayed intents and acknowledge their entries (one fenced script)."""
        if not items:  # also every batch of the re-drive stream, which has no timers
            return
        timers = self._timers
        assert timers is not None and st.timer_keys is not None
        st.check()
        states, redis_ms, pending = await timers.park_many(st.timer_keys, st.token,
                                                           self.config.group, items)
        if not states:
            self.metrics.fenced.labels("timer_park").inc()
            raise ClaimLost(st.key)
        st.saw_redis_ms(redis_ms)
        st.pending_timers = pending
        self._count_pending_timers()
        for (_eid, intent), state in zip(items, states, strict=True):
            if state == "parked" and intent.due_ms is not None:
                self.metrics.timers_armed.inc()
                if st.next_due_ms is None or intent.due_ms < st.next_due_ms:
                    st.next_due_ms = intent.due_ms

    async def _cancel(self, st: _Stream, entry: CancelEntry) -> None:
        """Apply a committed cancel entry and acknowledge it (one fenced script)."""
        timers = self._timers
        assert timers is not None and st.timer_keys is not None
        st.check()
        outcome, pending = await timers.cancel(st.timer_keys, st.token, self.config.group,
                                               entry.entry_id, entry.timer_id)
        if outcome == "fenced":
            self.metrics.fenced.labels("timer_cancel").inc()
            raise ClaimLost(st.key)
        st.pending_timers = pending
        self._count_pending_timers()
        self.metrics.timers_cancelled.labels(outcome).inc()
        log.info("%s: cancel %s of timer %s: %s", self.name, entry.id, entry.timer_id, outcome)

    # -- outbox entries -------------------------------------------------------------

    async def _step_outbox(self, st: _Stream) -> tuple[int, float]:
        """One round on the stream's entries: (entries handled, seconds to wait when 0)."""
        client, c = self._client, self.config
        assert client is not None
        pending: Any = await client.xpending_range(st.key, c.group, min="-", max="+",
                                                   count=c.batch_size)
        if pending:
            st.cursor = None  # not waiting for new entries: no wake-ups
            mine: list[dict[str, Any]] = []
            for p in pending:
                if text(p["consumer"]) != self.name:
                    break
                mine.append(p)
            if not mine:
                return await self._reclaim(st, pending[0])
            counts = {text(p["message_id"]): int(p["times_delivered"]) for p in mine}
            reply: Any = await client.xreadgroup(c.group, self.name, {st.key: "0"},
                                                 count=len(mine))
            entries = reply[0][1] if reply else []
            await self._deliver_batch(st, entries, counts)
            await self._trim(st)
            return max(len(entries), 1), 0.0
        pipe = client.pipeline(transaction=False)
        pipe.xrevrange(st.key, "+", "-", count=1)
        pipe.xreadgroup(c.group, self.name, {st.key: ">"}, count=c.batch_size)
        last, reply = await pipe.execute()
        entries = reply[0][1] if reply else []
        if not entries:
            st.cursor = text(last[0][0]) if last else "0-0"
            return 0, c.poll_interval_s
        await self._deliver_batch(st, entries, {})
        await self._trim(st)
        return len(entries), 0.0

    async def _trim(self, st: _Stream) -> None:
        """Trim ``st`` below what every consumer group acknowledged (one
        single-key script, see ``_trim.py``); a failure only delays the trim."""
        if not self.config.trim_acked or self._trim_script is None:
            return
        try:
            removed, _ = parse_trim_reply(await self._trim_script(keys=[st.key]))
        except (RedisError, OSError) as exc:
            log.debug("%s: trim of %s failed: %s", self.name, st.key, exc)
            return
        if removed:
            self.metrics.trimmed.inc(removed)

    async def _reclaim(self, st: _Stream, head: dict[str, Any]) -> tuple[int, float]:
        client, c = self._client, self.config
        assert client is not None
        need_ms = int(c.claim_idle_s * 1000)
        idle_ms = int(head["time_since_delivered"])
        if idle_ms < need_ms:
            return 0, max(0.01, min(c.poll_interval_s, (need_ms - idle_ms) / 1000))
        reply = await client.xautoclaim(st.key, c.group, self.name, min_idle_time=need_ms,
                                        start_id="0-0", count=c.batch_size)
        claimed = reply[1] if len(reply) > 1 else []
        deleted = reply[2] if len(reply) > 2 else []
        if claimed:
            self.metrics.reclaimed.inc(len(claimed))
            log.info("%s reclaimed %d pending entries of %s from %s", self.name, len(claimed),
                     st.key, text(head["consumer"]))
        if deleted:
            self.metrics.missing.inc(len(deleted))
            log.error("%s: %d pending entries of %s no longer exist: %s", self.name,
                      len(deleted), st.key, [text(d) for d in deleted][:10])
        return len(claimed) + len(deleted), 0.0

    async def _deliver_batch(self, st: _Stream, entries: list[Any],
                             counts: dict[str, int]) -> None:
        """Deliver a batch. Timer entries of an outbox stream are handled first,
        one by one in stream order (a cancel always follows its arm): delayed
        intents are parked (each run of them between cancels in one script),
        cancel entries applied; the rest is delivered."""
        by_destination: dict[str, list[tuple[str, dict[bytes, bytes], Any]]] = {}
        parks: list[tuple[str, Intent]] = []
        for raw_id, fields in entries:
            eid = text(raw_id)
            if not fields:  # the entry was deleted from the stream (never by the store)
                self.metrics.missing.inc()
                log.error("%s: pending entry %s of %s no longer exists", self.name, eid, st.key)
                await self._ack(st, eid)
                continue
            cancel = parse_cancel(eid, fields)
            if cancel is not None:
                if st.timer_keys is not None:
                    await self._park(st, parks)  # the arms it may cancel come first
                    parks = []
                    await self._cancel(st, cancel)
                else:  # a re-driven cancel entry has no timer to cancel
                    await self._ack(st, eid)
                continue
            try:
                parsed: Intent | PermanentDeliveryError = parse_entry(
                    st.key, eid, fields, st.process)
                dest = parsed.to if isinstance(parsed, Intent) else ""
            except PermanentDeliveryError as exc:
                parsed, dest = exc, ""
            if (isinstance(parsed, Intent) and parsed.due_ms is not None
                    and st.timer_keys is not None):
                parks.append((eid, parsed))
                continue
            by_destination.setdefault(dest, []).append((eid, fields, parsed))
        await self._park(st, parks)
        results = await asyncio.gather(
            *(self._deliver_in_order(st, items, counts) for items in by_destination.values()),
            return_exceptions=True,
        )
        for result in results:
            if isinstance(result, BaseException):
                raise result

    async def _deliver_in_order(self, st: _Stream, items: list[Any],
                                counts: dict[str, int]) -> None:
        for eid, fields, parsed, *timer in items:
            await self._deliver_one(st, eid, fields, parsed, counts.get(eid, 1),
                                    timer[0] if timer else None)

    async def _deliver_one(self, st: _Stream, eid: str, fields: dict[bytes, bytes],
                           parsed: Intent | PermanentDeliveryError, delivered_times: int,
                           timer: _Firing | None = None) -> None:
        """Deliver one intent, then ``XACK`` its entry (or, for a firing timer,
        finish it with the fenced *done*); dead-letter it when it cannot be."""
        c, registry = self.config, self._registry
        assert registry is not None
        if isinstance(parsed, PermanentDeliveryError):
            await self._dead(st, eid, fields, None, "none", parsed, attempts=0, timer=timer)
            return
        intent = parsed
        sink_name = intent.scheme or "none"
        if timer is None and delivered_times > c.max_deliveries:
            await self._dead(st, eid, fields, intent, sink_name, PermanentDeliveryError(
                f"handed to workers {delivered_times} times without an ack", reason="poison"),
                attempts=0)
            return
        try:
            sink, limit = registry.resolve(intent)
        except PermanentDeliveryError as exc:
            await self._dead(st, eid, fields, intent, sink_name, exc, attempts=0, timer=timer)
            return
        attempts = 0

        def retried(_: RetryCallState) -> None:
            self.metrics.retried.labels(sink.name).inc()

        try:
            async for attempt in AsyncRetrying(
                stop=stop_after_attempt(c.max_attempts),
                wait=wait_exponential(multiplier=c.retry_initial_s, max=c.retry_max_s)
                + wait_random(0, c.retry_initial_s),
                retry=retry_if_exception_type(RetryableDeliveryError),
                before_sleep=retried,
                reraise=True,
            ):
                with attempt:
                    st.check()
                    attempts += 1
                    await self._attempt(sink, limit, intent)
        except (RetryableDeliveryError, PermanentDeliveryError) as exc:
            if isinstance(exc, RetryableDeliveryError):
                exc = RetryableDeliveryError(exc.message, reason="exhausted")
            await self._dead(st, eid, fields, intent, sink.name, exc, attempts=attempts,
                             timer=timer)
            return
        if timer is not None:
            await self._timer_done(st, timer, "fired", eid)
        else:
            await self._ack(st, eid)
        self.metrics.delivered.labels(sink.name).inc()
        if intent.committed_ms:
            delay = max(0.0, time.time() - intent.committed_ms / 1000)
            self.metrics.delay.labels(sink.name).observe(delay)

    async def _attempt(self, sink: Any, limit: asyncio.Semaphore, intent: Intent) -> None:
        async with limit:
            try:
                await asyncio.wait_for(sink.deliver(intent), timeout=self.config.sink_timeout_s)
            except (RetryableDeliveryError, PermanentDeliveryError):
                raise
            except TimeoutError as exc:
                raise RetryableDeliveryError(
                    f"{sink.name} sink did not answer within {self.config.sink_timeout_s} s",
                    reason="timeout") from exc
            except Exception as exc:  # a misbehaving sink: retry, then dead-letter
                raise RetryableDeliveryError(f"{sink.name} sink failed: "
                                             f"{type(exc).__name__}: {exc}",
                                             reason="sink_error") from exc

    async def _dead(self, st: _Stream, eid: str, fields: dict[bytes, bytes],
                    intent: Intent | None, sink: str,
                    exc: PermanentDeliveryError | RetryableDeliveryError, *, attempts: int,
                    timer: _Firing | None = None) -> None:
        """Dead-letter one entry: write the letter, then settle it (fenced ack).

        The letter is written first (nothing lost if the worker dies next; the
        dead-letter bounds are enforced in the same script), then
        :meth:`StreamClaims.settle_dead` acknowledges the entry and records the
        letter as its outcome in one script, refused when a newer claim holder
        exists or the entry was already acknowledged (delivered). A refused
        letter is deleted again and never counts (see ``delivery_status``).

        Raises:
            ClaimLost: a newer claim holder exists (nothing settled).
        """
        client, claims = self._client, self._claims
        assert client is not None and claims is not None
        reason = str(exc.fields.get("reason", "failed"))
        dead_id, trimmed = await write_dead_letter(
            client, self.keys, intent=intent, fields=fields, stream=st.key, entry_id=eid,
            source=st.process or "", sink=sink, reason=reason, error=exc.message,
            attempts=attempts, worker=self.name, claim_token=st.token,
            bound=self.config.dead_letter_bound)
        self._count_trimmed(trimmed)
        if timer is not None:  # its entry was acknowledged at park: settle it in ``firing``
            outcome = await self._timer_done(st, timer, "dead_lettered", eid, dead_id)
        else:
            outcome = await claims.settle_dead(st.key, self.config.group, eid, st.token,
                                               dead_id)
        if outcome != "ok":
            with contextlib.suppress(RedisError, OSError):
                await client.xdel(self.keys.dead, dead_id)
            self.metrics.fenced.labels("dead_letter").inc()
            log.warning("%s: dead letter of %s refused (%s): %s", self.name,
                        intent.id if intent else f"{st.key} {eid}", outcome,
                        "a newer claim holder exists" if outcome == "fenced"
                        else "the entry was already acknowledged")
            if outcome == "fenced":
                raise ClaimLost(st.key)
            return
        self.metrics.dead_lettered.labels(sink, reason).inc()
        log.warning("%s dead-lettered %s (%s): %s", self.name,
                    intent.id if intent else f"{st.key} {eid}", reason, exc.message)

    async def _ack(self, st: _Stream, eid: str) -> None:
        """Acknowledge ``eid`` (its sink confirmed), fenced by the claim token.

        Raises:
            ClaimLost: a newer claim holder exists (not acknowledged; it redelivers).
        """
        claims = self._claims
        assert claims is not None
        if await claims.ack(st.key, self.config.group, eid, st.token) != "ok":
            self.metrics.fenced.labels("ack").inc()
            log.warning("%s: ack of %s %s refused: a newer claim holder exists", self.name,
                        st.key, eid)
            raise ClaimLost(st.key)


def redact_url(url: str) -> str:
    """``url`` with its password, if any, replaced by ``***`` (safe to log).

    ``redis://:secret@host:6379/0`` -> ``redis://:***@host:6379/0``; a URL
    without a password is returned unchanged.
    """
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit(parts._replace(netloc=f"{parts.username or ''}:***@{host}"))


def run_worker(config: DispatchConfig, *, metrics: DispatchMetrics | None = None) -> None:
    """Run one worker in this OS process until SIGTERM or SIGINT.

    Serves Prometheus metrics on ``config.metrics_port`` when it is set.
    """
    async def main() -> None:
        worker = DispatchWorker(config, metrics=metrics)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, worker.stop)
        if config.metrics_port is not None:
            start_http_server(config.metrics_port, registry=worker.metrics.registry)
        log.info("dispatcher worker %s starting (redis %s)", worker.name,
                 redact_url(config.redis_url))
        await worker.run()

    asyncio.run(main())
