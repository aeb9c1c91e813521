"""Svit Lisp: the guest interpreter (``svit-lisp@2`` surface, Ketos-derived).

Public names, by importance:

* :func:`compile_script` -- parse and compile a script once (cached).
* :class:`Program` -- a compiled script; :meth:`Program.run_main` runs it.
* :class:`Meter` -- deterministic fuel, guest memory and deadline accounting
  for one activation, shared by nested ``exec``.
* :class:`GuestHost` -- what an activation provides to guest code.

The guest sees an explicit allowlist of functions (no Python ``eval``, no
attribute access, no modules, clock, randomness, filesystem, network or
environment). Every failure is a project error (:mod:`svit_cluster.errors`);
see :mod:`svit_cluster.lisp._meter` for the fuel unit.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Protocol

from svit_cluster.errors import ErrorCode, InvalidInput, SvitError
from svit_cluster.lisp._compiler import compile_forms
from svit_cluster.lisp._errors import resource_limit
from svit_cluster.lisp._evaluator import Program
from svit_cluster.lisp._meter import Meter
from svit_cluster.lisp._reader import read_source
from svit_cluster.values import Limits, Value

__all__ = ["CACHE_SIZE", "GuestHost", "Meter", "Program", "compile_script"]

#: Entries kept in the compiled-program cache (least recently used are evicted).
CACHE_SIZE = 1024


class GuestHost(Protocol):
    """The process operations an activation offers to guest code.

    Every method may raise project errors (``InvalidInput``, ``LimitExceeded``,
    ...); they propagate to the guest unchanged, and ``safe-call`` never catches
    a limit failure.
    """

    def read(self, path: str) -> Value:
        """The value at an absolute path; a missing path gives ``None``."""

    def discover(self, path: str) -> Value:
        """The child names below ``path`` (an array of strings)."""

    def stat(self, path: str) -> Value:
        """The facts record of the node at ``path`` (``None`` if missing).

        Shape: :func:`svit_cluster.process._stat.stat_record` (the reference's
        ``kind``, ``access``, ``locality``, ``facts``, ``hash``, ...).
        """

    def write(self, path: str, value: Value) -> None:
        """Stage a write below ``/memory`` or to ``/lib/<name>``."""

    def remove(self, path: str) -> None:
        """Stage a removal."""

    def exec(self, script: str, input: Value) -> Value:
        """Run ``/lib/<name>`` with the same meter (depth-checked) and return its output."""

    def send(self, to: str, body: Value, delay_ms: int | None = None) -> str:
        """Stage an outbox intent; returns its id.

        With ``delay_ms`` (0..``MAX_DELAY_MS``, checked by ``send!``) the
        intent is a timer, due that long after the activation's timestamp.
        """

    def cancel(self, timer_id: str) -> bool:
        """Stage the cancel of a pending timer; False (nothing staged) when
        ``timer_id`` is not pending."""

    def log_info(self, message: str, fields: dict[str, Value] | None = None) -> None:
        """Record a log record ``{message, fields}`` (``log-info!``; ``fields`` a map)."""


_cache: OrderedDict[tuple[Any, ...], Program | tuple[type[SvitError], str, Any, dict[str, Any]]]
_cache = OrderedDict()
_lock = threading.Lock()


def compile_script(source: str, *, name: str, limits: Limits) -> Program:
    """Parse and compile ``source`` once; later calls hit a bounded LRU cache.

    The cache key is the source text itself (equivalent to its SHA-256), the
    name, and the limits that shape compilation (``max_script_bytes``,
    ``max_syntax_depth``, ``max_integer_bits``). Failures are cached too.

    Args:
        source: Svit Lisp source text.
        name: the script name; positions read ``/lib/<name>.svit-script:LINE:COL``.
        limits: the process limits.

    Returns:
        The compiled :class:`Program`.

    Raises:
        InvalidInput: ``source`` or ``name`` is not a string.
        ScriptFailed: a syntax error or malformed special form (positioned).
        LimitExceeded: (``resource_limit_exceeded``) script bytes, syntax depth,
            integer bits.
    """
    if type(source) is not str or type(name) is not str:
        raise InvalidInput("script source and name must be strings", code=ErrorCode.INVALID_VALUE)
    key = (source, name, limits.max_script_bytes, limits.max_syntax_depth,
           limits.max_integer_bits)
    with _lock:
        hit = _cache.get(key)
        if hit is not None:
            _cache.move_to_end(key)
    if type(hit) is Program:
        return hit
    if hit is not None:
        cls, message, code, fields = hit  # type: ignore[misc]
        raise cls(message, code=code, **fields)
    try:
        forms = read_source(source, name, limits)
        nodes, frame_size = compile_forms(forms, name)
        entry: Any = Program(name, nodes, frame_size)
    except SvitError as e:
        entry = (type(e), e.message, e.code, dict(e.fields))
        _store(key, entry)
        raise
    except RecursionError:  # pragma: no cover - the reader and compiler are iterative
        raise resource_limit("syntax depth", "compiler recursion") from None
    _store(key, entry)
    return entry  # type: ignore[no-any-return]


def _store(key: tuple[Any, ...], entry: Any) -> None:
    with _lock:
        _cache[key] = entry
        _cache.move_to_end(key)
        while len(_cache) > CACHE_SIZE:
            _cache.popitem(last=False)
