"""Guest value representation and the walkers over it.

Lisp values are plain Python objects, chosen so that process values cross the
boundary without copying:

==================  ===========================================================
Lisp value          Python
==================  ===========================================================
``()`` / list       ``tuple`` (``()`` is the empty tuple)
integer, float      ``int``, ``float`` (never ``bool``)
string, bool        ``str``, ``bool``
typed null          ``None``   (``value-null?``; differs from ``()``)
typed array / map   ``list`` / ``dict`` (treated as immutable; elements plain)
script record       :class:`~svit_cluster.values.Script` (opaque)
symbol, keyword     :class:`Symbol`, :class:`Keyword`
char                :class:`Char`
function            :class:`Closure` (guest lambda), :class:`Builtin`
==================  ===========================================================

Invariant: every typed array or map reachable by a guest holds only plain
values and is nested at most ``max_value_depth`` deep, so walkers over typed
values never recurse deeper than that. Lisp lists may nest arbitrarily; every
walker over them is depth-bounded.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from svit_cluster.lisp._errors import invalid_value, resource_limit, script_failed
from svit_cluster.values import I64_MAX, I64_MIN, Script, script_json

if TYPE_CHECKING:
    from svit_cluster.lisp._meter import Run

__all__ = [
    "UNBOUND",
    "WALK_DEPTH",
    "Builtin",
    "Char",
    "Closure",
    "DispatchTable",
    "Keyword",
    "Lambda",
    "Symbol",
    "SynList",
    "TailCall",
    "case_eq",
    "display",
    "height",
    "lisp_equal",
    "to_value",
    "type_name",
    "utf8len",
]

#: Depth bound for walkers over Lisp lists (equality, display).
WALK_DEPTH = 128


class Symbol:
    """A symbol (``'name``); compared by name."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __eq__(self, other: object) -> bool:
        return type(other) is Symbol and other.name == self.name

    def __hash__(self) -> int:
        return hash(("sym", self.name))

    def __repr__(self) -> str:
        return self.name


class Keyword:
    """A keyword (``:name``); self-evaluating, compared by name."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __eq__(self, other: object) -> bool:
        return type(other) is Keyword and other.name == self.name

    def __hash__(self) -> int:
        return hash(("kw", self.name))

    def __repr__(self) -> str:
        return ":" + self.name


class Char:
    """A character (``#'a'``, or an element of ``(chars s)``)."""

    __slots__ = ("ch",)

    def __init__(self, ch: str) -> None:
        self.ch = ch

    def __eq__(self, other: object) -> bool:
        return type(other) is Char and other.ch == self.ch

    def __hash__(self) -> int:
        return hash(("char", self.ch))

    def __repr__(self) -> str:
        return f"#'{self.ch}'"


class SynList(tuple[Any, ...]):
    """A parenthesized form as read, with its 1-based source ``line`` and ``col``."""

    line: int
    col: int


class _Unbound:
    __slots__ = ()

    def __repr__(self) -> str:
        return "#<unbound>"


#: Marks an optional parameter with a default that was not supplied. Never
#: visible to guests: the function prologue replaces it before the body runs.
UNBOUND: Any = _Unbound()


class Lambda:
    """The compiled, immutable template of a guest function."""

    __slots__ = (
        "body",
        "keys",
        "kmissing",
        "missing",
        "name",
        "nopt",
        "nreq",
        "pad",
        "plain",
        "rest",
        "where",
    )

    def __init__(self, name: str, where: str) -> None:
        self.name = name
        self.where = where
        self.nreq = 0
        self.nopt = 0
        self.keys: tuple[str, ...] = ()
        self.missing: tuple[Any, ...] = ()
        self.kmissing: tuple[Any, ...] = ()
        self.rest = False
        self.plain = True
        self.pad: list[Any] = []
        self.body: Any = None


class Closure:
    """A guest function value: a :class:`Lambda` plus its captured frame."""

    __slots__ = ("env", "lam")

    def __init__(self, lam: Lambda, env: list[Any]) -> None:
        self.lam = lam
        self.env = env

    def __repr__(self) -> str:
        return f"<lambda {self.lam.name}>"


#: A builtin implementation: ``fn(run, args) -> value``.
BuiltinFn = Callable[["Run", Sequence[Any]], Any]


class Builtin:
    """A host-provided function value.

    Attributes:
        name: the Lisp name.
        fn: ``fn(run, args)``; raises project errors only.
        special: 0, or :data:`SP_APPLY` / :data:`SP_SAFE` for functions the
            evaluator itself implements because they call guest functions, or
            :data:`SP_CALL` for a builtin whose ``fn`` may return a
            :class:`TailCall` for the evaluator to perform.
        inline: ``False`` for builtins that must run from the evaluator loop
            (they re-enter the interpreter, like ``exec``).
        fast: ``(op, ranged)`` for binary integer arithmetic and comparison:
            on two integers the result is ``op(x, y)`` (range-checked if
            ``ranged``), exactly what ``fn`` would return.
    """

    __slots__ = ("fast", "fn", "inline", "name", "special")

    def __init__(
        self,
        name: str,
        fn: BuiltinFn,
        special: int = 0,
        inline: bool = True,
        fast: tuple[Callable[[Any, Any], Any], bool] | None = None,
    ) -> None:
        self.name = name
        self.fn = fn
        self.special = special
        self.inline = inline and special == 0
        self.fast = fast

    def __repr__(self) -> str:
        return f"<function {self.name}>"


SP_APPLY = 1
SP_SAFE = 2
#: A builtin that may call a guest function: ``fn`` returns a value or a :class:`TailCall`.
SP_CALL = 3


class TailCall:
    """What an :data:`SP_CALL` builtin asks the evaluator to do next.

    The evaluator applies ``fn`` to ``args``; when that call returns, ``post``
    (if any) maps its value (``post(run, value) -> value``), and with
    ``catch`` a catchable error of the call becomes an error result, exactly
    as with ``safe-call``.
    """

    __slots__ = ("args", "catch", "fn", "post")

    def __init__(
        self,
        fn: Any,
        args: Sequence[Any],
        post: Callable[[Run, Any], Any] | None = None,
        catch: bool = False,
    ) -> None:
        self.fn = fn
        self.args = args
        self.post = post
        self.catch = catch


class DispatchTable:
    """An ephemeral, guest-built table of named handler functions (``dispatch-table``).

    It holds only the functions the guest listed, so ``dispatch`` can never
    reach any other guest or host function by name. It cannot be stored.
    """

    __slots__ = ("entries",)

    def __init__(self, entries: dict[str, Any]) -> None:
        self.entries = entries

    def __repr__(self) -> str:
        return f"<dispatch-table {len(self.entries)}>"


_NAMES: dict[type, str] = {
    int: "integer",
    float: "float",
    str: "string",
    bool: "bool",
    type(None): "null",
    list: "array",
    dict: "map",
    Symbol: "name",
    Keyword: "keyword",
    Char: "char",
    Closure: "lambda",
    Builtin: "function",
    Script: "script",
    DispatchTable: "dispatch-table",
}


def type_name(value: Any) -> str:
    """The Lisp type name of ``value`` (``type-of``)."""
    if type(value) is tuple:
        return "list" if value else "unit"
    return _NAMES.get(type(value), "object")


def utf8len(text: str) -> int:
    """UTF-8 length of ``text`` in bytes (lone surrogates count as 3)."""
    if text.isascii():
        return len(text)
    return len(text.encode("utf-8", "surrogatepass"))


# -- conversion to plain values ------------------------------------------------


def height(run: Run, value: Any) -> int:
    """Nesting height of a plain value (0 for scalars and empty containers).

    Heights of containers are cached per run; an unseen container (one the host
    returned) is walked once, iteratively, and charged as touched elements.
    """
    t = type(value)
    if t is not list and t is not dict:
        return 0
    hit = run.hcache.get(id(value))
    if hit is not None and hit[0] is value:
        return int(hit[1])
    best = 0
    seen = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        items = node.values() if type(node) is dict else node
        seen += len(items)
        if items:
            best = max(best, depth + 1)
        for child in items:
            tc = type(child)
            if tc is list or tc is dict:
                stack.append((child, depth + 1))
    run.touch(seen)
    run.hcache[id(value)] = (value, best)
    return best


def remember(run: Run, container: list[Any] | dict[str, Any], h: int) -> None:
    """Record the height of a container the guest just built, enforcing the bound.

    Flat containers (height 1) are not cached: walking them later is as cheap.
    """
    if h > run.max_depth:
        raise invalid_value(f"value depth limit exceeded (max_value_depth={run.max_depth})")
    if h > 1:
        run.hcache[id(container)] = (container, h)


def to_value(run: Run, value: Any, depth: int = 0) -> Any:
    """Convert a Lisp value to a plain process value.

    ``()`` becomes null, a Lisp list becomes an array; typed values pass
    through unchanged.

    Raises:
        InvalidInput: (``invalid_value``) a function, symbol, keyword or char,
            or an integer outside signed 64 bits.
        InvalidInput: (``invalid_value``) the result would nest deeper than
            ``max_value_depth`` (reference: value validation is ``invalid_value``).
    """
    t = type(value)
    if t is int:
        if I64_MIN <= value <= I64_MAX:
            return value
        raise invalid_value("integer is outside signed 64-bit range")
    if t is str or t is bool or t is float or value is None or t is list or t is dict:
        return value
    if t is tuple:
        if not value:
            return None
        if depth >= run.max_depth:
            raise invalid_value(f"value depth limit exceeded (max_value_depth={run.max_depth})")
        out = [to_value(run, item, depth + 1) for item in value]
        run.touch(len(out))
        run.alloc(16 + 8 * len(out))
        remember(run, out, container_height(run, out))
        return out
    if t is Script:
        return value
    raise invalid_value(f"Lisp {type_name(value)} values cannot be stored")


def container_height(run: Run, items: Iterable[Any]) -> int:
    """Height of a new container holding the plain values ``items``."""
    best = 0
    for item in items:
        t = type(item)
        if t is list or t is dict:
            best = max(best, 1 + height(run, item))
        elif best == 0:
            best = 1
    return best


# -- equality --------------------------------------------------------------------

_NUM = (int, float)


def lisp_equal(a: Any, b: Any) -> bool:
    """``=``: structural equality; comparing different types is an error.

    Integers and floats compare numerically. Inside lists the comparison is
    lenient (different types are simply unequal); inside typed arrays and maps
    it is type-strict (integer 1 differs from float 1.0).

    Raises:
        ScriptFailed: ``a`` and ``b`` have different, non-numeric types.
    """
    ta = type(a)
    tb = type(b)
    if ta is tb:
        return _eq(a, b, 0, False)
    if ta in _NUM and tb in _NUM:
        return bool(a == b)
    raise script_failed(f"cannot compare {type_name(a)} with {type_name(b)}")


def _eq(a: Any, b: Any, depth: int, strict: bool) -> bool:
    ta = type(a)
    if ta is not type(b):
        if not strict and ta in _NUM and type(b) in _NUM:
            return bool(a == b)
        return False
    if ta is tuple or ta is list:
        if len(a) != len(b):
            return False
        if depth >= WALK_DEPTH:
            raise resource_limit("value depth", "comparison nested too deeply")
        inner = strict or ta is list
        return all(_eq(x, y, depth + 1, inner) for x, y in zip(a, b, strict=True))
    if ta is dict:
        if a.keys() != b.keys():
            return False
        if depth >= WALK_DEPTH:
            raise resource_limit("value depth", "comparison nested too deeply")
        return all(_eq(a[k], b[k], depth + 1, True) for k in a)
    if ta is float:
        return bool(a == b)
    if ta is Closure or ta is Builtin:
        return a is b
    return bool(a == b)


def case_eq(key: Any, const: Any) -> bool:
    """``case`` matching: equal type and value, never an error."""
    tk = type(key)
    if tk is not type(const):
        return False
    if tk is tuple:
        return _eq(key, const, 0, False)
    return bool(key == const)


# -- printing --------------------------------------------------------------------

_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r", "\0": "\\0"}


def _quote_str(text: str) -> str:
    return '"' + "".join(_ESCAPES.get(ch, ch) for ch in text) + '"'


def _json_default(obj: Any) -> Any:
    if type(obj) is Script:
        return script_json(obj)
    raise TypeError(type(obj).__name__)


def display(value: Any, readable: bool = False, depth: int = 0) -> str:
    """Text form of a value: ``~a`` (``readable=False``) or ``~s`` (``True``).

    Lists nested deeper than :data:`WALK_DEPTH` print as ``...``.
    """
    t = type(value)
    if t is str:
        return _quote_str(value) if readable else value
    if t is bool:
        return "true" if value else "false"
    if t is int:
        return str(value)
    if t is float:
        return repr(value) if math.isfinite(value) else "nan"
    if t is tuple:
        if depth >= WALK_DEPTH:
            return "..."
        return "(" + " ".join(display(v, readable, depth + 1) for v in value) + ")"
    if value is None:
        return "null"
    if t is list or t is dict:
        return json.dumps(
            value, sort_keys=True, ensure_ascii=False, separators=(",", ":"),
            default=_json_default,
        )
    if t is Char:
        return repr(value) if readable else value.ch
    if t is Script:
        return "<script>"
    return repr(value)
