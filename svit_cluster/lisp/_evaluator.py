"""The evaluator loop and :class:`Program`.

Guest code runs on an explicit control stack (``ctl``), never on the Python
stack, so deep guest recursion stops at ``max_call_stack`` with a project error
and tail calls run in constant space:

* a call pushes the :data:`RET` marker, unless the marker is already on top
  (the call is in tail position), in which case the frame is simply replaced;
* ``max_call_stack`` bounds the number of :data:`RET` markers (guest frames);
* ``max_value_stack`` bounds the control stack plus the arguments being bound,
  for closures and builtins alike (inline builtin calls of at most 3 arguments
  are not counted; see docs/conformance.md, R1).

Simple subtrees (see :mod:`svit_cluster.lisp._nodes`) are evaluated by their
direct closures; Python recursion depth there is bounded by
``MAX_INLINE_HEIGHT``. ``safe-call`` pushes a marker; a catchable error unwinds
the control stack to the nearest marker and becomes an error result.
"""

from __future__ import annotations

import sys
from typing import Any

from svit_cluster.errors import ErrorCode, LimitExceeded, ScriptFailed, SvitError
from svit_cluster.lisp._builtins import GUEST_SCOPE
from svit_cluster.lisp._builtins_svit import result_error, result_ok
from svit_cluster.lisp._errors import (
    catchable,
    relocate,
    resource_limit,
    script_failed,
    source_path,
)
from svit_cluster.lisp._meter import Meter, Run
from svit_cluster.lisp._nodes import (
    AND,
    APP,
    CASE,
    DEFINE,
    DO,
    IF,
    LET,
    OR,
    Node,
    case_select,
    fail_at,
    not_bool,
)
from svit_cluster.lisp._types import (
    SP_APPLY,
    SP_CALL,
    UNBOUND,
    Builtin,
    Closure,
    Keyword,
    TailCall,
    to_value,
    type_name,
)

__all__ = ["Program"]

M_EVAL, M_RETURN, M_APPLY, M_ARGS, M_LET, M_DO, M_AND, M_OR, M_COND = range(9)
K_ARGS, K_IF, K_LET, K_DO, K_AND, K_OR, K_COND, K_CASE, K_DEF, K_SAFE, K_POST = range(11)

#: Control-stack marker of one guest call frame.
RET = (-1,)

#: Python frames kept free for one nested ``exec`` level (see ``_headroom``).
_RESERVE = 600


def _fail(error: SvitError, where: str) -> SvitError:
    return relocate(error, where, None)


def bind(r: Run, clo: Closure, args: Any, where: str) -> list[Any]:
    """Build the frame of a call with optional, keyword or rest parameters."""
    lam = clo.lam
    n = len(args)
    if n < lam.nreq or (lam.plain and n != lam.nreq):
        raise _fail(script_failed(f"{lam.name} expects {_arity(lam)} argument(s), got {n}"), where)
    frame: list[Any] = [clo.env, r]
    frame.extend(args[: lam.nreq])
    pos = lam.nreq
    for marker in lam.missing:
        if pos < n:
            frame.append(args[pos])
            pos += 1
        else:
            frame.append(marker)
    if lam.rest:
        rest = tuple(args[pos:])
        if rest:
            r.alloc(16 + 8 * len(rest))
        frame.append(rest)
    elif lam.keys:
        given: list[Any] = list(lam.kmissing)
        seen: set[str] = set()
        extra = args[pos:]
        if len(extra) % 2:
            raise _fail(script_failed(f"{lam.name}: odd number of keyword arguments"), where)
        for j in range(0, len(extra), 2):
            kw = extra[j]
            if type(kw) is not Keyword or kw.name not in lam.keys:
                what = f":{kw.name}" if type(kw) is Keyword else f"a {type_name(kw)}"
                raise _fail(script_failed(f"{lam.name}: unexpected argument {what}"), where)
            if kw.name in seen:
                raise _fail(script_failed(f"{lam.name}: duplicate keyword :{kw.name}"), where)
            seen.add(kw.name)
            given[lam.keys.index(kw.name)] = extra[j + 1]
        frame.extend(given)
    elif pos < n:
        raise _fail(script_failed(f"{lam.name} expects {_arity(lam)} argument(s), got {n}"), where)
    if lam.pad:
        frame.extend(lam.pad)
    return frame


