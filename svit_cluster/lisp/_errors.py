"""Helpers that build the project errors the guest interpreter raises.

Every failure leaving :mod:`svit_cluster.lisp` is one of the project errors in
:mod:`svit_cluster.errors`:

* :class:`ScriptFailed` (``script_failed``): syntax errors, type and arity
  errors, ``panic``, unbound names, a missing ``main``.
* :class:`InvalidInput` (``invalid_value`` / ``invalid_path``): a value that
  cannot be stored, a malformed path, a duplicate map key.
* :class:`LimitExceeded`: ``execution_limit_exceeded`` for fuel and wall-clock
  time, ``resource_limit_exceeded`` for every stack, memory, size and count
  bound. The message always names the limit ("fuel", "call stack", ...).

Errors raised by the interpreter are *located*: the message is prefixed with
the virtual source path and position, ``/lib/<name>.svit-script:LINE:COL: ...``,
and the position is kept in the ``at`` field.
"""

from __future__ import annotations

from svit_cluster.errors import ErrorCode, InvalidInput, LimitExceeded, ScriptFailed, SvitError

__all__ = [
    "catchable",
    "execution_limit",
    "invalid_path",
    "invalid_value",
    "relocate",
    "resource_limit",
    "script_failed",
    "source_path",
]

_LIMIT_CODES = frozenset({ErrorCode.EXECUTION_LIMIT_EXCEEDED, ErrorCode.RESOURCE_LIMIT_EXCEEDED})


def source_path(name: str) -> str:
    """The virtual source path of script ``name``: ``/lib/<name>.svit-script``."""
    return f"/lib/{name}.svit-script"


def script_failed(message: str) -> ScriptFailed:
    """A guest failure on its own terms (type, arity, panic, unbound name)."""
    return ScriptFailed(message)


def invalid_value(message: str) -> InvalidInput:
    """A value that cannot cross the storage boundary (``invalid_value``)."""
    return InvalidInput(message, code=ErrorCode.INVALID_VALUE)


def invalid_path(message: str) -> InvalidInput:
    """A malformed or unusable process path (``invalid_path``)."""
    return InvalidInput(message, code=ErrorCode.INVALID_PATH)


def resource_limit(limit: str, detail: str = "") -> LimitExceeded:
    """A stack, memory, size or count bound (``resource_limit_exceeded``).

    Args:
        limit: the stable limit name, e.g. ``"call stack"``.
        detail: optional extra text (the configured bound).
    """
    text = f"{limit} limit exceeded" + (f" ({detail})" if detail else "")
    return LimitExceeded(text, code=ErrorCode.RESOURCE_LIMIT_EXCEEDED, limit=limit)


def execution_limit(limit: str, detail: str = "") -> LimitExceeded:
    """Fuel or wall-clock time ran out (``execution_limit_exceeded``)."""
    text = f"{limit} limit exceeded" + (f" ({detail})" if detail else "")
    return LimitExceeded(text, code=ErrorCode.EXECUTION_LIMIT_EXCEEDED, limit=limit)


def catchable(error: SvitError) -> bool:
    """Whether ``safe-call`` and ``-safe`` helpers may turn ``error`` into a result.

    Limit failures (fuel, time, stack, memory, counts) are never catchable, and
    neither is anything but a guest-level failure (:class:`ScriptFailed`,
    :class:`InvalidInput`).
    """
    if isinstance(error, LimitExceeded) or error.code in _LIMIT_CODES:
        return False
    return isinstance(error, (ScriptFailed, InvalidInput))


def relocate(error: SvitError, where: str, foreign: object) -> SvitError:
    """Return ``error`` prefixed with the source position ``where``.

    An error that already carries a position (field ``at``), or that a host
    method raised (``foreign``), is returned unchanged.

    Args:
        error: the error to locate.
        where: ``/lib/<name>.svit-script:LINE:COL``.
        foreign: the last error object the host raised, passed through as is.
    """
    if error is foreign or "at" in error.fields:
        return error
    fields = dict(error.fields)
    fields["at"] = where
    located = type(error)(f"{where}: {error.message}", code=error.code, **fields)
    located.__cause__ = error
    return located
