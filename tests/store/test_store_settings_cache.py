"""``StoreConfig`` reads its environment defaults once per distinct environment.

Every process actor's ``start`` makes a ``StoreConfig``; reading ``StoreSettings``
through pydantic-settings costs about 20 ms, which was on the cold-activation
path twice per start (issue 18). The defaults must still follow the environment.
"""

from __future__ import annotations

from typing import Any

import pytest

import svit_cluster.settings as settings
from svit_cluster.errors import ConfigurationError
from svit_cluster.store import StoreConfig


def test_the_environment_is_read_once_and_changes_are_still_seen(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reads: list[Any] = []
    real = settings.load_settings

    def counting(cls: Any) -> Any:
        reads.append(cls)
        return real(cls)

    monkeypatch.setattr(settings, "load_settings", counting)
    monkeypatch.setenv("SVIT_REDIS_WAIT_REPLICAS", "2")
    monkeypatch.setenv("SVIT_REDIS_WAIT_TIMEOUT_MS", "777")
    first = [StoreConfig() for _ in range(5)]
    assert {(c.wait_replicas, c.wait_timeout_ms) for c in first} == {(2, 777)}
    assert len(reads) <= 1
    monkeypatch.setenv("SVIT_REDIS_WAIT_REPLICAS", "3")
    assert StoreConfig().wait_replicas == 3  # a changed environment is read again
    monkeypatch.setenv("SVIT_REDIS_WAIT_REPLICAS", "-1")
    with pytest.raises(ConfigurationError):  # and a bad value still fails every time
        StoreConfig()
    with pytest.raises(ConfigurationError):
        StoreConfig()
