"""Point 4: a script is compiled when it is stored (reference: process.rs, library
writes and the builder validate the script source), so a host write to ``/lib/NAME``
and process creation refuse a script that does not compile."""

from __future__ import annotations

from typing import Any

import pytest

from svit_cluster.activation import activate
from svit_cluster.errors import ErrorCode, SvitError
from svit_cluster.process import Limits, Process, Script
from tests.conformance._support import tampered


@pytest.mark.parametrize("source", ["(((", "(define (main input)", ")"])
def test_4_host_write_of_a_script_that_does_not_compile_is_refused(source: str) -> None:
    proc = Process.create("svit://conformance/lib")
    with pytest.raises(SvitError) as info:
        proc.write("/lib/broken", {"source": source})
    assert info.value.code == ErrorCode.SCRIPT_FAILED
    assert proc.version == 0 and proc.read("/lib/broken") is None
    proc.write("/lib/fine", Script("(define (main input) input)"))  # control
    assert proc.version == 1


def test_4_create_with_a_script_that_does_not_compile_is_refused() -> None:
    with pytest.raises(SvitError) as info:
        Process.create("svit://conformance/lib", scripts={"broken": "((("})
    assert info.value.code == ErrorCode.SCRIPT_FAILED
    assert Process.create("svit://conformance/lib", scripts={"ok": "(define (main i) i)"})


# docs/conformance.md row 17d: the parse limits (syntax depth, integer bits) are
# checked when a script is stored, on every path that stores one (reference:
# process.rs compiles library writes under the process limits; the Ketos reader
# enforces both limits), not only when the script runs.
_PARSE_LIMITS = [
    pytest.param(Limits(max_syntax_depth=4), "(define (main input) ((((((identity true)))))))",
                 "syntax depth", id="syntax-depth"),
    pytest.param(Limits(max_syntax_depth=4), "(define (unused) '((((x))))) (define (main i) i)",
                 "syntax depth", id="syntax-depth-quoted-never-called"),
    pytest.param(Limits(max_integer_bits=8), "(define (main input) 65536)",
                 "integer bits", id="integer-bits"),
    pytest.param(Limits(max_integer_bits=8), "(define (unused) '(1 -129)) (define (main i) i)",
                 "integer bits", id="integer-bits-quoted-never-called"),
]


def _refused(call: Any, limit: str) -> SvitError:
    with pytest.raises(SvitError) as info:
        call()
    assert info.value.code in (ErrorCode.RESOURCE_LIMIT_EXCEEDED, ErrorCode.INVALID_SNAPSHOT)
    assert limit in info.value.message
    return info.value


@pytest.mark.parametrize(("limits", "source", "limit"), _PARSE_LIMITS)
def test_17_parse_limits_refuse_a_script_when_it_is_written(limits: Limits, source: str,
                                                             limit: str) -> None:
    # process creation
    err = _refused(lambda: Process.create("svit://conformance/parse", limits=limits,
                                          scripts={"s": source}), limit)
    assert err.code == ErrorCode.RESOURCE_LIMIT_EXCEEDED
    # a host write
    proc = Process.create("svit://conformance/parse", limits=limits,
                          scripts={"stage": '(define (main input) (write "/lib/s" input))'})
    err = _refused(lambda: proc.write("/lib/s", {"source": source}), limit)
    assert err.code == ErrorCode.RESOURCE_LIMIT_EXCEEDED
    assert proc.version == 0 and proc.read("/lib/s") is None
    # a guest write staged by an activation: the activation fails, nothing commits
    before = proc.snapshot()
    err = _refused(lambda: activate(proc, "stage", {"source": source}), limit)
    assert err.code == ErrorCode.RESOURCE_LIMIT_EXCEEDED
    assert proc.snapshot() == before
    # a restored snapshot holding it (root hash recomputed): invalid_snapshot naming it
    def put(doc: dict[str, Any]) -> None:
        doc["root"]["value"]["lib"]["value"]["s"] = {"type": "script",
                                                     "value": {"source": source}}
    err = _refused(lambda: Process.restore(tampered(proc, put)), limit)
    assert err.code == ErrorCode.INVALID_SNAPSHOT and "/lib/s" in err.message
    # control: a script within the limits is stored on every path
    proc.write("/lib/s", {"source": "(define (main input) 127)"})
    assert activate(proc, "stage", {"source": "(define (main i) '(1 2))"}).version == 2
