"""Store fixtures; the servers, ``config``, ``pid``, ``cluster`` and ``make_lease``
come from tests/conftest.py (tests/ownership uses them too)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests._commit_log import ConfiguredRedis
from tests.conftest import running


@pytest.fixture
def no_config_redis(tmp_path: Path) -> Iterator[ConfiguredRedis]:
    """A dedicated redis-server with ``CONFIG`` renamed away, as managed Redis
    services do."""
    server = ConfiguredRedis(tmp_path / "redis-noconfig", ["--rename-command", "CONFIG", ""])
    with running(server):
        yield server
