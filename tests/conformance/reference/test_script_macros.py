"""Port of the reference's ``crates/svit/tests/script_macros.rs`` (see docs/conformance.md).

The reference embeds Lisp in Rust through two macros (inline source and a source
file). Python needs no macro: the same two cases are a documented script given as
text, and the fixture file ``scripts/counter.svit-script`` (our own counter, written
for this port) loaded from disk.
"""

from __future__ import annotations

from svit_cluster.activation import activate
from svit_cluster.process import Process, Script
from tests.conformance.reference._support import SCRIPTS


def test_direct_macro_preserves_lisp_names_and_executes() -> None:
    """A script with a helper whose name ends in ``?`` and with documentation runs,
    answers its input and a null check, and logs the check as a field."""
    source = """
        (define (missing?) (value-null? (read "/memory/missing")))
        (define (main input)
          (let ((missing (missing?)))
            (do (log-info! "direct source" (value-map "missing" missing))
                (value-map "input" input "missing" missing))))"""
    proc = Process.create("svit://local/tests/direct-macro", scripts={
        "inspect": Script(source, documentation="Returns the activation input and a null check")})
    result = activate(proc, "inspect", {"checked": True})
    assert result.output == {"input": {"checked": True}, "missing": True}
    log = result.logs[0]
    assert getattr(log, "fields", None) == {"missing": True} or (
        isinstance(log, dict) and log.get("fields") == {"missing": True})


def test_file_macro_executes_and_commits() -> None:
    source = (SCRIPTS / "counter.svit-script").read_text(encoding="utf-8")
    proc = Process.create("svit://local/tests/file-macro", scripts={"counter": source})
    proc.write("/memory/count", 40)
    assert activate(proc, "counter", {"by": 2}).output == {"count": 42}
    assert proc.read("/memory/count") == 42
