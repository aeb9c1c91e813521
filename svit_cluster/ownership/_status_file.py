"""The lease keeper's published state: one small shared-memory record per lease.

The keeper process (:mod:`svit_cluster.ownership._keeper`) writes the state of
the lease it keeps after every keepalive round; the host agent
(:class:`~svit_cluster.ownership.KeptLease`) reads it whenever it needs the
lease state. Shared memory instead of messages, so that a reader that was
starved for a while still reads the *current* deadline: a stale copy would make
a slow agent believe a kept lease lost.

Both sides map the same file (the agent creates it; the keeper unlinks it once
both have it mapped, so nothing is left behind when either dies). A file whose
creator and keeper were both killed before that unlink (a host killed while
its lease was being granted) is an orphan: the next record created in the same
directory removes every record whose creator process is gone. Deadlines are
``time.monotonic()`` seconds: CLOCK_MONOTONIC is one clock for every process of
a Linux host (and of a pod), so the agent judges the keeper's deadline with its
own clock.

Torn reads: the writer bumps a sequence number to odd before writing and to
even after; the body also carries its CRC-32. A reader accepts a copy only if
the sequence number is even and unchanged and the CRC matches, which holds
without memory barriers (Python has none) on any CPU.
"""

from __future__ import annotations

import mmap
import os
import re
import struct
import zlib
from dataclasses import dataclass, field

import psutil

__all__ = ["LAG_BUCKETS_S", "LeaseStatus", "StatusFile", "remove_orphans"]

#: Every record's file name starts so, then ``<creator pid>-<12 hex digits>``.
PREFIX = "svit-lease-"
_NAME = re.compile(rf"{PREFIX}(\d+)-[0-9a-f]{{12}}")


def remove_orphans(directory: str) -> list[str]:
    """Remove the records in ``directory`` whose creator process no longer
    exists (its pid in the name); returns their paths. A record of a live
    process, or of a pid reused by another process, is kept: removing one
    in use would blind its agent, keeping an orphan costs one small file.
    Never raises for a record that is already gone or a directory that
    cannot be listed."""
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    removed = []
    for name in names:
        match = _NAME.fullmatch(name)
        if match is None or psutil.pid_exists(int(match.group(1))):
            continue
        path = os.path.join(directory, name)
        try:
            os.unlink(path)
        except OSError:
            continue
        removed.append(path)
    return removed


#: Upper bounds (s) of the keepalive-lag histogram buckets (``+Inf`` is implied),
#: the same as ``LeaseMetrics``' ``svit_lease_keepalive_lag_seconds``.
LAG_BUCKETS_S = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)

# flags
_GRANTED, _FAILING, _LOST, _REVOKED, _EXITED, _STOPPED = 1, 2, 4, 8, 16, 32
_TEXT = 240  # bytes kept of each reason text
_NB = len(LAG_BUCKETS_S) + 1
# lease_id, deadline, last_ok, interval, flags, ttl, keeper pid, rounds,
# last lag, max lag, max rtt, lag sum, buckets, 3 texts (length-prefixed)
_BODY = struct.Struct(f"<qdddIIIQdddd{_NB}Q" + f"H{_TEXT}s" * 3)
_SEQ = struct.Struct("<Q")
_CRC = struct.Struct("<I")
#: Size of the file in bytes.
SIZE = _SEQ.size + _CRC.size + _BODY.size


def _text(raw: str | None) -> bytes:
    return (raw or "").encode("utf-8", "replace")[:_TEXT]


