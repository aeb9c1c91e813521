"""Helpers every test package shares: unique names and waiting for a condition."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from typing import Any

__all__ = ["unique", "wait_for"]

_counter = itertools.count()


def unique(name: str) -> str:
    """``name-<n>``, a name no other test of this session uses (process ids, keys)."""
    return f"{name}-{next(_counter)}"


def wait_for(cond: Callable[[], Any], timeout_s: float = 20.0, what: str = "condition",
             interval_s: float = 0.05) -> Any:
    """Poll ``cond`` every ``interval_s`` seconds until it returns a truthy value,
    and return that value.

    Raises:
        AssertionError: still falsy after ``timeout_s`` seconds (names ``what``).
    """
    deadline = time.monotonic() + timeout_s
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(interval_s)
