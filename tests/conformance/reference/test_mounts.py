"""Port of the reference's ``crates/svit/tests/mounts.rs`` (see docs/conformance.md, "Mounts").

One test per reference test, same name, re-expressed against
:class:`svit_cluster.process.Process`, :func:`activate` and the mount providers
of :mod:`svit_cluster.mounts`. Differences, each listed in docs/conformance.md:

* the reference's ``Limits::max_mount_entries`` does not exist here (adding a
  field to ``/system/limits`` would change every existing root): a listing or
  a result is bounded by ``max_value_entries``;
* the reference's Turso query mount is a PostgreSQL ``sql_query`` mount here
  (kind ``sql-query``), started by the ``postgres`` fixture;
* ``attach_mount`` refuses a provider whose identity differs from the
  committed descriptor (the reference leaves it to the host).
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from svit_cluster.activation import activate
from svit_cluster.errors import (
    ErrorCode,
    InvalidInput,
    InvalidMount,
    LimitExceeded,
    MountDenied,
    MountUnavailable,
    SvitError,
)
from svit_cluster.mounts import FolderMount, SqlQueryMount
from svit_cluster.process import Limits, Process
from tests._postgres import PostgresServer

FIXTURE = Path(__file__).resolve().parent / "mount-data"

READ_MOUNT = """
(define (main input)
  (value-map
    "greeting" (read "/mounts/files/greeting.txt")
    "nested" (read "/mounts/files/notes/checklist.md")
    "children" (discover "/mounts/files")
    "locality" (value-get (stat "/mounts/files/greeting.txt") "/locality")
    "kind" (value-get (stat "/mounts/files") "/kind")))
"""

WRITE_MOUNT = """
(define (main input)
  (do
    (write "/mounts/workspace/note.txt" (value-get input "/text"))
    (write "/memory/written" true)
    "committed"))
"""

WRITE_THEN_FAIL = """
(define (main input)
  (do
    (write "/mounts/workspace/note.txt" "must not reach disk")
    (panic "the activation fails after buffering a mount write")))
"""


def read_only_process() -> Process:
    return Process.create("svit://local/test/mounts",
                          scripts={"read_mount": READ_MOUNT},
                          mounts={"files": FolderMount(FIXTURE, writable=False)})


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    root = tmp_path / "scratch"
    root.mkdir()
    return root


def test_folder_mounts_resolve_lazily_and_expose_node_facts() -> None:
    process = read_only_process()

    activation = activate(process, "read_mount", {})

    assert activation.output == {
        "children": ["greeting.txt", "notes"],
        "greeting": "hello from a real folder\n",
        "kind": "directory",
        "locality": "local",
        "nested": "release checklist\n- run just check\n",
    }


def test_the_committed_root_records_mount_identity_without_mount_data() -> None:
    process = read_only_process()

    descriptor = process.read("/mounts/files")
    snapshot = process.snapshot().decode()

    assert process.read("/mounts") == {"files": {
        "access": "read", "kind": "folder", "locality": "local",
        "source": str(FIXTURE.resolve()),
    }}
    assert isinstance(descriptor, dict)
    assert descriptor["kind"] == "directory"
    assert descriptor["attached"] is True
    assert descriptor["locality"] == "local"
    assert "hello from a real folder" not in snapshot
    assert process.version == 0


def test_read_only_mounts_reject_host_and_guest_writes() -> None:
    process = read_only_process()
    process.write("/lib/try_write", {"source": """
