"""The Svit surface: process primitives, typed values, maps, JSON, results.

Process primitives call the :class:`~svit_cluster.lisp.GuestHost`; an error the
host raises propagates unchanged (it is never re-located). Values cross to the
host through :func:`~svit_cluster.lisp._types.to_value` (``()`` becomes null,
lists become arrays; functions, symbols and keywords are refused).

Result maps are ``{"ok": true, "value": v}`` and ``{"ok": false, "error": e}``
(``safe-call`` and ``-safe`` helpers add ``"code"``). They never catch limit
failures (see :func:`~svit_cluster.lisp._errors.catchable`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from svit_cluster.errors import ScriptFailed, SvitError
from svit_cluster.lisp._builtins_core import arity, expect_str
from svit_cluster.lisp._errors import (
    catchable,
    invalid_path,
    invalid_value,
    resource_limit,
    script_failed,
)
from svit_cluster.lisp._json import json_text
from svit_cluster.lisp._meter import Run
from svit_cluster.lisp._types import (
    container_height,
    display,
    height,
    remember,
    to_value,
    type_name,
    utf8len,
)
from svit_cluster.values import (
    MAX_DELAY_MS,
    from_plain_json,
    strict_json_loads,
    to_plain_json,
    validate_address,
)

__all__ = ["SVIT", "SVIT_NOT_INLINE", "result_error", "result_ok", "string_keyed_pairs"]

Args = Sequence[Any]
T = TypeVar("T")
_MISSING = object()


def _path(name: str, value: Any) -> str:
    if type(value) is str:
        return value
    raise script_failed(f"{name} path must be a string, got {type_name(value)}")


def _host(r: Run, primitive: Callable[..., T], *args: Any) -> T:
    """Call one host primitive. A :class:`SvitError` it raises is marked as the
    host's (``r.foreign``: reported unchanged, never re-located to the guest's
    form) and propagates."""
    try:
        return primitive(*args)
    except SvitError as e:
        r.foreign = e
        raise


def _incoming(r: Run, value: Any) -> Any:
    """Charge for a value the host handed over (it crosses without copying)."""
    t = type(value)
    if t is str or t is list or t is dict:
        r.touch(len(value))
    return value


# -- typed values ------------------------------------------------------------------


def b_value_get(r: Run, a: Args) -> Any:
    arity("value-get", a, 2)
    v = to_value(r, a[0])
    path = _path("value-get", a[1])
    if path == "" or path == "/":
        return v
    if path[0] != "/":
        segments = [path]
    else:
        segments = path[1:].split("/")
        for seg in segments:
            if seg == "" or seg == "." or seg == "..":
                raise invalid_path(f"invalid value path {path[:200]}")
    cur = v
    for seg in segments:
        t = type(cur)
        if t is dict:
            cur = cur.get(seg, _MISSING)
            if cur is _MISSING:
                return None
        elif t is list:
            if not (seg.isascii() and seg.isdigit()):
                raise invalid_path(f"array index {seg[:40]!r} is not decimal in {path[:200]}")
            index = int(seg)
            if index >= len(cur):
                return None
            cur = cur[index]
        else:
            raise invalid_path(f"value path {path[:200]} crosses a {type_name(cur)}")
    return cur


def string_keyed_pairs(a: Args, convert: Callable[[Any], T], *, odd: str, not_str: str,
                       duplicate: Callable[[str], SvitError]) -> dict[str, T]:
    """The arguments ``k1 v1 k2 v2 ...`` as ``{k: convert(v)}``, in argument order.

    Each key is checked (a string, not seen before) before its value is converted,
    so the first bad pair raises.

    Raises:
        ScriptFailed: an odd number of arguments (message ``odd``), or a key that
            is not a string (``"<not_str>, got <type>"``).
        SvitError: ``duplicate(key)`` for a repeated key; whatever ``convert`` raises.
    """
    if len(a) % 2:
        raise script_failed(odd)
    pairs: dict[str, T] = {}
    for i in range(0, len(a), 2):
        key = a[i]
        if type(key) is not str:
            raise script_failed(f"{not_str}, got {type_name(key)}")
        if key in pairs:
            raise duplicate(key)
        pairs[key] = convert(a[i + 1])
    return pairs


def b_value_map(r: Run, a: Args) -> Any:
    pairs = string_keyed_pairs(
        a, lambda v: to_value(r, v), odd="value-map expects key/value pairs",
        not_str="value-map key must be a string",
        duplicate=lambda key: invalid_value(f"duplicate map key: {key[:200]}"))
    n = len(pairs)
    r.alloc(16 + 16 * n)
    r.touch(n)
    out = pairs if n < 2 else dict(sorted(pairs.items()))
    remember(r, out, container_height(r, out.values()))
    return out


def b_value_array(r: Run, a: Args) -> Any:
    out = [to_value(r, v) for v in a]
    r.alloc(16 + 8 * len(out))
    r.touch(len(out))
    remember(r, out, container_height(r, out))
    return out


def b_value_null(r: Run, a: Args) -> Any:
    arity("value-null?", a, 1)
    return a[0] is None


# -- process primitives ----------------------------------------------------------


def b_read(r: Run, a: Args) -> Any:
    arity("read", a, 1)
    path = _path("read", a[0])
    return _incoming(r, _host(r, r.host.read, path))


def b_discover(r: Run, a: Args) -> Any:
    arity("discover", a, 1)
    path = _path("discover", a[0])
    return _incoming(r, _host(r, r.host.discover, path))


def b_stat(r: Run, a: Args) -> Any:
    arity("stat", a, 1)
    path = _path("stat", a[0])
    return _incoming(r, _host(r, r.host.stat, path))


def b_write(r: Run, a: Args) -> Any:
    arity("write", a, 2)
    path = _path("write", a[0])
    value = to_value(r, a[1])
    _host(r, r.host.write, path, value)
    return ()


def b_remove(r: Run, a: Args) -> Any:
    arity("remove", a, 1)
    path = _path("remove", a[0])
    _host(r, r.host.remove, path)
    return ()


def b_exec(r: Run, a: Args) -> Any:
    arity("exec", a, 2)
    path = _path("exec", a[0])
    if not path.startswith("/lib/") or len(path) == 5:
        raise invalid_path(f"exec runs only scripts stored under /lib, not {path[:200]}")
    value = to_value(r, a[1])
    r.sync_out()
    try:
        out = _host(r, r.host.exec, path, value)
    finally:
        r.sync_in()
    return _incoming(r, out)


#: The options ``send!`` knows (its optional third argument, a map).
SEND_OPTIONS = ("delay_ms",)


def _delay_ms(r: Run, options: Any) -> int | None:
    """The ``delay_ms`` of ``send!``'s options map (None: no delay).

    Rules: a map whose only known key is ``delay_ms``, an integer in
    ``0..MAX_DELAY_MS`` (a boolean is not an integer); anything else fails
    the script.
    """
    opts = to_value(r, options)
    if type(opts) is not dict:
        raise script_failed(f"send! options must be a map, got {type_name(options)}")
    for key in opts:
        if key not in SEND_OPTIONS:
            raise script_failed(f"send! option {key[:200]!r} is unknown "
                                f"(known: {', '.join(SEND_OPTIONS)})")
    if "delay_ms" not in opts:
        return None
    delay = opts["delay_ms"]
    if type(delay) is not int:
        raise script_failed(f"send! delay_ms must be an integer, got {type_name(delay)}")
    if not 0 <= delay <= MAX_DELAY_MS:
        raise script_failed(f"send! delay_ms must be 0..{MAX_DELAY_MS} (MAX_DELAY_MS), "
                            f"got {delay}")
    return delay


def b_send(r: Run, a: Args) -> Any:
    """``(send! to body [options])``: stage an intent; returns its id.

    ``options`` may carry ``"delay_ms"``: the intent becomes a timer due that
    long after the activation (the host stamps ``due_ms``; the guest never
    sees the clock).
    """
    arity("send!", a, 2, 3)
    to = expect_str("send!", a[0])
    try:  # reference: the address must parse (here: process id or external URI)
        validate_address(to)
    except SvitError as e:
        raise script_failed(f"send! address is not valid: {e.message}") from None
    body = to_value(r, a[1])
    delay = _delay_ms(r, a[2]) if len(a) == 3 else None
    if delay is None:
        return _host(r, r.host.send, to, body)
    return _host(r, r.host.send, to, body, delay)


def b_cancel(r: Run, a: Args) -> Any:
    """``(cancel! id)``: stage the cancel of a pending timer.

    True when ``id`` is in the process's pending timers (``/system/timers``)
    and the cancel is staged; false, staging nothing, otherwise.
    """
    arity("cancel!", a, 1)
    timer_id = expect_str("cancel!", a[0])
    cancel = getattr(r.host, "cancel", None)
    if cancel is None:
        return False  # a host without timers holds none pending
    return _host(r, cancel, timer_id)


def b_log_info(r: Run, a: Args) -> Any:
    arity("log-info!", a, 1, 2)
    message = expect_str("log-info!", a[0])
    fields: dict[str, Any] = {}
    if len(a) == 2:
        # The record is {message, fields}: a map becomes the fields; any other
        # value is kept whole under "value" (svit_cluster's choice, docs/conformance.md).
        value = to_value(r, a[1])
        fields = dict(value) if type(value) is dict else {"value": value}
    _host(r, r.host.log_info, message, fields)
    return ()


# -- JSON ---------------------------------------------------------------------------


def _stringify(r: Run, value: Any) -> str:
    plain = to_plain_json(to_value(r, value))
    text = json_text(plain)  # serde_json's bytes, numbers included (``1e21``, ``1e-7``)
    r.touch(len(text))
    r.alloc(16 + len(text))
    return text


def b_json_parse(r: Run, a: Args) -> Any:
    arity("json-parse", a, 1)
    text = expect_str("json-parse", a[0])
    limits = r.meter.limits
    size = utf8len(text)
    r.touch(size)
    if size > limits.max_text_bytes:
        raise resource_limit("text bytes", f"max_text_bytes={limits.max_text_bytes}")
    r.alloc(16 + size)
    # A repeated key keeps its last value, as serde_json does for maps.
    data = strict_json_loads(text, what="json-parse input", last_duplicate_wins=True)
    return from_plain_json(
        data,
        max_depth=r.max_depth,
        max_entries=limits.max_value_entries,
        max_text_bytes=limits.max_text_bytes,
    )


def b_json_stringify(r: Run, a: Args) -> Any:
    arity("json-stringify", a, 1)
    return _stringify(r, a[0])


# -- maps -------------------------------------------------------------------------


def _map(name: str, value: Any) -> dict[str, Any]:
    if type(value) is dict:
        return value
    raise script_failed(f"{name} expects a map, got {type_name(value)}")


def b_map_get(r: Run, a: Args) -> Any:
    """``(map-get map key [default])``: an absent key fails unless a default is given.

    The reference's catalog says an absent key fails; the optional default is
    our extension (``map-get-safe`` returns a result map instead).
    """
    arity("map-get", a, 2, 3)
    m = _map("map-get", a[0])
    key = expect_str("map-get", a[1])
    found = m.get(key, _MISSING)
    if found is not _MISSING:
        return found
    if len(a) == 3:
        return a[2]
    raise script_failed(f"map-get: key {key[:200]!r} is absent")


def b_map_has(r: Run, a: Args) -> Any:
    arity("map-has?", a, 2)
    return expect_str("map-has?", a[1]) in _map("map-has?", a[0])


def b_map_set(r: Run, a: Args) -> Any:
    arity("map-set", a, 3)
    m = _map("map-set", a[0])
    key = expect_str("map-set", a[1])
    value = to_value(r, a[2])
    out = dict(m)
    out[key] = value
    r.touch(len(out))
    r.alloc(16 + 16 * len(out))
    remember(r, out, max(height(r, m), container_height(r, [value])))
    return out


# -- predicates ---------------------------------------------------------------------


def b_is_list(r: Run, a: Args) -> Any:
    arity("list?", a, 1)
    return type(a[0]) is tuple or type(a[0]) is list


def b_is_string(r: Run, a: Args) -> Any:
    arity("string?", a, 1)
    return type(a[0]) is str


def b_is_number(r: Run, a: Args) -> Any:
    arity("number?", a, 1)
    return type(a[0]) is int or type(a[0]) is float


def b_is_boolean(r: Run, a: Args) -> Any:
    arity("boolean?", a, 1)
    return type(a[0]) is bool


def b_is_null(r: Run, a: Args) -> Any:
    arity("null?", a, 1)
    return a[0] is None or (type(a[0]) is tuple and not a[0])


# -- results ------------------------------------------------------------------------


def result_ok(r: Run, value: Any) -> dict[str, Any]:
    """``{"ok": true, "value": v}`` for a Lisp value ``v``."""
    plain = to_value(r, value)
    r.alloc(48)
    out = {"ok": True, "value": plain}
    remember(r, out, container_height(r, [plain]))
    return out


def result_error(r: Run, error: SvitError) -> dict[str, Any]:
    """``{"code": c, "error": message, "ok": false}`` for a caught error."""
    r.alloc(64 + len(error.message))
    out = {"code": str(error.code), "error": error.message, "ok": False}
    remember(r, out, 1)
    return out


def b_result_ok(r: Run, a: Args) -> Any:
    arity("result-ok", a, 1)
    return result_ok(r, a[0])


def b_result_error(r: Run, a: Args) -> Any:
    arity("result-error", a, 1)
    detail = to_value(r, a[0])
    r.alloc(48)
    out = {"error": detail, "ok": False}
    remember(r, out, container_height(r, [detail]))
    return out


def _result_map(name: str, value: Any) -> dict[str, Any]:
    if type(value) is dict and type(value.get("ok")) is bool:
        return value
    raise script_failed(f"{name} expects a result map, got {type_name(value)}")


def b_result_is_ok(r: Run, a: Args) -> Any:
    arity("result-ok?", a, 1)
    return _result_map("result-ok?", a[0])["ok"]


def b_result_value(r: Run, a: Args) -> Any:
    arity("result-value", a, 1)
    m = _result_map("result-value", a[0])
    if m["ok"]:
        return m.get("value")
    raise ScriptFailed(f"result-value of an error result: {display(m.get('error'))[:800]}")


def _safely(r: Run, fn: Callable[[Run, Args], Any], a: Args) -> Any:
    try:
        return result_ok(r, fn(r, a))
    except SvitError as e:
        if not catchable(e):
            raise
        return result_error(r, e)


def b_json_parse_safe(r: Run, a: Args) -> Any:
    return _safely(r, b_json_parse, a)


def b_exec_safe(r: Run, a: Args) -> Any:
    return _safely(r, b_exec, a)


SVIT: dict[str, Callable[[Run, Args], Any]] = {
    "value-get": b_value_get,
    "value-map": b_value_map,
    "value-array": b_value_array,
    "value-null?": b_value_null,
    "read": b_read,
    "discover": b_discover,
    "stat": b_stat,
    "write": b_write,
    "remove": b_remove,
    "exec": b_exec,
    "exec-safe": b_exec_safe,
    "send!": b_send,
    "cancel!": b_cancel,
    "log-info!": b_log_info,
    "json-parse": b_json_parse,
    "json-parse-safe": b_json_parse_safe,
    "json-stringify": b_json_stringify,
    "map-get": b_map_get,
    "map-has?": b_map_has,
    "map-set": b_map_set,
    "list?": b_is_list,
    "string?": b_is_string,
    "number?": b_is_number,
    "boolean?": b_is_boolean,
    "null?": b_is_null,
    "result-ok": b_result_ok,
    "result-error": b_result_error,
    "result-ok?": b_result_is_ok,
    "result-value": b_result_value,
}

#: Builtins that re-enter the interpreter and therefore run from the evaluator loop.
SVIT_NOT_INLINE = frozenset({"exec", "exec-safe"})
