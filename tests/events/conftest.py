"""Per-test process ids and key prefixes for the signal and observer tests."""

from __future__ import annotations

import pytest

from tests._support import unique


@pytest.fixture
def pid() -> str:
    return f"svit://test/{unique('p')}"


@pytest.fixture
def prefix() -> str:
    return unique("ev")
