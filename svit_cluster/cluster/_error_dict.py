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

__all__ = ["STALE_OWNER_CODES", "error_code", "error_dict", "raise_error_dict"]

#: Error codes with which an actor answers when it no longer serves the binding
#: the caller routed to (passivated, fenced out, its host's lease lost): the
#: caller may place the process again and resend once.
STALE_OWNER_CODES = frozenset({"unavailable", "fenced"})


def error_dict(exc: SvitError) -> dict[str, Any]:
    """A Ray result carrying a project error: ``{"error": exc.to_wire()}``
    (:func:`raise_error_dict` inverts it)."""
    return {"error": exc.to_wire()}


def error_code(result: dict[str, Any]) -> str | None:
    """The error code a Ray result carries (``result["error"]["code"]``), or None
    when it carries no error. An error that is not a wire dict counts as
    ``internal``."""
    err = result.get("error")
    if err is None:
        return None
    code = err.get("code") if isinstance(err, dict) else None
    return str(code) if code else "internal"


def raise_error_dict(result: dict[str, Any]) -> dict[str, Any]:
    """Return ``result`` unless it is ``{"error": wire}``; then raise
    :meth:`SvitError.from_wire(wire) <svit_cluster.errors.SvitError.from_wire>`
    (the class registered for its code, with its fields)."""
    err = result.get("error")
    if err is None:
        return result
    raise SvitError.from_wire(err if isinstance(err, dict) else {"message": str(err)})