def _arity(lam: Any) -> str:
    if lam.plain:
        return str(lam.nreq)
    if lam.rest or lam.keys:
        return f"at least {lam.nreq}"
    return f"{lam.nreq} to {lam.nreq + lam.nopt}"


def _spread(r: Run, vals: list[Any], where: str, used: int) -> list[Any]:
    """``(apply f a... list)``: the call vector ``[_, f, a..., list...]``."""
    if len(vals) < 4:
        raise _fail(script_failed("apply expects a function and an argument list"), where)
    tail = vals[-1]
    if type(tail) is not tuple and type(tail) is not list:
        raise _fail(script_failed(f"apply expects a final list, got {type_name(tail)}"), where)
    spread = vals[1:-1]
    spread[0] = None
    spread.extend(tail)
    r.touch(len(tail))
    if used + len(spread) - 2 > r.max_vs:
        raise _fail(resource_limit("value stack", f"max_value_stack={r.max_vs}"), where)
    return spread


def _run(r: Run, mode: int, node: Any, frame: Any, vals: Any) -> Any:
    ctl: list[Any] = []
    depth = 0
    val: Any = None
    while True:
        try:
            return _loop(r, ctl, mode, node, frame, val, vals, depth)
        except SvitError as e:
            if not catchable(e):
                raise
            idx = len(ctl) - 1
            while idx >= 0 and ctl[idx][0] != K_SAFE:
                idx -= 1
            if idx < 0:
                raise
            depth = ctl[idx][1]
            del ctl[idx:]
            val = result_error(r, e)
            mode = M_RETURN


