"""Port of the reference's ``crates/svit/tests/lisp_runtime.rs`` (see docs/conformance.md)."""

from __future__ import annotations

import pytest

from svit_cluster.activation import activate
from svit_cluster.errors import SvitError
from svit_cluster.process import Process, Script, from_plain_json, to_plain_json


def test_lisp_activation_commits_memory_and_returns_a_map() -> None:
    """A stored counter reads memory and input, commits the sum, logs it with
    fields, and reports that a missing memory path reads as null."""
    proc = Process.create("svit://local/tests/lisp-counter", memory={"count": 0})
    proc.write("/lib/counter", {"source": """
        (define (main input)
          (let ((n (+ (read "/memory/count") (value-get input "/by"))))
            (do (write "/memory/count" n)
                (log-info! "counted" (value-map "count" n))
                (value-map "count" n
                           "missing-is-null" (value-null? (read "/memory/missing"))))))"""})
    result = activate(proc, "counter", {"by": 2})
    assert result.output == {"count": 2, "missing-is-null": True}
    assert proc.read("/memory/count") == 2
    log = result.logs[0]
    assert getattr(log, "fields", None) == {"count": 2} or (
        isinstance(log, dict) and log.get("fields") == {"count": 2})


def test_generic_operations_share_absolute_process_paths_inside_lisp() -> None:
    """One activation uses write, discover, nested exec, remove and read on absolute
    paths: it stages a script (with documentation) and a draft, runs the script
    nested, then removes both; only the nested script's memory write remains."""
    inner = ('(define (main input) (let ((next (+ (read \\"/memory/count\\") '
             '(value-get input \\"/by\\")))) (do (write \\"/memory/count\\" next) next)))')
    proc = Process.create("svit://local/tests/generic-operations", memory={"count": 0},
                          scripts={"orchestrator": f"""
        (define (main input)
          (do (write "/memory/draft" true)
              (write "/lib/increment"
                     (value-map "source" "{inner}"
                                "documentation" "Increment the durable count"))
              (let ((before (discover "/memory"))
                    (nested (exec "/lib/increment" input)))
                (do (remove "/memory/draft")
                    (remove "/lib/increment")
                    (value-map "before" before
                               "nested" nested
                               "identity" (read "/system/identity/address"))))))"""})
    result = activate(proc, "orchestrator", {"by": 2})
    assert result.output == {"before": ["count", "draft"], "nested": 2,
                             "identity": "svit://local/tests/generic-operations"}
    assert proc.read("/memory/count") == 2
    assert proc.read("/memory/draft") is None
    assert proc.read("/lib/increment") is None


def test_failed_nested_exec_rolls_back_the_complete_activation() -> None:
    proc = Process.create("svit://local/tests/nested-rollback", memory={"changed": False},
                          scripts={
        "inner": '(define (main input)'
                 ' (do (write "/memory/changed" true) (panic "inner failed")))',
        "outer": '(define (main input)'
                 ' (do (write "/memory/outer" true) (exec "/lib/inner" input)))',
    })
    before = proc.snapshot()
    with pytest.raises(SvitError):
        activate(proc, "outer", None)
    assert proc.snapshot() == before


def test_library_reads_can_be_written_back_through_the_generic_value_boundary() -> None:
    """What a read of /lib/<name> returns, passed through plain JSON, is a value a
    host may write to another /lib name; the copy runs and can be removed."""
    proc = Process.create("svit://local/tests/library-round-trip", scripts={
        "original": Script("(define (main input) input)", documentation="Returns its input")})
    visible = to_plain_json(proc.read("/lib/original"))
    proc.write("/lib/copy", from_plain_json(visible))
    assert activate(proc, "copy", {"copied": True}).output == {"copied": True}
    proc.remove("/lib/copy")
    assert proc.read("/lib/copy") is None
