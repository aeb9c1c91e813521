"""Ketos core functions: powers and shifts, rounding, conversions, struct-style access, print.

These follow the Ketos interpreter's system functions (the reference runtime is
built on Ketos) wherever they fit Svit Lisp's value model: integers bounded by
``max_integer_bits`` (checked *before* a power or shift is computed, so a
guest cannot make the host build a huge number), finite floats only, and no
ratio, byte-string or struct types. Where Ketos would produce one of those,
the function either works on the part of its domain that exists here or fails
with a clear ``script_failed`` error; ``docs/conformance.md`` ("Builtin
catalog") lists each decision.

* ``(^ base exp)``: integer to a non-negative integer power is an integer;
  a negative integer exponent, or any float operand, gives a float.
* ``(<< n k)``, ``(>> n k)``: arithmetic shifts of integers (``k`` in
  ``0 .. 2^32-1``; ``>>`` rounds toward negative infinity).
* ``ceil floor round trunc``: an integer is returned unchanged, a float is
  rounded to a float (``round``: half-way cases away from zero, as Rust's
  ``f64::round``).
* ``(int x)``: truncates toward zero to an integer; ``(float x)``.
* ``(inf x ...)``, ``(nan x ...)``: predicates over floats; they are always
  false because non-finite floats cannot exist here. Called with no argument
  (Ketos returns infinity or NaN) they fail.
* ``numer``, ``denom``: of an integer ``n`` are ``n`` and ``1``; ``fract``
  of a float is ``x - trunc(x)``; ``rat`` and ``recip`` return an integer
  when the exact rational has denominator 1 and otherwise fail (there are no
  ratios, as with ``/``).
* ``(. map :key)``: the value of an existing key (the keyword's name) of a
  typed map, else an error; ``(.= map :k v ...)``: a new map with existing
  keys replaced (an absent key is an error, like an absent struct field).
* ``(print fmt arg ...)``, ``(println fmt arg ...)``: format like ``format``
  and append the text to the activation log as one record (``println`` adds
  a trailing newline unless the text ends with one).
* ``new``, ``is-instance`` (no struct definitions: ``struct`` is reserved)
  and ``bytes`` (no byte-string type) fail with a clear error naming the
  alternative.

Every function has the builtin signature ``fn(run, args) -> value`` and is
charged by the evaluator like any other builtin.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from svit_cluster.errors import SvitError
from svit_cluster.lisp._builtins_core import arity, expect_int, expect_str, number
from svit_cluster.lisp._builtins_seq import b_format
from svit_cluster.lisp._errors import resource_limit, script_failed
from svit_cluster.lisp._meter import Run
from svit_cluster.lisp._types import (
    Keyword,
    container_height,
    height,
    remember,
    to_value,
    type_name,
)

__all__ = ["KETOS"]

Args = Sequence[Any]

#: Largest shift amount or exponent Ketos accepts (a Rust ``u32``).
U32_MAX = (1 << 32) - 1


def _float(name: str, value: int | float) -> float:
    try:
        return float(value)
    except OverflowError:
        raise script_failed(f"{name}: number too large for a float") from None


def _finite(name: str, value: float) -> float:
    if not math.isfinite(value):
        raise script_failed(f"{name}: result is not a finite number")
    return value


def _bits_error(r: Run) -> SvitError:
    return resource_limit("integer bits", f"max_integer_bits={r.meter.limits.max_integer_bits}")


# -- powers and shifts ----------------------------------------------------------


def b_pow(r: Run, a: Args) -> Any:
    arity("^", a, 2)
    base, exp = number("^", a[0]), number("^", a[1])
    if type(base) is int and type(exp) is int and exp >= 0:
        if exp > U32_MAX:
            raise script_failed("^: exponent is too large")
        mag = abs(base)
        # |base|^exp >= 2^((bit_length-1)*exp): refuse before computing.
        if mag > 1 and (mag.bit_length() - 1) * exp >= r.ihi.bit_length() + 1:
            raise _bits_error(r)
        return r.big(base**exp)
    x, y = _float("^", base), _float("^", exp)
    try:
        out = math.pow(x, y)
    except (OverflowError, ValueError, ZeroDivisionError):
        raise script_failed("^: result is not a finite number") from None
    return _finite("^", out)


def _shift_amount(name: str, value: Any) -> int:
    k = expect_int(name, value)
    if k < 0 or k > U32_MAX:
        raise script_failed(f"{name}: shift amount {k} is outside 0..{U32_MAX}")
    return k


def b_shl(r: Run, a: Args) -> Any:
    arity("<<", a, 2)
    n = expect_int("<<", a[0])
    k = _shift_amount("<<", a[1])
    if n == 0:
        return 0
    if abs(n).bit_length() + k > r.ihi.bit_length() + 1:
        raise _bits_error(r)
    return r.big(n << k)


def b_shr(r: Run, a: Args) -> Any:
    arity(">>", a, 2)
    n = expect_int(">>", a[0])
    k = _shift_amount(">>", a[1])
    return n >> k


# -- rounding and conversion ---------------------------------------------------------


def _signed_zero(value: float, like: float) -> float:
    return math.copysign(value, like) if value == 0 else value


def _rounder(name: str, op: Callable[[float], int]) -> Callable[[Run, Args], Any]:
    def fn(r: Run, a: Args) -> Any:
        arity(name, a, 1)
        x = number(name, a[0])
        if type(x) is int:
            return x
        return _signed_zero(float(op(x)), x)

    fn.__name__ = f"b_{name}"
    return fn


def _round_half_away(x: float) -> int:
    t = math.trunc(x)
    if abs(x - t) >= 0.5:  # x - trunc(x) is exact for every finite float
        t += 1 if x > 0 else -1
    return t


def b_int(r: Run, a: Args) -> Any:
    arity("int", a, 1)
    x = number("int", a[0])
    if type(x) is int:
        return x
    t = math.trunc(x)
    if t < r.ilo or t > r.ihi:
        raise _bits_error(r)
    return r.big(t)


def b_float(r: Run, a: Args) -> Any:
    arity("float", a, 1)
    return _float("float", number("float", a[0]))


def _float_predicate(name: str) -> Callable[[Run, Args], Any]:
    def fn(r: Run, a: Args) -> Any:
        if not a:
            raise script_failed(
                f"{name}: non-finite floats are not supported (Svit values are finite)"
            )
        for x in a:
            if type(x) is not float:
                raise script_failed(f"{name} expects a float, got {type_name(x)}")
        return False  # every float a guest can hold is finite

    fn.__name__ = f"b_{name}"
    return fn


# -- rationals over integers ------------------------------------------------------------


def _no_ratio(name: str) -> SvitError:
    return script_failed(f"{name}: the result is not an integer (ratios are not supported)")


def _integer_or_ratio(name: str, value: Any) -> int:
    if type(value) is int:
        return value
    raise script_failed(f"{name} expects an integer or ratio, got {type_name(value)}")


def b_numer(r: Run, a: Args) -> Any:
    arity("numer", a, 1)
    return _integer_or_ratio("numer", a[0])


def b_denom(r: Run, a: Args) -> Any:
    arity("denom", a, 1)
    _integer_or_ratio("denom", a[0])
    return 1


def b_fract(r: Run, a: Args) -> Any:
    arity("fract", a, 1)
    x = a[0]
    if type(x) is not float:
        raise script_failed(f"fract expects a float or ratio, got {type_name(x)}")
    return _signed_zero(x - math.trunc(x), x)


def b_rat(r: Run, a: Args) -> Any:
    arity("rat", a, 1, 2)
    if len(a) == 2:
        n, d = expect_int("rat", a[0]), expect_int("rat", a[1])
        if d == 0:
            raise script_failed("division by zero")
        if n % d:
            raise _no_ratio("rat")
        return r.big(n // d)
    x = number("rat", a[0])
    if type(x) is int:
        return x
    n, d = x.as_integer_ratio()
    if d != 1:
        raise _no_ratio("rat")
    return r.big(n)


def b_recip(r: Run, a: Args) -> Any:
    arity("recip", a, 1)
    x = number("recip", a[0])
    if x == 0:
        raise script_failed("division by zero")
    if type(x) is int:
        if x in (1, -1):
            return x
        raise _no_ratio("recip")
    return _finite("recip", 1.0 / x)


# -- struct-style access on typed maps ---------------------------------------------------


def _map(name: str, value: Any) -> dict[str, Any]:
    if type(value) is dict:
        return value
    raise script_failed(f"{name} expects a map (Svit has no struct values), got {type_name(value)}")


def _field(name: str, value: Any) -> str:
    if type(value) is Keyword:
        return value.name
    raise script_failed(f"{name} expects a keyword field name, got {type_name(value)}")


def b_dot(r: Run, a: Args) -> Any:
    arity(".", a, 2)
    m = _map(".", a[0])
    key = _field(".", a[1])
    if key not in m:
        raise script_failed(f".: map has no field :{key[:200]}")
    return m[key]


def b_dot_eq(r: Run, a: Args) -> Any:
    arity(".=", a, 1, -1)
    m = _map(".=", a[0])
    if len(a) % 2 == 0:
        raise script_failed(".= expects keyword/value pairs after the map")
    out = dict(m)
    new: list[Any] = []
    for i in range(1, len(a), 2):
        key = _field(".=", a[i])
        if key not in m:
            raise script_failed(f".=: map has no field :{key[:200]}")
        value = to_value(r, a[i + 1])
        out[key] = value
        new.append(value)
    r.touch(len(out))
    r.alloc(16 + 16 * len(out))
    remember(r, out, max(height(r, m), container_height(r, new)))
    return out


def _unsupported(name: str, why: str) -> Callable[[Run, Args], Any]:
    def fn(r: Run, a: Args) -> Any:
        raise script_failed(f"{name} is not supported in Svit Lisp: {why}")

    fn.__name__ = "b_" + "".join(c if c.isalnum() else "_" for c in name)
    return fn


# -- printing to the activation log ----------------------------------------------------------


def _print(r: Run, a: Args, name: str, newline: bool) -> Any:
    arity(name, a, 1, -1)
    expect_str(name, a[0])
    text = b_format(r, a)
    if newline and not text.endswith("\n"):
        text += "\n"
    try:
        r.host.log_info(text)
    except SvitError as e:
        r.foreign = e
        raise
    return ()


def b_print(r: Run, a: Args) -> Any:
    return _print(r, a, "print", False)


def b_println(r: Run, a: Args) -> Any:
    return _print(r, a, "println", True)


KETOS: dict[str, Callable[[Run, Args], Any]] = {
    "^": b_pow,
    "<<": b_shl,
    ">>": b_shr,
    "ceil": _rounder("ceil", math.ceil),
    "floor": _rounder("floor", math.floor),
    "round": _rounder("round", _round_half_away),
    "trunc": _rounder("trunc", math.trunc),
    "int": b_int,
    "float": b_float,
    "inf": _float_predicate("inf"),
    "nan": _float_predicate("nan"),
    "denom": b_denom,
    "fract": b_fract,
    "numer": b_numer,
    "rat": b_rat,
    "recip": b_recip,
    "bytes": _unsupported("bytes", "there is no byte-string type; use strings"),
    "is-instance": _unsupported(
        "is-instance", "there are no struct definitions (struct is reserved); use map?"
    ),
    ".": b_dot,
    ".=": b_dot_eq,
    "new": _unsupported(
        "new", "there are no struct definitions (struct is reserved); use value-map"
    ),
    "print": b_print,
    "println": b_println,
}
