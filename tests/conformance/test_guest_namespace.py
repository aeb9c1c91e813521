"""Difference R2: ``max_namespace_entries`` bounds the guest's global
namespace the way the reference's Ketos scope does.

The reference installs ``*svit-version*``, ``input`` and one function per runtime
helper of its catalog in a fresh Ketos global scope for every script run, then
runs the script; Ketos refuses a ``define`` of a new name once the scope already
holds ``namespace_size`` values ("guest namespace"). Redefining a name does not
add an entry, and a nested ``exec`` runs in a fresh scope.
"""

from __future__ import annotations

import pytest

from svit_cluster.activation import activate
from svit_cluster.errors import ErrorCode, LimitExceeded
from svit_cluster.lisp._builtins_catalog import BEYOND_REFERENCE, CATALOG
from svit_cluster.process import Limits, Process

#: ``*svit-version*``, ``input`` and the 45 catalog helpers.
RUNTIME_NAMES = 47


def _defines(count: int) -> str:
    """A script with ``count`` global definitions, ``main`` included."""
    extra = " ".join(f"(define g{i} {i})" for i in range(count - 1))
    return extra + ' (define (main input) (do (write "/memory/ran" true) true))'


def _process(limit: int, source: str) -> Process:
    proc = Process.create("svit://conformance/namespace", memory={"ran": False},
                          limits=Limits(max_namespace_entries=limit))
    proc.write("/lib/s", {"source": source})
    return proc


def test_r2_the_runtime_names_are_the_reference_scope() -> None:
    from svit_cluster.lisp._builtins import GUEST_SCOPE

    # catalogued helpers beyond the reference (cancel!) are not in its scope
    assert len(GUEST_SCOPE) == RUNTIME_NAMES == 2 + len(CATALOG) - len(BEYOND_REFERENCE)
    assert "cancel!" in BEYOND_REFERENCE and "cancel!" not in GUEST_SCOPE
    assert {"*svit-version*", "input", "read", "write", "send!", "safe-call"} <= GUEST_SCOPE
    assert "+" not in GUEST_SCOPE and "list" not in GUEST_SCOPE  # Ketos's system scope


@pytest.mark.parametrize("defines", [1, 3, 9])
def test_r2_guest_namespace_counts_the_runtime_names_and_each_define(defines: int) -> None:
    limit = RUNTIME_NAMES + defines
    proc = _process(limit, _defines(defines))
    assert activate(proc, "s", None).output is True  # exactly at the limit: runs

    over = _process(limit, _defines(defines + 1))
    before = over.snapshot()
    with pytest.raises(LimitExceeded) as info:
        activate(over, "s", None)
    assert info.value.code == ErrorCode.RESOURCE_LIMIT_EXCEEDED
    assert "guest namespace" in info.value.message
    assert f"max_namespace_entries={limit}" in info.value.message
    assert over.snapshot() == before and over.version == 1


def test_r2_below_the_runtime_names_no_script_can_define_main() -> None:
    proc = _process(RUNTIME_NAMES, _defines(1))
    with pytest.raises(LimitExceeded) as info:
        activate(proc, "s", None)
    assert "guest namespace" in info.value.message


def test_r2_redefining_a_name_adds_no_entry() -> None:
    source = '(define a 1) (define a 2) (define (main input) a)'
    assert activate(_process(RUNTIME_NAMES + 2, source), "s", None).output == 2
    with pytest.raises(LimitExceeded):
        activate(_process(RUNTIME_NAMES + 1, source), "s", None)


def test_r2_each_nested_exec_has_its_own_namespace() -> None:
    limit = RUNTIME_NAMES + 3
    proc = Process.create(
        "svit://conformance/namespace-exec", limits=Limits(max_namespace_entries=limit),
        scripts={
            "inner": "(define x 1) (define y 2) (define (main input) (+ x y input))",
            "outer": '(define a 10) (define b 20) (define (main input) (exec "/lib/inner" a))',
        })
    assert activate(proc, "outer", None).output == 13


def test_r2_the_default_leaves_209_script_definitions() -> None:
    assert Limits().max_namespace_entries - RUNTIME_NAMES == 209
    proc = Process.create("svit://conformance/namespace-default", memory={"ran": False})
    proc.write("/lib/s", {"source": _defines(209)})
    assert activate(proc, "s", None).output is True
    proc.write("/lib/s", {"source": _defines(210)})
    with pytest.raises(LimitExceeded):
        activate(proc, "s", None)
