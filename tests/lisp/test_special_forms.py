from __future__ import annotations

import pytest

from svit_cluster.errors import ErrorCode, ScriptFailed
from svit_cluster.lisp import Meter, compile_script
from svit_cluster.values import Limits
from tests.lisp._support import FakeHost, run, value


def test_define_value_and_function() -> None:
    src = """
    (define base 10)
    (define (add x y) (+ x y base))
    (define (main input) (add 1 2))
    """
    assert run(src)[0] == 13


def test_define_returns_the_name_and_globals_do_not_survive() -> None:
    assert value("(= (define other 1) 'other)") is True
    src = """
    (define (probe) late)
    (define (main input) (if input (probe) (do (define late 1) 0)))
    """
    program = compile_script(src, name="fresh", limits=Limits())
    host = FakeHost()
    assert program.run_main(False, host, Meter(Limits())) == 0
    with pytest.raises(ScriptFailed) as info:
        program.run_main(True, host, Meter(Limits()))
    assert "unbound name late" in info.value.message


def test_optional_key_and_rest_parameters() -> None:
    src = """
    (define (opt a :optional b (c 5)) (value-array a b c))
    (define (kw a :key (scale 2) offset) (value-array (* a scale) offset))
    (define (rst a :rest more) (value-array a (len more) (null more)))
    (define (main input)
      (value-array (opt 1) (opt 1 2) (opt 1 2 3)
                   (kw 3) (kw 3 :offset 1 :scale 10)
                   (rst 1) (rst 1 2 3)))
    """
    out = run(src)[0]
    assert out == [
        [1, None, 5], [1, 2, 5], [1, 2, 3],
        [6, None], [30, 1],
        [1, 0, True], [1, 2, False],
    ]


def test_defaults_may_use_earlier_parameters() -> None:
    assert value("(let ((f (lambda (a :optional (b (* a 2))) (+ a b)))) (f 4))") == 12


@pytest.mark.parametrize(
    ("call", "fragment"),
    [
        ("(f 1 2 3)", "expects"),
        ("(g 1 :nope 2)", "unexpected argument"),
        ("(g 1 :scale)", "odd number"),
        ("(g 1 :scale 1 :scale 2)", "duplicate keyword"),
        ("(f)", "expects"),
    ],
)
def test_parameter_errors(call: str, fragment: str) -> None:
    src = f"""
    (define (f a :optional b) a)
    (define (g a :key scale) a)
    (define (main input) {call})
    """
    with pytest.raises(ScriptFailed) as info:
        run(src)
    assert fragment in info.value.message


@pytest.mark.parametrize(
    "params",
    ["(a a)", "(:rest)", "(:rest a b)", "(:key a :optional b)", "((a 1))", "(1)", "(:bogus a)"],
)
def test_malformed_parameter_lists(params: str) -> None:
    with pytest.raises(ScriptFailed):
        run(f"(define (f {params.strip('()')}) 1) (define (main input) 1)")


def test_let_is_sequential_and_scoped() -> None:
    assert value("(let ((a 1) (b (+ a 1))) (let ((a 10)) (+ a b)))") == 12
    with pytest.raises(ScriptFailed):
        value("(let ((a)) a)")
    with pytest.raises(ScriptFailed):
        value("(let (a 1) a)")


def test_lambda_closures_capture_their_environment() -> None:
    src = """
    (define (adder n) (lambda (x) (+ x n)))
    (define (main input)
      (let ((add2 (adder 2)) (add5 (adder 5)))
        (value-array (add2 1) (add5 1) ((adder 7) 1))))
    """
    assert run(src)[0] == [3, 6, 8]


def test_if_without_else_yields_unit_and_needs_bool() -> None:
    assert value("(if false 1)") is None
    assert value("(if true 1 2)") == 1
    with pytest.raises(ScriptFailed) as info:
        value("(if 0 1 2)")
    assert "condition must be a bool" in info.value.message
    with pytest.raises(ScriptFailed):
        value("(if true)")


def test_cond_and_else() -> None:
    src = "(cond ((< input 0) \"neg\") ((> input 0) \"pos\") (else \"zero\"))"
    assert [value(src, n) for n in (-1, 1, 0)] == ["neg", "pos", "zero"]
    assert value("(cond (false 1))") is None
    with pytest.raises(ScriptFailed):
        value("(cond (else 1) (true 2))")
    with pytest.raises(ScriptFailed):
        value("(cond (1 2))")


def test_case_and_else() -> None:
    src = "(case input ((0 2 4) \"even\") ((1 3 5) \"odd\") (\"x\" \"str\") (else \"other\"))"
    assert [value(src, n) for n in (2, 3, "x", 9)] == ["even", "odd", "str", "other"]
    assert value("(case 'b ((a) 1) ((b c) 2))") == 2
    assert value("(case 7 ((1) 1))") is None
    with pytest.raises(ScriptFailed):
        value("(case)")


def test_and_or_short_circuit() -> None:
    assert value("(and)") is True and value("(or)") is False
    assert value("(and true false (panic \"never\"))") is False
    assert value("(or false true (panic \"never\"))") is True
    assert value("(and true 5)") == 5
    with pytest.raises(ScriptFailed):
        value("(and 1 true)")


def test_do_sequences_effects() -> None:
    out, host, _ = run(
        '(define (main input) (do (write "/memory/a" 1) (write "/memory/b" 2) (do)))'
    )
    assert out is None and host.root["memory"] == {"a": 1, "b": 2}


def test_apply_and_quote() -> None:
    assert value("(apply + 1 2 '(3 4))") == 10
    assert value("(apply value-array (list 1 2))") == [1, 2]
    assert value("(apply (lambda (a b) (- a b)) '(5 3))") == 2
    assert value("'(1 (2 \"x\") ())") == [1, [2, "x"], None]
    assert value("(quote ())") is None
    with pytest.raises(ScriptFailed):
        value("(apply + 1)")
    with pytest.raises(ScriptFailed):
        value("(quote 1 2)")


@pytest.mark.parametrize(
    "form",
    ['(use foo :all)', "(export (main))", "(import x)", "(macro (m) 1)", "(struct S ((a i)))"],
)
def test_module_forms_fail_closed(form: str) -> None:
    with pytest.raises(ScriptFailed) as info:
        run(f"{form} (define (main input) 1)")
    assert "not available" in info.value.message
    assert info.value.code == ErrorCode.SCRIPT_FAILED


@pytest.mark.parametrize("name", ["read", "+", "input", "*svit-version*", "if"])
def test_builtins_cannot_be_redefined(name: str) -> None:
    with pytest.raises(ScriptFailed):
        run(f"(define {name} 1) (define (main input) 1)")


def test_builtins_can_be_shadowed_locally() -> None:
    assert value("(let ((list (lambda (x) (* x 2)))) (list 21))") == 42
    assert value("((lambda (read) read) 7)") == 7


def test_special_form_is_not_a_value() -> None:
    with pytest.raises(ScriptFailed):
        value("(id if)")


def test_unbound_name_is_located() -> None:
    with pytest.raises(ScriptFailed) as info:
        run("(define (main input)\n  (+ 1 nope))")
    assert "unbound name nope" in info.value.message
    assert "/lib/subject.svit-script:2:3" in info.value.message


def test_svit_version_and_input() -> None:
    assert value("*svit-version*") == "Svit Lisp 2"
    assert value("input", {"a": [1]}) == {"a": [1]}
    assert run("(define (main x) input)", [])[0] == []
