"""Test-only switches of the dispatcher. Never set them in production.

The one switch here exists for the chaos harness's *negative control* of
durable timers: a run whose dispatcher ignores committed cancels must fail the
harness's ``timers`` invariant, which proves the invariant would notice a timer
that is both reported cancelled and delivered.

``UNSAFE_IGNORE_CANCELS_ENV`` (``SVIT_DISPATCH_UNSAFE_IGNORE_CANCELS``): when it
is ``1`` in a dispatcher worker's environment at start, that worker applies
each committed cancel with :data:`UNSAFE_IGNORING_CANCEL_SCRIPT`: the cancel is
answered, logged and remembered as ``cancelled`` but the timer stays parked and
fires when due. Only the worker reads the variable; ``cancel_timer`` (the
operator's cancel), the HTTP API and the CLI do not.
"""

from __future__ import annotations

from svit_cluster.dispatch._timers import (
    UNSAFE_IGNORE_CANCELS_ENV,
    UNSAFE_IGNORING_CANCEL_SCRIPT,
)

__all__ = ["UNSAFE_IGNORE_CANCELS_ENV", "UNSAFE_IGNORING_CANCEL_SCRIPT"]
