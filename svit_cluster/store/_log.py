"""The fenced Redis commit log of one process, seen by one owner (one token).

:class:`RedisBackend` implements the controller's
:class:`~svit_cluster.control._backend.CommitBackend` (receipts + atomic
commit) plus what an owner needs around it: claim, create, restore and
snapshots. It is thread-safe (redis-py pools connections); commits to one
process must still be serialized by its owner, as the process itself is.

Guarantees, per call:

* **commit** -- on success the record, its receipt, its outbox intents, the
  new head and the ``committed`` signal (plus, for an inbox acknowledge, its
  ``completion`` signal) are stored together, in one Lua script, under a token
  no lower than the fence. On ``FencedError``/``ConflictError``/``NotFound`` nothing was
  stored. On ``UnavailableError`` with ``fields["outcome"] == "unknown"`` the
  commit may or may not have happened: retrying the *same request id* is safe
  (the receipt replays); re-sealing and committing anew is not (it conflicts
  or, if the first attempt failed, commits once).
* **claim** -- raises the fence to this token (atomic max) and loads the
  process's receipts (at most ``max_receipts``) into memory, in the same
  script; safe to retry.
* **get_receipt** -- after a claim, answered from memory, without a round trip:
  while this token is the fence this owner is the only writer of the receipts
  (every receipt write is the fenced commit or put_receipt script of a token
  >= the fence), so the copy loaded at the claim plus every receipt this owner
  stored since is exactly what Redis holds, with the same FIFO eviction. The
  copy is discarded when a write's outcome is unknown (``UnavailableError``) or
  the durable head moved unexpectedly (reloaded, fenced, before the next
  answer), and for good once a script reports the fence above this token
  (every later call raises ``FencedError``; a stale owner never answers from
  it).
* **restore** / **catch_up** -- read-only; safe to retry.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis

from svit_cluster import tracing
from svit_cluster.control import (
    DEFAULT_RECEIPTS,
    Receipt,
    RequestStatus,
    validate_receipt_limit,
)

# The defaults and ranges StoreConfig shares with the settings, ClusterConfig,
# ``svit-cluster up`` and the Helm chart (each stated once, with its unit, there).
from svit_cluster.defaults import (
    DEFAULT_SIGNAL_RETENTION,
    DEFAULT_SNAPSHOT_EVERY,
    DEFAULT_WAIT_REPLICAS,
    DEFAULT_WAIT_TIMEOUT_MS,
    RETENTION_MAX,
    RETENTION_MIN,
    WAIT_REPLICAS_MAX,
    WAIT_TIMEOUT_MS_MAX,
)
from svit_cluster.errors import (
    ConfigurationError,
    ConflictError,
    CorruptData,
    FencedError,
    InvalidInput,
    NotFound,
    SvitError,
    UnavailableError,
)
from svit_cluster.process import (
    Limits,
    Process,
    Transaction,
    Transition,
    canonical_json,
    get_node,
)
from svit_cluster.store._keys import DEFAULT_PREFIX, ProcessKeys, receipt_field
from svit_cluster.store._records import (
    Head,
    LogEntry,
    corrupt,
    decode_receipt,
    encode_receipt,
    parse_entry,
    parse_head,
    parse_snapshot,
)
from svit_cluster.store._redis import (
    RedisClient,
    redis_boundary,
    refusal_reason,
    require_noeviction,
    run_replicated,
)
from svit_cluster.store._scripts import Scripts
from svit_cluster.store._snapshots import (
    RestoreStats,
    limits_of,
    process_after,
    verify_and_restore,
)

__all__ = [
    "DEFAULT_SNAPSHOT_EVERY",
    "STALE_WRITES_RETAINED",
    "WAIT_REPLICAS_ENV",
    "WAIT_TIMEOUT_ENV",
    "RedisBackend",
    "StoreConfig",
    "stale_writes_key",
]

#: Environment variable: default of :attr:`StoreConfig.wait_replicas`.
WAIT_REPLICAS_ENV = "SVIT_REDIS_WAIT_REPLICAS"
#: Environment variable: default of :attr:`StoreConfig.wait_timeout_ms`.
WAIT_TIMEOUT_ENV = "SVIT_REDIS_WAIT_TIMEOUT_MS"


def _wait_set() -> bool:
    """Whether :data:`WAIT_REPLICAS_ENV` or :data:`WAIT_TIMEOUT_ENV` is set (to a
    non-empty value, in any case: what pydantic-settings reads)."""
    names = (WAIT_REPLICAS_ENV, WAIT_TIMEOUT_ENV)
    return any(value and key.upper() in names for key, value in os.environ.items())


def _store_settings() -> Any:
    """``StoreSettings`` of the current ``SVIT_*`` environment (names in any case,
    as pydantic-settings matches them), read once per distinct environment
    (reading it costs about 20 ms, and every process actor's ``start`` makes a
    :class:`StoreConfig` on the cold activation path).

    Raises:
        ConfigurationError: a variable does not parse or is out of range.
    """
    env = tuple(sorted((k, v) for k, v in os.environ.items() if k.upper().startswith("SVIT_")))
    return _store_settings_of(env)


@functools.lru_cache(maxsize=8)
def _store_settings_of(env: tuple[tuple[str, str], ...]) -> Any:
    from svit_cluster.settings import StoreSettings, load_settings

    return load_settings(StoreSettings)


# Neither WAIT variable set: the StoreSettings fields hold their defaults, taken
# here from svit_cluster.defaults; pydantic-settings (about 30 modules, with
# dotenv) is then never loaded for them, so a process actor's worker does not
# carry it. Set, StoreSettings reads and validates them (with its other fields).
def _wait_replicas_default() -> int:
    if not _wait_set():
        return DEFAULT_WAIT_REPLICAS
    value: int = _store_settings().redis_wait_replicas
    return value


def _wait_timeout_default() -> int:
    if not _wait_set():
        return DEFAULT_WAIT_TIMEOUT_MS
    value: int = _store_settings().redis_wait_timeout_ms
    return value

log = logging.getLogger(__name__)

#: Approximate number of refused writes kept in :func:`stale_writes_key` (oldest trimmed).
STALE_WRITES_RETAINED = 10_000


def stale_writes_key(prefix: str) -> str:
    """The Redis stream of refused writes of every process (``<prefix>:stale_writes``).

    One entry per write a stale owner attempted and was refused: ``process_id``,
    ``op`` (``commit``, ``claim``, ``put_receipt``, …, or ``guard``), ``by``
    (``fence``: the Lua script saw a higher fence; ``self``: the owner's own
    lease guard), ``token``, ``fence``, ``at`` (Unix seconds). Observability
    only (``svit-cluster demo`` counts them); nothing reads it for safety.
    """
    return f"{prefix}:stale_writes"

#: A callable run before every commit; it raises to refuse (self-fencing).
Guard = Callable[[], None]


@dataclass(frozen=True, slots=True)
class StoreConfig:
    """Options of the commit log; validated on construction.

    Attributes:
        prefix: key namespace (default ``"svit"``).
        max_receipts: receipts kept per process, FIFO-evicted, ``1..4096``
            (``control.DEFAULT_RECEIPTS``, 256).
        snapshot_every: store a snapshot after this many commits
            (:data:`DEFAULT_SNAPSHOT_EVERY`).
        snapshot_max_tail_bytes: ... or earlier once the records since the last
            snapshot reach this many bytes (default 4 MiB).
        trim_margin: stream entries kept *below* a new snapshot when trimming
            (default 16; 0 keeps none).
        hold_max_entries: the most entries a tail reader's hold
            (:attr:`ProcessKeys.hold`) keeps below a new snapshot, ``>=
            trim_margin`` (default 100 000): a reader that stopped copying
            cannot make the stream grow without bound.
        signal_retention: observer signals kept per process (``XADD MAXLEN ~``,
            so Redis may keep a few more), ``defaults.RETENTION_MIN..RETENTION_MAX``
            (``defaults.DEFAULT_SIGNAL_RETENTION``).
        wait_replicas: after every write script (commit, claim, create,
            receipt, snapshot) send ``WAIT wait_replicas wait_timeout_ms`` on the
            same connection and succeed only when that many replicas acknowledged,
            so the write survives the promotion of a replica
            (``0..defaults.WAIT_REPLICAS_MAX``; default from
            ``SVIT_REDIS_WAIT_REPLICAS``, else ``defaults.DEFAULT_WAIT_REPLICAS``,
            0 = off, right for a single node without replicas). Fewer replicas
            answer ``unavailable`` with ``outcome`` ``unknown`` and ``reason``
            ``replication``.
        wait_timeout_ms: the ``WAIT`` timeout in ms,
            ``1..defaults.WAIT_TIMEOUT_MS_MAX`` (default from
            ``SVIT_REDIS_WAIT_TIMEOUT_MS``, else ``defaults.DEFAULT_WAIT_TIMEOUT_MS``).

    Raises:
        ConfigurationError: a value is out of range.
    """

    prefix: str = DEFAULT_PREFIX
    max_receipts: int = DEFAULT_RECEIPTS
    snapshot_every: int = DEFAULT_SNAPSHOT_EVERY
    snapshot_max_tail_bytes: int = 4 * 1024 * 1024
    trim_margin: int = 16
    hold_max_entries: int = 100_000
    signal_retention: int = DEFAULT_SIGNAL_RETENTION
    wait_replicas: int = field(default_factory=_wait_replicas_default)
    wait_timeout_ms: int = field(default_factory=_wait_timeout_default)

    def __post_init__(self) -> None:
        validate_receipt_limit(self.max_receipts)
        for name in ("snapshot_every", "snapshot_max_tail_bytes"):
            value = getattr(self, name)
            if type(value) is not int or value < 1:
                raise ConfigurationError(f"{name} must be a positive integer, got {value!r}")
        if type(self.trim_margin) is not int or self.trim_margin < 0:
            raise ConfigurationError(f"trim_margin must be >= 0, got {self.trim_margin!r}")
        if type(self.hold_max_entries) is not int or self.hold_max_entries < self.trim_margin:
            raise ConfigurationError(
                f"hold_max_entries must be an int >= trim_margin ({self.trim_margin}), "
                f"got {self.hold_max_entries!r}")
        if (type(self.signal_retention) is not int
                or not RETENTION_MIN <= self.signal_retention <= RETENTION_MAX):
            raise ConfigurationError(
                f"signal_retention must be in {RETENTION_MIN}..{RETENTION_MAX}, "
                f"got {self.signal_retention!r}")
        if (type(self.wait_replicas) is not int
                or not 0 <= self.wait_replicas <= WAIT_REPLICAS_MAX):
            raise ConfigurationError(
                f"wait_replicas must be in 0..{WAIT_REPLICAS_MAX}, got {self.wait_replicas!r}")
        if (type(self.wait_timeout_ms) is not int
                or not 1 <= self.wait_timeout_ms <= WAIT_TIMEOUT_MS_MAX):
            raise ConfigurationError(
                f"wait_timeout_ms must be in 1..{WAIT_TIMEOUT_MS_MAX}, "
                f"got {self.wait_timeout_ms!r}")


def _status(reply: Any) -> tuple[str, list[bytes]]:
    return reply[0].decode(), list(reply[1:])


class RedisBackend:
    """The commit log of one process for the owner holding fencing ``token``.

    Args:
        client: a redis-py client (see :func:`svit_cluster.store.connect`).
        process_id: the ``svit://`` id (no braces).
        token: this owner's fencing token (``svit_cluster.ownership``: fence epoch and
            etcd create revision), >= 1.
        config: :class:`StoreConfig` (defaults as documented there).
        guard: optional check run before every commit, receipt and snapshot
            write; it raises to refuse (e.g. the host lease is not HELD).

    Raises:
        InvalidInput: (``invalid_process_id``) bad id; bad token.
    """

    def __init__(
        self,
        client: RedisClient,
        process_id: str,
        token: int,
        config: StoreConfig | None = None,
        *,
        guard: Guard | None = None,
    ) -> None:
        if type(token) is not int or token < 1:
            raise InvalidInput(f"fencing token must be a positive integer, got {token!r}")
        self.config = config or StoreConfig()
        self.keys = ProcessKeys(process_id, self.config.prefix)
        self.process_id = process_id
        self.token = token
        self._client = client
        self._scripts = Scripts.register(client)
        k = self.keys
        self._commit_keys = (k.stream, k.head, k.fence, k.receipts, k.receipts_order, k.outbox,
                             k.signals, k.queued)
        self._guard = guard
        self._lock = threading.Lock()
        self._limits: Limits | None = None
        self._since_snapshot = 0
        self._tail_bytes = 0
        # The receipts in memory (see the module docstring): field -> stored
        # value, and the eviction order (mirrors ``receipts:order``). None
        # until a claim loaded them, and again after an unknown outcome.
        self._receipts: dict[bytes, bytes] | None = None
        self._receipt_order: deque[bytes] = deque()
        self._claimed = False
        #: The fence a script reported above this token (then sticky: fences only rise).
        self._fenced_by: int | None = None
        #: Statistics of the last :meth:`restore` (None before one).
        self.last_restore: RestoreStats | None = None

    # -- helpers ----------------------------------------------------------------

    def _fenced(self, fence: bytes, op: str) -> FencedError:
        with self._lock:
            self._fenced_by = int(fence)
            self._receipts = None
            self._receipt_order.clear()
        self._record_refusal(op, "fence", fence=int(fence))
        return FencedError(
            f"{op} refused for {self.process_id}: token {self.token} is below the fence "
            f"{int(fence)}",
            token=self.token,
            fence=int(fence),
            process_id=self.process_id,
        )

    def _run(self, op: str, script: Any, keys: Sequence[str], args: Sequence[Any], *,
             outcome: str = "unknown") -> Any:
        """Run a write script; with ``wait_replicas`` also ``WAIT`` for the replicas.

        Call inside :func:`redis_boundary`. Raises UnavailableError
        (``outcome`` as given, ``unknown`` for writes; ``reason``
        ``replication``) when the script answered ``ok`` but fewer replicas
        than configured acknowledged; and (``reason`` ``eviction_policy``,
        ``outcome`` ``none``, before sending the script) while a node this
        client writes to may evict keys (:func:`require_noeviction`).
        """
        require_noeviction(self._client, keys[0], op=op, process_id=self.process_id)
        cfg = self.config
        reply, acked = run_replicated(self._client, script, keys, args,
                                      replicas=cfg.wait_replicas,
                                      timeout_ms=cfg.wait_timeout_ms)
        if acked is not None and acked < cfg.wait_replicas and _status(reply)[0] == "ok":
            raise UnavailableError(
                f"redis {op} of {self.process_id} ran on the master but {acked} of "
                f"{cfg.wait_replicas} replicas acknowledged within {cfg.wait_timeout_ms} ms; "
                "a promoted replica may lack it",
                op=op, process_id=self.process_id, outcome=outcome, reason="replication",
                replicas=cfg.wait_replicas, acknowledged=acked)
        return reply

    def _check_guard(self) -> None:
        if self._guard is not None:
            try:
                self._guard()
            except SvitError as exc:
                self._record_refusal("guard", "self", reason=exc.message)
                raise

    def _record_refusal(self, op: str, by: str, *, fence: int | None = None,
                        reason: str = "") -> None:
        """Best effort: append one refused write to :func:`stale_writes_key` (bounded stream).

        ``by`` is ``"fence"`` (the Lua script found a higher fence than this
        owner's token) or ``"self"`` (the owner's own guard refused: lease
        suspended/lost, fenced out). Observability only: a Redis error here is
        logged and ignored, the refusal itself is raised regardless.
        """
        fields: dict[Any, Any] = {"process_id": self.process_id, "op": op, "by": by,
                                  "token": self.token, "at": time.time()}
        if fence is not None:
            fields["fence"] = fence
        if reason:
            fields["reason"] = reason[:200]
        try:
            self._client.xadd(stale_writes_key(self.config.prefix), fields,
                              maxlen=STALE_WRITES_RETAINED, approximate=True)
        except redis.RedisError as exc:
            log.debug("could not record a refused write of %s: %s", self.process_id, exc)

    # -- ownership -----------------------------------------------------------------

    def claim(self, *, load_receipts: bool = True) -> int:
        """Raise the stored fence to this token (atomic max). Safe to retry.

        With ``load_receipts`` (the owner's claim) the same script returns the
        process's receipts (at most ``max_receipts``, FIFO order), which
        :meth:`get_receipt` then answers from memory; with ``wait_replicas``
        the fence is written even when unchanged, so the ``WAIT`` confirms that
        the replicas hold every loaded receipt. ``load_receipts=False`` is the
        bare claim (``RedisFences``: the host agent's claim for ownership).

        Returns:
            The fence after the claim (this token).

        Raises:
            FencedError: a higher token has already claimed or committed
                (fields ``token`` and ``fence``); nothing changed.
            UnavailableError: Redis failed; or (``reason`` ``replication``)
                fewer than ``wait_replicas`` replicas acknowledged the raise
                within ``wait_timeout_ms`` (retrying is safe).
        """
        if load_receipts:
            rest = self._claim_load(claim=True)
            with self._lock:
                self._claimed = True
            return int(rest[0])
        with redis_boundary("claim", self.process_id):
            reply = self._run("claim", self._scripts.claim, [self.keys.fence], [self.token])
        status, rest = _status(reply)
        if status == "fenced":
            raise self._fenced(rest[0], "claim")
        return int(rest[0])

    def _claim_load(self, *, claim: bool) -> list[Any]:
        """Run ``CLAIM_LOAD`` (``claim``: raise the fence; else only check it) and
        install the returned receipts in memory. Returns the reply after the status.

        Raises:
            FencedError: the fence is above this token (memory discarded for good).
            UnavailableError: Redis failed (or too few replicas acknowledged); the
                receipts stay unloaded.

        The hash and the order list are mirrored as they are (the scripts keep
        them consistent; should they not be, memory still evicts exactly what
        ``store_receipt`` would).
        """
        keys = self.keys
        # A reload only rewrites the fence with its own value: no outcome to doubt.
        op, outcome = ("claim", "unknown") if claim else ("get_receipt", "none")
        with redis_boundary(op, self.process_id):
            reply = self._run(op, self._scripts.claim_load,
                              [keys.fence, keys.receipts, keys.receipts_order],
                              [self.token, "1" if claim else "0",
                               "1" if self.config.wait_replicas else "0"], outcome=outcome)
        status, rest = _status(reply)
        if status == "fenced":
            raise self._fenced(rest[0], op)
        order_raw: list[bytes] = list(reply[2])
        flat: list[bytes] = list(reply[3])
        stored = {flat[i]: flat[i + 1] for i in range(0, len(flat), 2)}
        order = deque(order_raw)
        with self._lock:
            if self._fenced_by is None:
                self._receipts = stored
                self._receipt_order = order
        return rest

    def _remember_receipt(self, field: bytes, value: bytes) -> None:
        """Apply one stored receipt to memory exactly as ``store_receipt`` did in Redis."""
        with self._lock:
            receipts = self._receipts
            if receipts is None:
                return
            if field not in receipts:
                self._receipt_order.append(field)
                while len(self._receipt_order) > self.config.max_receipts:
                    receipts.pop(self._receipt_order.popleft(), None)
            receipts[field] = value

    def _forget_receipts(self) -> None:
        """Discard the receipts in memory (a write's outcome is unknown); the next
        :meth:`get_receipt` reloads them (fenced) before it answers."""
        with self._lock:
            self._receipts = None
            self._receipt_order.clear()

    def fence(self) -> int:
        """The stored fence (0 when nobody has claimed). Raises UnavailableError."""
        with redis_boundary("fence", self.process_id):
            raw = self._client.get(self.keys.fence)
        return 0 if raw is None else int(raw)

    # -- receipts (CommitBackend) ---------------------------------------------------

    def get_receipt(self, tenant: str, client_id: str, request_id: str) -> Receipt | None:
        """The stored receipt for the key, or None (never stored or evicted).

        After :meth:`claim` the answer comes from memory (no round trip; see
        the module docstring); if the memory was discarded after an unknown
        outcome, it is first reloaded with the fence checked. Without a claim
        (read-only tools) it is one ``HGET``. With ``wait_replicas`` every
        receipt answered was confirmed by ``WAIT``: those loaded by the claim
        or reload (which writes the fence), and those this owner stored (a
        commit that too few replicas acknowledged discards the memory); an
        ``HGET`` is then replaced by a replicated read (see the code).

        Raises:
            FencedError: a script of this backend already found the fence above
                this token, or the reload finds it: a stale owner answers nothing.
            UnavailableError: Redis failed; or (``reason`` ``replication``)
                fewer replicas than ``wait_replicas`` acknowledged in time.
            CorruptData: the stored value is malformed.
        """
        field = receipt_field(tenant, client_id, request_id)
        if self._fenced_by is not None:
            raise FencedError(
                f"get_receipt refused for {self.process_id}: token {self.token} is below the "
                f"fence {self._fenced_by}", token=self.token, fence=self._fenced_by,
                process_id=self.process_id)
        if self._claimed:
            with self._lock:
                loaded = self._receipts is not None
            if not loaded:
                self._claim_load(claim=False)
            with self._lock:
                held = None if self._receipts is None else self._receipts.get(field)
            if held is None:
                return None
            return decode_receipt(self.process_id, tenant, client_id, request_id, held)
        with redis_boundary("get_receipt", self.process_id):
            if self.config.wait_replicas:
                # A receipt on the master whose commit no replica has yet (the
                # commit answered "unavailable", reason "replication") must not
                # be replayed as an acknowledgement: read it with a replicated
                # no-op write and WAIT, so a replay is acknowledged only once
                # the commit that stored it is on the replicas too.
                reply = self._run("get_receipt", self._scripts.get_receipt_synced,
                                  [self.keys.fence, self.keys.receipts], [field],
                                  outcome="none")
                raw = reply[1]
            else:
                raw = self._client.hget(self.keys.receipts, field)
        if raw is None:
            return None
        return decode_receipt(self.process_id, tenant, client_id, request_id, raw)

    def put_receipt(self, receipt: Receipt, *, version: int) -> None:
        """Store a conflict or rejected receipt observed at ``version`` (fenced).

        Raises:
            FencedError: a newer owner holds the process; nothing stored.
            UnavailableError: Redis failed; the receipt may or may not be stored
                (storing it again is harmless).
        """
        self._check_guard()
        field = receipt_field(receipt.tenant, receipt.client_id, receipt.request_id)
        value = encode_receipt(receipt)
        try:
            with redis_boundary("put_receipt", self.process_id, outcome="unknown"):
                reply = self._run(
                    "put_receipt", self._scripts.put_receipt,
                    [self.keys.fence, self.keys.receipts, self.keys.receipts_order],
                    [self.token, field, value, self.config.max_receipts],
                )
        except UnavailableError:
            self._forget_receipts()
            raise
        status, rest = _status(reply)
        if status == "fenced":
            raise self._fenced(rest[0], "put_receipt")
        self._remember_receipt(field, value)

    # -- commit (CommitBackend) -------------------------------------------------------

    #: This backend appends observer signals with every commit and accepts a
    #: ``completion`` (``ProcessController.complete_turn``, the reasoning loop's end of turn).
    emits_signals = True

    def _commit_args(
        self,
        transition: Transition,
        receipt: Receipt | None,
        intents: Sequence[dict[str, Any]],
        completion: Mapping[str, Any] | None,
    ) -> list[Any]:
        """The commit script's ARGV for ``transition`` (see ``_scripts.COMMIT``).

        One place builds it, for :meth:`commit` and for ``benchmarks/bench_store``
        (which times the bare script with exactly these arguments). ``args[3]``
        is the encoded record; ``args[14]`` the current ``traceparent`` (``b""``
        when untraced, see :mod:`svit_cluster.tracing`); ``args[15]`` ``b"1"``
        when the new state's ``/inbox`` is non-empty (the ``queued`` key).
        """
        rec = transition.record
        trace = tracing.current()  # the commit span's context, when traced
        if receipt is None:
            field, value = b"", b""
        else:
            field = receipt_field(receipt.tenant, receipt.client_id, receipt.request_id)
            value = encode_receipt(receipt)
        change = transition.change
        args: list[Any] = [
            self.token,
            rec.process_version_before,
            rec.previous_hash,
            rec.encode(),
            rec.event_hash,
            rec.resulting_root_hash,
            rec.position,
            field,
            value,
            self.config.max_receipts,
            rec.process_version_after,
            self.config.signal_retention,
            canonical_json({"version": change.version, "paths": list(change.paths),
                            "hashes": dict(change.hashes)}),
            b"" if completion is None else canonical_json(dict(completion)),
            b"" if trace is None else trace.traceparent.encode(),
            b"1" if get_node(transition.root, ("inbox", "0")) is not None else b"0",
        ]
        args.extend(canonical_json(intent) for intent in intents)
        return args

    def commit(
        self,
        transition: Transition,
        receipt: Receipt | None = None,
        intents: Sequence[dict[str, Any]] = (),
        *,
        completion: Mapping[str, Any] | None = None,
    ) -> None:
        """Durably commit ``transition`` with its receipt and outbox intents, atomically.

        The same script appends the ``committed`` signal (the transition's
        :class:`~svit_cluster.process.Change`: version, sorted changed paths,
        content hashes; no values) to the process's signal stream, and then,
        if ``completion`` is given (an inbox acknowledge that ends a turn), the
        ``completion`` signal, so a completion exists if and only if its
        acknowledge committed.

        Host operations pass no receipt. After every ``snapshot_every`` commits
        (or ``snapshot_max_tail_bytes`` of records) a snapshot of the new state
        is stored and the stream trimmed; a failed snapshot is logged and
        retried after the next commit, never failing the commit.

        Raises:
            FencedError: a newer owner holds the process (fields ``token``,
                ``fence``); nothing stored.
            ConflictError: the durable head is not the transition's base
                (fields ``expected_version``, ``actual_version``); nothing stored.
            NotFound: the process was never created (see :meth:`create`).
            CorruptData: the stream already holds an entry at the new version
                (or its key has the wrong type).
            UnavailableError: Redis failed; ``fields["outcome"]`` is
                ``"unknown"`` (see the module docstring), except when Redis
                refused the script's first write (``reason`` ``oom``,
                ``readonly``, ``misconf``... see ``store._redis.REFUSALS``):
                then ``"none"``, nothing was stored, and the same request can be
                retried once Redis recovers; likewise ``"none"`` with ``reason``
                ``eviction_policy`` (fields ``policy``, ``node``): the node's
                ``maxmemory-policy`` is not ``noeviction`` (read again at most
                ``eviction_check_s`` after its last verdict, see
                :func:`require_noeviction`) and nothing was sent. With
                ``wait_replicas`` set, a commit that fewer replicas
                acknowledged in time is *not* acknowledged: ``unavailable``,
                ``outcome`` ``unknown``, ``reason`` ``replication`` (a
                promoted replica may lack it).
        """
        self._check_guard()
        rec = transition.record
        args = self._commit_args(transition, receipt, intents, completion)
        try:
            with redis_boundary("commit", self.process_id, outcome="unknown"):
                reply = self._run("commit", self._scripts.commit, self._commit_keys, args)
        except UnavailableError:
            self._forget_receipts()  # the receipt may or may not be stored
            raise
        status, rest = _status(reply)
        if status == "ok":
            if args[7]:
                self._remember_receipt(args[7], args[8])
            self._after_commit(transition, len(args[3]))
            return
        if status == "fenced":
            raise self._fenced(rest[0], "commit")
        if status == "conflict":
            # The head moved without this owner knowing (its own write whose
            # reply was lost): its receipt may be stored too, so reload them.
            self._forget_receipts()
            raise ConflictError(
                f"commit refused for {self.process_id}: head is at version {int(rest[0])}, "
                f"not {rec.process_version_before}",
                expected_version=rec.process_version_before,
                actual_version=int(rest[0]),
                process_id=self.process_id,
            )
        if status == "missing":
            raise NotFound(f"process {self.process_id} was never created in the store",
                           process_id=self.process_id)
        detail = rest[0].decode(errors="replace") if rest else status
        reason = refusal_reason(detail)
        if reason is not None:
            # The XADD is the script's first write and it was refused (OOM,
            # READONLY, MISCONF...): the script returned before writing anything.
            raise UnavailableError(
                f"commit of version {rec.process_version_after} of {self.process_id} "
                f"refused by redis: {detail[:300]}",
                op="commit", process_id=self.process_id, outcome="none", reason=reason,
            )
        raise corrupt(self.process_id, f"stream refused version {rec.process_version_after}: "
                      f"{detail}", version=rec.process_version_after)

    # -- create / snapshot -------------------------------------------------------------

    def create(self, process: Process) -> None:
        """Store ``process`` as the start of a new log (head + snapshot), fenced.

        Events a history fork copied for this id beforehand (the session
        pointer and that session's events, which expire while no create
        follows) are kept for good by the same script.

        Raises:
            ConflictError: the process already exists in the store.
            FencedError: a newer owner holds the process.
            UnavailableError: Redis failed (the create may or may not be stored).
            InvalidInput: ``process`` has another id.
        """
        if process.id != self.process_id:
            raise InvalidInput("process id does not match the store's process id")
        self._check_guard()
        keys = self.keys
        with redis_boundary("create", self.process_id, outcome="unknown"):
            session = self._client.get(keys.session)
            history = [keys.session, keys.events(
                session.decode() if isinstance(session, bytes) else str(session))
            ] if session else []
            reply = self._run(
                "create", self._scripts.create,
                [keys.fence, keys.head, keys.snapshot, keys.queued, *history],
                [self.token, process.version, process.position, process.chain_head,
                 process.root_hash, process.snapshot(),
                 b"1" if process.inbox_head_hash() is not None else b"0"],
            )
        status, rest = _status(reply)
        if status == "fenced":
            raise self._fenced(rest[0], "create")
        if status == "exists":
            raise ConflictError(f"process {self.process_id} already exists in the store",
                                process_id=self.process_id)
        with self._lock:
            self._limits = process.limits
            self._since_snapshot = 0
            self._tail_bytes = 0

    def residency(self) -> dict[str, float]:
        """The process's residency settings (``{"passivate_after_s": s}`` when
        set; ``{}`` when none). A malformed stored value is left out.

        Raises:
            UnavailableError: Redis failed.
        """
        with redis_boundary("residency", self.process_id, outcome="none"):
            raw = self._client.hgetall(self.keys.residency)
        out: dict[str, float] = {}
        for key, value in (raw or {}).items():
            name = key.decode() if isinstance(key, bytes) else str(key)
            try:
                out[name] = float(value)
            except (TypeError, ValueError):
                continue
        return out

    def set_residency(self, name: str, value: float | None) -> None:
        """Set (or with None remove) residency setting ``name``, fenced like a
        commit: only the current owner may. Not a transition: the version does
        not move. Safe to retry.

        Raises:
            FencedError: a newer owner holds the process.
            NotFound: the process is not in the store.
            UnavailableError: Redis failed (retry).
        """
        self._check_guard()
        keys = self.keys
        with redis_boundary("set_residency", self.process_id, outcome="unknown"):
            reply = self._run("set_residency", self._scripts.set_residency,
                              [keys.fence, keys.head, keys.residency],
                              [self.token, name, "" if value is None else repr(float(value))])
        status, rest = _status(reply)
        if status == "fenced":
            raise self._fenced(rest[0], "set_residency")
        if status == "missing":
            raise NotFound(f"unknown process {self.process_id}", process_id=self.process_id)

    def delete(self) -> dict[str, Any]:
        """Delete the process from the store, fenced like a commit.

        Removes the stream, head, snapshot, receipts, outbox (intents not yet
        delivered are dropped), signals, the session pointer, the residency
        settings, the ``queued`` mark, the dispatcher's timer keys (pending and firing timers, their
        outcomes and log: a deleted process's timers never fire) and the
        current session's events stream, in one script. The
        fence key stays, raised to this token: it is the tombstone that keeps
        refusing every write of an older owner, so a stale owner cannot
        resurrect the process (see
        ``DELETE`` in ``_scripts``). Not removed: the fence key itself, the
        events streams of earlier reasoning sessions (each expires
        ``OLD_SESSION_TTL_S`` after its session ended), and the dispatcher's
        per-stream bookkeeping: ``<outbox>:lease-token``, a fencing counter
        kept like the fence, and ``:dead-settled``, whose fields leave with
        their dead letters (``svit_cluster.dispatch``).

        Returns:
            ``{"version": int | None, "removed_keys": int}``: the head version
            that was deleted and how many Redis keys were removed.

        Raises:
            FencedError: a newer owner holds the process; nothing deleted.
            NotFound: the process is not in the store (never created, or
                already deleted).
            UnavailableError: Redis failed (the delete may or may not be
                applied; retrying answers ``NotFound`` if it was).
        """
        self._check_guard()
        keys = self.keys
        with redis_boundary("delete", self.process_id, outcome="unknown"):
            session = self._client.get(keys.session)
            extra = [keys.events(session.decode() if isinstance(session, bytes) else session)
                     ] if session else []
            reply = self._run(
                "delete", self._scripts.delete,
                [keys.fence, keys.head, keys.snapshot, keys.stream, keys.receipts,
                 keys.receipts_order, keys.outbox, keys.signals, keys.session, keys.hold,
                 keys.residency, keys.queued, keys.timers, keys.timer_intents,
                 keys.timer_firing, keys.timer_done, keys.timer_log, *extra],
                [self.token],
            )
        status, rest = _status(reply)
        if status == "fenced":
            raise self._fenced(rest[0], "delete")
        if status == "missing":
            raise NotFound(f"unknown process {self.process_id}", process_id=self.process_id)
        version = rest[0].decode() if isinstance(rest[0], bytes) else str(rest[0])
        return {"version": int(version) if version else None, "removed_keys": int(rest[1])}

    def snapshot(self, process: Process) -> bool:
        """Store a snapshot of ``process`` (which must be at the durable head), fenced.

        Trims the stream below ``process.version - trim_margin + 1``, or below
        a tail reader's hold + 1 if that is lower (but never below
        ``process.version - hold_max_entries + 1``).

        Returns:
            True if stored; False if a snapshot at least as new already exists.

        Raises:
            FencedError: a newer owner holds the process; nothing stored.
            ConflictError: ``process`` is not at the durable head.
            NotFound: the process was never created.
            UnavailableError: Redis failed.
        """
        self._check_guard()
        minid = process.version - self.config.trim_margin + 1
        floor = process.version - self.config.hold_max_entries + 1
        keys = self.keys
        with redis_boundary("snapshot", self.process_id, outcome="unknown"):
            reply = self._run(
                "snapshot", self._scripts.snapshot,
                [keys.fence, keys.snapshot, keys.head, keys.stream, keys.hold],
                [self.token, process.version, process.position, process.chain_head,
                 process.root_hash, process.snapshot(),
                 str(minid) if minid > 1 else "", str(max(floor, 1))],
            )
        status, rest = _status(reply)
        if status == "fenced":
            raise self._fenced(rest[0], "snapshot")
        if status == "missing":
            raise NotFound(f"process {self.process_id} was never created in the store",
                           process_id=self.process_id)
        if status == "not_head":
            raise ConflictError(
                f"snapshot of version {process.version} refused: head is at {int(rest[0])}",
                expected_version=process.version, actual_version=int(rest[0]),
                process_id=self.process_id,
            )
        with self._lock:
            self._since_snapshot = 0
            self._tail_bytes = 0
        return status == "ok"

    def _after_commit(self, transition: Transition, record_bytes: int) -> None:
        with self._lock:
            self._since_snapshot += 1
            self._tail_bytes += record_bytes
            due = (
                self._since_snapshot >= self.config.snapshot_every
                or self._tail_bytes >= self.config.snapshot_max_tail_bytes
            )
            if not due:
                return
            if self._limits is None:
                self._limits = limits_of(self.process_id, transition)
            limits = self._limits
        try:
            self.snapshot(process_after(self.process_id, transition, limits))
        except SvitError as exc:
            log.warning("snapshot after version %d of %s failed: %s",
                        transition.record.process_version_after, self.process_id, exc)

    # -- read side ----------------------------------------------------------------------

    def head(self) -> Head | None:
        """The durable head, or None if the process was never created.

        Raises:
            UnavailableError: Redis failed.  CorruptData: malformed head.
        """
        with redis_boundary("head", self.process_id):
            raw = self._client.hgetall(self.keys.head)
        return parse_head(self.process_id, raw)

    def entries(self, after_version: int = 0) -> list[LogEntry]:
        """Stream entries with version > ``after_version``, in order (tools, checkers).

        Raises:
            UnavailableError: Redis failed.  CorruptData: a malformed entry.
        """
        with redis_boundary("entries", self.process_id):
            raw = self._client.xrange(self.keys.stream, min=f"{after_version + 1}-0")
        return [parse_entry(self.process_id, eid, fields) for eid, fields in raw or ()]

    def find_request(
        self, tenant: str, client_id: str, request_id: str, *, head_version: int = 0
    ) -> RequestStatus:
        """Which retained stream entry, if any, ``(tenant, client_id, request_id)`` committed.

        Each entry names its committing request (field ``request``), so this
        answers for as long as the entry is retained: the stream keeps the
        entries after the latest snapshot plus ``trim_margin`` below it (so at
        least ``trim_margin`` and up to about ``snapshot_every + trim_margin``
        of the newest versions), which may be fewer than the receipts kept.
        Reads the stream and the head in one ``MULTI``/``EXEC`` view;
        ``head_version`` is unused (the durable head is read). Read-only; cost
        O(retained tail).

        Returns:
            :class:`~svit_cluster.control.RequestStatus`;
            ``retained_from_version`` is the oldest retained version from which
            every entry names its request (entries written before entries
            carried the field count as unknown), or head + 1 when none is.

        Raises:
            UnavailableError: Redis failed.
            CorruptData: a malformed entry or head.
            NotFound: the process was never created.
        """
        wanted = receipt_field(tenant, client_id, request_id)
        with redis_boundary("find_request", self.process_id):
            pipe = self._client.pipeline(transaction=True)
            pipe.xrange(self.keys.stream)
            pipe.hgetall(self.keys.head)
            raw, head_raw = pipe.execute()
        head = parse_head(self.process_id, head_raw)
        if head is None:
            raise NotFound(f"process {self.process_id} was never created in the store",
                           process_id=self.process_id)
        retained_from = head.version + 1
        found: int | None = None
        for eid, fields in reversed(raw or ()):
            entry = parse_entry(self.process_id, eid, fields)
            if entry.request is None:
                break  # written before entries named their request: unknown below
            retained_from = entry.version
            if entry.request == wanted and found is None:
                found = entry.version
        if found is not None:
            return RequestStatus(True, found, retained_from)
        return RequestStatus(False, None, retained_from)

    def catch_up(self, process: Process) -> Process:
        """Bring ``process`` (this owner's in-memory state) to the durable head.

        The re-synchronisation after a commit whose outcome is unknown (the
        controller's ``_resync``): reads head, fence and the stream entries
        after ``process.version`` in one ``MULTI``/``EXEC`` view. If the head
        did not move, nothing changes. If it moved, the entries up to the head
        are replayed into ``process`` in place, verified as in :meth:`restore`
        (consecutive versions, no token above the fence or below an earlier
        entry's, hash chain, root hashes, result equal to the head). If that
        tail was already trimmed below a newer snapshot, a full :meth:`restore`
        is returned instead. Read-only; safe to retry.

        Returns:
            ``process`` itself (advanced in place) or, after a trim, a freshly
            restored process at the head.

        Raises:
            CorruptData: (``corrupt_log``) the process was never created, the
                head is behind ``process`` or diverged from its chain at the
                same version, or the tail does not verify. Nothing changes.
            UnavailableError: Redis failed; nothing changes.
        """
        keys = self.keys
        with redis_boundary("catch_up", self.process_id):
            pipe = self._client.pipeline(transaction=True)
            pipe.hgetall(keys.head)
            pipe.get(keys.fence)
            pipe.xrange(keys.stream, min=f"{process.version + 1}-0")
            head_raw, fence_raw, tail_raw = pipe.execute()
        head = parse_head(self.process_id, head_raw)
        if head is None:
            raise corrupt(self.process_id, "durable head is missing on re-synchronisation")
        if head.version < process.version:
            raise corrupt(self.process_id, f"durable head {head.version} is behind the served "
                          f"version {process.version}", version=head.version)
        if head.version == process.version:
            if head.chain_head != process.chain_head or head.root_hash != process.root_hash:
                raise corrupt(self.process_id, f"durable head diverged from the served state "
                              f"at version {head.version}", version=head.version)
            return process
        entries = [parse_entry(self.process_id, eid, fields) for eid, fields in tail_raw or ()]
        entries = [e for e in entries if e.version <= head.version]
        if not entries or entries[0].version != process.version + 1:
            restored = self.restore()  # the tail was trimmed: start from the snapshot
            if restored is None:
                raise corrupt(self.process_id, "process vanished on re-synchronisation")
            return restored
        fence = 0 if fence_raw is None or not fence_raw.isdigit() else int(fence_raw)
        records: list[Transaction] = []
        last_token = 0
        for expected, entry in enumerate(entries, start=process.version + 1):
            if entry.version != expected:
                raise corrupt(self.process_id, f"missing stream entry at version {expected}",
                              version=expected)
            if entry.token < last_token or entry.token > fence:
                raise corrupt(self.process_id, f"token {entry.token} out of order or above the "
                              f"fence {fence} at version {entry.version}", version=entry.version)
            last_token = entry.token
            try:
                records.append(Transaction.decode(entry.record))
            except InvalidInput as exc:
                raise corrupt(self.process_id, f"undecodable record at version {entry.version}: "
                              f"{exc.message}", version=entry.version) from exc
        if entries[-1].version != head.version:
            raise corrupt(self.process_id, f"missing stream entry at version "
                          f"{entries[-1].version + 1}", version=entries[-1].version + 1)
        last = records[-1]
        if (last.event_hash != head.chain_head or last.resulting_root_hash != head.root_hash
                or last.position != head.position):
            raise corrupt(self.process_id, f"the entry at version {head.version} does not "
                          "match the stored head", version=head.version)
        served = process.version
        try:
            process.replay(records)  # all or nothing; verifies chain, steps and root hashes
        except CorruptData as exc:
            raise corrupt(self.process_id, f"re-synchronisation replay failed after version "
                          f"{served}: {exc.message}", version=served + 1) from exc
        with self._lock:
            self._since_snapshot += len(records)
            self._tail_bytes += sum(len(e.record) for e in entries)
        return process

    def restore(self) -> Process | None:
        """Rebuild the process from the latest snapshot and the stream tail.

        Reads snapshot, tail (entries after the snapshot), head and fence in one
        ``MULTI``/``EXEC`` view, then verifies and replays without guest code.
        Costs O(snapshot + tail), not O(history). Records statistics in
        :attr:`last_restore`. Safe to retry (read-only).

        Returns:
            The process at the durable head, or None
            if the process was never created.

        Raises:
            CorruptData: (``corrupt_log``) the log does not verify; the message
                and fields name the process and the version/position. Nothing
                is repaired.
            UnavailableError: Redis failed.
        """
        started = time.perf_counter()
        keys = self.keys
        with redis_boundary("restore", self.process_id):
            hint_raw = self._client.hget(keys.snapshot, "version")
            hint = int(hint_raw) if hint_raw is not None and hint_raw.isdigit() else 0
            pipe = self._client.pipeline(transaction=True)
            pipe.hgetall(keys.snapshot)
            pipe.xrange(keys.stream, min=f"{hint + 1}-0")
            pipe.hgetall(keys.head)
            pipe.get(keys.fence)
            snap_raw, tail_raw, head_raw, fence_raw = pipe.execute()
        snap = parse_snapshot(self.process_id, snap_raw)
        head = parse_head(self.process_id, head_raw)
        if snap is None and head is None:
            if tail_raw:
                raise corrupt(self.process_id, "stream entries without head or snapshot")
            return None
        if snap is None or head is None:
            raise corrupt(self.process_id, "head without snapshot or snapshot without head")
        if snap.version < hint:
            raise corrupt(self.process_id, f"snapshot went back from {hint} to {snap.version}",
                          version=snap.version)
        if fence_raw is not None and not fence_raw.isdigit():
            raise corrupt(self.process_id, "fence is not a decimal integer")
        fence = 0 if fence_raw is None else int(fence_raw)
        entries = [parse_entry(self.process_id, eid, fields) for eid, fields in tail_raw or ()]
        proc = verify_and_restore(self.process_id, snap, entries, head, fence)
        tail = [e for e in entries if e.version > snap.version]
        with self._lock:
            self._limits = proc.limits
            self._since_snapshot = len(tail)
            self._tail_bytes = sum(len(e.record) for e in tail)
        self.last_restore = RestoreStats(
            snapshot_version=snap.version,
            snapshot_bytes=len(snap.data),
            tail_entries=len(tail),
            duration_s=time.perf_counter() - started,
        )
        return proc

