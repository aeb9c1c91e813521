"""Bounded ``/thread`` session metadata of a reasoning process.

``/thread`` keeps only small, host-owned metadata, never the conversation
(reference: memory.md and the reasoning-loop tests; the canonical events are
paged host storage, here the Redis event log). The metadata keys:

* ``format`` -- :data:`THREAD_FORMAT`;
* ``instructions`` -- the operator's instructions for this process, or null;
* ``process_id`` -- the process the metadata belongs to;
* ``session_id`` -- the event session the loop appends to;
* ``system_prompt`` -- generated from the process id, the tool guidance and
  the instructions (appended inside an ``<instructions>`` block).

Next to them the cluster keeps its own bounded bookkeeping under
:data:`HOST_KEYS` (the turn counter ``session``, the inbox dedup window
``delivered``, the inbox close mark ``inbox_closed``).

Lifecycle: the metadata is written in the same commit as a turn's inbox
acknowledge (so it never adds a version a client did not expect). Snapshot and
restore carry it unchanged (same process id: same session, history kept in the
event log). A fork carries the parent's metadata under another process id; the
child's first turn rewrites ``process_id``, ``session_id`` and
``system_prompt`` for the child and keeps ``instructions`` (reference: a
process-only fork starts a new isolated session with inherited instructions).
A store-level fork also copies the parent's event prefix into the child's
session (``events.fork_events``); the loop then continues after it.

A loop refuses to start on a ``/thread`` that carries a materialised history
(``messages`` or ``events``) or metadata with no ``process_id``
(:func:`check_thread`).
"""

from __future__ import annotations

from typing import Any

from svit_cluster.errors import ErrorCode, InvalidInput
from svit_cluster.events import session_for

__all__ = [
    "HOST_KEYS",
    "METADATA_KEYS",
    "THREAD_FORMAT",
    "ThreadRefused",
    "check_thread",
    "system_prompt_for",
    "thread_metadata",
]

#: Format tag of the ``/thread`` metadata (the reference's current format).
THREAD_FORMAT = "svit-thread@8"
#: The reference's bounded metadata keys, sorted.
METADATA_KEYS = ("format", "instructions", "process_id", "session_id", "system_prompt")
#: Cluster bookkeeping kept next to the metadata.
HOST_KEYS = ("dead_letters", "delivered", "inbox_closed", "session")
_MATERIALISED = ("events", "messages")
#: Instructions longer than this (UTF-8 bytes) are refused.
MAX_INSTRUCTIONS_BYTES = 16 * 1024

_GUIDANCE = (
    "You are the reasoning loop of the Svit process {pid}. The process's committed "
    "state is authoritative and every change you make is one fenced transaction. "
    "Keep durable facts and working notes in /memory. Tools: discover, read and stat "
    "observe any absolute path; write and remove change /memory (or store a script "
    "at /lib/<name>); exec activates a /lib script with a JSON input, and a "
    "script can call (exec \"/lib/name\" input), build maps with (value-map \"key\" "
    "value ...) and reach host ports with (port-call \"name\" input) when /ports "
    "lists them. A port call has an immediate external effect outside the "
    "transaction, so call it once and store what you need.\n"
    "Scripts are process state under /lib, kept and versioned like memory. To keep "
    "an operation you will need again, write {{\"source\": <Svit Lisp defining "
    "main>, \"documentation\": <what it does>}} to /lib/<name>, then call the exec "
    "tool with path /lib/<name>; the script stays for later turns. A script can "
    "call ports and write durable state in the same activation. What a port "
    "returns exists only during that activation: write the part you need to "
    "/memory or return it. Inside a script, (jq filter value) queries JSON and "
    "(search path pattern) finds text below a process path.\n"
    "Answer briefly."
)


class ThreadRefused(InvalidInput):
    """``/thread`` cannot start a reasoning loop (``invalid_value``)."""

    default_code = ErrorCode.INVALID_VALUE


def system_prompt_for(process_id: str, instructions: str | None,
                      guidance: str | None = None) -> str:
    """The generated system prompt: names ``process_id``; ends with the instructions.

    ``guidance`` replaces the built-in tool guidance (an operator's own
    prompt); the process id is still named first.
    """
    if guidance:
        prompt = f"You operate the Svit process {process_id}. {guidance}"
    else:
        prompt = _GUIDANCE.format(pid=process_id)
    if instructions:
        prompt += f"\n\n<instructions>\n{instructions}\n</instructions>"
    return prompt


def check_thread(thread: Any) -> None:
    """Refuse a ``/thread`` a loop must not start from.

    Raises:
        ThreadRefused: ``thread`` holds a materialised history (``messages`` or
            ``events``), or carries metadata (``format``) without a string
            ``process_id``, or instructions that are not text or too long.
    """
    if not isinstance(thread, dict):
        return
    found = [k for k in _MATERIALISED if k in thread]
    if found:
        raise ThreadRefused("bounded /thread metadata holds a materialised history "
                            f"({', '.join(found)}); the events live in the event log")
    if "format" in thread and not isinstance(thread.get("process_id"), str):
        raise ThreadRefused("the /thread metadata has no process_id")
    instructions = thread.get("instructions")
    if instructions is not None and (
            not isinstance(instructions, str)
            or len(instructions.encode("utf-8")) > MAX_INSTRUCTIONS_BYTES):
        raise ThreadRefused("/thread/instructions must be text of at most "
                            f"{MAX_INSTRUCTIONS_BYTES} bytes")


def thread_metadata(process_id: str, thread: Any, default_instructions: str | None,
                    guidance: str | None = None) -> dict[str, Any]:
    """The metadata ``/thread`` must hold for ``process_id``.

    Instructions already in ``thread`` win (a fork or restore keeps them);
    otherwise ``default_instructions`` (the host's configuration) is used. The
    session is derived from the process id, so a fork gets a new session and a
    failover keeps the old one.
    """
    instructions = default_instructions
    if isinstance(thread, dict) and "format" in thread:
        kept = thread.get("instructions")
        instructions = kept if isinstance(kept, str) else None
    return {
        "format": THREAD_FORMAT,
        "instructions": instructions,
        "process_id": process_id,
        "session_id": session_for(process_id),
        "system_prompt": system_prompt_for(process_id, instructions, guidance),
    }


def history_prefix_seq(thread: Any) -> int:
    """The last event sequence number a history fork shares, from ``/thread``.

    ``thread`` is the plain JSON of the parent's ``/thread`` read from the same
    state the child's snapshot is taken from, so the shared prefix is exactly
    the events acknowledged at that version: ``/thread/session/last_seq`` (the
    last event of the last acknowledged turn; see ``TurnLoop``). Events after
    it (a turn in flight or failed, not acknowledged) are not shared. 0 when
    the process never acknowledged a turn (nothing to share).

    Source of the rule: the reference's durable fork shares an immutable prefix
    of the parent's event log, then parent and child diverge in isolation.
    """
    session = thread.get("session") if isinstance(thread, dict) else None
    last = session.get("last_seq") if isinstance(session, dict) else None
    return last if type(last) is int and last > 0 else 0