def _loop(
    r: Run, ctl: list[Any], mode: int, node: Any, frame: Any, val: Any, vals: Any, depth: int
) -> Any:
    """Run until the control stack is empty.

    ``vals`` is the call vector ``[_, fn, arg...]`` being built (``M_ARGS``) or
    applied (``M_APPLY``); a closure call reuses it as the new frame. The
    sections fall through (eval, args, apply, return) so that a typical call
    takes one trip round the outer loop.
    """
    push = ctl.append
    pop = ctl.pop
    max_call = r.max_call
    max_vs = r.max_vs
    i = 0
    while True:
        if mode == M_EVAL:
            while True:
                ev = node.ev
                if ev is not None:
                    val = ev(frame)
                    mode = M_RETURN
                    break
                k = node.kind
                if k == APP:
                    r.fuel += node.c  # the application and its leaf items
                    if r.fuel > r.check_at:
                        r.tick(node.where)
                    vals = [None]
                    mode = M_ARGS
                    break
                if k != LET or not node.c:  # the parameter-default prologue is free
                    r.fuel += 1
                    if r.fuel > r.check_at:
                        r.tick(node.where)
                if k == IF:
                    test = node.a
                    if test.ev is None:
                        push((K_IF, node, frame))
                        node = test
                        continue
                    t = test.ev(frame)
                    if t is True:
                        node = node.b
                    elif t is False:
                        node = node.c
                    else:
                        raise not_bool(t, node.where)
                    continue
                if k == CASE:
                    key = node.a
                    if key.ev is None:
                        push((K_CASE, node, frame))
                        node = key
                        continue
                    body = case_select(key.ev(frame), node.items)
                    if body is None:
                        val = ()
                        mode = M_RETURN
                        break
                    node = body
                    continue
                if k == DEFINE:
                    push((K_DEF, node, frame))
                    node = node.b
                    continue
                i = 0
                if k == LET:
                    mode = M_LET
                elif k == DO:
                    mode = M_DO
                elif k == AND:
                    mode = M_AND
                elif k == OR:
                    mode = M_OR
                else:
                    mode = M_COND
                break

        if mode == M_ARGS:
            evs = node.b
            n = len(evs)
            i = len(vals) - 1
            while i < n:
                ev = evs[i]
                if ev is None:
                    push((K_ARGS, node, frame, vals))
                    node = node.items[i]
                    mode = M_EVAL
                    break
                vals.append(ev(frame))
                i += 1
            else:
                mode = M_APPLY
            if mode == M_EVAL:
                continue

        if mode == M_APPLY:
            fn = vals[1]
            t = type(fn)
            if t is Closure:
                if not ctl or ctl[-1] is not RET:
                    depth += 1
                    if depth > max_call:
                        raise _fail(
                            resource_limit("call stack", f"max_call_stack={max_call}"),
                            node.where if node is not None else r.where,
                        )
                    push(RET)
                if len(ctl) + len(vals) - 2 > max_vs:
                    raise _fail(
                        resource_limit("value stack", f"max_value_stack={max_vs}"),
                        node.where if node is not None else r.where,
                    )
                lam = fn.lam
                if lam.plain and len(vals) - 2 == lam.nreq:
                    vals[0] = fn.env
                    vals[1] = r
                    frame = vals
                    if lam.pad:
                        frame.extend(lam.pad)
                else:
                    frame = bind(r, fn, vals[2:], node.where if node is not None else r.where)
                node = lam.body
                mode = M_EVAL
                continue
            where = node.where if node is not None else r.where
            if t is not Builtin:
                raise _fail(script_failed(f"cannot call a {type_name(fn)}"), where)
            special = fn.special
            if special == SP_APPLY:
                vals = _spread(r, vals, where, len(ctl))
                continue
            if special == SP_CALL:
                try:
                    out = fn.fn(r, vals[2:])
                except SvitError as err:
                    fail_at(err, where, r.foreign)
                if type(out) is not TailCall:
                    val = out
                    mode = M_RETURN
                    continue
                if out.post is not None:
                    push((K_POST, out.post, where))
                if out.catch:
                    push((K_SAFE, depth))
                if len(ctl) + len(out.args) > max_vs:
                    raise _fail(resource_limit("value stack", f"max_value_stack={max_vs}"), where)
                vals = [None, out.fn, *out.args]
                continue
            if special:  # SP_SAFE
                if len(vals) < 3:
                    raise _fail(script_failed("safe-call expects a function"), where)
                push((K_SAFE, depth))
                vals = vals[1:]
                vals[0] = None
                continue
            if len(ctl) + len(vals) - 2 > max_vs:  # builtin arguments count too
                raise _fail(resource_limit("value stack", f"max_value_stack={max_vs}"), where)
            fast = fn.fast
            done = False
            if fast is not None and len(vals) == 4:
                x = vals[2]
                y = vals[3]
                if type(x) is int and type(y) is int:
                    val = fast[0](x, y)
                    done = not fast[1] or r.ilo <= val <= r.ihi
            if not done:
                try:
                    val = fn.fn(r, vals[2:])
                except SvitError as err:
                    fail_at(err, where, r.foreign)
            mode = M_RETURN

        if mode == M_RETURN:
            while True:
                if not ctl:
                    return val
                c = pop()
                if c is RET:
                    depth -= 1
                    continue
                k = c[0]
                if k == K_ARGS:
                    node, frame, vals = c[1], c[2], c[3]
                    vals.append(val)
                    mode = M_ARGS
                    break
                if k == K_IF:
                    node, frame = c[1], c[2]
                    if val is True:
                        node = node.b
                    elif val is False:
                        node = node.c
                    else:
                        raise not_bool(val, node.where)
                    mode = M_EVAL
                    break
                if k == K_LET:
                    node, frame, i = c[1], c[2], c[3]
                    frame[node.items[i][0]] = val
                    i += 1
                    mode = M_LET
                    break
                if k == K_DO:
                    node, frame, i = c[1], c[2], c[3] + 1
                    mode = M_DO
                    break
                if k == K_AND or k == K_OR:
                    stop = k == K_OR
                    if val is stop:
                        continue
                    if val is not (not stop):
                        raise not_bool(val, c[1].where)
                    node, frame, i = c[1], c[2], c[3] + 1
                    mode = M_OR if stop else M_AND
                    break
                if k == K_COND:
                    node, frame, i = c[1], c[2], c[3]
                    if val is True:
                        node = node.items[i][1]
                        mode = M_EVAL
                    elif val is False:
                        i += 1
                        mode = M_COND
                    else:
                        raise not_bool(val, node.where)
                    break
                if k == K_CASE:
                    node, frame = c[1], c[2]
                    body = case_select(val, node.items)
                    if body is None:
                        val = ()
                        continue
                    node = body
                    mode = M_EVAL
                    break
                if k == K_DEF:
                    node = c[1]
                    r.define(node.a, val, node.where)
                    val = node.c
                    continue
                if k == K_POST:
                    try:
                        val = c[1](r, val)
                    except SvitError as err:
                        fail_at(err, c[2], r.foreign)
                    continue
                val = result_ok(r, val)  # K_SAFE
            continue

        if mode == M_LET:
            pairs = node.items
            fill = node.c
            n = len(pairs)
            while i < n:
                slot, e = pairs[i]
                if fill and frame[slot] is not UNBOUND:
                    i += 1
                    continue
                ev = e.ev
                if ev is None:
                    push((K_LET, node, frame, i))
                    node = e
                    break
                frame[slot] = ev(frame)
                i += 1
            else:
                node = node.b
            mode = M_EVAL
            continue

        if mode == M_DO:
            items = node.items
            last = len(items) - 1
            while i < last:
                e = items[i]
                ev = e.ev
                if ev is None:
                    push((K_DO, node, frame, i))
                    node = e
                    break
                ev(frame)
                i += 1
            else:
                node = items[last]
            mode = M_EVAL
            continue

        if mode == M_AND or mode == M_OR:
            stop = mode == M_OR
            items = node.items
            last = len(items) - 1
            mode = M_EVAL
            while i < last:
                e = items[i]
                ev = e.ev
                if ev is None:
                    push((K_OR if stop else K_AND, node, frame, i))
                    node = e
                    break
                v = ev(frame)
                if v is stop:
                    val = v
                    mode = M_RETURN
                    break
                if v is not (not stop):
                    raise not_bool(v, node.where)
                i += 1
            else:
                node = items[last]
            continue

        # M_COND
        clauses = node.items
        n = len(clauses)
        mode = M_EVAL
        while i < n:
            test, body = clauses[i]
            if test is None:
                node = body
                break
            ev = test.ev
            if ev is None:
                push((K_COND, node, frame, i))
                node = test
                break
            v = ev(frame)
            if v is True:
                node = body
                break
            if v is not False:
                raise not_bool(v, node.where)
            i += 1
        else:
            val = ()
            mode = M_RETURN


