"""Compiled evaluation nodes, and direct closures for the simple ones.

A :class:`Node` is one compiled form. Every node can be run by the evaluator
loop (:mod:`svit_cluster.lisp._evaluator`), which keeps its own explicit stack.
A node that cannot call a guest function and whose syntax height is at most
:data:`MAX_INLINE_HEIGHT` is *simple*: it also gets ``ev``, a Python closure
``ev(frame) -> value`` that evaluates it directly (Python recursion depth is
then bounded by that height). Leaves (literals, variables, ``lambda``) get a
second closure ``raw`` that skips the fuel charge, so that an application can
charge its leaf arguments in one addition.

Fuel charged (see :mod:`svit_cluster.lisp._meter`) is the same on both paths.

A frame is a Python list ``[parent_frame, run, slot2, slot3, ...]``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from svit_cluster.errors import SvitError
from svit_cluster.lisp._errors import relocate, resource_limit, script_failed
from svit_cluster.lisp._types import UNBOUND, Closure, Lambda, Symbol, case_eq, type_name

__all__ = [
    "AND",
    "APP",
    "CASE",
    "COND",
    "CONST",
    "DEFINE",
    "DO",
    "IF",
    "LET",
    "MAX_INLINE_HEIGHT",
    "OR",
    "Node",
    "fail_at",
    "mk_app",
    "mk_case",
    "mk_cond",
    "mk_const",
    "mk_define",
    "mk_global",
    "mk_if",
    "mk_input",
    "mk_lambda",
    "mk_let",
    "mk_local",
    "mk_seq",
    "mk_unit",
    "not_bool",
]

CONST, LOCAL, GLOBAL, INPUT, LAMBDA, IF, COND, CASE, AND, OR, DO, LET, DEFINE, APP = range(14)

#: Largest syntax height evaluated by direct Python closures.
MAX_INLINE_HEIGHT = 24

Frame = list[Any]
Ev = Callable[[Frame], Any]


class Node:
    """One compiled form (see the module docstring)."""

    __slots__ = ("a", "b", "c", "ev", "height", "items", "kind", "raw", "where")

    def __init__(self, kind: int, where: str) -> None:
        self.kind = kind
        self.where = where
        self.ev: Ev | None = None
        self.raw: Ev | None = None
        self.height = 1
        self.a: Any = None
        self.b: Any = None
        self.c: Any = None
        self.items: tuple[Any, ...] = ()


def fail_at(error: SvitError, where: str, foreign: object) -> NoReturn:
    """Raise ``error`` located at ``where`` (unless it is already located or foreign)."""
    located = relocate(error, where, foreign)
    if located is error:
        raise error
    raise located from error


def not_bool(value: Any, where: str) -> SvitError:
    """The error for a non-boolean condition."""
    return relocate(
        script_failed(f"condition must be a bool, got {type_name(value)}"), where, None
    )


def _leaf(kind: int, where: str, raw: Ev) -> Node:
    node = Node(kind, where)
    node.raw = raw

    def ev(f: Frame) -> Any:
        r = f[1]
        r.fuel += 1
        if r.fuel > r.check_at:
            r.tick(where)
        return raw(f)

    node.ev = ev
    return node


def mk_const(value: Any, where: str) -> Node:
    """A literal (or a resolved builtin): costs 1."""
    node = Node(CONST, where)
    node.a = value

    def raw(f: Frame) -> Any:
        return value

    def ev(f: Frame) -> Any:
        r = f[1]
        r.fuel += 1
        if r.fuel > r.check_at:
            r.tick(where)
        return value

    node.raw = raw
    node.ev = ev
    return node


def mk_unit(where: str) -> Node:
    """The implicit ``()`` of an ``if`` without else: free."""
    node = Node(CONST, where)
    node.a = ()

    def ev(f: Frame) -> Any:
        return ()

    node.ev = ev
    return node


def mk_local(depth: int, slot: int, where: str) -> Node:
    """A lexical variable at ``depth`` frames up, ``slot`` in that frame."""
    if depth == 0:

        def raw(f: Frame) -> Any:
            return f[slot]

        node = Node(LOCAL, where)
        node.raw = raw

        def ev(f: Frame) -> Any:
            r = f[1]
            r.fuel += 1
            if r.fuel > r.check_at:
                r.tick(where)
            return f[slot]

        node.ev = ev
        node.a, node.b = depth, slot
        return node
    if depth == 1:

        def raw(f: Frame) -> Any:
            return f[0][slot]

    else:

        def raw(f: Frame) -> Any:
            for _ in range(depth):
                f = f[0]
            return f[slot]

    node = _leaf(LOCAL, where, raw)
    node.a, node.b = depth, slot
    return node


def mk_global(name: str, where: str) -> Node:
    """A global defined by the script (looked up when evaluated)."""

    def raw(f: Frame) -> Any:
        try:
            return f[1].g[name]
        except KeyError:
            raise relocate(script_failed(f"unbound name {name}"), where, None) from None

    node = _leaf(GLOBAL, where, raw)
    node.a = name
    return node


def mk_input(where: str) -> Node:
    """The global ``input``: the activation input."""

    def raw(f: Frame) -> Any:
        return f[1].input

    return _leaf(INPUT, where, raw)


def mk_lambda(lam: Lambda, where: str) -> Node:
    """``lambda``: a closure over the current frame."""

    def raw(f: Frame) -> Any:
        return Closure(lam, f)

    node = _leaf(LAMBDA, where, raw)
    node.a = lam
    return node


def _height(children: Sequence[Node]) -> int:
    return 1 + max((c.height for c in children), default=0)


def _simple(children: Sequence[Node], height: int) -> bool:
    return height <= MAX_INLINE_HEIGHT and all(c.ev is not None for c in children)


def mk_if(test: Node, then: Node, other: Node, where: str) -> Node:
    """``(if test then [else])``."""
    node = Node(IF, where)
    node.a, node.b, node.c = test, then, other
    node.height = _height((test, then, other))
    if not _simple((test, then, other), node.height):
        return node
    t_ev, a_ev, b_ev = test.ev, then.ev, other.ev
    assert t_ev is not None and a_ev is not None and b_ev is not None

    def ev(f: Frame) -> Any:
        r = f[1]
        r.fuel += 1
        if r.fuel > r.check_at:
            r.tick(where)
        t = t_ev(f)
        if t is True:
            return a_ev(f)
        if t is False:
            return b_ev(f)
        raise not_bool(t, where)

    node.ev = ev
    return node


def mk_seq(kind: int, items: Sequence[Node], where: str) -> Node:
    """``do``, ``and``, ``or`` over at least one item (the last is in tail position)."""
    node = Node(kind, where)
    node.items = tuple(items)
    node.height = _height(items)
    if not _simple(items, node.height):
        return node
    evs: list[Ev] = [i.ev for i in items if i.ev is not None]
    init, last = tuple(evs[:-1]), evs[-1]
    if kind == DO:

        def ev(f: Frame) -> Any:
            r = f[1]
            r.fuel += 1
            if r.fuel > r.check_at:
                r.tick(where)
            for e in init:
                e(f)
            return last(f)

    else:
        stop = kind == OR  # value that short-circuits

        def ev(f: Frame) -> Any:
            r = f[1]
            r.fuel += 1
            if r.fuel > r.check_at:
                r.tick(where)
            for e in init:
                v = e(f)
                if v is stop:
                    return v
                if v is not (not stop):
                    raise not_bool(v, where)
            return last(f)

    node.ev = ev
    return node


def mk_let(pairs: Sequence[tuple[int, Node]], body: Node, where: str, fill: bool) -> Node:
    """``let`` (sequential), or the default-filling prologue of a function (``fill``).

    The prologue is synthetic and costs nothing; it only evaluates the default
    of a parameter whose argument was not supplied.
    """
    node = Node(LET, where)
    node.items = tuple(pairs)
    node.b = body
    node.c = fill
    children = [n for _, n in pairs] + [body]
    node.height = _height(children)
    if not _simple(children, node.height):
        return node
    steps = tuple((slot, n.ev) for slot, n in pairs)
    body_ev = body.ev
    assert body_ev is not None
    if fill:

        def ev(f: Frame) -> Any:
            for slot, e in steps:
                if f[slot] is UNBOUND:
                    f[slot] = e(f)  # type: ignore[misc]
            return body_ev(f)

    else:

        def ev(f: Frame) -> Any:
            r = f[1]
            r.fuel += 1
            if r.fuel > r.check_at:
                r.tick(where)
            for slot, e in steps:
                f[slot] = e(f)  # type: ignore[misc]
            return body_ev(f)

    node.ev = ev
    return node


def mk_cond(clauses: Sequence[tuple[Node | None, Node]], where: str) -> Node:
    """``cond``: ``(test body)`` clauses; a ``None`` test is ``else``."""
    node = Node(COND, where)
    node.items = tuple(clauses)
    children = [n for pair in clauses for n in pair if n is not None]
    node.height = _height(children)
    if not _simple(children, node.height):
        return node
    steps = tuple((t.ev if t is not None else None, b.ev) for t, b in clauses)

    def ev(f: Frame) -> Any:
        r = f[1]
        r.fuel += 1
        if r.fuel > r.check_at:
            r.tick(where)
        for test, body in steps:
            if test is None:
                return body(f)  # type: ignore[misc]
            t = test(f)
            if t is True:
                return body(f)  # type: ignore[misc]
            if t is not False:
                raise not_bool(t, where)
        return ()

    node.ev = ev
    return node


def case_select(key: Any, clauses: Sequence[tuple[tuple[Any, ...] | None, Any]]) -> Any:
    """The body of the first ``case`` clause matching ``key`` (``None`` if none)."""
    for consts, body in clauses:
        if consts is None:
            return body
        for c in consts:
            if case_eq(key, c):
                return body
    return None


def mk_case(key: Node, clauses: Sequence[tuple[tuple[Any, ...] | None, Node]], where: str) -> Node:
    """``case``: constant lists compared with :func:`case_eq`; ``None`` is ``else``."""
    node = Node(CASE, where)
    node.a = key
    node.items = tuple(clauses)
    children = [key] + [b for _, b in clauses]
    node.height = _height(children)
    if not _simple(children, node.height):
        return node
    key_ev = key.ev
    assert key_ev is not None
    steps = tuple((consts, b.ev) for consts, b in clauses)

    def ev(f: Frame) -> Any:
        r = f[1]
        r.fuel += 1
        if r.fuel > r.check_at:
            r.tick(where)
        body = case_select(key_ev(f), steps)
        return () if body is None else body(f)

    node.ev = ev
    return node


def mk_define(name: str, value: Node, where: str) -> Node:
    """``define``: bind a global; evaluates to the defined name (a symbol)."""
    node = Node(DEFINE, where)
    node.a, node.b, node.c = name, value, Symbol(name)
    node.height = _height((value,))
    if not _simple((value,), node.height):
        return node
    value_ev = value.ev
    sym = node.c
    assert value_ev is not None

    def ev(f: Frame) -> Any:
        r = f[1]
        r.fuel += 1
        if r.fuel > r.check_at:
            r.tick(where)
        r.define(name, value_ev(f), where)
        return sym

    node.ev = ev
    return node


def mk_app(static: Any, op: Node, args: Sequence[Node], where: str) -> Node:
    """An application. ``static`` is the builtin the operator names, or ``None``."""
    node = Node(APP, where)
    node.items = (op, *args)
    node.height = _height(node.items)
    # For the evaluator loop: per item, the uncharged leaf closure, the charging
    # closure of a simple subtree, or None; leaves are charged with the node.
    node.b = tuple(i.raw if i.raw is not None else i.ev for i in node.items)
    node.c = 1 + sum(1 for i in node.items if i.raw is not None)
    if static is None or not static.inline or not _simple(args, node.height):
        return node
    fast = static.fast
    if fast is not None and len(args) == 2:
        node.ev = _fast_closure(static.fn, fast[0], fast[1], args, where)
    else:
        node.ev = _app_closure(static.fn, args, where)
    return node


def _fast_closure(
    fn: Any, op: Callable[[Any, Any], Any], ranged: bool, args: Sequence[Node], where: str
) -> Ev:
    """A binary builtin application with an inline integer fast path.

    The result is identical to calling the builtin (which is the fallback for
    every non-integer case); a local variable or literal operand is read
    directly instead of through a closure call.
    """
    x_node, y_node = args
    cost = 2 + (x_node.raw is not None) + (y_node.raw is not None)

    def slow(r: Any, x: Any, y: Any) -> Any:
        try:
            return fn(r, (x, y))
        except SvitError as e:
            fail_at(e, where, r.foreign)

    if x_node.kind == LOCAL and x_node.a == 0 and y_node.kind == CONST and y_node.raw:
        xs, yc = x_node.b, y_node.a

        def ev(f: Frame) -> Any:
            r = f[1]
            r.fuel += cost
            if r.fuel > r.check_at:
                r.tick(where)
            x = f[xs]
            if type(x) is int and type(yc) is int:
                v = op(x, yc)
                if not ranged or r.ilo <= v <= r.ihi:
                    return v
            return slow(r, x, yc)

        return ev
    if x_node.kind == LOCAL and x_node.a == 0 and y_node.kind == LOCAL and y_node.a == 0:
        xs, ys = x_node.b, y_node.b

        def ev(f: Frame) -> Any:
            r = f[1]
            r.fuel += cost
            if r.fuel > r.check_at:
                r.tick(where)
            x = f[xs]
            y = f[ys]
            if type(x) is int and type(y) is int:
                v = op(x, y)
                if not ranged or r.ilo <= v <= r.ihi:
                    return v
            return slow(r, x, y)

        return ev
    x_ev = x_node.raw if x_node.raw is not None else x_node.ev
    y_ev = y_node.raw if y_node.raw is not None else y_node.ev
    assert x_ev is not None and y_ev is not None

    def ev_any(f: Frame) -> Any:
        r = f[1]
        r.fuel += cost
        if r.fuel > r.check_at:
            r.tick(where)
        x = x_ev(f)
        y = y_ev(f)
        if type(x) is int and type(y) is int:
            v = op(x, y)
            if not ranged or r.ilo <= v <= r.ihi:
                return v
        return slow(r, x, y)

    return ev_any


def _app_closure(fn: Any, args: Sequence[Node], where: str) -> Ev:
    cost = 2 + sum(1 for a in args if a.raw is not None)
    evs: list[Ev] = [a.raw if a.raw is not None else a.ev for a in args]  # type: ignore[misc]
    if len(evs) == 0:

        def ev(f: Frame) -> Any:
            r = f[1]
            r.fuel += cost
            if r.fuel > r.check_at:
                r.tick(where)
            try:
                return fn(r, ())
            except SvitError as e:
                fail_at(e, where, r.foreign)

    elif len(evs) == 1:
        (a0,) = evs

        def ev(f: Frame) -> Any:
            r = f[1]
            r.fuel += cost
            if r.fuel > r.check_at:
                r.tick(where)
            try:
                return fn(r, (a0(f),))
            except SvitError as e:
                fail_at(e, where, r.foreign)

    elif len(evs) == 2:
        a0, a1 = evs

        def ev(f: Frame) -> Any:
            r = f[1]
            r.fuel += cost
            if r.fuel > r.check_at:
                r.tick(where)
            try:
                return fn(r, (a0(f), a1(f)))
            except SvitError as e:
                fail_at(e, where, r.foreign)

    elif len(evs) == 3:
        a0, a1, a2 = evs

        def ev(f: Frame) -> Any:
            r = f[1]
            r.fuel += cost
            if r.fuel > r.check_at:
                r.tick(where)
            try:
                return fn(r, (a0(f), a1(f), a2(f)))
            except SvitError as e:
                fail_at(e, where, r.foreign)

    else:
        all_evs = tuple(evs)
        nargs = len(all_evs)

        def ev(f: Frame) -> Any:
            r = f[1]
            r.fuel += cost
            if r.fuel > r.check_at:
                r.tick(where)
            if nargs > r.max_vs:  # the arguments occupy the value stack
                fail_at(resource_limit("value stack", f"max_value_stack={r.max_vs}"),
                        where, r.foreign)
            try:
                return fn(r, tuple([e(f) for e in all_evs]))
            except SvitError as e:
                fail_at(e, where, r.foreign)

    return ev
