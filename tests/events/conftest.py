"""Per-test process ids and key prefixes for the signal and observer tests."""

from __future__ import annotations

import itertools

import pytest

_n = itertools.count(1)


def unique(name: str) -> str:
    return f"{name}-{next(_n)}"


@pytest.fixture
def pid() -> str:
    return f"svit://test/{unique('p')}"


@pytest.fixture
def prefix() -> str:
    return unique("ev")