def execute(r: Run, node: Node, frame: list[Any]) -> Any:
    """Evaluate ``node`` in ``frame`` to a value."""
    ev = node.ev
    if ev is not None:
        return ev(frame)
    return _run(r, M_EVAL, node, frame, None)


def call(r: Run, fn: Any, args: list[Any]) -> Any:
    """Apply ``fn`` to ``args`` (the call to ``main``)."""
    if type(fn) is Closure:
        lam = fn.lam
        body = lam.body
        if lam.plain and len(args) == lam.nreq and body.ev is not None and r.max_call > 0:
            if len(args) > r.max_vs:
                raise _fail(resource_limit("value stack", f"max_value_stack={r.max_vs}"), r.where)
            frame = [fn.env, r, *args]
            if lam.pad:
                frame.extend(lam.pad)
            return body.ev(frame)
    return _run(r, M_APPLY, None, None, [None, fn, *args])


def _headroom() -> None:
    """Make sure a nested run has ``_RESERVE`` Python frames of recursion left.

    Nested ``exec`` re-enters the interpreter through the host; each level uses
    a bounded number of Python frames. Python >= 3.11 runs pure-Python calls
    without consuming the C stack, so raising the limit is safe.
    """
    depth = 0
    f: Any = sys._getframe()
    while f is not None:
        depth += 1
        f = f.f_back
    need = depth + _RESERVE
    if sys.getrecursionlimit() < need:
        sys.setrecursionlimit(need)


