"""The workload: K clients activate a counting script on P processes through the gateway.

Each process is created with ``/memory = {count: 0, last: "", ops: []}`` and the
script ``op`` (:data:`SCRIPT`). One activation with input ``{"rid": R}``:

* writes ``R`` to ``/memory/last`` -- so every stored transaction record names
  the request it committed (the checker's link between history and log);
* adds 1 to ``/memory/count``;
* appends ``R`` to ``/memory/ops``, keeping only the last 32 (``max_value_entries``
  is 10 000, so an unbounded list would fail a long run);
* when ``/memory/sink`` names a destination (``WorkloadConfig.sink``) and the new
  count is a multiple of ``/memory/send_every``, ``send!``s ``{rid, count}`` to it
  and writes the returned intent id to ``/memory/sent`` -- so the stored record
  of every commit that staged an intent names that intent (the checker's
  ``outbox`` invariant derives the committed intents from the logs);
* when ``/memory/timer_every`` (``WorkloadConfig.timer_every``) is positive:
  on every count ``c`` with ``c % (2 * timer_every) == timer_every // 2`` it
  ``cancel!``s the timer it armed last (``/memory/timer``; ``cancel!`` stages a
  cancel only while that timer is pending as far as the host knows), and on
  every multiple of ``timer_every`` it arms a timer: ``send!`` of ``{rid,
  timer: c}`` to the sink with ``{"delay_ms": /memory/timer_delay_ms}``, its
  id written to ``/memory/timer``. So every other timer meets a cancel about
  ``timer_every // 2`` commits after it was armed; the dispatcher decides
  whether the cancel or the firing wins (the checker's ``timers`` invariant).

The sink is one more process of the run (``svit://<tenant>/<run_id>-sink``,
created by :meth:`Workload.setup` with empty memory and no script); the
dispatcher delivers the intents into its inbox and the cluster's reasoning loop
consumes them, so its inbox stays bounded.

Every client loops: pick a process (seeded), send ``activate`` with the version
it last observed as ``expected_version`` and a fresh request id, then

* ``committed`` -> history ``ok`` with the resulting version (and ``token``, the
  owner's fencing token from the gateway's ``X-Svit-Token`` header, when sent
  and the answer is not a replayed receipt);
* every answered operation (``ok``, and ``fail`` for a conflict or rejection)
  carries ``sent``: the history ``t`` at which the answered attempt was sent;
  a conflict or rejection also carries the answering owner's ``token`` when the
  gateway sent one;
* ``conflict`` -> ``fail`` and *recompute* (the conflict names the actual
  version, which becomes the next expectation) -- unless an earlier attempt of
  the same request had an unknown outcome, then ``info``: once the receipt is
  evicted a retry of a committed request also answers ``conflict``;
* ``rejected`` -> ``fail`` with the failure code;
* transport error or ``unavailable`` -> retried with the SAME request id
  (control protocol: retry safety) with capped exponential backoff until
  ``op_deadline_s`` passes, then ``info`` (unknown outcome).

The SDK is used with ``attempts=1`` so this module sees and records every
attempt itself.
"""

from __future__ import annotations

import asyncio
import functools
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from svit_cluster.client import AsyncSvitClient
from svit_cluster.errors import ErrorCode, SvitError, UnavailableError
from svit_cluster.process import to_plain_json

from .clock import Clock, MonotonicClock
from .history import SETTLE_CLIENT, HistoryWriter

__all__ = ["PORT_SCRIPT", "SCRIPT", "SCRIPT_NAME", "SENT_PATH", "TIMER_PATH", "Workload",
           "WorkloadConfig", "WorkloadStats", "initial_memory", "timer_fields"]

