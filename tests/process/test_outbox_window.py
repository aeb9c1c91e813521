"""``/system/outbox`` keeps the newest ``OUTBOX_WINDOW`` intents (docs/conformance.md D9).

A process that sends forever must not slow down or fail because of its own
history: the window is trimmed in the activation that sends, the
trim is recorded as ``remove_front`` mutations, and replay reaches the same
root without running guest code.
"""

from __future__ import annotations

import time

from svit_cluster.activation import activate
from svit_cluster.process import OUTBOX_WINDOW, Process, Transaction
from svit_cluster.values import Limits

SENDER = "svit://t/sender"
SEND_ONE = """(define (main input)
  (do (send! "https://hooks.example.org/x" (value-map "n" input))
      (write "/memory/n" input)
      input))"""


def _sender(**scripts: str) -> Process:
    return Process.create(SENDER, scripts={"send": SEND_ONE, **scripts})


def test_the_window_keeps_the_newest_intents_and_replays() -> None:
    proc = _sender()
    base = proc.snapshot()
    log: list[Transaction] = []
    total = OUTBOX_WINDOW + 40
    for n in range(total):
        result = activate(proc, "send", n)
        log.append(Transaction.decode(result.transition.record.encode()))
    outbox = proc.read("/system/outbox")
    assert isinstance(outbox, list) and len(outbox) == OUTBOX_WINDOW
    first = total - OUTBOX_WINDOW
    assert [m["body"] for m in outbox] == [{"n": n} for n in range(first, total)]  # type: ignore[index]
    assert outbox[-1]["message_id"] == f"{SENDER}:{total}:0"  # type: ignore[index]
    # the trim is part of the record: replay reaches the same root
    last = log[-1]
    assert [m.op for m in last.mutations].count("remove_front") == 1
    replayed = Process.restore(base)
    assert replayed.replay(log) == total
    assert replayed.root_hash == proc.root_hash
    assert Process.restore(proc.snapshot()).root_hash == proc.root_hash


def test_an_activation_keeps_all_its_own_intents_even_past_the_window() -> None:
    many = OUTBOX_WINDOW + 5
    sends = " ".join(f'(send! "svit://t/peer" {i})' for i in range(many))
    burst = f"(define (main input) (do {sends} {many}))"
    limits = Limits(max_messages=many)
    proc = Process.create(SENDER, scripts={"send": SEND_ONE, "burst": burst}, limits=limits)
    for n in range(3):
        activate(proc, "send", n)
    result = activate(proc, "burst", None)
    assert len(result.messages) == many
    outbox = proc.read("/system/outbox")
    assert isinstance(outbox, list) and len(outbox) == many
    assert [m["body"] for m in outbox] == list(range(many))  # type: ignore[index]
    activate(proc, "send", 99)
    outbox = proc.read("/system/outbox")
    assert isinstance(outbox, list) and len(outbox) == OUTBOX_WINDOW
    assert outbox[-1]["body"] == {"n": 99}  # type: ignore[index]


def test_an_activation_that_sends_nothing_leaves_the_outbox_alone() -> None:
    proc = _sender(quiet='(define (main input) (write "/memory/q" 1))')
    for n in range(3):
        activate(proc, "send", n)
    result = activate(proc, "quiet", None)
    assert "/system/outbox" not in result.changed
    assert len(proc.read("/system/outbox")) == 3  # type: ignore[arg-type]


def test_a_process_that_sends_forever_neither_slows_down_nor_fails() -> None:
    """25,000 sends: all commit (none hits ``max_tree_nodes``), and the median of
    the last 1,000 is within 1.5x of the first 1,000 after the window filled."""
    proc = _sender()
    durations: list[float] = []
    for n in range(25_000):
        t0 = time.perf_counter()
        activate(proc, "send", n)
        durations.append(time.perf_counter() - t0)
    assert proc.version == 25_000
    assert len(proc.read("/system/outbox")) == OUTBOX_WINDOW  # type: ignore[arg-type]
    # the first window fills the outbox; compare full-window activations
    early = sorted(durations[OUTBOX_WINDOW:OUTBOX_WINDOW + 1000])[500]
    late = sorted(durations[-1000:])[500]
    assert late <= 1.5 * early, (early, late)
