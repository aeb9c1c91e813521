"""The lease keeper's shared record: round trip, torn copies refused (pure logic)."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

from svit_cluster.ownership._status_file import SIZE, LeaseStatus, StatusFile


def test_a_written_status_reads_back_whole(tmp_path: Path) -> None:
    writer = StatusFile.create(str(tmp_path))
    reader = StatusFile.open(writer.path)
    try:
        assert reader.read() is None  # nothing published yet
        st = LeaseStatus(lease_id=42, deadline=123.5, last_ok=120.25, interval_s=1.0,
                         granted=True, failing=True, ttl_s=5, keeper_pid=7, rounds=3,
                         last_lag_s=0.02, max_lag_s=0.3, max_rtt_s=0.1,
                         lost_reason="x" * 500, unhealthy="raylet 9 is stopped")
        for lag in (0.005, 0.2, 40.0):
            st.observe_lag(lag)
        writer.write(st)
        got = reader.read()
        assert got is not None
        assert (got.lease_id, got.deadline, got.last_ok, got.granted, got.failing, got.lost) == \
            (42, 123.5, 120.25, True, True, False)
        assert got.unhealthy == "raylet 9 is stopped"
        assert got.lost_reason == "x" * 240  # bounded text
        assert got.lag_buckets[0] == 1 and got.lag_buckets[3] == 1 and got.lag_buckets[-1] == 1
        assert abs(got.lag_sum_s - 40.205) < 1e-9
        st.lost = True
        writer.write(st)
        assert reader.read().lost is True  # type: ignore[union-attr]
    finally:
        reader.close()
        writer.close()
        writer.unlink()


def test_a_torn_or_half_written_copy_is_never_accepted(tmp_path: Path) -> None:
    """A reader never takes a copy the writer is in the middle of (odd sequence
    number) or whose body does not match its CRC: it would judge a lease by a
    deadline that was never published."""
    writer = StatusFile.create(str(tmp_path))
    try:
        writer.write(LeaseStatus(lease_id=1, deadline=10.0, granted=True))
        raw = writer._map
        seq = struct.unpack_from("<Q", raw, 0)[0]
        struct.pack_into("<Q", raw, 0, seq + 1)  # a write under way
        assert writer.read(attempts=3) is None
        struct.pack_into("<Q", raw, 0, seq)
        raw[SIZE - 1] ^= 0xFF  # a body byte that is not the published one
        assert writer.read(attempts=3) is None
        raw[SIZE - 1] ^= 0xFF
        assert writer.read() is not None and writer.read().lease_id == 1  # type: ignore[union-attr]
    finally:
        writer.close()
        writer.unlink()


def test_creating_a_record_removes_the_orphans_of_dead_creators(tmp_path: Path) -> None:
    """A host killed while its lease was being granted leaves its record
    behind (neither the agent nor the keeper lived to unlink it); the next
    record created there removes it, and never one whose creator lives."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # reaped: its pid names no process now
    orphan = tmp_path / f"svit-lease-{gone.pid}-0123456789ab"
    live = tmp_path / f"svit-lease-{os.getpid()}-ba9876543210"
    other = tmp_path / f"svit-lease-{gone.pid}-not-a-record"
    for path in (orphan, live, other):
        path.write_bytes(b"\0" * SIZE)
    made = StatusFile.create(str(tmp_path))
    try:
        assert not orphan.exists()
        assert live.exists() and other.exists()
        assert Path(made.path).exists()
    finally:
        made.close()
        made.unlink()