#: Name of the script in ``/lib``.
SCRIPT_NAME = "op"
#: How many request ids ``/memory/ops`` keeps.
KEEP_OPS = 32
#: The workload script (Svit Lisp).
SCRIPT = f"""(define (keep ops)
  (if (> (len ops) {KEEP_OPS}) (slice ops (- (len ops) {KEEP_OPS})) ops))
(define (main input)
  (let ((rid (value-get input "/rid"))
        (count (+ (read "/memory/count") 1))
        (ops (keep (concat (read "/memory/ops") (value-array rid))))
        (sink (read "/memory/sink"))
        (every (read "/memory/send_every")))
    (do (write "/memory/ops" ops)
        (write "/memory/last" rid)
        (write "/memory/count" count)
        (if (and (/= sink "") (> every 0) (= (rem count every) 0))
            (write "/memory/sent" (send! sink (value-map "rid" rid "count" count))))
        (if (and (/= sink "") (> (read "/memory/timer_every") 0)
                 (= (rem count (* 2 (read "/memory/timer_every")))
                    (read "/memory/timer_cancel_at"))
                 (/= (read "/memory/timer") ""))
            (cancel! (read "/memory/timer")))
        (if (and (/= sink "") (> (read "/memory/timer_every") 0)
                 (= (rem count (read "/memory/timer_every")) 0))
            (write "/memory/timer"
                   (send! sink (value-map "rid" rid "timer" count)
                          (value-map "delay_ms" (read "/memory/timer_delay_ms")))))
        (value-map "count" count))))"""

#: The ports workload's script: the same counting, plus one ``http`` port call
#: (a POST of the request id to ``/memory/port_url``) whose answer's body is
#: written to ``/memory/port`` (see :mod:`svit_chaos.ports`).
PORT_SCRIPT = f"""(define (keep ops)
  (if (> (len ops) {KEEP_OPS}) (slice ops (- (len ops) {KEEP_OPS})) ops))
(define (main input)
  (let ((rid (value-get input "/rid"))
        (count (+ (read "/memory/count") 1))
        (ops (keep (concat (read "/memory/ops") (value-array rid))))
        (answer (port-call "http" (value-map "url" (read "/memory/port_url")
                                             "method" "POST" "body" rid))))
    (do (write "/memory/ops" ops)
        (write "/memory/last" rid)
        (write "/memory/count" count)
        (write "/memory/port" (value-get answer "/body"))
        (value-map "count" count))))"""

#: Where the script writes the id of the intent an activation staged.
SENT_PATH = "/memory/sent"

#: Where it writes the id of the timer an activation armed.
TIMER_PATH = "/memory/timer"

INITIAL_MEMORY: dict[str, Any] = {"count": 0, "last": "", "ops": [], "sink": "",
                                  "send_every": 0, "sent": "", "timer": "", "timer_every": 0,
                                  "timer_cancel_at": 0, "timer_delay_ms": 0}


def initial_memory(sink: str | None, send_every: int, timer_every: int = 0,
                   timer_delay_ms: int = 0) -> dict[str, Any]:
    """``/memory`` of a new workload process (no intents when ``sink`` is None)."""
    if not sink:
        return dict(INITIAL_MEMORY)
    return {**INITIAL_MEMORY, "sink": sink, "send_every": send_every,
            "timer_every": timer_every, "timer_cancel_at": timer_every // 2,
            "timer_delay_ms": timer_delay_ms}


def timer_fields(messages: Sequence[Any]) -> dict[str, Any]:
    """The ``ok`` event's record of an activation's timers, from the committed
    intents its answer carries: ``timers`` ``[{id, due_ms}]`` (each delayed
    ``send!``) and ``cancels`` ``[timer id]`` (each staged ``cancel!``); empty
    when it staged neither."""
    out: dict[str, Any] = {}
    for m in messages:
        due = getattr(m, "due_ms", None)
        cancel = getattr(m, "cancel", None)
        if isinstance(due, int):
            out.setdefault("timers", []).append({"id": m.message_id, "due_ms": due})
        elif isinstance(cancel, str):
            out.setdefault("cancels", []).append(cancel)
    return out

