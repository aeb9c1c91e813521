"""The reference runtime's helper catalog: discovery, structured access, results, dispatch.

:data:`CATALOG` describes every Svit-provided runtime helper the way the
reference's catalog does (name, signature, one-line description, category);
``(runtime-builtins)`` returns it as an array of maps. The functions this
module adds:

* ``map?``; ``list-get`` (typed array, zero-based, out of range fails);
  ``map-get-safe`` (a result map instead of failing on an absent key).
* ``result-error-message``; ``result-map``, ``result-and-then``,
  ``result-or-else`` (function first, result second, as in the reference).
* ``value-at``, ``value-at-safe``, ``value-has-path?``: traverse maps and
  arrays with a Lisp list of string keys and non-negative integer indexes;
  an absent key, an index out of range or a component that does not match
  its container fails (``value-at``), gives an error result (``-safe``) or
  ``false`` (``value-has-path?``).
* ``dispatch-table``, ``dispatch``, ``dispatch-safe``: call a handler the
  guest registered by name in an explicit table; unknown names fail closed.
* ``jq`` (see :mod:`svit_cluster.lisp._jq`), ``search`` (literal text search
  below a process path), ``port-call`` (the host's granted ports; fails for any other name).

Helpers that call a guest function are :data:`~svit_cluster.lisp._types.SP_CALL`
builtins: they return a :class:`~svit_cluster.lisp._types.TailCall` and the
evaluator performs the call on its own control stack, so fuel, stack limits
and error positions work exactly as for a direct call. Result maps and
catchability follow :mod:`svit_cluster.lisp._builtins_svit`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from svit_cluster.errors import ScriptFailed, SvitError
from svit_cluster.lisp._builtins_core import arity, expect_str
from svit_cluster.lisp._builtins_svit import (
    _incoming,
    _result_map,
    b_map_get,
    result_error,
    result_ok,
    string_keyed_pairs,
)
from svit_cluster.lisp._errors import catchable, invalid_path, script_failed
from svit_cluster.lisp._jq import run_jq
from svit_cluster.lisp._meter import Run
from svit_cluster.lisp._types import (
    Builtin,
    Closure,
    DispatchTable,
    TailCall,
    display,
    remember,
    to_value,
    type_name,
    utf8len,
)
from svit_cluster.values import Script

__all__ = [
    "BEYOND_REFERENCE",
    "CALLERS",
    "CATALOG",
    "HELPERS",
    "MAX_SEARCH_OUTPUT_BYTES",
    "MAX_SEARCH_PATTERN_BYTES",
    "MAX_SEARCH_RESULTS",
    "Entry",
]

Args = Sequence[Any]

#: ``search`` bounds (the reference's): pattern bytes, matches, output bytes.
MAX_SEARCH_PATTERN_BYTES = 4 * 1024
MAX_SEARCH_RESULTS = 100
MAX_SEARCH_OUTPUT_BYTES = 256 * 1024


class Entry(NamedTuple):
    """One catalog record (the shape ``runtime-builtins`` returns)."""

    name: str
    signature: str
    description: str
    category: str


#: The runtime helper catalog, in the reference's order (descriptions in our words).
CATALOG: tuple[Entry, ...] = (
    Entry("runtime-builtins", "(runtime-builtins)",
          "List the Svit runtime helpers with signature, description and category.", "discovery"),
    Entry("value-map", "(value-map key value ...)",
          "Build a typed map from string keys and values.", "persistent-value"),
    Entry("value-array", "(value-array value ...)", "Build a typed array.", "persistent-value"),
    Entry("value-null?", "(value-null? value)", "True when value is the typed null.", "predicate"),
    Entry("value-get", "(value-get value path)",
          "Value at a slash path inside a typed value; null when absent.", "persistent-value"),
    Entry("jq", "(jq filter value)",
          "Run a bounded jq subset filter over a value; an array of every output.",
          "structured-data"),
    Entry("search", "(search path text)",
          "Find lines containing text in strings below a process path.", "memory-tree"),
    Entry("discover", "(discover path)", "Child names below a process path.", "memory-tree"),
    Entry("read", "(read path)", "The value at a process path (staged writes included).",
          "memory-tree"),
    Entry("stat", "(stat path)",
          "Facts about a process node: kind, access, locality, facts, hash.", "memory-tree"),
    Entry("write", "(write path value)", "Stage a write below /memory or of /lib/NAME.",
          "memory-tree"),
    Entry("remove", "(remove path)", "Stage the removal of a writable node.", "memory-tree"),
    Entry("exec", "(exec path input)",
          "Run a /lib script within this activation, with bounded nesting.", "scripts"),
    Entry("port-call", "(port-call name input)",
          "Call a host port granted to the process; fails for a port the host does not grant.",
          "ports"),
    Entry("log-info!", "(log-info! message [fields])", "Append a record to the activation log.",
          "effects"),
    Entry("send!", "(send! address body [options])",
          "Stage a message to a process address, sent only if the activation commits; "
          "options {\"delay_ms\" N} make it a timer due N ms later.",
          "effects"),
    Entry("cancel!", "(cancel! id)",
          "Stage the cancel of a pending timer by its send! id; false when it is not pending.",
          "effects"),
    Entry("json-parse", "(json-parse text)", "Parse JSON text into a typed value.",
          "structured-data"),
    Entry("json-stringify", "(json-stringify value)", "Encode a value as compact, sorted JSON.",
          "structured-data"),
    Entry("json-parse-safe", "(json-parse-safe text)", "json-parse returning a result map.",
          "recoverable"),
    Entry("map?", "(map? value)", "True when value is a typed map.", "predicate"),
    Entry("map-get", "(map-get map key)", "The entry for key; an absent key fails.",
          "structured-data"),
    Entry("map-get-safe", "(map-get-safe map key)", "map-get returning a result map.",
          "recoverable"),
    Entry("map-has?", "(map-has? map key)", "True when the map has key.", "structured-data"),
    Entry("map-set", "(map-set map key value)", "A new map with key set to value.",
          "structured-data"),
    Entry("list?", "(list? value)", "True for a Lisp list or a typed array.", "predicate"),
    Entry("list-get", "(list-get array index)",
          "Element of a typed array at a zero-based index; out of range fails.",
          "structured-data"),
    Entry("string?", "(string? value)", "True for a string.", "predicate"),
    Entry("number?", "(number? value)", "True for an integer or a float.", "predicate"),
    Entry("boolean?", "(boolean? value)", "True for true or false.", "predicate"),
    Entry("null?", "(null? value)", "True for null or the empty list.", "predicate"),
    Entry("result-ok", "(result-ok value)", "A successful result map.", "result"),
    Entry("result-error", "(result-error detail)", "A failed result map.", "result"),
    Entry("result-ok?", "(result-ok? result)", "True when the result succeeded.", "result"),
    Entry("result-value", "(result-value result)",
          "The value of a successful result; fails on an error result.", "result"),
    Entry("result-error-message", "(result-error-message result)",
          "The error of a failed result; fails on a successful result.", "result"),
    Entry("result-map", "(result-map function result)",
          "Apply function to a success value and wrap it; errors pass through.", "result"),
    Entry("result-and-then", "(result-and-then function result)",
          "Chain a result-returning function after a success; errors pass through.", "result"),
    Entry("result-or-else", "(result-or-else function result)",
          "Recover an error with a result-returning function; successes pass through.", "result"),
    Entry("value-at", "(value-at value path-list)",
          "Walk maps and arrays by a list of keys and indexes; a missing step fails.",
          "structured-data"),
    Entry("value-at-safe", "(value-at-safe value path-list)", "value-at returning a result map.",
          "recoverable"),
    Entry("value-has-path?", "(value-has-path? value path-list)",
          "True when value-at would succeed.", "structured-data"),
    Entry("dispatch-table", "(dispatch-table name function ...)",
          "An ephemeral table of explicitly named handler functions.", "dispatch"),
    Entry("dispatch", "(dispatch table name argument)",
          "Call the handler registered under name; an unknown name fails.", "dispatch"),
    Entry("dispatch-safe", "(dispatch-safe table name argument)",
          "dispatch returning a result map for recoverable failures.", "dispatch"),
    Entry("safe-call", "(safe-call function argument ...)",
          "Call function; a recoverable error becomes an error result, limits still fail.",
          "recoverable"),
)


#: Catalogued helpers the reference does not have (durable timers). Guests
#: discover them with ``runtime-builtins`` like any helper, but they are not
#: in the reference's global scope, so they do not count against
#: ``max_namespace_entries`` (see ``_builtins.GUEST_SCOPE``).
BEYOND_REFERENCE = frozenset({"cancel!"})


def b_runtime_builtins(r: Run, a: Args) -> Any:
    arity("runtime-builtins", a, 0)
    out = [
        {"category": e.category, "description": e.description, "name": e.name,
         "signature": e.signature}
        for e in CATALOG
    ]
    r.touch(len(out) * 4)
    r.alloc(16 + 8 * len(out) + len(out) * (16 + 16 * 4 + 160))
    remember(r, out, 2)
    return out


# -- predicates and access -------------------------------------------------------------


def b_is_map(r: Run, a: Args) -> Any:
    arity("map?", a, 1)
    return type(a[0]) is dict


def b_list_get(r: Run, a: Args) -> Any:
    arity("list-get", a, 2)
    items = a[0]
    if type(items) is not list:
        raise script_failed(f"list-get expects a typed array, got {type_name(items)}")
    index = a[1]
    if type(index) is not int:
        raise script_failed(f"list-get expects an integer index, got {type_name(index)}")
    if index < 0:
        raise script_failed("list-get expects a non-negative index")
    if index >= len(items):
        raise script_failed(f"list-get index {index} is out of bounds for length {len(items)}")
    return items[index]


def _safe(r: Run, fn: Callable[[Run, Args], Any], a: Args) -> Any:
    try:
        value = fn(r, a)
    except SvitError as e:
        if not catchable(e):
            raise
        return result_error(r, e)
    return result_ok(r, value)


def b_map_get_safe(r: Run, a: Args) -> Any:
    return _safe(r, b_map_get, a)


# -- results ---------------------------------------------------------------------------


def b_result_error_message(r: Run, a: Args) -> Any:
    arity("result-error-message", a, 1)
    m = _result_map("result-error-message", a[0])
    if m["ok"]:
        raise script_failed("result-error-message expects a failed result")
    return m.get("error")


def _function(name: str, value: Any) -> Any:
    if type(value) is Closure or type(value) is Builtin:
        return value
    raise script_failed(f"{name} expects a function, got {type_name(value)}")


def _wrap_ok(r: Run, value: Any) -> Any:
    return result_ok(r, value)


def _expect_result(name: str) -> Callable[[Run, Any], Any]:
    def post(r: Run, value: Any) -> Any:
        return _result_map(f"{name} function result", value)

    return post


def _transform(name: str, on_ok: bool, post: Callable[[Run, Any], Any]) -> Callable[..., Any]:
    def fn(r: Run, a: Args) -> Any:
        arity(name, a, 2)
        f = _function(name, a[0])
        m = _result_map(name, a[1])
        if m["ok"] is not on_ok:
            return m
        payload = m.get("value") if on_ok else m.get("error")
        return TailCall(f, (payload,), post)

    fn.__name__ = "b_" + name.replace("-", "_")
    return fn


# -- structured paths ------------------------------------------------------------------


def _components(name: str, path: Any) -> Sequence[Any]:
    if type(path) is not tuple and type(path) is not list:
        raise script_failed(f"{name} path must be a list, got {type_name(path)}")
    for c in path:
        if type(c) is str:
            continue
        if type(c) is int:
            if c < 0:
                raise script_failed(f"{name} path index must be non-negative")
            continue
        raise script_failed(f"{name} path components must be strings or integers")
    return path


def _walk(name: str, value: Any, path: Sequence[Any]) -> Any:
    cur = value
    for c in path:
        t = type(cur)
        if t is dict and type(c) is str:
            if c not in cur:
                raise script_failed(f"{name}: key {c[:200]!r} is absent")
            cur = cur[c]
        elif t is list and type(c) is int:
            if c >= len(cur):
                raise script_failed(f"{name}: index {c} is out of bounds for length {len(cur)}")
            cur = cur[c]
        else:
            raise script_failed(
                f"{name}: path component {display(c, True)[:200]} does not match a "
                f"{type_name(cur)}"
            )
    return cur


def _value_at(name: str) -> Callable[[Run, Args], Any]:
    def fn(r: Run, a: Args) -> Any:
        arity(name, a, 2)
        value = to_value(r, a[0])
        path = _components(name, a[1])
        r.touch(len(path))
        return _walk(name, value, path)

    return fn


b_value_at = _value_at("value-at")


def b_value_at_safe(r: Run, a: Args) -> Any:
    return _safe(r, _value_at("value-at-safe"), a)


def b_value_has_path(r: Run, a: Args) -> Any:
    arity("value-has-path?", a, 2)
    value = to_value(r, a[0])
    path = _components("value-has-path?", a[1])
    r.touch(len(path))
    try:
        _walk("value-has-path?", value, path)
    except ScriptFailed:
        return False
    return True


# -- dispatch --------------------------------------------------------------------------


def b_dispatch_table(r: Run, a: Args) -> Any:
    entries = string_keyed_pairs(
        a, lambda f: _function("dispatch-table", f),
        odd="dispatch-table expects name/function pairs",
        not_str="dispatch-table name must be a string",
        duplicate=lambda name: script_failed(
            f"dispatch-table handler names must be unique: {name[:200]}"))
    r.touch(len(entries))
    r.alloc(16 + 16 * len(entries))
    return DispatchTable(entries)


def _dispatch(name: str, safe: bool) -> Callable[[Run, Args], Any]:
    def fn(r: Run, a: Args) -> Any:
        arity(name, a, 3)
        table = a[0]
        if type(table) is not DispatchTable:
            raise script_failed(f"{name} expects a dispatch table, got {type_name(table)}")
        key = expect_str(name, a[1])
        handler = table.entries.get(key)
        if handler is None:
            error = script_failed(f"{name}: no handler is registered for {key[:200]!r}")
            if safe:
                return result_error(r, error)
            raise error
        if safe:
            return TailCall(handler, (a[2],), catch=True)
        return TailCall(handler, (a[2],), _plain)

    fn.__name__ = "b_" + name.replace("-", "_")
    return fn


def _plain(r: Run, value: Any) -> Any:
    return to_value(r, value)


# -- jq, search, ports -----------------------------------------------------------------


def b_jq(r: Run, a: Args) -> Any:
    arity("jq", a, 2)
    flt = expect_str("jq", a[0])
    value = to_value(r, a[1])
    return run_jq(r, flt, value)


def _lines(text: str) -> list[str]:
    parts = text.split("\n")
    if parts and parts[-1] == "":
        parts.pop()
    return [p[:-1] if p.endswith("\r") else p for p in parts]


class _Search:
    __slots__ = ("bytes", "matches", "needle", "r", "seen")

    def __init__(self, r: Run, needle: str) -> None:
        self.r = r
        self.needle = needle
        self.matches: list[dict[str, Any]] = []
        self.bytes = 0
        self.seen = 0

    def full(self) -> bool:
        return len(self.matches) >= MAX_SEARCH_RESULTS or self.bytes >= MAX_SEARCH_OUTPUT_BYTES

    def walk(self, path: str, value: Any) -> bool:
        """Collect matches below ``value``; ``False`` once a bound stopped the walk."""
        stack: list[tuple[str, Any]] = [(path, value)]
        while stack:
            where, node = stack.pop()
            self.seen += 1
            t = type(node)
            if t is Script:
                node = {"documentation": node.documentation or "", "source": node.source}
                t = dict
            if t is dict:
                prefix = "" if where == "/" else where
                for key in sorted(node, reverse=True):
                    stack.append((f"{prefix}/{key}", node[key]))
            elif t is list:
                prefix = "" if where == "/" else where
                for i in range(len(node) - 1, -1, -1):
                    stack.append((f"{prefix}/{i}", node[i]))
            elif t is str:
                self.r.touch(len(node))
                for number, line in enumerate(_lines(node), 1):
                    if self.needle in line:
                        size = utf8len(where) + utf8len(line)
                        if self.bytes + size > MAX_SEARCH_OUTPUT_BYTES:
                            return False
                        self.matches.append({"line": number, "path": where, "text": line})
                        self.bytes += size
                        if self.full():
                            return False
        return True


def b_search(r: Run, a: Args) -> Any:
    arity("search", a, 2)
    path = expect_str("search", a[0])
    needle = expect_str("search", a[1])
    if utf8len(needle) > MAX_SEARCH_PATTERN_BYTES:
        raise script_failed(
            f"search pattern limit exceeded: the text is over {MAX_SEARCH_PATTERN_BYTES} bytes"
        )
    if not path.startswith("/"):
        raise invalid_path(f"search path must be absolute, not {path[:200]}")
    try:
        root = r.host.read(path)
    except SvitError as e:
        r.foreign = e
        raise
    if root is None:
        raise invalid_path(f"search path {path[:200]} does not exist")
    s = _Search(r, needle)
    complete = s.walk(path, root)
    r.touch(s.seen)
    r.alloc(48 + len(s.matches) * 64 + s.bytes)
    out = {"matches": s.matches, "truncated": not complete}
    remember(r, out, 3 if s.matches else 1)
    return out


def b_port_call(r: Run, a: Args) -> Any:
    arity("port-call", a, 2)
    name = expect_str("port-call", a[0])
    if not name or "/" in name:
        raise script_failed("port-call name must name one port")
    value = to_value(r, a[1])
    call = getattr(r.host, "port_call", None)
    if call is None:
        raise script_failed(f"no port named {name[:200]} is granted to this process")
    # A port call costs fuel up front (and its result is charged like any value):
    # the guest is suspended while the host runs the port once.
    r.fuel += int(getattr(r.host, "port_call_fuel", 0))
    if r.fuel > r.max_fuel:
        r.tick("port-call")
    r.sync_out()
    try:
        result = call(name, value)
    except SvitError as e:
        r.foreign = e
        raise
    finally:
        r.sync_in()
    return _incoming(r, result)


HELPERS: dict[str, Callable[[Run, Args], Any]] = {
    "runtime-builtins": b_runtime_builtins,
    "map?": b_is_map,
    "map-get-safe": b_map_get_safe,
    "list-get": b_list_get,
    "result-error-message": b_result_error_message,
    "value-at": b_value_at,
    "value-at-safe": b_value_at_safe,
    "value-has-path?": b_value_has_path,
    "dispatch-table": b_dispatch_table,
    "jq": b_jq,
    "search": b_search,
    "port-call": b_port_call,
}

#: Helpers that call guest functions (registered as ``SP_CALL`` builtins).
CALLERS: dict[str, Callable[[Run, Args], Any]] = {
    "result-map": _transform("result-map", True, _wrap_ok),
    "result-and-then": _transform("result-and-then", True, _expect_result("result-and-then")),
    "result-or-else": _transform("result-or-else", False, _expect_result("result-or-else")),
    "dispatch": _dispatch("dispatch", False),
    "dispatch-safe": _dispatch("dispatch-safe", True),
}
