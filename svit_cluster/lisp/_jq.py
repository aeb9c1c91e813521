"""A small, deterministic subset of jq for the ``jq`` runtime helper.

``(jq filter value)`` returns an array of every output of ``filter`` on
``value``, like the reference's ``jq`` helper. If ``value`` is a string that
holds JSON it is decoded first, and an HTTP response map ``{status (integer),
headers (map), body (JSON text)}`` is replaced by its decoded body (the
reference does both).

Supported syntax (anything else fails with a ``script_failed`` error that
names the construct):

==========================  ==================================================
``.``                       identity
``.key`` ``."key"``         object field (null on null; absent gives null)
``.[n]``                    array element (negative counts from the end;
                            out of range gives null)
``.["key"]``                object field
``.[]``                     every element of an array or value of an object
                            (objects iterate in sorted key order)
``.[a:b]``                   slice of an array or string (either bound may be
                            omitted; negative counts from the end; null on null)
``{k: f, "k": f, (f): g}``  object construction, one object per combination of
``{k}``                     outputs; ``{k}`` is ``{k: .k}``
``f?``                      suppress errors of ``f``
``f | g``  ``f, g``         pipe, and concatenation of outputs
``[f]``  ``(f)``            collect outputs into an array; grouping
literals                    numbers, strings (JSON escapes), ``true``,
                            ``false``, ``null``
``==  !=  <  <=  >  >=``    comparison, with jq's order of types
                            (null < false < true < numbers < strings <
                            arrays < objects)
``and  or``                 boolean logic (``false`` and ``null`` are falsy)
``select(f)``  ``map(f)``   keep the input when ``f`` is truthy; ``[.[] | f]``
``has(k)``                  object key or array index present
``sort_by(f)``               stable sort by ``[f]`` (charged n*log2(n) steps)
``startswith(s)``           string prefix test
``to_entries``              ``[{key, value}]`` in sorted key order
``reverse``                 reversed array or string (null gives ``[]``)
``length keys type not``    as in jq (``keys`` are sorted)
``empty``                   no output
==========================  ==================================================

Bounds (the reference's): the filter is 1 to 4096 bytes and nests at most 64
levels, at most 100 outputs, whose JSON text totals at most
``max_text_bytes``. Every 8 evaluation steps cost one fuel unit, so a filter
that explodes over a large input stops at the fuel limit deterministically.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Iterator
from typing import Any

from svit_cluster.errors import SvitError
from svit_cluster.lisp._errors import resource_limit, script_failed
from svit_cluster.lisp._meter import Run
from svit_cluster.lisp._types import container_height, remember
from svit_cluster.values import from_plain_json, strict_json_loads, to_plain_json

__all__ = ["MAX_FILTER_BYTES", "MAX_FILTER_NESTING", "MAX_RESULTS", "run_jq"]

MAX_FILTER_BYTES = 4 * 1024
MAX_FILTER_NESTING = 64
MAX_RESULTS = 100

#: jq names that loop, recurse or read input: refused like the reference does.
_UNBOUNDED = frozenset(
    {"def", "recurse", "repeat", "while", "until", "range", "input", "inputs", "limit",
     "reduce", "foreach", "env", "getpath", "paths", "walk", "..", "$__loc__"}
)
_FUNCTIONS = ("select", "map", "has", "sort_by", "startswith", "length", "keys", "type",
              "not", "empty", "to_entries", "reverse")

Filter = Callable[[Any], Iterator[Any]]


class JqError(Exception):
    """A jq runtime error (``error`` in jq); ``?`` suppresses it."""


# -- lexer -------------------------------------------------------------------------

_PUNCT = ("==", "!=", "<=", ">=", "|", ",", "(", ")", "[", "]", "{", "}", ":", ";", "<", ">",
          "?", ".")


def _tokens(text: str) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in " \t\r\n":
            i += 1
            continue
        if c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            if j >= n:
                raise script_failed("jq: unterminated string")
            try:
                out.append(("str", json.loads(text[i : j + 1])))
            except ValueError:
                raise script_failed("jq: invalid string literal") from None
            i = j + 1
            continue
        if c.isdigit() or (c == "-" and i + 1 < n and text[i + 1].isdigit()):
            j = i + 1
            while j < n and (text[j].isdigit() or text[j] in ".eE" or
                             (text[j] in "+-" and text[j - 1] in "eE")):
                j += 1
            lit = text[i:j]
            try:
                num: Any = int(lit) if lit.lstrip("-").isdigit() else float(lit)
            except ValueError:
                raise script_failed(f"jq: invalid number {lit[:40]}") from None
            if type(num) is float and not math.isfinite(num):
                raise script_failed("jq: number literal is not finite")
            out.append(("num", num))
            i = j
            continue
        if c.isalpha() or c == "_" or c == "$":
            j = i + 1
            while j < n and (text[j].isalnum() or text[j] in "_$"):
                j += 1
            out.append(("id", text[i:j]))
            i = j
            continue
        if text.startswith("..", i):
            raise script_failed("jq filter uses an unbounded construct (..)")
        for p in _PUNCT:
            if text.startswith(p, i):
                out.append(("op", p))
                i += len(p)
                break
        else:
            raise script_failed(f"jq: unsupported syntax {text[i:i + 20]!r}")
    out.append(("end", None))
    return out


# -- parser: builds generator closures ------------------------------------------------------


class _Parser:
    def __init__(self, run: _Eval, tokens: list[tuple[str, Any]]) -> None:
        self.ev = run
        self.toks = tokens
        self.pos = 0
        self.depth = 0

    def peek(self) -> tuple[str, Any]:
        return self.toks[self.pos]

    def take(self) -> tuple[str, Any]:
        tok = self.toks[self.pos]
        self.pos += 1
        return tok

    def expect(self, op: str) -> None:
        kind, val = self.take()
        if kind != "op" or val != op:
            raise script_failed(f"jq: expected {op!r}, found {val!r}")

    def at(self, op: str) -> bool:
        kind, val = self.peek()
        return kind == "op" and val == op

    def nest(self) -> None:
        self.depth += 1
        if self.depth > MAX_FILTER_NESTING:
            raise script_failed(f"jq filter nests deeper than {MAX_FILTER_NESTING}")

    def pipe(self) -> Filter:
        self.nest()
        left = self.comma()
        while self.at("|"):
            self.take()
            left = self.ev.pipe(left, self.comma())
        self.depth -= 1
        return left

    def comma(self) -> Filter:
        left = self.or_expr()
        while self.at(","):
            self.take()
            left = self.ev.comma(left, self.or_expr())
        return left

    def or_expr(self) -> Filter:
        left = self.and_expr()
        while self.peek() == ("id", "or"):
            self.take()
            left = self.ev.logic(left, self.and_expr(), is_or=True)
        return left

    def and_expr(self) -> Filter:
        left = self.compare()
        while self.peek() == ("id", "and"):
            self.take()
            left = self.ev.logic(left, self.compare(), is_or=False)
        return left

    def compare(self) -> Filter:
        left = self.postfix()
        kind, val = self.peek()
        if kind == "op" and val in ("==", "!=", "<", "<=", ">", ">="):
            self.take()
            left = self.ev.compare(val, left, self.postfix())
        return left

    def postfix(self) -> Filter:
        f = self.primary()
        while True:
            if self.at("?"):
                self.take()
                f = self.ev.optional(f)
            elif self.at("["):
                f = self.ev.pipe(f, self.bracket())
            elif self.at("."):
                self.take()
                f = self.ev.pipe(f, self.field())
            else:
                return f

    def field(self) -> Filter:
        kind, val = self.peek()
        if kind in ("id", "str"):
            self.take()
            return self.ev.index_const(val)
        if self.at("["):
            return self.bracket()
        raise script_failed(f"jq: expected a field name after '.', found {val!r}")

    def bracket(self) -> Filter:
        self.expect("[")
        if self.at("]"):
            self.take()
            return self.ev.iterate
        start: Filter | None = None
        if not self.at(":"):
            start = self.pipe()
            if not self.at(":"):
                self.expect("]")
                return self.ev.index(start)
        self.expect(":")
        end = None if self.at("]") else self.pipe()
        self.expect("]")
        return self.ev.slice(start, end)

    def object(self) -> Filter:
        """``{...}`` after its ``{``: ``key: f``, ``"key": f``, ``(f): g`` or ``key``."""
        self.nest()
        entries: list[tuple[Filter, Filter]] = []
        while not self.at("}"):
            kind, val = self.take()
            if kind in ("id", "str"):
                key: Filter = self.ev.const(val)
                value: Filter = self.ev.index_const(val)
            elif kind == "op" and val == "(":
                key = self.pipe()
                self.expect(")")
                value = self.ev.identity
            else:
                raise script_failed(f"jq: unexpected {val!r} in an object")
            if self.at(":"):
                self.take()
                value = self.or_expr()
                while self.at("|"):
                    self.take()
                    value = self.ev.pipe(value, self.or_expr())
            elif kind == "op":
                raise script_failed("jq: a computed object key needs a value")
            entries.append((key, value))
            if not self.at("}"):
                self.expect(",")
        self.take()
        self.depth -= 1
        return self.ev.build_object(entries)

    def primary(self) -> Filter:
        kind, val = self.take()
        if kind == "op" and val == ".":
            nk, nv = self.peek()
            if nk in ("id", "str") and not (nk == "id" and nv in ("and", "or")):
                self.take()
                return self.ev.index_const(nv)
            if self.at("["):
                return self.bracket()
            return self.ev.identity
        if kind in ("num", "str"):
            return self.ev.const(val)
        if kind == "op" and val == "(":
            f = self.pipe()
            self.expect(")")
            return f
        if kind == "op" and val == "{":
            return self.object()
        if kind == "op" and val == "[":
            if self.at("]"):
                self.take()
                return self.ev.collect(None)
            f = self.pipe()
            self.expect("]")
            return self.ev.collect(f)
        if kind == "id":
            return self.name(val)
        raise script_failed(f"jq: unexpected {val!r}")

    def name(self, name: str) -> Filter:
        if name in ("true", "false", "null"):
            return self.ev.const({"true": True, "false": False, "null": None}[name])
        if name in _UNBOUNDED:
            raise script_failed("jq filter uses an unbounded construct")
        if name in ("select", "map", "has", "sort_by", "startswith"):
            self.expect("(")
            arg = self.pipe()
            self.expect(")")
            maker: Callable[[Filter], Filter] = getattr(self.ev, "f_" + name)
            return maker(arg)
        if name in ("length", "keys", "type", "not", "empty", "to_entries", "reverse"):
            builtin: Filter = getattr(self.ev, "f_" + name)
            return builtin
        raise script_failed(
            f"jq: unsupported function {name[:40]} (this subset supports "
            f"{', '.join(_FUNCTIONS)})"
        )


# -- evaluation ---------------------------------------------------------------------------

_ORDER = {type(None): 0, bool: 1, int: 3, float: 3, str: 4, list: 5, dict: 6}


def _rank(v: Any) -> int:
    if v is True:
        return 2
    rank = _ORDER.get(type(v))
    if rank is None:
        raise JqError("script records are not JSON data")
    return rank


def _cmp(a: Any, b: Any) -> int:
    ra, rb = _rank(a), _rank(b)
    if ra != rb:
        return -1 if ra < rb else 1
    if type(a) is list:
        for x, y in zip(a, b, strict=False):
            c = _cmp(x, y)
            if c:
                return c
        return (len(a) > len(b)) - (len(a) < len(b))
    if type(a) is dict:
        ka, kb = sorted(a), sorted(b)
        if ka != kb:
            return -1 if ka < kb else 1
        for k in ka:
            c = _cmp(a[k], b[k])
            if c:
                return c
        return 0
    if ra <= 2:
        return 0
    return int(a > b) - int(a < b)


def _truthy(v: Any) -> bool:
    return v is not None and v is not False


def _name(v: Any) -> str:
    r = _rank(v)
    return ("null", "boolean", "boolean", "number", "string", "array", "object")[r]


class _Eval:
    """Builds filters; counts steps and charges fuel on the run's meter."""

    def __init__(self, r: Run) -> None:
        self.r = r
        self.steps = 0

    def step(self) -> None:
        self.steps += 1
        if self.steps & 7 == 0:
            r = self.r
            r.fuel += 1
            if r.fuel > r.check_at:
                r.tick(r.where)

    def identity(self, v: Any) -> Iterator[Any]:
        self.step()
        yield v

    def const(self, c: Any) -> Filter:
        def f(v: Any) -> Iterator[Any]:
            self.step()
            yield c

        return f

    def pipe(self, a: Filter, b: Filter) -> Filter:
        def f(v: Any) -> Iterator[Any]:
            for x in a(v):
                yield from b(x)

        return f

    def comma(self, a: Filter, b: Filter) -> Filter:
        def f(v: Any) -> Iterator[Any]:
            yield from a(v)
            yield from b(v)

        return f

    def optional(self, a: Filter) -> Filter:
        def f(v: Any) -> Iterator[Any]:
            try:
                yield from a(v)
            except JqError:
                return

        return f

    def collect(self, a: Filter | None) -> Filter:
        def f(v: Any) -> Iterator[Any]:
            out = [] if a is None else list(a(v))
            self.r.touch(len(out))
            self.r.alloc(16 + 8 * len(out))
            self.step()
            yield out

        return f

    def _index(self, v: Any, k: Any) -> Any:
        self.step()
        if v is None:
            return None
        if type(k) is str:
            if type(v) is dict:
                return v.get(k)
            raise JqError(f"cannot index {_name(v)} with a string")
        if type(k) in (int, float) and type(k) is not bool:
            if type(v) is list:
                i = math.floor(k)
                if i < 0:
                    i += len(v)
                return v[i] if 0 <= i < len(v) else None
            raise JqError(f"cannot index {_name(v)} with a number")
        raise JqError(f"cannot index {_name(v)} with {_name(k)}")

    def index_const(self, k: Any) -> Filter:
        def f(v: Any) -> Iterator[Any]:
            yield self._index(v, k)

        return f

    def index(self, key: Filter) -> Filter:
        def f(v: Any) -> Iterator[Any]:
            for k in key(v):
                yield self._index(v, k)

        return f

    def iterate(self, v: Any) -> Iterator[Any]:
        if type(v) is list:
            items: Any = v
        elif type(v) is dict:
            items = [v[k] for k in sorted(v)]
        else:
            raise JqError(f"cannot iterate over {_name(v)}")
        for x in items:
            self.step()
            yield x

    def compare(self, op: str, a: Filter, b: Filter) -> Filter:
        test: dict[str, Callable[[int], bool]] = {
            "==": lambda c: c == 0, "!=": lambda c: c != 0, "<": lambda c: c < 0,
            "<=": lambda c: c <= 0, ">": lambda c: c > 0, ">=": lambda c: c >= 0,
        }
        check = test[op]

        def f(v: Any) -> Iterator[Any]:
            for y in b(v):
                for x in a(v):
                    self.step()
                    yield check(_cmp(x, y))

        return f

    def logic(self, a: Filter, b: Filter, *, is_or: bool) -> Filter:
        def f(v: Any) -> Iterator[Any]:
            for x in a(v):
                if _truthy(x) is is_or:
                    yield is_or
                    continue
                for y in b(v):
                    self.step()
                    yield _truthy(y)

        return f

    def slice(self, start: Filter | None, end: Filter | None) -> Filter:
        """``.[start:end]`` of an array or string (null bounds: the ends; null on null)."""

        def bound(b: Any, n: int, default: int) -> int:
            if b is None:
                return default
            if type(b) not in (int, float) or type(b) is bool:
                raise JqError(f"slice bounds must be numbers, not {_name(b)}")
            i: int = math.floor(b)
            if i < 0:
                i += n
            return min(max(i, 0), n)

        def f(v: Any) -> Iterator[Any]:
            for e in end(v) if end is not None else (None,):
                for s in start(v) if start is not None else (None,):
                    self.step()
                    if v is None:
                        yield None
                        continue
                    if type(v) not in (list, str):
                        raise JqError(f"cannot slice {_name(v)}")
                    n = len(v)
                    lo, hi = bound(s, n, 0), bound(e, n, n)
                    part = v[lo:hi] if lo < hi else v[:0]
                    self.r.touch(len(part))
                    self.r.alloc(16 + 8 * len(part))
                    yield part

        return f

    def build_object(self, entries: list[tuple[Filter, Filter]]) -> Filter:
        """``{k: v, ...}``: one object per combination of key and value outputs."""

        def f(v: Any) -> Iterator[Any]:
            def rest(i: int, acc: dict[str, Any]) -> Iterator[dict[str, Any]]:
                if i == len(entries):
                    self.step()
                    self.r.alloc(16 + 16 * len(acc))
                    yield dict(acc)
                    return
                key, value = entries[i]
                for k in key(v):
                    if type(k) is not str:
                        raise JqError(f"object keys must be strings, not {_name(k)}")
                    for x in value(v):
                        acc[k] = x
                        yield from rest(i + 1, acc)
                        del acc[k]

            yield from rest(0, {})

        return f

    def f_sort_by(self, a: Filter) -> Filter:
        def f(v: Any) -> Iterator[Any]:
            if type(v) is not list:
                raise JqError(f"cannot sort {_name(v)}, only an array")
            keyed = [(list(a(x)), i, x) for i, x in enumerate(v)]
            n = len(keyed)
            # A comparison sort: charge n*log2(n) steps up front, so fuel bounds it.
            for _ in range(n * max(1, n.bit_length())):
                self.step()
            self.r.alloc(16 + 8 * n)

            def order(p: tuple[list[Any], int, Any], q: tuple[list[Any], int, Any]) -> int:
                c = _cmp(p[0], q[0])
                return c if c else (p[1] > q[1]) - (p[1] < q[1])

            yield [x for _, _, x in sorted(keyed, key=functools.cmp_to_key(order))]

        return f

    def f_startswith(self, prefix: Filter) -> Filter:
        def f(v: Any) -> Iterator[Any]:
            for p in prefix(v):
                self.step()
                if type(v) is not str or type(p) is not str:
                    raise JqError("startswith() requires string inputs")
                yield v.startswith(p)

        return f

    def f_to_entries(self, v: Any) -> Iterator[Any]:
        self.step()
        if type(v) is not dict:
            raise JqError(f"{_name(v)} has no keys to turn into entries")
        self.r.touch(len(v))
        self.r.alloc(16 + 48 * len(v))
        yield [{"key": k, "value": v[k]} for k in sorted(v)]

    def f_reverse(self, v: Any) -> Iterator[Any]:
        self.step()
        if v is None:
            yield []
        elif type(v) is list or type(v) is str:
            self.r.touch(len(v))
            self.r.alloc(16 + 8 * len(v))
            yield v[::-1]
        else:
            raise JqError(f"cannot reverse {_name(v)}")

    def f_select(self, a: Filter) -> Filter:
        def f(v: Any) -> Iterator[Any]:
            for x in a(v):
                if _truthy(x):
                    yield v

        return f

    def f_map(self, a: Filter) -> Filter:
        return self.collect(self.pipe(self.iterate, a))

    def f_has(self, key: Filter) -> Filter:
        def f(v: Any) -> Iterator[Any]:
            for k in key(v):
                self.step()
                if type(v) is dict and type(k) is str:
                    yield k in v
                elif type(v) is list and type(k) in (int, float) and type(k) is not bool:
                    yield 0 <= k < len(v)
                else:
                    raise JqError(f"cannot check whether {_name(v)} has a {_name(k)} key")

        return f

    def f_length(self, v: Any) -> Iterator[Any]:
        self.step()
        t = type(v)
        if v is None:
            yield 0
        elif t is int or t is float:
            yield abs(v)
        elif t is str or t is list or t is dict:
            yield len(v)
        else:
            raise JqError(f"{_name(v)} has no length")

    def f_keys(self, v: Any) -> Iterator[Any]:
        self.step()
        if type(v) is dict:
            yield sorted(v)
        elif type(v) is list:
            yield list(range(len(v)))
        else:
            raise JqError(f"{_name(v)} has no keys")

    def f_type(self, v: Any) -> Iterator[Any]:
        self.step()
        yield _name(v)

    def f_not(self, v: Any) -> Iterator[Any]:
        self.step()
        yield not _truthy(v)

    def f_empty(self, v: Any) -> Iterator[Any]:
        return iter(())


def _decode(r: Run, value: Any) -> Any:
    """The reference's input decoding: JSON text, then an HTTP response envelope."""

    def text(v: Any) -> Any:
        if type(v) is not str:
            return v
        limits = r.meter.limits
        r.touch(len(v))
        try:
            return from_plain_json(
                strict_json_loads(v, what="jq input"),
                max_depth=r.max_depth,
                max_entries=limits.max_value_entries,
                max_text_bytes=limits.max_text_bytes,
            )
        except SvitError:
            return v

    value = text(value)
    if (
        type(value) is dict
        and type(value.get("body")) is str
        and type(value.get("status")) is int
        and value["status"] >= 0
        and type(value.get("headers")) is dict
    ):
        return text(value["body"])
    return value


def run_jq(r: Run, flt: str, value: Any) -> list[Any]:
    """Run ``flt`` on the plain value ``value``; an array of every output.

    Raises:
        ScriptFailed: an empty, too long, unsupported or invalid filter, a jq
            runtime error (wrong type indexed or iterated), more than
            :data:`MAX_RESULTS` outputs.
        LimitExceeded: fuel; output text over ``max_text_bytes``; an output
            nested deeper than ``max_value_depth``.
    """
    size = len(flt.encode("utf-8", "surrogatepass"))
    if size == 0 or size > MAX_FILTER_BYTES:
        raise script_failed("jq filter is empty or exceeds its limit")
    r.touch(size)
    ev = _Eval(r)
    parser = _Parser(ev, _tokens(flt))
    f = parser.pipe()
    kind, val = parser.peek()
    if kind != "end":
        raise script_failed(f"jq: unexpected {val!r}")
    data = _decode(r, value)
    out: list[Any] = []
    total = 0
    limit = r.meter.limits.max_text_bytes
    try:
        for x in f(data):
            if len(out) == MAX_RESULTS:
                raise script_failed("jq result count limit exceeded")
            text = json.dumps(to_plain_json(x), ensure_ascii=False, separators=(",", ":"))
            total += len(text)
            if total > limit:
                raise resource_limit("text bytes", f"jq output over max_text_bytes={limit}")
            out.append(x)
    except JqError as e:
        raise script_failed(f"jq evaluation failed: {e}") from None
    except RecursionError:  # pragma: no cover - nesting is bounded by the parser
        raise script_failed("jq filter nests too deeply") from None
    r.touch(len(out))
    r.alloc(16 + 8 * len(out) + total)
    remember(r, out, container_height(r, out))
    return out
