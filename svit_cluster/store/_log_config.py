"""The commit log's options (:class:`StoreConfig`) and the environment they default from.

:class:`StoreConfig` validates every option on construction. Its two ``WAIT``
options default from :data:`WAIT_REPLICAS_ENV` and :data:`WAIT_TIMEOUT_ENV`:
while neither is set, the defaults come from :mod:`svit_cluster.defaults` and
pydantic-settings is never loaded; once one is set, ``StoreSettings`` reads and
validates them, once per distinct ``SVIT_*`` environment (a small LRU cache),
since every process actor's ``start`` builds a :class:`StoreConfig` on the cold
activation path.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from typing import Any

from svit_cluster.control import DEFAULT_RECEIPTS, validate_receipt_limit

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
from svit_cluster.errors import ConfigurationError
from svit_cluster.store._keys import DEFAULT_PREFIX

__all__ = [
    "DEFAULT_SNAPSHOT_EVERY",
    "WAIT_REPLICAS_ENV",
    "WAIT_TIMEOUT_ENV",
    "StoreConfig",
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
        dedicated_connection: run this owner's write scripts on one connection
            of its own (:class:`~svit_cluster.store._lane.ScriptLane`, opened on
            first use, closed by ``RedisBackend.close``) instead of a pooled
            connection per script: less CPU per commit. For a process actor,
            which serves one process at a time; off by default, so a runtime
            holding many backends on one client does not hold a connection
            each. Ignored with ``wait_replicas`` or a Redis Cluster client.

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
    dedicated_connection: bool = False

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