class Program:
    """A compiled script: immutable, cached, safe to run many times (and concurrently).

    Attributes:
        name: the script name.
        path: the virtual source path ``/lib/<name>.svit-script``.
    """

    __slots__ = ("frame_size", "name", "nodes", "path")

    def __init__(self, name: str, nodes: list[Node], frame_size: int) -> None:
        self.name = name
        self.path = source_path(name)
        self.nodes = tuple(nodes)
        self.frame_size = frame_size

    def __repr__(self) -> str:
        return f"<Program {self.path}>"

    def run_main(self, input: Any, host: Any, meter: Meter) -> Any:
        """Evaluate the top-level forms in a fresh global environment, then ``(main input)``.

        Args:
            input: the activation input, a plain value (a map, array and null
                stay typed, so an empty array differs from ``()``).
            host: the :class:`~svit_cluster.lisp.GuestHost` of the activation.
            meter: the activation's meter, shared with nested ``exec`` runs.

        Returns:
            ``main``'s result as a plain value (``()`` becomes null, lists arrays).

        Raises:
            ScriptFailed: no ``main``, a type/arity error, ``panic``, ...
            InvalidInput: a non-storable result (``invalid_value``), a bad path.
            LimitExceeded: fuel or time (``execution_limit_exceeded``), or a
                stack/memory/count bound (``resource_limit_exceeded``).
            SvitError: whatever a host method raised, unchanged.
        """
        meter.exec_level += 1
        try:
            if meter.exec_level > 1:
                _headroom()
                meter.check_time()
            r = Run(meter, host, input, self.path, len(GUEST_SCOPE))
            try:
                return self._run(r, input)
            finally:
                r.sync_out()
        except SvitError:
            raise
        except RecursionError:
            raise LimitExceeded(
                f"{self.path}: call stack limit exceeded (interpreter recursion)",
                code=ErrorCode.RESOURCE_LIMIT_EXCEEDED,
            ) from None
        except MemoryError:
            raise LimitExceeded(
                f"{self.path}: guest memory limit exceeded (host memory)",
                code=ErrorCode.RESOURCE_LIMIT_EXCEEDED,
            ) from None
        except Exception as exc:
            raise ScriptFailed(
                f"{self.path}: internal interpreter error ({type(exc).__name__})"
            ) from exc
        finally:
            meter.exec_level -= 1

    def _run(self, r: Run, input: Any) -> Any:
        frame: list[Any] = [None, r]
        frame.extend([UNBOUND] * (self.frame_size - 2))
        for node in self.nodes:
            execute(r, node, frame)
        main = r.g.get("main")
        if main is None:
            raise ScriptFailed(f"{self.path}: script must define main(input)")
        if type(main) is not Closure and type(main) is not Builtin:
            raise ScriptFailed(f"{self.path}: main must be a function, not a {type_name(main)}")
        r.fuel += 1
        if r.fuel > r.check_at:
            r.tick(self.path)
        out = call(r, main, [input])
        try:
            return to_value(r, out)
        except SvitError as e:
            raise _fail(e, f"{self.path}: main result") from e
