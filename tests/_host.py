"""Host operations through the real commit path (``ProcessController``), recorded.

The cluster's actor commits every change through ``ProcessController`` and a
``CommitBackend`` (``RedisBackend`` in production). Tests that need the records
of host writes, inbox operations or activations use :class:`Host` over any
backend; :class:`RecordingBackend` is the in-memory one that keeps each
committed transition (what the Redis stream would hold).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from svit_cluster.control import (
    PROTOCOL,
    CommitBackend,
    ControlRequest,
    MemoryBackend,
    ProcessController,
    Receipt,
    wire,
)
from svit_cluster.errors import SvitError
from svit_cluster.process import (
    Change,
    Process,
    ScriptNode,
    Transaction,
    Transition,
    WorkingCopy,
    check_script,
    get_node,
)
from svit_cluster.values import Value

_rids = itertools.count()


class RecordingBackend(MemoryBackend):
    """A :class:`MemoryBackend` that keeps every committed transition, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.transitions: list[Transition] = []

    def commit(self, transition: Transition, receipt: Receipt | None = None,
               intents: Sequence[dict[str, Any]] = (), *,
               completion: Mapping[str, Any] | None = None) -> None:
        super().commit(transition, receipt, intents, completion=completion)
        self.transitions.append(transition)

    @property
    def records(self) -> list[Transaction]:
        """The committed records, each round-tripped through its bytes."""
        return [Transaction.decode(t.record.encode()) for t in self.transitions]


class Host:
    """One owner's host operations on ``process`` through ``ProcessController``."""

    def __init__(self, process: Process, backend: CommitBackend | None = None) -> None:
        self.backend = backend if backend is not None else RecordingBackend()
        self.ctrl = ProcessController(process, self.backend)

    @property
    def process(self) -> Process:
        return self.ctrl.process

    def __getattr__(self, name: str) -> Any:
        """Reads (``read``, ``version``, ``root_hash``, ``snapshot``, ...) go to the process."""
        return getattr(self.ctrl.process, name)

    @property
    def records(self) -> list[Transaction]:
        assert isinstance(self.backend, RecordingBackend)
        return self.backend.records

    def write(self, path: str, value: Value) -> Change:
        def stage(wc: WorkingCopy) -> None:
            segs = wc.write(path, value)
            if segs[0] == "lib":  # as Process.write: a stored script must compile
                node = get_node(wc.root, segs)
                assert isinstance(node, ScriptNode)
                check_script(segs[1], node.script, self.process.limits)

        return self.ctrl.commit_host("host.write", stage)

    def remove(self, path: str) -> Change:
        def stage(wc: WorkingCopy) -> None:
            wc.remove(path)

        return self.ctrl.commit_host("host.remove", stage)

    def inbox_append(self, message: Value) -> Change | None:
        return self.ctrl.append_inbox(message)[2]

    def inbox_ack(self, expected_head_hash: str) -> Change:
        return self.ctrl.ack_inbox(expected_head_hash)

    def activate(self, script: str, input: Value) -> Value:
        """Run ``script`` at the current version; return its output.

        Raises:
            SvitError: the request was not committed (its code and message).
        """
        req = ControlRequest(protocol=PROTOCOL, client_id="test-host",
                             request_id=f"r{next(_rids)}", process_id=self.process.id,
                             expected_version=self.process.version,
                             command={"operation": "activate", "script": script,
                                      "input": wire(input)})
        outcome = self.ctrl.execute(req).outcome
        if outcome.status != "committed":
            raise SvitError(f"activation not committed: {outcome.model_dump(mode='json')}")
        return outcome.activation.output  # type: ignore[union-attr]
