"""A project error as a Ray call's result: ``{"error": exc.to_wire()}``.

Actors and agents answer failures with this dict so that errors cross the Ray
boundary without pickling exception classes; the callers (the router, the spawn
port) turn it back into the typed error. Both directions live here, below every
caller, and import only :mod:`svit_cluster.errors` (a process actor's worker
loads this module).
"""

from __future__ import annotations

from typing import Any

from svit_cluster.errors import SvitError

__all__ = ["error_dict", "raise_error_dict"]


def error_dict(exc: SvitError) -> dict[str, Any]:
    """A Ray result carrying a project error: ``{"error": exc.to_wire()}``
    (:func:`raise_error_dict` inverts it)."""
    return {"error": exc.to_wire()}


def raise_error_dict(result: dict[str, Any]) -> dict[str, Any]:
    """Return ``result`` unless it is ``{"error": wire}``; then raise
    :meth:`SvitError.from_wire(wire) <svit_cluster.errors.SvitError.from_wire>`
    (the class registered for its code, with its fields)."""
    err = result.get("error")
    if err is None:
        return result
    raise SvitError.from_wire(err if isinstance(err, dict) else {"message": str(err)})