(define (main input) (do (write "/mounts/files/greeting.txt" "guest") "done"))"""})
    snapshot = process.snapshot()

    with pytest.raises(MountDenied):
        process.write("/mounts/files/greeting.txt", "replacement")
    with pytest.raises(MountDenied):
        activate(process, "try_write", {})

    assert process.version == 1
    assert process.snapshot() == snapshot
    assert (FIXTURE / "greeting.txt").read_text() == "hello from a real folder\n"


def test_mount_paths_cannot_escape_their_root() -> None:
    process = read_only_process()

    with pytest.raises(InvalidInput) as escaped:
        process.read("/mounts/files/../../etc")
    assert escaped.value.code == ErrorCode.INVALID_PATH
    with pytest.raises(InvalidInput) as listed:
        process.discover("/mounts/files/..")
    assert listed.value.code == ErrorCode.INVALID_PATH
    # A path that simply does not exist reads as absent, not as an escape.
    assert process.read("/mounts/files/absent.txt") is None


def test_granted_mount_writes_commit_with_the_activation(scratch: Path) -> None:
    (scratch / "note.txt").write_text("before")
    process = Process.create("svit://local/test/writable-mount",
                             scripts={"write_mount": WRITE_MOUNT},
                             mounts={"workspace": FolderMount(scratch, writable=True)})

    activation = activate(process, "write_mount", {"text": "after"})

    assert activation.output == "committed"
    assert (scratch / "note.txt").read_text() == "after"
    assert process.read("/memory/written") is True
    assert process.version == 1
    # The write is in the committed record (so any later owner can re-apply it),
    # and its notification path has no committed content hash.
    muts = [(m.op, m.path, m.value) for m in activation.transition.record.mutations]
    assert ("mount_write", "/mounts/workspace/note.txt", "after") in muts
    assert "/mounts/workspace/note.txt" in activation.changed
    assert activation.transition.change.hashes["/mounts/workspace/note.txt"] is None


def test_a_failed_activation_leaves_mount_writes_unapplied(scratch: Path) -> None:
    (scratch / "note.txt").write_text("before")
    process = Process.create("svit://local/test/rolled-back-mount",
                             memory={"count": 0},
                             scripts={"write_then_fail": WRITE_THEN_FAIL},
                             mounts={"workspace": FolderMount(scratch, writable=True)})
    snapshot = process.snapshot()

    with pytest.raises(SvitError):
        activate(process, "write_then_fail", {})

    assert (scratch / "note.txt").read_text() == "before"
    assert process.version == 0
    assert process.snapshot() == snapshot


def test_restoring_a_snapshot_keeps_mount_identity_but_not_mount_authority() -> None:
    process = read_only_process()
    restored = Process.restore(process.snapshot())

    root_record = restored.read("/mounts/files")
    assert isinstance(root_record, dict)
    assert restored.root_hash == process.root_hash
    assert root_record["attached"] is False
    assert root_record["kind"] == "folder"
    with pytest.raises(MountUnavailable):
        restored.read("/mounts/files/greeting.txt")
    with pytest.raises(MountUnavailable):
        restored.discover("/mounts/files")

    restored.attach_mount("files", FolderMount(FIXTURE, writable=False))

    assert restored.read("/mounts/files/greeting.txt") == "hello from a real folder\n"
    # Reattaching identical identity is not a state transition.
    assert restored.version == process.version
    assert restored.root_hash == process.root_hash


def test_stat_describes_committed_nodes_with_the_same_facts_vocabulary() -> None:
    process = read_only_process()

    memory = process.stat("/memory")
    script = process.stat("/lib/read_mount")

    assert memory is not None and script is not None
    assert memory["kind"] == "directory"
    assert memory["locality"] == "cache"
    assert memory["access"] == "read-write"
    assert script["kind"] == "leaf"
    # Ours names a script's content svit-script (the reference: svit-lisp@2);
    # docs/conformance.md, "Mounts".
    assert script["facts"] == {"bytes": len(READ_MOUNT.encode()), "content": "svit-script"}
    assert process.stat("/memory/absent") is None


def test_mount_reads_fail_closed_at_the_configured_limits(scratch: Path) -> None:
    (scratch / "large.txt").write_text("x" * 4096)
    limits = Limits(max_text_bytes=2048)
    process = Process.create("svit://local/test/mount-limits", limits=limits,
                             mounts={"files": FolderMount(scratch, writable=False)})

    with pytest.raises(LimitExceeded) as info:
        process.read("/mounts/files/large.txt")
    assert info.value.fields.get("limit") == "mount leaf bytes"


def test_forked_processes_share_the_mounts_the_host_attached() -> None:
    process = read_only_process()

    child = process.fork("svit://local/test/mounts-child")

    assert child.read("/mounts/files/greeting.txt") == "hello from a real folder\n"


def test_turso_query_mounts_report_cache_locality(postgres: PostgresServer) -> None:
    import psycopg

    table = f"items_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres.admin_dsn(), autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {table}")
        conn.execute(f"CREATE TABLE {table} (id INTEGER, name TEXT)")
        conn.execute(f"INSERT INTO {table} VALUES (1, 'alpha'), (2, 'beta')")
    catalog = SqlQueryMount(dsn=postgres.dsn(), query=f"SELECT id, name FROM {table} ORDER BY id",
                            label="items by id")
    process = Process.create("svit://local/test/turso-mount", mounts={"catalog": catalog})

    assert process.read("/mounts/catalog/0/name") == "alpha"
    assert process.discover("/mounts/catalog") == ["0", "1"]
    # Query rows are materialized, so the mount says so rather than claiming a
    # live remote view.
    stat = process.stat("/mounts/catalog")
    assert stat is not None and stat["locality"] == "cache"


def test_unknown_mount_names_are_invalid_paths() -> None:
    process = read_only_process()

    with pytest.raises(InvalidInput) as unknown:
        process.read("/mounts/absent/thing")
    assert unknown.value.code == ErrorCode.INVALID_PATH
    with pytest.raises(InvalidMount):
        process.read("/mounts/not a name/thing")
    assert isinstance(process.read("/mounts"), dict)
