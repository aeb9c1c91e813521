"""Core, list and string builtins: a valid case and the nearest invalid one for each."""

from __future__ import annotations

import math
from typing import Any

import pytest

from svit_cluster.errors import ErrorCode, LimitExceeded, ScriptFailed
from tests.lisp._support import value

VALID: list[tuple[str, Any]] = [
    # arithmetic
    ("(+)", 0),
    ("(+ 1 2 3)", 6),
    ("(+ 1 2.5)", 3.5),
    ("(- 5)", -5),
    ("(- 10 1 2)", 7),
    ("(*)", 1),
    ("(* 2 3 4)", 24),
    ("(* 2 1.5)", 3.0),
    ("(/ 12 3)", 4),
    ("(/ -12 4)", -3),
    ("(/ 1 2.0)", 0.5),
    ("(/ 1)", 1),
    ("(// 7 2)", 3),
    ("(// -7 2)", -4),
    ("(// 7.5 2)", 3.0),
    ("(rem 7 3)", 1),
    ("(rem -7 3)", -1),
    ("(rem 7.5 2)", 1.5),
    ("(abs -3)", 3),
    ("(abs -2.5)", 2.5),
    ("(min 3 1 2)", 1),
    ("(max 3 1.5 2)", 3),
    # comparison
    ("(= 1 1)", True),
    ("(= 1 1.0)", True),
    ("(= \"a\" \"a\" \"a\")", True),
    ("(= '(1 (2)) (list 1 (list 2)))", True),
    ("(= () ())", True),
    ("(= 'a 'a)", True),
    ("(= (value-map \"a\" 1) (value-map \"a\" 1))", True),
    ("(= (value-array 1) (value-array 1.0))", False),
    ("(/= 1 2)", True),
    ("(/= 1 1)", False),
    ("(< 1 2 3)", True),
    ("(< 1 3 2)", False),
    ("(<= 1 1.0)", True),
    ("(> \"b\" \"a\")", True),
    ("(>= 2 2)", True),
    # logic
    ("(not false)", True),
    ("(xor true false)", True),
    ("(xor true true)", False),
    ("(zero 0 0.0)", True),
    ("(zero 1)", False),
    # lists
    ("(list)", None),
    ("(list 1 \"a\")", [1, "a"]),
    ("(first '(1 2))", 1),
    ("(second '(1 2))", 2),
    ("(last '(1 2 3))", 3),
    ("(init '(1 2 3))", [1, 2]),
    ("(tail '(1 2 3))", [2, 3]),
    ("(tail '(1))", None),
    ("(elt '(1 2 3) 1)", 2),
    ("(len '(1 2 3))", 3),
    ("(len ())", 0),
    ("(append '(1) 2 3)", [1, 2, 3]),
    ("(concat '(1) () '(2 3))", [1, 2, 3]),
    ("(reverse '(1 2 3))", [3, 2, 1]),
    ("(slice '(1 2 3 4) 1 3)", [2, 3]),
    ("(slice '(1 2 3 4) 2)", [3, 4]),
    ("(null ())", True),
    ("(null '(1))", False),
    ("(null (value-array))", False),
    ("(join '(0) '(1 2) '(3))", [1, 2, 0, 3]),
    # arrays keep their kind
    ("(tail (value-array 1 2 3))", [2, 3]),
    ("(tail (value-array 1))", []),
    ("(append (value-array 1) '(2 3))", [1, [2, 3]]),
    ("(concat (value-array 1) '(2))", [1, 2]),
    ("(reverse (value-array 1 2))", [2, 1]),
    ("(first (value-array 9))", 9),
    # strings
    ("(len \"héllo\")", 6),
    ("(concat \"ab\" \"cd\" (first (chars \"e\")))", "abcde"),
    ("(join \", \" \"a\" \"b\")", "a, b"),
    ("(join \"-\" '(\"a\" \"b\"))", "a-b"),
    ("(string (first (chars \"xy\")))", "x"),
    ("(len (chars \"abc\"))", 3),
    ("(slice \"hello\" 1 3)", "el"),
    ("(slice \"héllo\" 0 3)", "hé"),
    # misc
    ("(= (type-of 1) 'integer)", True),
    ("(= (type-of 1.0) 'float)", True),
    ("(= (type-of ()) 'unit)", True),
    ("(= (type-of '(1)) 'list)", True),
    ("(= (type-of \"\") 'string)", True),
    ("(= (type-of (value-array)) 'array)", True),
    ("(= (type-of (value-map)) 'map)", True),
    ("(= (type-of (value-get input \"/x\")) 'null)", True),
    ("(= (type-of 'a) 'name)", True),
    ("(= (type-of :k) 'keyword)", True),
    ("(= (type-of (lambda () 1)) 'lambda)", True),
    ("(= (type-of +) 'function)", True),
    ("(is 'number 1.5)", True),
    ("(is 'integer 1.5)", False),
    ("(id 5)", 5),
    ("(format \"~a and ~s\" \"x\" \"y\")", 'x and "y"'),
    ("(format \"~d|~5d|~x|~b|~o\" 42 7 255 5 8)", "42|    7|ff|101|10"),
    ("(format \"~,2f ~a~%~~\" 3.14159 '(1 \"a\"))", "3.14 (1 a)\n~"),
    ("(format \"~5a|~5@a|\" \"ab\" \"cd\")", "ab   |   cd|"),
    ("(format \"~a ~a\" true (value-map \"k\" (value-array 1)))", 'true {"k":[1]}'),
    ("(format \"~c\" (first (chars \"z\")))", "z"),
]


