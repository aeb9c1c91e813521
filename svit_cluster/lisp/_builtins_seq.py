"""List and string builtins.

Sequence functions accept Lisp lists (``()`` included) and typed arrays; the
result keeps the kind of its input (an array stays an array, and values put
into an array are converted to plain values). String lengths and slice
offsets are in UTF-8 bytes, as in Ketos.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from svit_cluster.lisp._builtins_core import arity, expect_int, expect_str, number
from svit_cluster.lisp._errors import script_failed
from svit_cluster.lisp._meter import Run
from svit_cluster.lisp._types import (
    Char,
    container_height,
    display,
    height,
    remember,
    to_value,
    type_name,
    utf8len,
)

__all__ = ["SEQ"]

Args = Sequence[Any]


def _seq(name: str, value: Any) -> Any:
    t = type(value)
    if t is tuple or t is list:
        return value
    raise script_failed(f"{name} expects a list, got {type_name(value)}")


def _nonempty(name: str, value: Any) -> Any:
    s = _seq(name, value)
    if not s:
        raise script_failed(f"{name} of an empty list")
    return s


def _charge(r: Run, n: int) -> None:
    r.touch(n)
    r.alloc(16 + 8 * n)


def _same_kind(r: Run, source: Any, items: Any) -> Any:
    """A new sequence of ``items`` with the kind of ``source`` (values already plain)."""
    _charge(r, len(items))
    if type(source) is list:
        return list(items)
    return tuple(items)


def b_first(r: Run, a: Args) -> Any:
    arity("first", a, 1)
    return _nonempty("first", a[0])[0]


def b_second(r: Run, a: Args) -> Any:
    arity("second", a, 1)
    s = _seq("second", a[0])
    if len(s) < 2:
        raise script_failed("second of a list shorter than 2")
    return s[1]


def b_last(r: Run, a: Args) -> Any:
    arity("last", a, 1)
    return _nonempty("last", a[0])[-1]


def b_init(r: Run, a: Args) -> Any:
    arity("init", a, 1)
    s = _nonempty("init", a[0])
    return _same_kind(r, s, s[:-1])


def b_tail(r: Run, a: Args) -> Any:
    arity("tail", a, 1)
    s = _nonempty("tail", a[0])
    return _same_kind(r, s, s[1:])


def b_elt(r: Run, a: Args) -> Any:
    arity("elt", a, 2)
    s = _seq("elt", a[0])
    i = expect_int("elt", a[1])
    if i < 0 or i >= len(s):
        raise script_failed(f"elt index {i} out of bounds for length {len(s)}")
    return s[i]


def b_len(r: Run, a: Args) -> Any:
    arity("len", a, 1)
    v = a[0]
    t = type(v)
    if t is tuple or t is list or t is dict:
        return len(v)
    if t is str:
        r.touch(len(v))
        return utf8len(v)
    raise script_failed(f"len expects a list, map or string, got {type_name(v)}")


def b_append(r: Run, a: Args) -> Any:
    arity("append", a, 2, -1)
    s = _seq("append", a[0])
    _charge(r, len(s) + len(a) - 1)
    if type(s) is tuple:
        return s + tuple(a[1:])
    extra = [to_value(r, v) for v in a[1:]]
    out = s + extra
    remember(r, out, max(height(r, s), container_height(r, extra)))
    return out


def _is_text(v: Any) -> bool:
    return type(v) is str or type(v) is Char


def b_concat(r: Run, a: Args) -> Any:
    if not a:
        return ()
    if any(_is_text(v) for v in a):
        parts = []
        for v in a:
            if type(v) is str:
                parts.append(v)
            elif type(v) is Char:
                parts.append(v.ch)
            else:
                raise script_failed(f"concat cannot mix strings with {type_name(v)}")
        total = sum(len(p) for p in parts)
        r.touch(total)
        r.alloc(16 + total)
        return "".join(parts)
    seqs = [_seq("concat", v) for v in a]
    total = sum(len(s) for s in seqs)
    _charge(r, total)
    if any(type(s) is list for s in seqs):
        out: list[Any] = []
        for s in seqs:
            out.extend(s if type(s) is list else [to_value(r, v) for v in s])
        remember(r, out, container_height(r, out))
        return out
    return tuple(v for s in seqs for v in s)


def b_reverse(r: Run, a: Args) -> Any:
    arity("reverse", a, 1)
    s = _seq("reverse", a[0])
    return _same_kind(r, s, s[::-1])


def _bounds(name: str, a: Args, length: int) -> tuple[int, int]:
    begin = expect_int(name, a[1])
    end = expect_int(name, a[2]) if len(a) == 3 else length
    if not 0 <= begin <= end <= length:
        raise script_failed(f"{name} bounds {begin}..{end} out of range for length {length}")
    return begin, end


def b_slice(r: Run, a: Args) -> Any:
    arity("slice", a, 2, 3)
    v = a[0]
    if type(v) is str:
        if v.isascii():
            begin, end = _bounds("slice", a, len(v))
            out = v[begin:end]
        else:
            raw = v.encode("utf-8", "surrogatepass")
            begin, end = _bounds("slice", a, len(raw))
            try:
                out = raw[begin:end].decode("utf-8", "surrogatepass")
            except UnicodeDecodeError:
                raise script_failed("slice offsets are not on character boundaries") from None
        r.touch(len(out))
        r.alloc(16 + len(out))
        return out
    s = _seq("slice", v)
    begin, end = _bounds("slice", a, len(s))
    return _same_kind(r, s, s[begin:end])


def b_null(r: Run, a: Args) -> Any:
    arity("null", a, 1)
    return type(a[0]) is tuple and not a[0]


def b_join(r: Run, a: Args) -> Any:
    arity("join", a, 1, -1)
    sep = a[0]
    rest = list(a[1:])
    if len(rest) == 1 and type(rest[0]) in (tuple, list) and (type(sep) is str or sep == ()):
        rest = list(rest[0])
    if type(sep) is str:
        for v in rest:
            expect_str("join", v)
        out = sep.join(rest)
        r.touch(len(out))
        r.alloc(16 + len(out))
        return out
    sep_items = _seq("join", sep)
    items: list[Any] = []
    for i, v in enumerate(rest):
        if i:
            items.extend(sep_items)
        items.extend(_seq("join", v))
    if not items:
        return ()
    _charge(r, len(items))
    return tuple(items)


def b_chars(r: Run, a: Args) -> Any:
    arity("chars", a, 1)
    s = expect_str("chars", a[0])
    if not s:
        return ()
    _charge(r, len(s))
    return tuple(Char(c) for c in s)


def b_string(r: Run, a: Args) -> Any:
    arity("string", a, 1)
    v = a[0]
    if type(v) is Char:
        return v.ch
    if type(v) is str:
        return v
    raise script_failed(f"string expects a char, got {type_name(v)}")


# -- format --------------------------------------------------------------------

_DIRECTIVE = re.compile(r"((?:[0-9]{1,9}|'.)?(?:,(?:[0-9]{1,9}|'.)?)*)([:@]*)(.)", re.DOTALL)


def _params(text: str) -> list[Any]:
    out: list[Any] = []
    for p in text.split(","):
        if not p:
            out.append(None)
        elif p[0] == "'":
            out.append(p[1])
        else:
            out.append(int(p))
    return out


def _pad(r: Run, text: str, width: Any, left: bool, fill: Any = None) -> str:
    if type(width) is not int or width <= len(text):
        return text
    r.alloc(width)
    pad = (fill if type(fill) is str else " ") * (width - len(text))
    return pad + text if left else text + pad


def b_format(r: Run, a: Args) -> Any:
    arity("format", a, 1, -1)
    fmt = expect_str("format", a[0])
    args = a[1:]
    out: list[str] = []
    i = 0
    used = 0
    while i < len(fmt):
        j = fmt.find("~", i)
        if j < 0:
            out.append(fmt[i:])
            break
        out.append(fmt[i:j])
        m = _DIRECTIVE.match(fmt, j + 1)
        if m is None:
            raise script_failed("format string ends inside a directive")
        i = m.end()
        params, flags, d = _params(m.group(1)) if m.group(1) else [], m.group(2), m.group(3)
        d = d.lower()
        if d == "~":
            out.append("~")
            continue
        if d == "%":
            out.append("\n")
            continue
        if d not in "asdxobcf":
            raise script_failed(f"unsupported format directive ~{d}")
        if used >= len(args):
            raise script_failed("format: not enough arguments")
        v = args[used]
        used += 1
        width = params[0] if params else None
        out.append(_directive(r, d, v, params, flags, width))
    text = "".join(out)
    r.touch(len(fmt) + len(text))
    r.alloc(16 + len(text))
    return text


def _directive(r: Run, d: str, v: Any, params: list[Any], flags: str, width: Any) -> str:
    if d in "as":
        return _pad(r, display(v, d == "s"), width, "@" in flags)
    if d in "dxob":
        n = expect_int(f"~{d}", v)
        text = format(n, {"d": "d", "x": "x", "o": "o", "b": "b"}[d])
        if "@" in flags and n >= 0:
            text = "+" + text
        return _pad(r, text, width, True, params[1] if len(params) > 1 else None)
    if d == "c":
        if type(v) is not Char:
            raise script_failed(f"~c expects a char, got {type_name(v)}")
        return str(v.ch)
    try:
        x = float(number("~f", v))
    except OverflowError:
        raise script_failed("~f: number too large for a float") from None
    prec = params[1] if len(params) > 1 and type(params[1]) is int else None
    text = repr(x) if prec is None else f"{x:.{min(prec, 100)}f}"
    if "@" in flags and x >= 0:
        text = "+" + text
    return _pad(r, text, width, True)


SEQ: dict[str, Callable[[Run, Args], Any]] = {
    "first": b_first,
    "second": b_second,
    "last": b_last,
    "init": b_init,
    "tail": b_tail,
    "elt": b_elt,
    "len": b_len,
    "append": b_append,
    "concat": b_concat,
    "reverse": b_reverse,
    "slice": b_slice,
    "null": b_null,
    "join": b_join,
    "chars": b_chars,
    "string": b_string,
    "format": b_format,
}
