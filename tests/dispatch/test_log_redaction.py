"""The dispatcher never logs the Redis password.

The chart gives the dispatcher ``SVIT_REDIS_URL`` from a Secret
(``redis://:<password>@host:6379/0``); the start-up log line must print it with
the password masked.
"""

from __future__ import annotations

import logging

import pytest

from svit_cluster.dispatch import _worker
from svit_cluster.dispatch._config import DispatchConfig
from svit_cluster.dispatch._worker import redact_url, run_worker


def test_redact_url() -> None:
    assert redact_url("redis://:s3cret@h:6379/0") == "redis://:***@h:6379/0"
    assert redact_url("rediss://user:s3cret@h:6380") == "rediss://user:***@h:6380"
    assert redact_url("redis://h:6379/0") == "redis://h:6379/0"


def test_start_log_line_hides_the_password(monkeypatch: pytest.MonkeyPatch,
                                           caplog: pytest.LogCaptureFixture) -> None:
    async def no_run(self: object) -> None:
        return None

    monkeypatch.setattr(_worker.DispatchWorker, "run", no_run)
    caplog.set_level(logging.INFO, logger=_worker.__name__)
    run_worker(DispatchConfig(redis_url="redis://:s3cret-pw@127.0.0.1:1/0"))
    assert "starting (redis redis://:***@127.0.0.1:1/0)" in caplog.text
    assert "s3cret-pw" not in caplog.text
