"""Points 12 and 13: what a transition reports and counts.

12. The changed paths are the touched paths, even when a write stores the value
    that was already there (reference: process.rs, commit and activation report
    the touched paths of their mutations).
13. ``max_staged_scripts`` counts every library change, writes and removals, not
    distinct names (reference: process.rs, the staged library change list).
"""

from __future__ import annotations

import pytest

from svit_cluster.activation import activate
from svit_cluster.errors import ErrorCode, LimitExceeded
from svit_cluster.process import Limits, Process

SAME = '(define (main input) (write "/memory/count" (read "/memory/count")))'


def test_12_writing_an_equal_value_reports_the_touched_path() -> None:
    proc = Process.create("svit://conformance/same", memory={"count": 3},
                          scripts={"same": SAME})
    before = proc.root_hash
    result = activate(proc, "same", None)
    assert result.changed == ("/memory/count",)
    assert result.transition.record.touched_paths == ("/memory/count",)
    assert result.version == 1 and result.root_hash == before
    change = proc.write("/memory/count", 3)
    assert change.paths == ("/memory/count",) and proc.root_hash == before


def _lib_writer(body: str) -> Process:
    return Process.create("svit://conformance/lib", limits=Limits(max_staged_scripts=2),
                          scripts={"author": f"(define (main input) (do {body} 1))"})


W = '(write "/lib/{n}" (value-map "source" "(define (main input) input)"))'


@pytest.mark.parametrize("body", [
    W.format(n="a") * 3,  # one name, three changes
    W.format(n="a") + '(remove "/lib/a")' + W.format(n="a"),  # removals count too
])
def test_13_staged_script_limit_counts_every_library_change(body: str) -> None:
    proc = _lib_writer(body)
    with pytest.raises(LimitExceeded) as info:
        activate(proc, "author", None)
    assert info.value.code == ErrorCode.RESOURCE_LIMIT_EXCEEDED
    assert proc.version == 0
    ok = _lib_writer(W.format(n="a") + W.format(n="b"))  # control: two changes fit
    assert activate(ok, "author", None).version == 1
