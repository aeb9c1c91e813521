"""The Svit Lisp reader: source text to forms, with positions and bounds.

Syntax: lists ``( ... )``; integers (``-12``) bounded by ``max_integer_bits``;
floats (``1.5``, ``2e3``); strings with escapes ``\\n \\t \\r \\0 \\\\ \\"
\\' \\u{XXXX}``; chars ``#'a'``; ``true``, ``false``; keywords ``:key``;
symbols; quote ``'x`` (read as ``(quote x)``); comments from ``;`` to the end
of the line. The reader is iterative (no Python recursion). Nesting is bounded
by ``max_syntax_depth`` and the source by ``max_script_bytes``.

Every error names the virtual source path and position:
``/lib/<name>.svit-script:LINE:COL: message``.
"""

from __future__ import annotations

import bisect
import math
import re
from typing import Any

from svit_cluster.errors import ErrorCode, LimitExceeded, ScriptFailed
from svit_cluster.lisp._errors import source_path
from svit_cluster.lisp._types import Char, Keyword, Symbol, SynList, utf8len
from svit_cluster.values import Limits

__all__ = ["QUOTE", "Form", "read_source"]

#: A top-level form with its position: ``(datum, line, col)``.
Form = tuple[Any, int, int]

QUOTE = Symbol("quote")

_TOKEN = re.compile(
    r"""
    (?P<ws>[ \t\r\n\f\v]+)
  | (?P<comment>;[^\n]*)
  | (?P<open>\()
  | (?P<close>\))
  | (?P<quote>')
  | (?P<string>"(?:[^"\\]|\\.)*")
  | (?P<char>\#'(?:\\u\{[0-9a-fA-F]{1,6}\}|\\.|[^\\'])')
  | (?P<atom>[^\x00-\x20()';"\x7f]+)
    """,
    re.VERBOSE | re.DOTALL,
)
_INT = re.compile(r"[+-]?[0-9]+\Z")
_FLOAT = re.compile(r"[+-]?[0-9]+(?:\.[0-9]+(?:[eE][+-]?[0-9]+)?|[eE][+-]?[0-9]+)\Z")
_NUMBERISH = re.compile(r"[+-]?[0-9]")
_ESCAPE = re.compile(r"\\(u\{[0-9a-fA-F]{1,6}\}|.)", re.DOTALL)
_SIMPLE_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "0": "\0", "\\": "\\", '"': '"', "'": "'"}


