"""Fixtures of the ownership tests: a real 3-member etcd of its own per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from svit_cluster.local import EtcdClusterServer


@pytest.fixture
def etcd3(tmp_path: Path) -> Iterator[EtcdClusterServer]:
    """A local 3-member etcd (election timeout 1 s), stopped by PID afterwards."""
    server = EtcdClusterServer(tmp_path / "etcd3", members=3, die_with_parent=True)
    server.start()
    try:
        yield server
    finally:
        server.stop()
