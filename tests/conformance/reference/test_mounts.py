"""Reference ``crates/svit/tests/mounts.rs``: tests of a feature we lack.

Feature: the reference's virtual mounts (/mounts/<name> backed by folders or queries).
Each reference test is listed by name and fails with "feature absent: ..." (it is not
skipped) until the feature exists; then it is ported for real. Marker ``reference_absent``
runs them as strict expected failures (``conftest.py`` here). See
docs/conformance.md, "Reference test port".
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.reference_absent



def test_folder_mounts_resolve_lazily_and_expose_node_facts() -> None:
    pytest.fail(
        'feature absent: a folder mount is read lazily; stat shows kind and locality'
    )


def test_the_committed_root_records_mount_identity_without_mount_data() -> None:
    pytest.fail(
        'feature absent: the root stores a mount descriptor, never file content'
    )


def test_read_only_mounts_reject_host_and_guest_writes() -> None:
    pytest.fail(
        'feature absent: writes to a read-only mount are mount_denied'
    )


def test_mount_paths_cannot_escape_their_root() -> None:
    pytest.fail(
        'feature absent: `..` below a mount is invalid_path; an absent file reads as '
        'null'
    )


def test_granted_mount_writes_commit_with_the_activation() -> None:
    pytest.fail(
        "feature absent: a writable mount's write reaches disk with the commit"
    )


def test_a_failed_activation_leaves_mount_writes_unapplied() -> None:
    pytest.fail(
        'feature absent: a failed activation leaves the mounted file untouched'
    )


def test_restoring_a_snapshot_keeps_mount_identity_but_not_mount_authority() -> None:
    pytest.fail(
        'feature absent: after restore a mount is detached until reattached with the '
        'same identity'
    )


def test_stat_describes_committed_nodes_with_the_same_facts_vocabulary() -> None:
    pytest.fail(
        'feature absent: stat of committed nodes reports kind, locality, access and '
        'facts'
    )


def test_mount_reads_fail_closed_at_the_configured_limits() -> None:
    pytest.fail(
        'feature absent: a mounted file above max_text_bytes is resource_limit_exceeded'
    )


def test_forked_processes_share_the_mounts_the_host_attached() -> None:
    pytest.fail(
        "feature absent: a fork sees the parent's attached mounts"
    )


def test_turso_query_mounts_report_cache_locality() -> None:
    pytest.fail(
        'feature absent: a database query mount reports cache locality'
    )


def test_unknown_mount_names_are_invalid_paths() -> None:
    pytest.fail(
        'feature absent: an unknown mount name is invalid_path; a bad name is '
        'invalid_mount'
    )
