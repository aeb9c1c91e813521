"""Point 4: a script is compiled when it is stored (reference: process.rs, library
writes and the builder validate the script source), so a host write to ``/lib/NAME``
and process creation refuse a script that does not compile."""

from __future__ import annotations

import pytest

from svit_cluster.errors import ErrorCode, SvitError
from svit_cluster.process import Process, Script


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
