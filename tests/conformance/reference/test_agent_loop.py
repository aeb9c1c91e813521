"""Reference ``crates/svit/tests/agent_loop.rs``: tests of a feature we lack.

Feature: the reference's agent loop (model driver, /agent state, /bin executables). Each
reference test is listed by name and fails with "feature absent: ..." (it is not
skipped) until the feature exists; then it is ported for real. Marker
``reference_absent`` lets a run deselect them (``-m "not reference_absent"``). See
docs/conformance.md, "Reference test port".
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.reference_absent



def test_svit_builder_combines_process_definition_and_blocking_inbox_loop() -> None:
    pytest.fail(
        'feature absent: agent builder with a simulated model: an inbox message runs a '
        'tool call and an answer, then the inbox closes'
    )


def test_started_svit_processes_inbox_messages_in_commit_order() -> None:
    pytest.fail(
        'feature absent: a started agent answers inbox messages in commit order without '
        'restarting'
    )


def test_agent_runtime_projects_prompt_messages_and_events() -> None:
    pytest.fail(
        'feature absent: /agent/system_prompt, /agent/messages, /agent/events and the '
        '/bin catalog (jq, search) are projected'
    )


def test_resumed_agent_refreshes_tool_discovery_to_current_host_grants() -> None:
    pytest.fail(
        'feature absent: a resumed agent lists only the executables the new host grants'
    )


def test_agent_resume_rejects_a_divergent_message_projection() -> None:
    pytest.fail(
        'feature absent: resume refuses /agent messages that disagree with the event '
        'projection'
    )


def test_svit_agent_resumes_its_thread_from_the_process_snapshot() -> None:
    pytest.fail(
        'feature absent: an agent resumes its conversation from a process snapshot'
    )


def test_subagent_owns_an_isolated_forked_process() -> None:
    pytest.fail(
        "feature absent: a subagent runs on a fork; the parent's root hash is unchanged"
    )


def test_process_owned_agent_enforces_its_script_allowlist() -> None:
    pytest.fail(
        "feature absent: an agent's exec tool refuses scripts outside its allowlist"
    )


def test_agent_event_growth_fails_closed_at_the_process_limit() -> None:
    pytest.fail(
        'feature absent: oversized model output fails the turn and is not committed'
    )


def test_native_search_and_jq_process_structured_data() -> None:
    pytest.fail(
        'feature absent: native /bin/search and /bin/jq executables'
    )


def test_native_http_is_denied_without_an_explicit_url_grant() -> None:
    pytest.fail(
        'feature absent: native /bin/http refuses a URL not in the host allowlist'
    )


def test_native_http_uses_the_host_allowlist_and_transport() -> None:
    pytest.fail(
        'feature absent: native /bin/http calls an allowed URL through the host '
        'transport'
    )


def test_native_llm_uses_only_the_host_selected_nested_model() -> None:
    pytest.fail(
        'feature absent: native /bin/llm uses only the host-selected nested model'
    )


def test_native_spawn_runs_and_retains_an_isolated_child_svit() -> None:
    pytest.fail(
        'feature absent: native /bin/spawn forks and runs a child agent and keeps its '
        'snapshot'
    )


def test_native_data_tools_reject_unbounded_or_oversized_work() -> None:
    pytest.fail(
        'feature absent: jq refuses unbounded recursion; search refuses oversized '
        'patterns'
    )
