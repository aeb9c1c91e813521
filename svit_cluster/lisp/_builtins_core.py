"""Core builtins: argument helpers, arithmetic, comparison, logic, misc.

Numbers are integers (bounded by ``max_integer_bits``) and finite floats;
``bool`` is never a number. Mixing an integer with a float gives a float.
Integer division that does not divide evenly is an error (there are no
ratios). Every builtin has the signature ``fn(run, args) -> value``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from svit_cluster.errors import ScriptFailed
from svit_cluster.lisp._errors import script_failed
from svit_cluster.lisp._meter import Run
from svit_cluster.lisp._types import Char, Symbol, display, lisp_equal, type_name

__all__ = ["CORE", "arity", "expect_int", "expect_str", "number"]

Args = Sequence[Any]


def arity(name: str, args: Args, low: int, high: int | None = None) -> None:
    """Raise unless ``low <= len(args) <= high`` (``high=None``: exactly ``low``; -1: no max)."""
    n = len(args)
    top = low if high is None else high
    if n < low or (top >= 0 and n > top):
        if high is None:
            want = f"{low}"
        elif high < 0:
            want = f"at least {low}"
        else:
            want = f"{low} to {high}"
        raise script_failed(f"{name} expects {want} argument(s), got {n}")


def number(name: str, value: Any) -> int | float:
    """``value`` if it is an integer or float (not a bool), else a type error."""
    t = type(value)
    if t is int or t is float:
        return value  # type: ignore[no-any-return]
    raise script_failed(f"{name} expects a number, got {type_name(value)}")


def expect_int(name: str, value: Any) -> int:
    """``value`` if it is an integer, else a type error."""
    if type(value) is int:
        return value
    raise script_failed(f"{name} expects an integer, got {type_name(value)}")


def expect_str(name: str, value: Any) -> str:
    """``value`` if it is a string, else a type error."""
    if type(value) is str:
        return value
    raise script_failed(f"{name} expects a string, got {type_name(value)}")


def _result(r: Run, value: int | float) -> int | float:
    if type(value) is int:
        if r.ilo <= value <= r.ihi:
            return value
        return r.big(value)
    if not math.isfinite(value):
        raise script_failed("arithmetic produced a non-finite number")
    return value


def _fold(r: Run, name: str, args: Args, op: Callable[[Any, Any], Any]) -> int | float:
    acc = number(name, args[0])
    for x in args[1:]:
        try:
            acc = _result(r, op(acc, number(name, x)))
        except OverflowError:
            raise script_failed(f"{name}: number too large for a float") from None
    return _result(r, acc)


def b_add(r: Run, a: Args) -> Any:
    if len(a) == 2:
        x, y = a
        if type(x) is int and type(y) is int:
            v = x + y
            if r.ilo <= v <= r.ihi:
                return v
            return r.big(v)
    if not a:
        return 0
    return _fold(r, "+", a, lambda x, y: x + y)


def b_sub(r: Run, a: Args) -> Any:
    if len(a) == 2:
        x, y = a
        if type(x) is int and type(y) is int:
            v = x - y
            if r.ilo <= v <= r.ihi:
                return v
            return r.big(v)
    arity("-", a, 1, -1)
    if len(a) == 1:
        return _result(r, -number("-", a[0]))
    return _fold(r, "-", a, lambda x, y: x - y)


def b_mul(r: Run, a: Args) -> Any:
    if not a:
        return 1
    return _fold(r, "*", a, lambda x, y: x * y)


def _div(x: Any, y: Any) -> Any:
    if y == 0:
        raise script_failed("division by zero")
    if type(x) is int and type(y) is int:
        if x % y:
            raise script_failed("integer division is not exact (ratios are not supported)")
        return x // y
    return x / y


def b_div(r: Run, a: Args) -> Any:
    arity("/", a, 1, -1)
    if len(a) == 1:
        return _result(r, _div(1, number("/", a[0])))
    return _fold(r, "/", a, _div)


def _floordiv(x: Any, y: Any) -> Any:
    if y == 0:
        raise script_failed("division by zero")
    if type(x) is int and type(y) is int:
        return x // y
    return float(math.floor(x / y))


def b_floordiv(r: Run, a: Args) -> Any:
    arity("//", a, 2, -1)
    return _fold(r, "//", a, _floordiv)


def b_rem(r: Run, a: Args) -> Any:
    arity("rem", a, 2)
    x, y = number("rem", a[0]), number("rem", a[1])
    if y == 0:
        raise script_failed("division by zero")
    if type(x) is int and type(y) is int:
        m = abs(x) % abs(y)
        return -m if x < 0 else m
    try:
        return _result(r, math.fmod(x, y))
    except OverflowError:
        raise script_failed("rem: number too large for a float") from None


def b_abs(r: Run, a: Args) -> Any:
    arity("abs", a, 1)
    return _result(r, abs(number("abs", a[0])))


def _extreme(name: str, a: Args, pick_greater: bool) -> Any:
    arity(name, a, 1, -1)
    best = number(name, a[0])
    for x in a[1:]:
        v = number(name, x)
        if (v > best) if pick_greater else (v < best):
            best = v
    return best


def b_min(r: Run, a: Args) -> Any:
    return _extreme("min", a, False)


def b_max(r: Run, a: Args) -> Any:
    return _extreme("max", a, True)


# -- comparison --------------------------------------------------------------


def b_eq(r: Run, a: Args) -> Any:
    if len(a) == 2:
        x, y = a
        tx = type(x)
        if tx is type(y) and (tx is int or tx is str):
            return x == y
        return lisp_equal(x, y)
    arity("=", a, 1, -1)
    return all(lisp_equal(a[i], a[i + 1]) for i in range(len(a) - 1))


def b_ne(r: Run, a: Args) -> Any:
    arity("/=", a, 1, -1)
    return all(not lisp_equal(a[i], a[i + 1]) for i in range(len(a) - 1))


def _orderable(name: str, x: Any, y: Any) -> None:
    tx, ty = type(x), type(y)
    if (tx is int or tx is float) and (ty is int or ty is float):
        return
    if tx is ty and (tx is str or tx is Char):
        return
    raise script_failed(f"{name} cannot order {type_name(x)} and {type_name(y)}")


def _key(x: Any) -> Any:
    return x.ch if type(x) is Char else x


def _chain(name: str, a: Args, test: Callable[[Any, Any], bool]) -> bool:
    if len(a) == 2:
        x, y = a
        tx, ty = type(x), type(y)
        if (tx is int or tx is float) and (ty is int or ty is float):
            return test(x, y)
    arity(name, a, 1, -1)
    ok = True
    for i in range(len(a) - 1):
        x, y = a[i], a[i + 1]
        _orderable(name, x, y)
        ok = ok and test(_key(x), _key(y))
    return ok


def b_lt(r: Run, a: Args) -> Any:
    return _chain("<", a, lambda x, y: x < y)


def b_le(r: Run, a: Args) -> Any:
    return _chain("<=", a, lambda x, y: x <= y)


def b_gt(r: Run, a: Args) -> Any:
    return _chain(">", a, lambda x, y: x > y)


def b_ge(r: Run, a: Args) -> Any:
    return _chain(">=", a, lambda x, y: x >= y)


# -- logic -----------------------------------------------------------------------


def _bool(name: str, value: Any) -> bool:
    if type(value) is bool:
        return value
    raise script_failed(f"{name} expects a bool, got {type_name(value)}")


def b_not(r: Run, a: Args) -> Any:
    arity("not", a, 1)
    return not _bool("not", a[0])


def b_xor(r: Run, a: Args) -> Any:
    arity("xor", a, 2)
    return _bool("xor", a[0]) != _bool("xor", a[1])


def b_zero(r: Run, a: Args) -> Any:
    arity("zero", a, 1, -1)
    return all(number("zero", x) == 0 for x in a)


# -- misc --------------------------------------------------------------------------


def b_type_of(r: Run, a: Args) -> Any:
    arity("type-of", a, 1)
    return Symbol(type_name(a[0]))


def b_is(r: Run, a: Args) -> Any:
    arity("is", a, 2)
    kind = a[0]
    if type(kind) is not Symbol:
        raise script_failed(f"is expects a type name, got {type_name(kind)}")
    actual = type_name(a[1])
    if kind.name == "number":
        return actual in ("integer", "float")
    return actual == kind.name


def b_id(r: Run, a: Args) -> Any:
    arity("id", a, 1)
    return a[0]


def b_panic(r: Run, a: Args) -> Any:
    arity("panic", a, 0, 1)
    text = display(a[0]) if a else "explicit panic"
    raise ScriptFailed(f"panic: {text[:900]}")


def b_list(r: Run, a: Args) -> Any:
    if not a:
        return ()
    r.alloc(16 + 8 * len(a))
    r.touch(len(a))
    return tuple(a)


CORE: dict[str, Callable[[Run, Args], Any]] = {
    "+": b_add,
    "-": b_sub,
    "*": b_mul,
    "/": b_div,
    "//": b_floordiv,
    "rem": b_rem,
    "abs": b_abs,
    "min": b_min,
    "max": b_max,
    "=": b_eq,
    "/=": b_ne,
    "<": b_lt,
    "<=": b_le,
    ">": b_gt,
    ">=": b_ge,
    "not": b_not,
    "xor": b_xor,
    "zero": b_zero,
    "type-of": b_type_of,
    "is": b_is,
    "id": b_id,
    "panic": b_panic,
    "list": b_list,
}
