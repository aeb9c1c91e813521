"""Compile read forms into :class:`~svit_cluster.lisp._nodes.Node` trees.

Special forms: ``quote``, ``if``, ``cond``, ``case``, ``and``, ``or``, ``do``,
``let`` (sequential bindings), ``lambda``, ``define``. Module forms (``use``,
``export``, ...) fail closed. Variables are resolved lexically at compile time
to ``(depth, slot)``; a free name is ``input``, a builtin, or a script global.
Builtin names cannot be redefined with ``define`` (they may be shadowed by
local bindings).

The compiler walks nested syntax with an explicit stack of generators
(:func:`_drive`), so deep syntax never exhausts the Python stack.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any

from svit_cluster.errors import ScriptFailed
from svit_cluster.lisp._builtins import BUILTINS, CONSTANTS
from svit_cluster.lisp._errors import source_path
from svit_cluster.lisp._nodes import (
    AND,
    DO,
    OR,
    Node,
    mk_app,
    mk_case,
    mk_cond,
    mk_const,
    mk_define,
    mk_global,
    mk_if,
    mk_input,
    mk_lambda,
    mk_let,
    mk_local,
    mk_seq,
    mk_unit,
)
from svit_cluster.lisp._reader import Form
from svit_cluster.lisp._types import UNBOUND, Keyword, Lambda, Symbol, SynList

__all__ = ["compile_forms"]

#: A compile step: a node, or a generator that yields sub-steps and returns a node.
Step = Any
Gen = Generator[Any, Any, Any]

_RESERVED = frozenset(
    {"use", "export", "import", "load", "require", "macro", "struct", "const",
     "quasiquote", "unquote", "unquote-splicing", "set!", "eval"}
)


class _Scope:
    """Slot allocator of one function frame (slots 0 and 1 are parent and run)."""

    __slots__ = ("nslots",)

    def __init__(self) -> None:
        self.nslots = 2

    def alloc(self) -> int:
        self.nslots += 1
        return self.nslots - 1


class _Block:
    __slots__ = ("fn", "names", "parent")

    def __init__(self, fn: _Scope, parent: _Block | None) -> None:
        self.fn = fn
        self.parent = parent
        self.names: dict[str, int] = {}


def _resolve(blk: _Block | None, name: str) -> tuple[int, int] | None:
    if blk is None:
        return None
    depth = 0
    fn = blk.fn
    b: _Block | None = blk
    while b is not None:
        if b.fn is not fn:
            depth += 1
            fn = b.fn
        slot = b.names.get(name)
        if slot is not None:
            return depth, slot
        b = b.parent
    return None


def _drive(step: Step) -> Any:
    """Run a compile step to completion with an explicit generator stack."""
    if type(step) is Node:
        return step
    stack: list[Gen] = [step]
    value: Any = None
    while stack:
        try:
            request = stack[-1].send(value)
        except StopIteration as stop:
            stack.pop()
            value = stop.value
            continue
        if type(request) is Node:
            value = request
        else:
            stack.append(request)
            value = None
    return value


class _Compiler:
    def __init__(self, name: str) -> None:
        self.path = source_path(name)

    # -- helpers -----------------------------------------------------------
    def where(self, form: SynList) -> str:
        return f"{self.path}:{form.line}:{form.col}"

    def error(self, where: str, message: str) -> ScriptFailed:
        return ScriptFailed(f"{where}: {message}", at=where)

    def sub(self, x: Any, blk: _Block, where: str) -> Step:
        t = type(x)
        if t is SynList:
            if not x:
                return mk_const((), self.where(x))
            return self.form(x, blk, self.where(x))
        if t is Symbol:
            return self.symbol(x.name, blk, where)
        return mk_const(x, where)

    def symbol(self, name: str, blk: _Block, where: str) -> Node:
        if name in _SPECIAL or name in _RESERVED:
            raise self.error(where, f"{name} is a special form, not a value")
        found = _resolve(blk, name)
        if found is not None:
            return mk_local(found[0], found[1], where)
        if name == "input":
            return mk_input(where)
        if name in BUILTINS:
            return mk_const(BUILTINS[name], where)
        if name in CONSTANTS:
            return mk_const(CONSTANTS[name], where)
        return mk_global(name, where)

    def body(self, exprs: Sequence[Any], blk: _Block, where: str, what: str) -> Gen:
        if not exprs:
            raise self.error(where, f"{what} needs a body")
        nodes = []
        for x in exprs:
            nodes.append((yield self.sub(x, blk, where)))
        return nodes[0] if len(nodes) == 1 else mk_seq(DO, nodes, where)

    def datum(self, x: SynList) -> Gen:
        out = []
        for item in x:
            out.append((yield self.datum(item)) if type(item) is SynList else item)
        return tuple(out)

    # -- forms --------------------------------------------------------------
    def form(self, x: SynList, blk: _Block, where: str) -> Step:
        head = x[0]
        if type(head) is Symbol:
            special = _SPECIAL.get(head.name)
            if special is not None:
                return special(self, x, blk, where)
            if head.name in _RESERVED:
                raise self.error(
                    where, f"{head.name} is not available: Svit Lisp has no modules or macros"
                )
        return self.app(x, blk, where)

    def app(self, x: SynList, blk: _Block, where: str) -> Gen:
        head = x[0]
        static = None
        if type(head) is Symbol and _resolve(blk, head.name) is None:
            static = BUILTINS.get(head.name)
        op = mk_const(static, where) if static is not None else (yield self.sub(head, blk, where))
        args = []
        for a in x[1:]:
            args.append((yield self.sub(a, blk, where)))
        return mk_app(static, op, args, where)

    def f_quote(self, x: SynList, blk: _Block, where: str) -> Gen:
        if len(x) != 2:
            raise self.error(where, "quote takes exactly one datum")
        d = x[1]
        value = (yield self.datum(d)) if type(d) is SynList else d
        return mk_const(value, where)

    def f_if(self, x: SynList, blk: _Block, where: str) -> Gen:
        if len(x) not in (3, 4):
            raise self.error(where, "if takes a condition, a then branch and an optional else")
        test = yield self.sub(x[1], blk, where)
        then = yield self.sub(x[2], blk, where)
        other = (yield self.sub(x[3], blk, where)) if len(x) == 4 else mk_unit(where)
        return mk_if(test, then, other, where)

    def f_cond(self, x: SynList, blk: _Block, where: str) -> Gen:
        clauses: list[tuple[Node | None, Node]] = []
        for i, clause in enumerate(x[1:]):
            if type(clause) is not SynList or len(clause) < 2:
                raise self.error(where, "cond clause must be (test body...)")
            cw = self.where(clause)
            if clause[0] == _ELSE:
                if i != len(x) - 2:
                    raise self.error(cw, "else must be the last cond clause")
                test = None
            else:
                test = yield self.sub(clause[0], blk, cw)
            body = yield self.body(clause[1:], blk, cw, "cond clause")
            clauses.append((test, body))
        return mk_cond(clauses, where)

    def f_case(self, x: SynList, blk: _Block, where: str) -> Gen:
        if len(x) < 2:
            raise self.error(where, "case needs a key expression")
        key = yield self.sub(x[1], blk, where)
        clauses: list[tuple[tuple[Any, ...] | None, Node]] = []
        for i, clause in enumerate(x[2:]):
            if type(clause) is not SynList or len(clause) < 2:
                raise self.error(where, "case clause must be ((values...) body...)")
            cw = self.where(clause)
            head = clause[0]
            consts: tuple[Any, ...] | None
            if head == _ELSE:
                if i != len(x) - 3:
                    raise self.error(cw, "else must be the last case clause")
                consts = None
            elif type(head) is SynList:
                consts = yield self.datum(head)
            else:
                consts = (head,)
            body = yield self.body(clause[1:], blk, cw, "case clause")
            clauses.append((consts, body))
        return mk_case(key, clauses, where)

    def f_and_or(self, x: SynList, blk: _Block, where: str) -> Gen:
        kind = AND if x[0].name == "and" else OR
        if len(x) == 1:
            return mk_const(kind == AND, where)
        items = []
        for e in x[1:]:
            items.append((yield self.sub(e, blk, where)))
        return mk_seq(kind, items, where)

    def f_do(self, x: SynList, blk: _Block, where: str) -> Gen:
        if len(x) == 1:
            return mk_const((), where)
        items = []
        for e in x[1:]:
            items.append((yield self.sub(e, blk, where)))
        return mk_seq(DO, items, where)

    def f_let(self, x: SynList, blk: _Block, where: str) -> Gen:
        if len(x) < 3 or type(x[1]) is not SynList:
            raise self.error(where, "let takes ((name value)...) and a body")
        inner = _Block(blk.fn, blk)
        pairs: list[tuple[int, Node]] = []
        for binding in x[1]:
            if (
                type(binding) is not SynList
                or len(binding) != 2
                or type(binding[0]) is not Symbol
            ):
                raise self.error(where, "let binding must be (name value)")
            self.check_bindable(binding[0].name, where)
            value = yield self.sub(binding[1], inner, self.where(binding))
            slot = blk.fn.alloc()
            inner.names[binding[0].name] = slot
            pairs.append((slot, value))
        body = yield self.body(x[2:], inner, where, "let")
        if not pairs:
            return body
        return mk_let(pairs, body, where, fill=False)

    def f_lambda(self, x: SynList, blk: _Block, where: str) -> Gen:
        if len(x) < 3 or type(x[1]) is not SynList:
            raise self.error(where, "lambda takes (params...) and a body")
        lam = yield self.function("lambda", x[1], x[2:], blk, where)
        return mk_lambda(lam, where)

    def f_define(self, x: SynList, blk: _Block, where: str) -> Gen:
        if len(x) < 3:
            raise self.error(
                where, "define takes a name and a value, or (name params...) and a body"
            )
        target = x[1]
        if type(target) is SynList:
            if not target or type(target[0]) is not Symbol:
                raise self.error(where, "define (name params...) needs a symbol name")
            name = target[0].name
            self.check_definable(name, where)
            lam = yield self.function(name, target[1:], x[2:], blk, where)
            return mk_define(name, mk_lambda(lam, where), where)
        if type(target) is not Symbol or len(x) != 3:
            raise self.error(where, "define takes a symbol name and one value")
        self.check_definable(target.name, where)
        value = yield self.sub(x[2], blk, where)
        return mk_define(target.name, value, where)

    def check_bindable(self, name: str, where: str) -> None:
        if name in _SPECIAL or name in _RESERVED:
            raise self.error(where, f"cannot bind special form name {name}")

    def check_definable(self, name: str, where: str) -> None:
        self.check_bindable(name, where)
        if name in BUILTINS or name in CONSTANTS or name == "input":
            raise self.error(where, f"cannot redefine builtin {name}")

    def function(
        self, name: str, params: Sequence[Any], body: Sequence[Any], blk: _Block, where: str
    ) -> Gen:
        specs = self.params(params, where)
        fn = _Scope()
        fblk = _Block(fn, blk)
        lam = Lambda(name, where)
        slots = [fn.alloc() for _ in specs]
        fills: list[tuple[int, Node]] = []
        missing: list[Any] = []
        kmissing: list[Any] = []
        keys: list[str] = []
        for (mode, pname, default), slot in zip(specs, slots, strict=True):
            if default is not None:
                fills.append((slot, (yield self.sub(default, fblk, where))))
            marker = UNBOUND if default is not None else ()
            if mode == "opt":
                missing.append(marker)
            elif mode == "key":
                keys.append(pname)
                kmissing.append(marker)
            elif mode == "rest":
                lam.rest = True
            else:
                lam.nreq += 1
            fblk.names[pname] = slot
        lam.nopt = len(missing)
        lam.missing = tuple(missing)
        lam.keys = tuple(keys)
        lam.kmissing = tuple(kmissing)
        lam.plain = lam.nreq == len(specs)
        node = yield self.body(body, fblk, where, "function")
        if fills:
            node = mk_let(fills, node, where, fill=True)
        lam.body = node
        lam.pad = [UNBOUND] * (fn.nslots - 2 - len(specs))
        return lam

    def params(self, params: Sequence[Any], where: str) -> list[tuple[str, str, Any]]:
        """Parse ``a b :optional c (d 1) :key (e 2) :rest r`` into (mode, name, default)."""
        mode = "req"
        specs: list[tuple[str, str, Any]] = []
        seen: set[str] = set()
        after = {"optional": ("req",), "key": ("req", "opt"), "rest": ("req", "opt")}
        for p in params:
            if type(p) is Keyword:
                allowed = after.get(p.name)
                if allowed is None or mode not in allowed:
                    raise self.error(where, f"unexpected :{p.name} in parameter list")
                mode = {"optional": "opt", "key": "key", "rest": "rest"}[p.name]
                continue
            default = None
            if type(p) is Symbol:
                pname = p.name
            elif (
                type(p) is SynList and len(p) == 2 and type(p[0]) is Symbol
                and mode in ("opt", "key")
            ):
                pname, default = p[0].name, p[1]
            else:
                raise self.error(where, "malformed parameter")
            if mode == "rest" and specs and specs[-1][0] == "rest":
                raise self.error(where, ":rest takes exactly one name")
            if pname in seen:
                raise self.error(where, f"duplicate parameter {pname}")
            self.check_bindable(pname, where)
            seen.add(pname)
            specs.append((mode, pname, default))
        if mode == "rest" and (not specs or specs[-1][0] != "rest"):
            raise self.error(where, ":rest needs a name")
        return specs


_ELSE = Symbol("else")

_SPECIAL: dict[str, Any] = {
    "quote": _Compiler.f_quote,
    "if": _Compiler.f_if,
    "cond": _Compiler.f_cond,
    "case": _Compiler.f_case,
    "and": _Compiler.f_and_or,
    "or": _Compiler.f_and_or,
    "do": _Compiler.f_do,
    "let": _Compiler.f_let,
    "lambda": _Compiler.f_lambda,
    "define": _Compiler.f_define,
}


def compile_forms(forms: Sequence[Form], name: str) -> tuple[list[Node], int]:
    """Compile top-level forms.

    Returns:
        The top-level nodes, in order, and the size of the top-level frame.

    Raises:
        ScriptFailed: a malformed special form, a module form, or a reserved
            name (the message carries ``/lib/<name>.svit-script:LINE:COL``).
    """
    compiler = _Compiler(name)
    top = _Scope()
    blk = _Block(top, None)
    nodes = []
    for datum, line, col in forms:
        where = f"{compiler.path}:{line}:{col}"
        nodes.append(_drive(compiler.sub(datum, blk, where)))
    return nodes, top.nslots
