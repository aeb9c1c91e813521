"""The guest environment: an explicit allowlist of builtins and constants.

Nothing is seeded from Python's namespaces: a guest sees exactly the names in
:data:`BUILTINS` and :data:`CONSTANTS`, the global ``input``, and what it
defines itself. ``apply`` and ``safe-call`` call guest functions, so the
evaluator implements them (their ``fn`` is never called directly); the
result and dispatch helpers that call guest functions are ``SP_CALL``
builtins whose ``fn`` hands the call to the evaluator.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any

from svit_cluster.lisp._builtins_catalog import BEYOND_REFERENCE, CALLERS, CATALOG, HELPERS
from svit_cluster.lisp._builtins_core import CORE
from svit_cluster.lisp._builtins_ketos import KETOS
from svit_cluster.lisp._builtins_seq import SEQ
from svit_cluster.lisp._builtins_svit import SVIT, SVIT_NOT_INLINE
from svit_cluster.lisp._errors import script_failed
from svit_cluster.lisp._meter import Run
from svit_cluster.lisp._types import SP_APPLY, SP_CALL, SP_SAFE, Builtin

__all__ = ["BUILTINS", "CONSTANTS", "GUEST_SCOPE", "SVIT_VERSION"]

#: Value of ``*svit-version*``.
SVIT_VERSION = "Svit Lisp 2"


def _evaluator_only(r: Run, args: Sequence[Any]) -> Any:  # pragma: no cover - defensive
    raise script_failed("this function is implemented by the evaluator")


#: Integer fast paths of binary arithmetic and comparison: (operator, range-checked).
_FAST: dict[str, tuple[Callable[[Any, Any], Any], bool]] = {
    "+": (operator.add, True),
    "-": (operator.sub, True),
    "*": (operator.mul, True),
    "=": (operator.eq, False),
    "/=": (operator.ne, False),
    "<": (operator.lt, False),
    "<=": (operator.le, False),
    ">": (operator.gt, False),
    ">=": (operator.ge, False),
}


def _table() -> dict[str, Builtin]:
    table: dict[str, Builtin] = {}
    for source in (CORE, SEQ, SVIT, KETOS, HELPERS):
        for name, fn in source.items():
            assert name not in table, name
            table[name] = Builtin(
                name, fn, inline=name not in SVIT_NOT_INLINE, fast=_FAST.get(name)
            )
    for name, fn in CALLERS.items():
        assert name not in table, name
        table[name] = Builtin(name, fn, special=SP_CALL)
    table["apply"] = Builtin("apply", _evaluator_only, special=SP_APPLY)
    table["safe-call"] = Builtin("safe-call", _evaluator_only, special=SP_SAFE)
    return table


#: Every builtin function, by Lisp name.
BUILTINS: dict[str, Builtin] = _table()

#: Named constants.
CONSTANTS: dict[str, Any] = {"*svit-version*": SVIT_VERSION}

#: The names a guest's global namespace holds before the script runs, which
#: count against ``Limits.max_namespace_entries`` together with each name the
#: script defines. They are the values the reference installs in its Ketos
#: global scope before running a script (``*svit-version*``, ``input`` and one
#: function per runtime helper of the catalog, :data:`CATALOG`); Ketos refuses a
#: ``define`` of a new name once that scope holds ``namespace_size`` values.
#: Ketos's own core functions (``+``, ``list``, ...) live in its system scope
#: and do not count; neither do our extensions, outside the catalog or in it
#: (:data:`~svit_cluster.lisp._builtins_catalog.BEYOND_REFERENCE`).
GUEST_SCOPE: frozenset[str] = frozenset(
    [*CONSTANTS, "input", *(entry.name for entry in CATALOG
                            if entry.name not in BEYOND_REFERENCE)]
)
