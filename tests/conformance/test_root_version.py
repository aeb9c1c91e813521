"""Version difference V1: which reference version our root follows.

The reference's own files disagree between versions. ``process_invariants.rs`` at
28183774 (snapshot format 8) expects a root with ``bin`` and the language
``svit-guests@1``; ``process.rs`` at 4af29e09 (snapshot format 10, the later
format) builds and validates a root with ``ports`` instead of ``bin`` and the
language ``svit-lisp@2``, and the reference's docs (``docs/memory.md``,
``docs/ports.md``) describe ``/ports`` as the read-only port catalog. We follow
the later version; these tests pin that choice (docs/conformance.md, V1).
``/system/api`` is ours in every version: ``{control: "svit-control@1"}`` where
the reference lists ``{operations: [discover, exec, read, remove, write]}``.
"""

from __future__ import annotations

from svit_cluster.process import Process

#: Root keys of the reference's process.rs at 4af29e09, in discover order.
REFERENCE_4AF29E09_ROOT = ["children", "inbox", "lib", "memory", "mounts", "ports", "system",
                           "tasks", "thread"]


def test_v1_root_keys_and_language_follow_the_later_reference_version() -> None:
    proc = Process.create("svit://conformance/root")
    assert proc.discover("/") == REFERENCE_4AF29E09_ROOT
    assert "bin" not in proc.discover("/")
    assert proc.read("/system/runtime/language") == "svit-lisp@2"
    # the reference's seven /system keys, plus our timers (docs/conformance.md D10)
    assert proc.discover("/system") == ["api", "capabilities", "identity", "limits",
                                        "lineage", "outbox", "runtime", "timers"]


def test_v1_system_api_is_our_own() -> None:
    proc = Process.create("svit://conformance/root")
    assert proc.read("/system/api") == {"control": "svit-control@1"}
    assert proc.read("/system/api/operations") is None
