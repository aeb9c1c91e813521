"""Reference ``crates/svit/tests/deed_runtime.rs``: tests of a feature we lack.

Feature: the reference's second guest language, Deed. Each reference test is listed by
name and fails with "feature absent: ..." (it is not skipped) until the feature exists;
then it is ported for real. Marker ``reference_absent``
runs them as strict expected failures (``conftest.py`` here). See
docs/conformance.md, "Reference test port".
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.reference_absent



def test_deed_activation_commits_memory_once() -> None:
    pytest.fail(
        "feature absent: a Deed script's mutation intents commit once"
    )


def test_deed_contract_failure_rolls_back_memory_and_version() -> None:
    pytest.fail(
        'feature absent: a Deed contract failure rolls the activation back'
    )


def test_deed_source_can_be_staged_as_a_named_script() -> None:
    pytest.fail(
        'feature absent: a /lib entry with language deed@0.2.12 is stored and runs'
    )


def test_deed_text_and_remove_intents_commit_together() -> None:
    pytest.fail(
        'feature absent: Deed set-text and remove intents commit together'
    )


def test_malformed_deed_output_rolls_back_the_activation() -> None:
    pytest.fail(
        'feature absent: console output that is not a mutation intent fails the '
        'activation'
    )


def test_invalid_deed_source_is_rejected_before_it_enters_the_library() -> None:
    pytest.fail(
        'feature absent: Deed source that does not parse is refused on write'
    )


def test_deed_imports_outside_the_svit_grants_are_rejected() -> None:
    pytest.fail(
        'feature absent: Deed effects outside the granted imports are refused on write'
    )
