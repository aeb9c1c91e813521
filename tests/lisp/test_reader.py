from __future__ import annotations

import dataclasses

import pytest

from svit_cluster.errors import ErrorCode, LimitExceeded, ScriptFailed
from svit_cluster.lisp._reader import read_source
from svit_cluster.lisp._types import Char, Keyword, Symbol, SynList
from svit_cluster.values import Limits

LIM = Limits()


def read(src: str, limits: Limits = LIM) -> list[object]:
    return [d for d, _, _ in read_source(src, "t", limits)]


def test_atoms() -> None:
    assert read("1 -2 +3 1.5 -2e3 2.5e-1 true false") == [1, -2, 3, 1.5, -2000.0, 0.25, True, False]
    kw, sym = read(":key foo-bar?")
    assert kw == Keyword("key") and sym == Symbol("foo-bar?")
    assert read("#'a' #'\\n'") == [Char("a"), Char("\n")]


def test_types_are_exact() -> None:
    one, flt = read("1 1.0")
    assert type(one) is int and type(flt) is float


def test_lists_quote_and_comments() -> None:
    (form,) = read("; comment\n(a (b 'c) ()) ; trailing")
    assert isinstance(form, SynList)
    assert form[0] == Symbol("a")
    inner = form[1]
    assert inner[1] == SynList([Symbol("quote"), Symbol("c")])
    assert form[2] == ()


def test_positions() -> None:
    forms = read_source("\n  (a\n   (b))", "t", LIM)
    datum, line, col = forms[0]
    assert (line, col) == (2, 3)
    assert (datum[1].line, datum[1].col) == (3, 4)


def test_string_escapes() -> None:
    assert read(r'"a\nb\t\"q\"\\ \u{41}\0"') == ['a\nb\t"q"\\ A\0']
    assert read('"multi\nline"') == ["multi\nline"]


@pytest.mark.parametrize(
    ("src", "fragment"),
    [
        ('"abc', "unterminated string"),
        ("(a", "unclosed"),
        (")", "unexpected ')'"),
        ("'", "dangling quote"),
        ("('x ')", "quote must be followed"),
        (r'"\q"', "invalid escape"),
        (r'"\u{D800}"', "invalid unicode escape"),
        ("1abc", "invalid number"),
        ("#foo", "unsupported syntax"),
        ("`x", "unsupported syntax"),
        ("1e999", "out of range"),
        ("\x01", "unexpected character"),
        (":", "empty keyword"),
    ],
)
def test_syntax_errors_carry_path_and_position(src: str, fragment: str) -> None:
    with pytest.raises(ScriptFailed) as info:
        read_source(src, "subject", LIM)
    assert "/lib/subject.svit-script:1:" in info.value.message
    assert fragment in info.value.message
    assert info.value.code == ErrorCode.SCRIPT_FAILED


def test_error_line_and_column() -> None:
    with pytest.raises(ScriptFailed) as info:
        read_source("(a)\n  (b \"x", "subject", LIM)
    assert "/lib/subject.svit-script:2:6:" in info.value.message


def test_syntax_depth_limit() -> None:
    limits = dataclasses.replace(LIM, max_syntax_depth=8)
    read("(" * 8 + ")" * 8, limits)
    with pytest.raises(LimitExceeded) as info:
        read("(" * 9 + ")" * 9, limits)
    assert info.value.code == ErrorCode.RESOURCE_LIMIT_EXCEEDED
    assert "syntax depth" in info.value.message
    with pytest.raises(LimitExceeded):
        read("'" * 9 + "x", limits)


def test_deep_syntax_at_hard_maximum_is_iterative() -> None:
    limits = dataclasses.replace(LIM, max_syntax_depth=1024)
    (form,) = read("(" * 1024 + ")" * 1024, limits)
    assert isinstance(form, SynList)


def test_script_bytes_limit() -> None:
    limits = dataclasses.replace(LIM, max_script_bytes=10)
    read("(a b c d)", limits)
    with pytest.raises(LimitExceeded) as info:
        read("(a b c d e f)", limits)
    assert "script bytes" in info.value.message
    assert "/lib/t.svit-script" in info.value.message


def test_integer_bits_limit() -> None:
    assert read(str(2**63 - 1)) == [2**63 - 1]
    assert read(str(-(2**63))) == [-(2**63)]
    for text in (str(2**63), str(-(2**63) - 1), "9" * 5000):
        with pytest.raises(LimitExceeded) as info:
            read(text)
        assert "integer bits" in info.value.message


def test_lone_surrogate_source_is_rejected() -> None:
    with pytest.raises(ScriptFailed):
        read("\ud800")