class _Reader:
    def __init__(self, source: str, name: str, limits: Limits) -> None:
        self.source = source
        self.path = source_path(name)
        self.limits = limits
        self.lines = [0] + [m.end() for m in re.finditer("\n", source)]
        bits = max(limits.max_integer_bits, 1)
        self.ihi = (1 << (bits - 1)) - 1
        self.ilo = -(1 << (bits - 1))
        # A decimal literal longer than this cannot fit (and int() would refuse it).
        self.max_digits = int(bits * 0.30103) + 2

    def pos(self, offset: int) -> tuple[int, int]:
        line = bisect.bisect_right(self.lines, offset)
        return line, offset - self.lines[line - 1] + 1

    def fail(self, offset: int, message: str) -> ScriptFailed:
        line, col = self.pos(offset)
        where = f"{self.path}:{line}:{col}"
        return ScriptFailed(f"{where}: syntax error: {message}", at=where)

    def limit(self, offset: int, message: str) -> LimitExceeded:
        line, col = self.pos(offset)
        where = f"{self.path}:{line}:{col}"
        return LimitExceeded(
            f"{where}: {message}", code=ErrorCode.RESOURCE_LIMIT_EXCEEDED, at=where
        )

    def read(self) -> list[Form]:
        source = self.source
        end = len(source)
        max_depth = self.limits.max_syntax_depth
        top: list[Form] = []
        # Open frames: [items, offset, is_quote]
        stack: list[tuple[list[Any], int, bool]] = []
        offset = 0
        match = _TOKEN.match
        while offset < end:
            m = match(source, offset)
            if m is None:
                if source[offset] == '"':
                    raise self.fail(offset, "unterminated string")
                raise self.fail(offset, f"unexpected character {source[offset]!r}")
            kind = m.lastgroup
            start = offset
            offset = m.end()
            if kind == "ws" or kind == "comment":
                continue
            if kind == "open" or kind == "quote":
                if len(stack) >= max_depth:
                    raise self.limit(
                        start, f"syntax depth limit exceeded (max_syntax_depth={max_depth})"
                    )
                stack.append(([], start, kind == "quote"))
                continue
            if kind == "close":
                if not stack:
                    raise self.fail(start, "unexpected ')'")
                items, opened, is_quote = stack.pop()
                if is_quote:
                    raise self.fail(start, "quote must be followed by a datum")
                datum: Any = self.syn(items, opened)
            elif kind == "string":
                datum = self.string(m.group(), start)
            elif kind == "char":
                datum = self.char(m.group(), start)
            else:
                datum = self.atom(m.group(), start)
            # Close pending quote frames, then place the datum.
            while stack and stack[-1][2]:
                _, opened, _ = stack.pop()
                datum = self.syn([QUOTE, datum], opened)
            if stack:
                stack[-1][0].append(datum)
            elif type(datum) is SynList:
                top.append((datum, datum.line, datum.col))
            else:
                line, col = self.pos(start)
                top.append((datum, line, col))
        if stack:
            raise self.fail(stack[-1][1], "unclosed '('" if not stack[-1][2] else "dangling quote")
        return top

    def syn(self, items: list[Any], offset: int) -> SynList:
        form = SynList(items)
        form.line, form.col = self.pos(offset)
        return form

    def string(self, token: str, offset: int) -> str:
        body = token[1:-1]
        if "\\" not in body:
            return body

        def unescape(m: re.Match[str]) -> str:
            esc = m.group(1)
            if esc in _SIMPLE_ESCAPES:
                return _SIMPLE_ESCAPES[esc]
            if esc == "\n":  # line continuation: skip the newline and leading blanks
                return ""
            if esc.startswith("u{"):
                code = int(esc[2:-1], 16)
                if code > 0x10FFFF or 0xD800 <= code <= 0xDFFF:
                    raise self.fail(offset, f"invalid unicode escape \\{esc}")
                return chr(code)
            raise self.fail(offset, f"invalid escape \\{esc}")

        return _ESCAPE.sub(unescape, body)

    def char(self, token: str, offset: int) -> Char:
        body = token[2:-1]
        if body.startswith("\\"):
            text = self.string('"' + body + '"', offset) if body != "\\'" else "'"
            if len(text) != 1:
                raise self.fail(offset, "invalid char literal")
            return Char(text)
        return Char(body)

    def atom(self, text: str, offset: int) -> Any:
        if _INT.match(text):
            digits = len(text.lstrip("+-"))
            if digits > self.max_digits:
                raise self.limit(offset, self._bits_message())
            value = int(text)
            if value < self.ilo or value > self.ihi:
                raise self.limit(offset, self._bits_message())
            return value
        if _FLOAT.match(text):
            number = float(text)
            if not math.isfinite(number):
                raise self.fail(offset, f"float literal out of range: {text[:40]}")
            return number
        if text == "true":
            return True
        if text == "false":
            return False
        if text[0] == ":":
            if len(text) == 1:
                raise self.fail(offset, "empty keyword")
            return Keyword(text[1:])
        if text[0] == "#" or text[0] == "`" or text[0] == ",":
            raise self.fail(offset, f"unsupported syntax {text[:40]!r}")
        if _NUMBERISH.match(text):
            raise self.fail(offset, f"invalid number {text[:40]!r}")
        return Symbol(text)

    def _bits_message(self) -> str:
        return f"integer bits limit exceeded (max_integer_bits={self.limits.max_integer_bits})"


def read_source(source: str, name: str, limits: Limits) -> list[Form]:
    """Read every top-level form of ``source``.

    Args:
        source: the script text.
        name: the script name (for ``/lib/<name>.svit-script`` positions).
        limits: ``max_script_bytes``, ``max_syntax_depth``, ``max_integer_bits``.

    Returns:
        ``(datum, line, col)`` for each top-level form, in order.

    Raises:
        ScriptFailed: a syntax error (position in the message).
        LimitExceeded: (``resource_limit_exceeded``) "script bytes",
            "syntax depth" or "integer bits".
    """
    path = source_path(name)
    try:
        size = utf8len(source)
        source.encode("utf-8")
    except UnicodeEncodeError:
        raise ScriptFailed(f"{path}: script source is not valid UTF-8") from None
    if size > limits.max_script_bytes:
        raise LimitExceeded(
            f"{path}: script bytes limit exceeded (max_script_bytes={limits.max_script_bytes})",
            code=ErrorCode.RESOURCE_LIMIT_EXCEEDED,
        )
    return _Reader(source, name, limits).read()
