"""Reference ``crates/svit/tests/persistence.rs``: tests of a feature we lack.

Feature: the reference's persistence tests of features this host lacks. Each reference
test is listed by name and fails with "feature absent: ..." (it is not skipped) until
the feature exists; then it is ported for real. Marker ``reference_absent``
runs them as strict expected failures (``conftest.py`` here). See
docs/conformance.md, "Reference test port".
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.reference_absent



def test_fork_references_history_until_the_child_is_cut() -> None:
    pytest.fail(
        "feature absent: history cut: a durable fork shares the parent's history until "
        'the child is cut; cutting the parent first is refused (no `cut` operation on '
        'the Redis log; trimming is automatic after snapshots)'
    )


def test_transaction_queries_fail_closed_outside_the_result_bound() -> None:
    pytest.fail(
        'feature absent: transaction queries: a bounded query API over committed '
        'transactions (limit above 4096 is resource_limit_exceeded); the Redis log has '
        '`entries()` only'
    )