@dataclass
class LeaseStatus:
    """What the keeper knows of its lease (all times ``time.monotonic()`` seconds).

    Attributes:
        lease_id: the etcd lease id (0 until granted).
        deadline: the local deadline: LOST at or after it.
        last_ok: send time of the last successful keepalive.
        interval_s: time between keepalives.
        granted, failing, lost, revoked: the keeper's flags (``lost`` is latched).
        stopped: the keeper tries no keepalive (paused or the host unhealthy;
            ``HostLease.stopped``): SUSPENDED at once, not after two intervals.
        exited: the keeper process has ended (nothing will renew the lease).
        ttl_s: TTL granted by etcd (s).
        keeper_pid: the keeper's process id.
        rounds: keepalive rounds started.
        last_lag_s, max_lag_s: start lag of the last round and the largest (s).
        max_rtt_s: slowest successful keepalive round trip (s).
        lag_sum_s, lag_buckets: the lag histogram (counts per
            :data:`LAG_BUCKETS_S` bound, then ``+Inf``; not cumulative).
        lost_reason, unhealthy, error: why LOST; why the host cannot serve;
            why the grant failed (each at most 240 bytes).
    """

    lease_id: int = 0
    deadline: float = 0.0
    last_ok: float = 0.0
    interval_s: float = 1.0
    granted: bool = False
    failing: bool = False
    stopped: bool = False
    lost: bool = False
    revoked: bool = False
    exited: bool = False
    ttl_s: int = 0
    keeper_pid: int = 0
    rounds: int = 0
    last_lag_s: float = 0.0
    max_lag_s: float = 0.0
    max_rtt_s: float = 0.0
    lag_sum_s: float = 0.0
    lag_buckets: list[int] = field(default_factory=lambda: [0] * _NB)
    lost_reason: str = ""
    unhealthy: str = ""
    error: str = ""

    def observe_lag(self, lag_s: float) -> None:
        """Count one keepalive round's start lag (s) in the histogram."""
        self.lag_sum_s += lag_s
        for i, bound in enumerate(LAG_BUCKETS_S):
            if lag_s <= bound:
                self.lag_buckets[i] += 1
                return
        self.lag_buckets[-1] += 1

    def _pack(self) -> bytes:
        flags = ((_GRANTED if self.granted else 0) | (_FAILING if self.failing else 0)
                 | (_LOST if self.lost else 0) | (_REVOKED if self.revoked else 0)
                 | (_EXITED if self.exited else 0) | (_STOPPED if self.stopped else 0))
        texts: list[object] = []
        for raw in (self.lost_reason, self.unhealthy, self.error):
            data = _text(raw)
            texts += [len(data), data]
        return _BODY.pack(self.lease_id, self.deadline, self.last_ok, self.interval_s, flags,
                          self.ttl_s, self.keeper_pid, self.rounds, self.last_lag_s,
                          self.max_lag_s, self.max_rtt_s, self.lag_sum_s, *self.lag_buckets,
                          *texts)

    @classmethod
    def _unpack(cls, body: bytes) -> LeaseStatus:
        v = _BODY.unpack(body)
        flags = v[4]
        buckets = list(v[12:12 + _NB])
        rest = v[12 + _NB:]
        texts = [bytes(rest[i + 1][:rest[i]]).decode("utf-8", "replace")
                 for i in range(0, 6, 2)]
        return cls(lease_id=v[0], deadline=v[1], last_ok=v[2], interval_s=v[3],
                   granted=bool(flags & _GRANTED), failing=bool(flags & _FAILING),
                   stopped=bool(flags & _STOPPED),
                   lost=bool(flags & _LOST), revoked=bool(flags & _REVOKED),
                   exited=bool(flags & _EXITED), ttl_s=v[5], keeper_pid=v[6], rounds=v[7],
                   last_lag_s=v[8], max_lag_s=v[9], max_rtt_s=v[10], lag_sum_s=v[11],
                   lag_buckets=buckets, lost_reason=texts[0], unhealthy=texts[1],
                   error=texts[2])


class StatusFile:
    """A :class:`LeaseStatus` record in a shared, memory-mapped file of :data:`SIZE` bytes.

    Args:
        path: the file (created by :meth:`create`, opened by :meth:`open`).

    Raises:
        OSError: the file cannot be created, opened or mapped.
    """

    def __init__(self, path: str, *, create: bool) -> None:
        self.path = path
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        fd = os.open(path, flags, 0o600)
        try:
            if create:
                os.ftruncate(fd, SIZE)
            self._map = mmap.mmap(fd, SIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)

    @classmethod
    def create(cls, directory: str) -> StatusFile:
        """A new zeroed record in ``directory`` (mode 0600, a unique name:
        ``svit-lease-<creator pid>-<12 hex digits>``), after removing the
        orphans there (:func:`remove_orphans`)."""
        remove_orphans(directory)
        name = os.path.join(directory, f"{PREFIX}{os.getpid()}-{os.urandom(6).hex()}")
        return cls(name, create=True)

    @classmethod
    def open(cls, path: str) -> StatusFile:
        """Map the existing record at ``path``."""
        return cls(path, create=False)

    def unlink(self) -> None:
        """Remove the file's name (the mapping stays valid); no error if gone."""
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def write(self, status: LeaseStatus) -> None:
        """Publish ``status`` (one writer only)."""
        body = status._pack()
        seq = _SEQ.unpack_from(self._map, 0)[0]
        _SEQ.pack_into(self._map, 0, seq + 1)
        _CRC.pack_into(self._map, _SEQ.size, zlib.crc32(body))
        self._map[_SEQ.size + _CRC.size:SIZE] = body
        _SEQ.pack_into(self._map, 0, seq + 2)

    def read(self, *, attempts: int = 100) -> LeaseStatus | None:
        """The last published status; None if none was ever written, or no
        consistent copy was seen in ``attempts`` tries (a writer mid-write)."""
        for _ in range(attempts):
            before = _SEQ.unpack_from(self._map, 0)[0]
            if before == 0:
                return None
            if before % 2:
                continue
            raw = bytes(self._map[:SIZE])
            if _SEQ.unpack_from(raw, 0)[0] != before or _SEQ.unpack_from(self._map, 0)[0] != before:
                continue
            body = raw[_SEQ.size + _CRC.size:]
            if zlib.crc32(body) != _CRC.unpack_from(raw, _SEQ.size)[0]:
                continue
            return LeaseStatus._unpack(body)
        return None

    def close(self) -> None:
        """Unmap (idempotent)."""
        if not self._map.closed:
            self._map.close()