_TRANSIENT = (httpx.TransportError, UnavailableError)


def _answered_by(client: AsyncSvitClient) -> dict[str, int]:
    """``{"token": t}``: the fencing token of the owner that answered the last
    control request (the gateway's ``X-Svit-Token``), ``{}`` when none was sent."""
    token = getattr(client, "last_owner_token", None)
    return {"token": token} if isinstance(token, int) else {}


@dataclass(frozen=True)
class WorkloadConfig:
    """Workload shape.

    Attributes:
        run_id: prefix of process ids, client ids and request ids
            (``[A-Za-z0-9._-]``, at most 40 characters).
        clients: concurrent clients K (>= 1).
        processes: processes P (>= 1).
        tenant: tenant part of process ids (``svit://<tenant>/<run_id>-p<i>``).
        seed: seeds each client's process choice.
        request_timeout_s: HTTP timeout of one attempt (default 5 s).
        op_deadline_s: give up retrying one request after this long and
            record ``info`` (default 20 s).
        drain_s: after ``stop``, in-flight requests get this long to resolve
            (default 10 s).
        backoff_s: first and maximum retry pause (default 0.05 .. 1.0 s).
        think_s: pause between a client's operations (default 0).
        send_every: every this many commits per process, the script ``send!``s
            an intent to the run's sink process (0: no intents, no sink).
        port_url: when set, the processes run :data:`PORT_SCRIPT` (one ``http``
            port call per activation to this URL) instead of :data:`SCRIPT`;
            ``send_every`` and ``timer_every`` must then be 0.
        timer_every: every this many commits per process the script arms a
            timer to the run's sink, and every other timer meets a ``cancel!``
            ``timer_every // 2`` commits later (0: no timers).
        timer_delay_ms: the timers' ``delay_ms`` (default 3000).
    """

    run_id: str
    clients: int = 4
    processes: int = 2
    tenant: str = "chaos"
    seed: int = 0
    request_timeout_s: float = 5.0
    op_deadline_s: float = 20.0
    drain_s: float = 10.0
    backoff_s: tuple[float, float] = (0.05, 1.0)
    think_s: float = 0.0
    send_every: int = 0
    port_url: str = ""
    timer_every: int = 0
    timer_delay_ms: int = 3000

    def __post_init__(self) -> None:
        if self.clients < 1 or self.processes < 1:
            raise ValueError("clients and processes must be >= 1")
        if self.port_url and (self.send_every or self.timer_every):
            raise ValueError("the ports workload sends no intents (send_every and "
                             "timer_every must be 0)")
        if self.timer_every < 0 or self.timer_delay_ms < 0:
            raise ValueError("timer_every and timer_delay_ms must be >= 0")
        if not self.run_id or len(self.run_id) > 40 or not all(
            c.isalnum() or c in "._-" for c in self.run_id
        ):
            raise ValueError("run_id must be 1-40 characters of [A-Za-z0-9._-]")

    def process_ids(self) -> list[str]:
        return [f"svit://{self.tenant}/{self.run_id}-p{i}" for i in range(self.processes)]

    @property
    def sink(self) -> str | None:
        """The destination of the workload's intents and timers (same tenant), or None."""
        return (f"svit://{self.tenant}/{self.run_id}-sink"
                if self.send_every > 0 or self.timer_every > 0 else None)


@dataclass
class WorkloadStats:
    """Live counters (read by the progress display)."""

    invoked: int = 0
    ok: int = 0
    fail: int = 0
    info: int = 0
    attempts: int = 0
    transient_errors: int = 0
    in_flight: int = 0
    last_ok_t: float = 0.0
    per_process_ok: dict[str, int] = field(default_factory=dict)


ClientFactory = Callable[[str], AsyncSvitClient]