@pytest.mark.parametrize(("expr", "expected"), VALID)
def test_valid(expr: str, expected: Any) -> None:
    out = value(expr, {})
    assert out == expected
    assert type(out) is type(expected)


INVALID: list[tuple[str, str]] = [
    ("(+ 1 \"a\")", "expects a number"),
    ("(+ true 1)", "expects a number"),
    ("(-)", "expects at least 1"),
    ("(* 1 '(1))", "expects a number"),
    ("(/ 7 2)", "not exact"),
    ("(/ 1 0)", "division by zero"),
    ("(/ 1.0 0.0)", "division by zero"),
    ("(// 1)", "expects at least 2"),
    ("(// 1 0)", "division by zero"),
    ("(rem 1 0)", "division by zero"),
    ("(rem 1)", "expects 2"),
    ("(abs \"x\")", "expects a number"),
    ("(min)", "expects at least 1"),
    ("(max 1 \"a\")", "expects a number"),
    ("(* 1e300 1e300)", "non-finite"),
    ("(= 1 \"1\")", "cannot compare"),
    ("(= () (value-get input \"/x\"))", "cannot compare"),
    ("(/= 'a 1)", "cannot compare"),
    ("(< 1 \"a\")", "cannot order"),
    ("(< true false)", "cannot order"),
    ("(not 1)", "expects a bool"),
    ("(xor true)", "expects 2"),
    ("(zero \"0\")", "expects a number"),
    ("(first ())", "empty list"),
    ("(first 5)", "expects a list"),
    ("(second '(1))", "shorter than 2"),
    ("(last ())", "empty list"),
    ("(init ())", "empty list"),
    ("(tail ())", "empty list"),
    ("(elt '(1) 1)", "out of bounds"),
    ("(elt '(1) -1)", "out of bounds"),
    ("(elt '(1) 0.0)", "expects an integer"),
    ("(len 5)", "expects a list"),
    ("(append 5 1)", "expects a list"),
    ("(append '(1))", "expects at least 2"),
    ("(concat \"a\" '(1))", "cannot mix"),
    ("(reverse \"ab\")", "expects a list"),
    ("(slice '(1 2) 1 5)", "out of range"),
    ("(slice \"héllo\" 0 2)", "character boundaries"),
    ("(null)", "expects 1"),
    ("(join \",\" \"a\" 1)", "expects a string"),
    ("(chars 1)", "expects a string"),
    ("(string 1)", "expects a char"),
    ("(format \"~a\")", "not enough arguments"),
    ("(format \"~q\" 1)", "unsupported format directive"),
    ("(format \"~d\" 1.5)", "expects an integer"),
    ("(format \"~\" 1)", "ends inside a directive"),
    ("(type-of)", "expects 1"),
    ("(is \"integer\" 1)", "expects a type name"),
    ("(id)", "expects 1"),
    ("(panic \"boom\")", "panic: boom"),
    ("(panic)", "explicit panic"),
    ("(1 2)", "cannot call a integer"),
]


@pytest.mark.parametrize(("expr", "fragment"), INVALID)
def test_invalid(expr: str, fragment: str) -> None:
    with pytest.raises(ScriptFailed) as info:
        value(expr, {})
    assert fragment in info.value.message
    assert info.value.code == ErrorCode.SCRIPT_FAILED
    assert "/lib/subject.svit-script:1:" in info.value.message


def test_integer_overflow_is_a_limit() -> None:
    for expr in ("(+ 9223372036854775807 1)", "(* 4611686018427387904 2)",
                 "(- -9223372036854775808 1)", "(abs -9223372036854775808)",
                 "(- -9223372036854775808)"):
        with pytest.raises(LimitExceeded) as info:
            value(expr)
        assert "integer bits" in info.value.message
        assert info.value.code == ErrorCode.RESOURCE_LIMIT_EXCEEDED


def test_float_results_stay_finite() -> None:
    assert math.isclose(value("(/ 1 3.0)"), 1 / 3)
