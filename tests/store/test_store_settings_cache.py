"""``StoreConfig`` reads its environment defaults once per distinct environment.

Every process actor's ``start`` makes a ``StoreConfig``; reading ``StoreSettings``
through pydantic-settings costs about 20 ms, too much to pay on the
cold-activation path at every start. The defaults must still follow the environment.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

import svit_cluster.settings as settings
from svit_cluster.defaults import DEFAULT_WAIT_REPLICAS, DEFAULT_WAIT_TIMEOUT_MS
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


def test_unset_wait_variables_give_the_settings_defaults_without_pydantic_settings() -> None:
    """With ``SVIT_REDIS_WAIT_REPLICAS`` and ``SVIT_REDIS_WAIT_TIMEOUT_MS`` unset (or
    empty), ``StoreConfig`` takes ``StoreSettings``' defaults without loading
    pydantic-settings (every process actor's worker makes one)."""
    fields = settings.StoreSettings.model_fields
    assert fields["redis_wait_replicas"].default == DEFAULT_WAIT_REPLICAS
    assert fields["redis_wait_timeout_ms"].default == DEFAULT_WAIT_TIMEOUT_MS
    code = (
        "import os, sys; "
        "[os.environ.pop(k) for k in list(os.environ) if k.upper().startswith('SVIT_')]; "
        "os.environ['SVIT_REDIS_WAIT_REPLICAS'] = ''; "  # empty counts as unset
        "from svit_cluster.store import StoreConfig; c = StoreConfig(); "
        "print(c.wait_replicas, c.wait_timeout_ms, 'pydantic_settings' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True)
    assert out.stdout.split() == [str(DEFAULT_WAIT_REPLICAS), str(DEFAULT_WAIT_TIMEOUT_MS),
                                  "False"]


@pytest.mark.parametrize("name", ["SVIT_REDIS_WAIT_TIMEOUT_MS", "svit_redis_wait_timeout_ms"])
def test_a_set_wait_variable_is_read_in_any_case(monkeypatch: pytest.MonkeyPatch,
                                                  name: str) -> None:
    """Any case, as pydantic-settings matches names (case-insensitive); a changed
    value is read again whatever the case of its name."""
    monkeypatch.setenv(name, "555")
    assert StoreConfig().wait_timeout_ms == 555
    monkeypatch.setenv(name, "0")
    with pytest.raises(ConfigurationError):
        StoreConfig()