class Workload:
    """K async clients against one gateway, recording every operation in ``history``.

    Args:
        gateway_url: ``http://host:port`` of the gateway.
        token: bearer token (admin, or the tenant of ``config.tenant``).
        history: the run's history writer.
        config: :class:`WorkloadConfig`.
        clock: for deadlines and backoff (default monotonic).
        client_factory: ``client_id -> AsyncSvitClient`` (tests); by default
            an SDK client with ``attempts=1`` and ``config.request_timeout_s``.
    """

    def __init__(
        self,
        gateway_url: str,
        token: str | None,
        history: HistoryWriter,
        config: WorkloadConfig,
        *,
        clock: Clock | None = None,
        client_factory: ClientFactory | None = None,
    ) -> None:
        self.url = gateway_url
        self.token = token
        self.history = history
        self.config = config
        self.clock: Clock = clock or MonotonicClock()
        self.stats = WorkloadStats()
        self.processes = config.process_ids()
        self.sink = config.sink
        self._factory = client_factory or self._default_client
        self._stopping = False
        self._stop_at = 0.0

    def _default_client(self, client_id: str) -> AsyncSvitClient:
        return AsyncSvitClient(self.url, self.token, client_id=client_id,
                               timeout_s=self.config.request_timeout_s, attempts=1)

    # -- setup ---------------------------------------------------------------------------

    async def setup(self, *, timeout_s: float = 60.0) -> None:
        """Create every process (an existing one counts as created).

        Raises:
            SvitError: a process could not be created within ``timeout_s``
                (the last error, ``unavailable`` for timeouts).
        """
        client = self._factory(f"{self.config.run_id}-setup")
        try:
            if self.sink is not None:
                await self._retry(functools.partial(self._create, client, self.sink, {}, {}),
                                  timeout_s)
            memory = initial_memory(self.sink, self.config.send_every,
                                    self.config.timer_every, self.config.timer_delay_ms)
            script = SCRIPT
            if self.config.port_url:
                memory = {**memory, "port_url": self.config.port_url, "port": ""}
                script = PORT_SCRIPT
            for pid in self.processes:
                await self._retry(functools.partial(self._create, client, pid, memory,
                                                    {SCRIPT_NAME: script}), timeout_s)
        finally:
            await client.aclose()

    async def _create(self, client: AsyncSvitClient, pid: str, memory: dict[str, Any],
                      scripts: dict[str, str]) -> None:
        try:
            await client.create_process(pid, memory=memory, scripts=scripts)
        except SvitError as exc:
            if exc.code == ErrorCode.CONFLICT or "already exists" in exc.message:
                return
            raise

    async def _retry(self, fn: Callable[[], Any], timeout_s: float) -> Any:
        deadline = self.clock.now() + timeout_s
        pause = self.config.backoff_s[0]
        while True:
            try:
                return await fn()
            except _TRANSIENT as exc:
                if self.clock.now() >= deadline:
                    raise UnavailableError(f"gave up after {timeout_s} s: {exc}") from exc
                await self.clock.sleep(pause)
                pause = min(pause * 2, self.config.backoff_s[1])

    # -- run -----------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Run every client until ``stop`` is set, then drain in-flight requests.

        Never raises for request failures (they are recorded); returns once
        every client has finished its last operation.
        """
        async def watch() -> None:
            await stop.wait()
            self._stopping = True
            self._stop_at = self.clock.now()

        watcher = asyncio.ensure_future(watch())
        try:
            await asyncio.gather(*(self._client(i, stop) for i in range(self.config.clients)))
        finally:
            watcher.cancel()

    def _deadline(self, start: float) -> float:
        deadline = start + self.config.op_deadline_s
        if self._stopping:
            deadline = min(deadline, self._stop_at + self.config.drain_s)
        return deadline

    async def _client(self, index: int, stop: asyncio.Event) -> None:
        cfg = self.config
        name = f"c{index}"
        client = self._factory(f"{cfg.run_id}-{name}")
        rng = random.Random(f"{cfg.seed}/{index}")
        expected: dict[str, int | None] = {}
        seq = 0
        try:
            while not stop.is_set():
                pid = rng.choice(self.processes)
                if expected.get(pid) is None:
                    expected[pid] = await self._observe(client, pid, stop)
                    if expected[pid] is None:
                        continue
                seq += 1
                rid = f"{cfg.run_id}.{name}.{seq}"
                expected[pid] = await self._operate(client, name, pid, rid, expected[pid] or 0)
                if cfg.think_s:
                    await self.clock.sleep(cfg.think_s)
        finally:
            await client.aclose()

    async def _observe(self, client: AsyncSvitClient, pid: str,
                       stop: asyncio.Event) -> int | None:
        pause = self.config.backoff_s[0]
        while not stop.is_set():
            try:
                _, version = await client.state(pid, "/memory/count")
                return version
            except (*_TRANSIENT, SvitError):
                self.stats.transient_errors += 1
                await self.clock.sleep(pause)
                pause = min(pause * 2, self.config.backoff_s[1])
        return None

    async def _operate(self, client: AsyncSvitClient, name: str, pid: str, rid: str,
                       expected: int) -> int | None:
        """One operation; returns the next expected version (None: observe again)."""
        hist = self.history
        stats = self.stats
        hist.record("invoke", client=name, process=pid, rid=rid, expected=expected)
        stats.invoked += 1
        stats.in_flight += 1
        start = self.clock.now()
        pause = self.config.backoff_s[0]
        ambiguous = False
        attempts = 0
        last_error = ""
        try:
            while True:
                attempts += 1
                stats.attempts += 1
                sent = round(hist.elapsed(), 6)  # when the attempt that may be answered was sent
                try:
                    resp = await client.activate(pid, SCRIPT_NAME, {"rid": rid},
                                                 expected_version=expected, request_id=rid)
                except _TRANSIENT as exc:
                    ambiguous = True
                    stats.transient_errors += 1
                    last_error = f"{type(exc).__name__}: {str(exc)[:200]}"
                    if self.clock.now() + pause >= self._deadline(start):
                        hist.record("info", client=name, process=pid, rid=rid,
                                    expected=expected, attempts=attempts, error=last_error)
                        stats.info += 1
                        return None
                    await self.clock.sleep(pause * (0.5 + random.random()))
                    pause = min(pause * 2, self.config.backoff_s[1])
                    continue
                except SvitError as exc:
                    kind = "info" if ambiguous else "fail"
                    hist.record(kind, client=name, process=pid, rid=rid, expected=expected,
                                attempts=attempts, outcome="error", code=str(exc.code),
                                error=exc.message[:200])
                    stats.info += kind == "info"
                    stats.fail += kind == "fail"
                    return None
                outcome = resp.outcome
                if outcome.status == "committed":
                    version = outcome.activation.version
                    extra: dict[str, Any] = {}
                    # the owner's token (X-Svit-Token); a replayed receipt may come from a
                    # newer owner than the one that committed, so only first answers count
                    token = getattr(client, "last_owner_token", None)
                    if isinstance(token, int) and not resp.replayed:
                        extra["token"] = token
                    hist.record("ok", client=name, process=pid, rid=rid, expected=expected,
                                version=version, previous=outcome.previous_version,
                                replayed=resp.replayed, attempts=attempts, sent=sent, **extra,
                                **timer_fields(outcome.activation.messages))
                    stats.ok += 1
                    stats.last_ok_t = hist.elapsed()
                    stats.per_process_ok[pid] = stats.per_process_ok.get(pid, 0) + 1
                    return int(version)
                if outcome.status == "conflict":
                    actual = int(outcome.actual_version)
                    if ambiguous:
                        hist.record("info", client=name, process=pid, rid=rid,
                                    expected=expected, attempts=attempts,
                                    error=f"conflict (actual {actual}) after an unknown "
                                          f"outcome: {last_error}")
                        stats.info += 1
                        return None
                    hist.record("fail", client=name, process=pid, rid=rid, expected=expected,
                                attempts=attempts, outcome="conflict", actual=actual,
                                replayed=resp.replayed, sent=sent, **_answered_by(client))
                    stats.fail += 1
                    return actual
                hist.record("fail", client=name, process=pid, rid=rid, expected=expected,
                            attempts=attempts, outcome="rejected",
                            code=outcome.failure.code, replayed=resp.replayed, sent=sent,
                            **_answered_by(client))
                stats.fail += 1
                return None
        except asyncio.CancelledError:
            hist.record("info", client=name, process=pid, rid=rid, expected=expected,
                        attempts=attempts, error="cancelled")
            stats.info += 1
            raise
        finally:
            stats.in_flight -= 1

    # -- after the run -------------------------------------------------------------------

    async def commit_after_heal(self, above_snapshot: Callable[[str, int], bool], *,
                                timeout_s: float = 30.0) -> int | None:
        """Commit operations on the first process, once healed, until one is
        acknowledged above the process's latest snapshot.

        The lost-commit control deletes such an entry; a run whose last
        operations all ended unknown (a fault at the very end), or whose last
        commit was snapshotted, has none. The operations are recorded in the
        history like any other, by client ``SETTLE_CLIENT``, so the checker holds
        them to the same invariants.

        Args:
            above_snapshot: ``(process, version) -> bool``: the stored log holds
                ``version`` above the process's latest snapshot (snapshots are
                stored before a commit is answered, so one read after the
                acknowledgement decides).
            timeout_s: seconds to keep trying.

        Returns:
            the acknowledged version above the snapshot, or None when there was
            none within ``timeout_s`` (the control then ends inconclusive).
        """
        self._stopping = False  # the run's drain deadline no longer applies
        client = self._factory(f"{self.config.run_id}-settle")
        pid = self.processes[0]
        deadline = self.clock.now() + timeout_s
        seq = 0
        expected: int | None = None
        try:
            while self.clock.now() < deadline:
                if expected is None:
                    try:
                        _, expected = await client.state(pid, "/memory/count")
                    except (*_TRANSIENT, SvitError):
                        await self.clock.sleep(self.config.backoff_s[0])
                        continue
                seq += 1
                acked = self.stats.ok
                expected = await self._operate(client, SETTLE_CLIENT, pid,
                                               f"{self.config.run_id}.settle.{seq}", expected)
                if (self.stats.ok > acked and expected is not None
                        and await asyncio.to_thread(above_snapshot, pid, expected)):
                    return expected
        finally:
            await client.aclose()
        return None

    async def read_final(self, *, timeout_s: float = 60.0) -> dict[str, tuple[int, Any]]:
        """Read ``/memory`` of every process after healing; records ``final`` events.

        Returns:
            ``{process: (version, memory)}`` for each process that answered
            within ``timeout_s``; the others are recorded as ``note`` events.
        """
        client = self._factory(f"{self.config.run_id}-final")
        out: dict[str, tuple[int, Any]] = {}
        try:
            for pid in self.processes:
                try:
                    value, version = await self._retry(
                        functools.partial(client.state, pid, "/memory"), timeout_s)
                except SvitError as exc:
                    self.history.record("note", process=pid,
                                        message=f"final state unreadable: {exc}")
                    continue
                memory = to_plain_json(value)
                out[pid] = (version, memory)
                count = memory.get("count") if isinstance(memory, dict) else None
                last = memory.get("last") if isinstance(memory, dict) else None
                self.history.record("final", process=pid, version=version, count=count,
                                    last=last)
        finally:
            await client.aclose()
        return out


def process_ids(run_id: str, processes: int, tenant: str = "chaos") -> Sequence[str]:
    """The process ids a workload with these parameters uses."""
    return WorkloadConfig(run_id=run_id, processes=processes, tenant=tenant).process_ids()
