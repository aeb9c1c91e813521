"""Reference ``crates/svit/tests/reasoning_loop.rs``: tests of a feature we lack.

Feature: the reference's reasoning loop (Svit builder with a reasoner, /thread metadata,
ports, port-call, jq, search, event observation). Each reference test is listed by name
and fails with "feature absent: ..." (it is not skipped) until the feature exists; then
it is ported for real. Marker ``reference_absent`` lets a run deselect them (``-m "not
reference_absent"``). See docs/conformance.md, "Reference test port".
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.reference_absent



def test_svit_builder_requires_a_reasoner() -> None:
    pytest.fail(
        'feature absent: building a Svit without a reasoner is refused'
    )


def test_svit_owns_the_system_prompt_without_host_instructions() -> None:
    pytest.fail(
        'feature absent: /thread/system_prompt is generated (names the process, teaches '
        'port-call/exec/value-map); /thread/instructions null'
    )


def test_svit_builder_combines_process_definition_and_blocking_inbox_loop() -> None:
    pytest.fail(
        'feature absent: a reasoner turn runs a write tool and answers; the inbox then '
        'closes'
    )


def test_svit_uses_the_everruns_iteration_default() -> None:
    pytest.fail(
        'feature absent: nine tool calls then an answer fit the default iteration limit'
    )


def test_iteration_limit_does_not_publish_a_tool_call_as_a_completed_turn() -> None:
    pytest.fail(
        'feature absent: hitting max_iterations publishes no answer and keeps the '
        'message queued'
    )


def test_persisted_svit_resumes_memory_and_conversation_without_rerunning_reasoning() -> None:
    pytest.fail(
        'feature absent: a persisted Svit resumes memory and paged history; transaction '
        'sources name ports.refresh and inbox operations'
    )


def test_durable_fork_shares_an_immutable_event_prefix_and_diverges_afterward() -> None:
    pytest.fail(
        "feature absent: a durable fork shares the parent's event history, then "
        'diverges'
    )


def test_svit_exposes_only_explicitly_registered_ports() -> None:
    pytest.fail(
        'feature absent: /ports lists exactly the registered ports'
    )


def test_explicit_http_registration_exposes_only_http() -> None:
    pytest.fail(
        'feature absent: registering only http exposes only http under /ports'
    )


def test_svit_commit_notifications_are_observed_through_the_contract() -> None:
    pytest.fail(
        'feature absent: two observers each see Committed changes; read_versioned of / '
        'agrees with version'
    )


def test_canonical_events_are_observed_without_materializing_thread_history() -> None:
    pytest.fail(
        'feature absent: canonical events are observed; /thread holds only bounded '
        'metadata keys'
    )


def test_reasoning_tool_commits_are_observed_through_the_contract() -> None:
    pytest.fail(
        "feature absent: a reasoning tool's write is observed as a Committed change"
    )


def test_started_svit_processes_inbox_messages_in_commit_order() -> None:
    pytest.fail(
        'feature absent: a started Svit answers inbox messages in commit order'
    )


def test_reasoning_loop_exposes_bounded_thread_metadata_and_host_history() -> None:
    pytest.fail(
        'feature absent: /thread metadata (format svit-thread@8, instructions) and '
        'host-paged history'
    )


def test_resumed_svit_refreshes_builtin_discovery_to_current_host_grants() -> None:
    pytest.fail(
        'feature absent: a resumed Svit lists only the ports the new host grants'
    )


def test_reasoning_resume_rejects_materialized_thread_history() -> None:
    pytest.fail(
        'feature absent: resume refuses /thread carrying materialized messages'
    )


def test_reasoning_resume_rejects_thread_metadata_without_its_owner() -> None:
    pytest.fail(
        'feature absent: resume refuses /thread without its process_id'
    )


def test_process_snapshot_restores_thread_metadata_but_not_event_history() -> None:
    pytest.fail(
        'feature absent: a snapshot restores /thread metadata but not event history'
    )


def test_child_process_owns_an_isolated_forked_process() -> None:
    pytest.fail(
        'feature absent: a forked child gets its own system prompt and session'
    )


def test_process_reasoning_executes_any_process_script() -> None:
    pytest.fail(
        "feature absent: the reasoner's exec tool runs any /lib script"
    )


def test_system_prompt_teaches_the_script_library_lifecycle() -> None:
    pytest.fail(
        'feature absent: the generated system prompt teaches /lib scripts, inline exec, '
        'jq and search'
    )


def test_reasoning_event_growth_fails_closed_at_the_process_limit() -> None:
    pytest.fail(
        'feature absent: oversized model output fails closed and is reported as a '
        'Failed event'
    )


def test_host_extension_registers_discoverable_process_builtin() -> None:
    pytest.fail(
        'feature absent: a host port extension is discoverable under /ports and '
        'callable with port-call'
    )


def test_host_port_registration_exposes_its_own_descriptor() -> None:
    pytest.fail(
        "feature absent: /ports/<name> shows the port's own descriptor"
    )


def test_port_output_cannot_cross_the_persistent_value_boundary() -> None:
    pytest.fail(
        'feature absent: an oversized port result cannot be returned or stored'
    )


def test_standard_library_processes_structured_data() -> None:
    pytest.fail(
        'feature absent: the guest `search` and `jq` functions'
    )


def test_jq_standard_library_processes_json_returned_by_the_http_port() -> None:
    pytest.fail(
        "feature absent: jq over the http port's JSON response"
    )


def test_model_catalog_scenario_uses_a_saved_script_to_reduce_http_into_memory() -> None:
    pytest.fail(
        'feature absent: a model-written script fetches over http, reduces with jq, '
        'stores to memory'
    )


def test_builtin_http_is_denied_without_an_explicit_url_grant() -> None:
    pytest.fail(
        'feature absent: port-call http refuses a URL not in the allowlist'
    )


def test_inline_exec_can_call_http_and_commit_memory() -> None:
    pytest.fail(
        'feature absent: inline exec of source calls http and commits memory without a '
        '/lib entry'
    )


def test_persisted_model_authored_script_invokes_host_http_builtin() -> None:
    pytest.fail(
        'feature absent: a persisted, model-written script calls http once'
    )


def test_failed_script_does_not_repeat_builtin_or_commit_guest_state() -> None:
    pytest.fail(
        'feature absent: a script failing after an http call commits nothing and does '
        'not repeat the call'
    )


def test_builtin_llm_uses_only_the_host_selected_nested_model() -> None:
    pytest.fail(
        'feature absent: port-call llm uses only the host-selected nested reasoner'
    )


def test_builtin_spawn_runs_and_retains_an_isolated_child_svit() -> None:
    pytest.fail(
        'feature absent: port-call spawn runs a child Svit and refuses a duplicate '
        'child address'
    )


def test_bounded_data_operations_reject_unbounded_or_oversized_work() -> None:
    pytest.fail(
        'feature absent: jq refuses unbounded recursion; search refuses oversized '
        'patterns'
    )
