"""A delayed intent and a cancel reach the outbox stream ``<prefix>:{P}:outbox``
with exactly the fixed intent JSON, through the real ``ProcessController`` +
``RedisBackend`` commit script; a restore (snapshot + tail) gives the same timers."""

from __future__ import annotations

import json
from typing import Any

import redis

from svit_cluster.control import ProcessController, decode_request
from svit_cluster.process import Process, encode_value
from svit_cluster.store import RedisBackend, StoreConfig

HOOK = "https://hooks.example.org/x"
SCRIPT = f"""(define (main input)
  (let ((op (value-get input "/op")))
    (if (= op "arm")
        (send! "{HOOK}" (value-map "n" (value-get input "/n")) (value-map "delay_ms" 8000))
        (if (= op "cancel") (cancel! (value-get input "/id"))
            (send! "svit://t/peer" "plain")))))"""


def _run(ctrl: ProcessController, pid: str, n: int, input: Any) -> Any:
    doc = {"protocol": "svit-control@1", "client_id": "c", "request_id": f"r{n}",
           "process_id": pid, "expected_version": ctrl.process.version,
           "command": {"operation": "activate", "script": "s", "input": encode_value(input)}}
    response = ctrl.execute(decode_request(json.dumps(doc).encode()))
    assert response.outcome.status == "committed", response.outcome
    return response.outcome.activation  # type: ignore[union-attr]


def test_the_outbox_stream_carries_delayed_intents_and_cancels_verbatim(
    rclient: redis.Redis, pid: str, config: StoreConfig
) -> None:
    backend = RedisBackend(rclient, pid, 4, config)
    backend.claim()
    proc = Process.create(pid, scripts={"s": SCRIPT})
    backend.create(proc)
    now = [1_700_000_000_000]
    ctrl = ProcessController(proc, backend, token=4, wall_clock=lambda: now[0])

    _run(ctrl, pid, 1, {"op": "arm", "n": 1})
    _run(ctrl, pid, 2, {"op": "arm", "n": 2})
    now[0] += 1_000
    assert _run(ctrl, pid, 3, {"op": "cancel", "id": f"{pid}:1:0"}).output is True
    _run(ctrl, pid, 4, {"op": "plain"})

    entries = rclient.xrange(backend.keys.outbox)
    got = [(fields[b"version"], json.loads(fields[b"intent"])) for _, fields in entries]
    due = 1_700_000_008_000
    assert got == [
        (b"1", {"body": {"n": 1}, "delay_ms": 8000, "due_ms": due,
                "message_id": f"{pid}:1:0", "to": HOOK}),
        (b"2", {"body": {"n": 2}, "delay_ms": 8000, "due_ms": due,
                "message_id": f"{pid}:2:0", "to": HOOK}),
        (b"3", {"cancel": f"{pid}:1:0", "message_id": f"{pid}:3:0"}),
        (b"4", {"body": "plain", "message_id": f"{pid}:4:0", "to": "svit://t/peer"}),
    ]
    # stored as canonical JSON (sorted keys, no spaces), as every intent
    assert entries[2][1][b"intent"] == (
        f'{{"cancel":"{pid}:1:0","message_id":"{pid}:3:0"}}'.encode())
    assert ctrl.process.read("/system/timers") == [
        {"id": f"{pid}:2:0", "to": HOOK, "due_ms": due}]

    # past snapshot_every commits, a new owner restores snapshot + tail to the same state
    for n in range(5, 5 + config.snapshot_every):
        _run(ctrl, pid, n, {"op": "arm", "n": n})
    owner = RedisBackend(rclient, pid, 5, config)
    restored = owner.restore()
    assert restored is not None and owner.last_restore is not None
    assert owner.last_restore.snapshot_version > 0 and owner.last_restore.tail_entries > 0
    assert restored.root_hash == ctrl.process.root_hash
    assert restored.read("/system/timers") == ctrl.process.read("/system/timers")
    assert len(restored.read("/system/timers")) == 1 + config.snapshot_every  # type: ignore[arg-type]
