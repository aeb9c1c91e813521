"""Durable timers, guest and host side (pure): delayed ``send!``, ``cancel!`` and
``/system/timers`` (docs/conformance.md D10).

The host stamps ``due_ms`` from one wall-clock timestamp per activation (injected
here); the pending window in ``/system/timers`` changes only through mutations
recorded with the activation, so replay and restore reach the same root without
running guest code or reading a clock.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from svit_cluster.activation import ActivationResult, activate
from svit_cluster.errors import ErrorCode, InvalidInput, LimitExceeded, ScriptFailed
from svit_cluster.process import (
    MAX_DELAY_MS,
    MAX_PENDING_TIMERS,
    Limits,
    Process,
    Transaction,
)
from tests.conformance._support import sys_section, tampered

PID = "svit://t/timers"
HOOK = "https://hooks.example.org/x"

#: ``input`` is ``{"op": "arm"|"cancel"|"both", ...}``:
#: arm: one plain send, then one timer per ``delays`` entry; returns the ids.
#: cancel: ``(cancel! id)`` for each of ``ids``; returns the booleans.
TIMERS = """
(define (arm-all delays acc)
  (if (= (len delays) 0) acc
      (arm-all (tail delays)
               (append acc (send! (value-get input "/to")
                                  (value-map "n" (len acc))
                                  (value-map "delay_ms" (first delays)))))))
(define (cancel-all ids acc)
  (if (= (len ids) 0) acc
      (cancel-all (tail ids) (append acc (cancel! (first ids))))))
(define (main input)
  (let ((op (value-get input "/op")))
    (if (= op "arm")
        (let ((plain (send! "svit://t/peer" "now")))
          (apply value-array (arm-all (value-get input "/delays") (list))))
        (apply value-array (cancel-all (value-get input "/ids") (list))))))
"""


class Clock:
    """An injected wall clock in ms that counts its reads."""

    def __init__(self, now_ms: int) -> None:
        self.now_ms = now_ms
        self.reads = 0

    def __call__(self) -> int:
        self.reads += 1
        return self.now_ms


def _process(limits: Limits | None = None, **scripts: str) -> Process:
    return Process.create(PID, scripts={"timers": TIMERS, **scripts}, limits=limits)


def arm(proc: Process, clock: Clock, *delays: int, to: str = HOOK) -> ActivationResult:
    return activate(proc, "timers", {"op": "arm", "delays": list(delays), "to": to},
                    wall_clock=clock)


def cancel(proc: Process, clock: Clock, *ids: str) -> ActivationResult:
    return activate(proc, "timers", {"op": "cancel", "ids": list(ids)}, wall_clock=clock)


def one(source: str) -> Process:
    return _process(subject=f"(define (main input) {source})")


# -- send! options ---------------------------------------------------------------------------


@pytest.mark.parametrize(("options", "message"), [
    ("1", "send! options must be a map"),
    ('"delay_ms"', "send! options must be a map"),
    ("(value-array 5)", "send! options must be a map"),
    ('(value-map "delay" 5)', "send! option 'delay' is unknown (known: delay_ms)"),
    ('(value-map "delay_ms" 5 "retries" 1)', "send! option 'retries' is unknown"),
    ('(value-map "delay_ms" 1.5)', "send! delay_ms must be an integer"),
    ('(value-map "delay_ms" "5")', "send! delay_ms must be an integer"),
    ('(value-map "delay_ms" true)', "send! delay_ms must be an integer"),
    ('(value-map "delay_ms" ())', "send! delay_ms must be an integer"),
    ('(value-map "delay_ms" -1)', f"send! delay_ms must be 0..{MAX_DELAY_MS}"),
    (f'(value-map "delay_ms" {MAX_DELAY_MS + 1})', f"send! delay_ms must be 0..{MAX_DELAY_MS}"),
])
def test_bad_send_options_fail_the_script_and_commit_nothing(options: str, message: str) -> None:
    proc = one(f'(send! "{HOOK}" 1 {options})')
    before = proc.snapshot()
    with pytest.raises(ScriptFailed) as info:
        activate(proc, "subject", None, wall_clock=Clock(1_000))
    assert info.value.code == ErrorCode.SCRIPT_FAILED
    assert message in info.value.message, info.value.message
    assert proc.snapshot() == before and proc.version == 0


def test_send_takes_two_or_three_arguments() -> None:
    with pytest.raises(ScriptFailed) as info:
        activate(one(f'(send! "{HOOK}" 1 (value-map) 4)'), "subject", None)
    assert "send! expects 2 to 3 argument(s), got 4" in info.value.message
    with pytest.raises(ScriptFailed) as info:
        activate(one('(cancel!)'), "subject", None)
    assert "cancel! expects 1 argument(s), got 0" in info.value.message
    with pytest.raises(ScriptFailed) as info:
        activate(one('(cancel! 7)'), "subject", None)
    assert "cancel! expects a string" in info.value.message


def test_the_bounds_zero_and_max_delay_and_an_empty_options_map_are_accepted() -> None:
    clock = Clock(5_000)
    proc = one(f'(value-array (send! "{HOOK}" 1 (value-map "delay_ms" 0))'
               f' (send! "{HOOK}" 2 (value-map "delay_ms" {MAX_DELAY_MS}))'
               f' (send! "{HOOK}" 3 (value-map)))')
    result = activate(proc, "subject", None, wall_clock=clock)
    assert [m.get("due_ms") for m in result.messages] == [5_000, 5_000 + MAX_DELAY_MS, None]
    assert result.messages[2] == {"message_id": f"{PID}:1:2", "to": HOOK, "body": 3}


# -- stamping, ids, shapes -------------------------------------------------------------------


def test_a_delayed_send_is_stamped_from_one_timestamp_per_activation() -> None:
    clock = Clock(1_700_000_000_000)
    proc = _process()
    result = arm(proc, clock, 8_000, 250)
    assert clock.reads == 1  # one timestamp per activation, however many timers
    first, second = f"{PID}:1:1", f"{PID}:1:2"
    assert result.output == [first, second]  # send! returns the timer id
    assert list(result.messages) == [
        {"message_id": f"{PID}:1:0", "to": "svit://t/peer", "body": "now"},
        {"message_id": first, "to": HOOK, "body": {"n": 0},
         "delay_ms": 8_000, "due_ms": 1_700_000_008_000},
        {"message_id": second, "to": HOOK, "body": {"n": 1},
         "delay_ms": 250, "due_ms": 1_700_000_000_250},
    ]
    assert proc.read("/system/timers") == [
        {"id": first, "to": HOOK, "due_ms": 1_700_000_008_000},
        {"id": second, "to": HOOK, "due_ms": 1_700_000_000_250},
    ]
    # the outbox window keeps every intent as committed, delayed ones included
    assert proc.read("/system/outbox") == list(result.messages)
    assert "/system/timers" in result.changed


def test_any_destination_send_supports_takes_a_delay_the_process_itself_included() -> None:
    clock = Clock(10)
    proc = _process()
    for to in (PID, "svit://t/other", "redis-stream://events", HOOK):
        arm(proc, clock, 1_000, to=to)
    assert [t["to"] for t in proc.read("/system/timers")] == [  # type: ignore[union-attr,index]
        PID, "svit://t/other", "redis-stream://events", HOOK]


# -- cancel! ---------------------------------------------------------------------------------


def test_cancel_of_a_pending_timer_is_true_and_stages_a_cancel_entry() -> None:
    clock = Clock(1_000)
    proc = _process()
    first, second = arm(proc, clock, 5_000, 6_000).output  # type: ignore[misc]
    clock.now_ms = 2_000
    result = cancel(proc, clock, first, first, "svit://t/timers:9:9")
    assert result.output == [True, False, False]  # once only; an unknown id is not pending
    assert list(result.messages) == [{"message_id": f"{PID}:2:0", "cancel": first}]
    assert proc.read("/system/timers") == [{"id": second, "to": HOOK, "due_ms": 7_000}]
    # a cancel never enters /system/outbox
    assert all("cancel" not in m for m in proc.read("/system/outbox"))  # type: ignore[union-attr]
    assert result.changed == ("/system/timers/0",)


def test_cancel_of_an_unknown_or_fired_timer_is_false_and_stages_nothing() -> None:
    clock = Clock(1_000)
    proc = _process()
    (timer,) = arm(proc, clock, 500).output  # type: ignore[misc]
    clock.now_ms = 1_500  # due: fired or firing, as far as the guest can know
    result = cancel(proc, clock, timer, "not-a-timer")
    assert result.output == [False, False]
    assert result.messages == ()
    assert proc.read("/system/timers") == []


def test_a_timer_set_in_this_activation_is_not_pending_yet() -> None:
    proc = one(f'(cancel! (send! "{HOOK}" 1 (value-map "delay_ms" 60000)))')
    result = activate(proc, "subject", None, wall_clock=Clock(0))
    assert result.output is False
    assert [m["message_id"] for m in result.messages] == [f"{PID}:1:0"]
    assert proc.read("/system/timers") == [{"id": f"{PID}:1:0", "to": HOOK, "due_ms": 60_000}]


def test_cancels_and_sends_share_the_index_counter_and_max_messages() -> None:
    clock = Clock(0)
    proc = _process(mixed=f"""(define (main input)
      (value-array (send! "{HOOK}" 1) (cancel! (value-get input "/0"))
                   (send! "{HOOK}" 2 (value-map "delay_ms" 9))
                   (cancel! (value-get input "/1"))))""", limits=Limits(max_messages=3))
    ids = arm(proc, clock, 1_000, 2_000).output  # 3 messages: exactly max_messages
    before = proc.snapshot()
    with pytest.raises(LimitExceeded) as info:  # the 4th (a cancel) is over max_messages
        activate(proc, "mixed", ids, wall_clock=clock)
    assert "max_messages" in info.value.message
    assert proc.snapshot() == before
    proc.write("/lib/mixed", {"source": f"""(define (main input)
      (value-array (send! "{HOOK}" 1) (cancel! (value-get input "/0"))
                   (send! "{HOOK}" 2 (value-map "delay_ms" 9))))"""})
    result = activate(proc, "mixed", ids, wall_clock=clock)
    assert [m["message_id"] for m in result.messages] == [f"{PID}:3:0", f"{PID}:3:1",
                                                          f"{PID}:3:2"]
    assert result.messages[1] == {"message_id": f"{PID}:3:1", "cancel": ids[0]}  # type: ignore[index]


# -- the pending window ----------------------------------------------------------------------


def test_each_activation_drops_the_timers_due_by_its_timestamp() -> None:
    clock = Clock(1_000)
    proc = _process(look='(define (main input) (read "/system/timers"))')
    _, b, _ = arm(proc, clock, 100, 300, 200).output  # type: ignore[misc]  # due 1100 1300 1200
    clock.now_ms = 1_200  # due_ms <= timestamp: dropped (the boundary included)
    result = activate(proc, "look", None, wall_clock=clock)
    assert result.output == [{"id": b, "to": HOOK, "due_ms": 1_300}]  # the guest sees the window
    assert result.changed == ("/system/timers/0", "/system/timers/2")
    assert [m.op for m in result.transition.record.mutations] == ["remove", "remove"]
    clock.now_ms = 1_299
    assert activate(proc, "look", None, wall_clock=clock).changed == ()
    clock.now_ms = 1_300
    assert activate(proc, "look", None, wall_clock=clock).output == []


def test_pending_timers_are_bounded_by_max_pending_timers() -> None:
    clock = Clock(0)
    proc = _process(limits=Limits(max_messages=MAX_PENDING_TIMERS + 1, max_execution_millis=20_000))
    ids = arm(proc, clock, *([60_000] * (MAX_PENDING_TIMERS - 1))).output
    assert len(proc.read("/system/timers")) == MAX_PENDING_TIMERS - 1  # type: ignore[arg-type]
    before = proc.snapshot()
    with pytest.raises(LimitExceeded) as info:
        arm(proc, clock, 60_000, 60_000)  # the second would be pending timer 1001
    assert info.value.code == ErrorCode.RESOURCE_LIMIT_EXCEEDED
    assert f"MAX_PENDING_TIMERS={MAX_PENDING_TIMERS}" in info.value.message
    assert proc.snapshot() == before
    arm(proc, clock, 60_000)  # exactly at the bound
    cancel(proc, clock, ids[0])  # type: ignore[index]
    arm(proc, clock, 60_000)  # a cancel frees a slot
    clock.now_ms = 60_000
    arm(proc, clock, *([1] * 10))  # and so does time: every earlier timer is due
    assert len(proc.read("/system/timers")) == 10  # type: ignore[arg-type]


def test_the_guest_cannot_write_or_remove_system_timers() -> None:
    clock = Clock(0)
    proc = _process(poke='(define (main input) (write "/system/timers" (value-array)))',
                    drop='(define (main input) (remove "/system/timers/0"))')
    arm(proc, clock, 1_000)
    for script in ("poke", "drop"):
        with pytest.raises(InvalidInput) as info:
            activate(proc, script, None, wall_clock=clock)
        assert info.value.code == ErrorCode.INVALID_PATH
    with pytest.raises(InvalidInput):
        proc.write("/system/timers", [])
    assert len(proc.read("/system/timers")) == 1  # type: ignore[arg-type]


# -- replay, restore, fork -------------------------------------------------------------------


def _history(proc: Process, clock: Clock) -> list[Transaction]:
    """Arm, cancel, let some fire, arm again; the decoded records of every commit."""
    log: list[Transaction] = []

    def keep(result: ActivationResult) -> Any:
        log.append(Transaction.decode(result.transition.record.encode()))
        return result.output

    ids = keep(arm(proc, clock, 100, 200, 5_000, 9_000))
    clock.now_ms += 150
    keep(cancel(proc, clock, ids[2], ids[0]))  # ids[0] is due: false
    clock.now_ms += 100
    keep(arm(proc, clock, 50))
    clock.now_ms += 6_000
    keep(cancel(proc, clock, ids[3]))
    keep(arm(proc, clock, 1, 2, 3))
    return log


def test_replay_and_restore_reach_the_same_timers_without_a_clock() -> None:
    clock = Clock(1_000)
    proc = _process()
    base = proc.snapshot()
    log = _history(proc, clock)
    assert [t["due_ms"] for t in proc.read("/system/timers")] == [  # type: ignore[union-attr,index]
        7_251, 7_252, 7_253]
    replayed = Process.restore(base)
    assert replayed.replay(log) == proc.version
    assert replayed.root_hash == proc.root_hash
    assert replayed.read("/system/timers") == proc.read("/system/timers")
    # snapshot + tail: restore a middle snapshot, replay the rest
    middle = Process.restore(base)
    middle.replay(log[:2])
    resumed = Process.restore(middle.snapshot(), position=middle.position,
                              chain_head=middle.chain_head)
    resumed.replay(log[2:])
    assert resumed.root_hash == proc.root_hash
    assert Process.restore(proc.snapshot()).root_hash == proc.root_hash


def test_a_fork_starts_with_no_pending_timers() -> None:
    proc = _process()
    arm(proc, Clock(0), 1_000)
    child = proc.fork("svit://t/child")
    assert child.read("/system/timers") == [] and child.read("/system/outbox") == []


def test_a_process_from_before_timers_restores_and_gets_the_list_with_its_first_timer() -> None:
    proc = _process()
    proc.write("/memory/x", 1)
    old = Process.restore(tampered(proc, lambda doc: sys_section(doc).pop("timers")))
    assert old.read("/system/timers") is None and old.version == 1
    clock = Clock(0)
    assert cancel(old, clock, f"{PID}:1:0").output == [False]  # nothing pending, nothing staged
    assert old.read("/system/timers") is None
    base, position, head = old.snapshot(), old.position, old.chain_head
    result = arm(old, clock, 500)
    assert old.read("/system/timers") == [{"id": f"{PID}:3:1", "to": HOOK, "due_ms": 500}]
    assert [m.op for m in result.transition.record.mutations
            if m.path.startswith("/system/timers")] == ["set", "append"]
    replayed = Process.restore(base, position=position, chain_head=head)
    replayed.replay([Transaction.decode(result.transition.record.encode())])
    assert replayed.root_hash == old.root_hash
    assert Process.restore(old.snapshot()).root_hash == old.root_hash


def _timers(value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(doc: dict[str, Any]) -> None:
        sys_section(doc)["timers"] = value
    return edit


_S = lambda s: {"type": "string", "value": s}  # noqa: E731
_I = lambda n: {"type": "integer", "value": n}  # noqa: E731


def _entry(**over: Any) -> dict[str, Any]:
    fields = {"id": _S(f"{PID}:1:0"), "to": _S(HOOK), "due_ms": _I(5)}
    fields.update(over)
    return {"type": "map", "value": {k: v for k, v in fields.items() if v is not None}}


@pytest.mark.parametrize(("value", "where"), [
    ({"type": "map", "value": {}}, "/system/timers"),
    ({"type": "array", "value": [_I(1)]}, "/system/timers/0"),
    ({"type": "array", "value": [_entry(body=_I(1))]}, "/system/timers/0"),
    ({"type": "array", "value": [_entry(due_ms=None)]}, "/system/timers/0"),
    ({"type": "array", "value": [_entry(id=_I(3))]}, "/system/timers/0/id"),
    ({"type": "array", "value": [_entry(to=_S("not-an-address"))]}, "/system/timers/0/to"),
    ({"type": "array", "value": [_entry(due_ms=_S("5"))]}, "/system/timers/0/due_ms"),
    ({"type": "array", "value": [_entry(due_ms=_I(-1))]}, "/system/timers/0/due_ms"),
    ({"type": "array", "value": [_entry()] * (MAX_PENDING_TIMERS + 1)}, "/system/timers"),
], ids=["not-an-array", "entry-not-a-map", "extra-field", "missing-field", "id-not-a-string",
        "bad-address", "due-not-an-integer", "due-negative", "over-the-bound"])
def test_restore_refuses_a_malformed_timers_list(value: Any, where: str) -> None:
    with pytest.raises(InvalidInput) as info:
        Process.restore(tampered(_process(), _timers(value)))
    assert info.value.code == ErrorCode.INVALID_SNAPSHOT
    assert where in info.value.message, info.value.message


def test_restore_refuses_a_delayed_outbox_entry_with_a_bad_delay() -> None:
    proc = _process()
    arm(proc, Clock(0), 1_000)

    def edit(doc: dict[str, Any]) -> None:
        sys_section(doc)["outbox"]["value"][1]["value"]["delay_ms"] = _I(MAX_DELAY_MS + 1)
    with pytest.raises(InvalidInput) as info:
        Process.restore(tampered(proc, edit))
    assert "/system/outbox/1/delay_ms" in info.value.message
    # the untampered snapshot, with a delayed intent in its outbox, restores
    assert Process.restore(proc.snapshot()).root_hash == proc.root_hash


def test_the_intent_json_is_exactly_the_fixed_interface() -> None:
    """What the store XADDs for each entry (canonical JSON, sorted keys)."""
    from svit_cluster.values import canonical_json

    clock = Clock(42)
    proc = _process()
    (timer,) = arm(proc, clock, 8_000).output  # type: ignore[misc]
    result = cancel(proc, clock, timer)
    armed = json.loads(canonical_json(dict(proc.read("/system/outbox")[1])))  # type: ignore[index]
    assert armed == {"message_id": timer, "to": HOOK, "body": {"n": 0}, "delay_ms": 8_000,
                     "due_ms": 8_042}
    assert canonical_json(result.messages[0]) == (
        f'{{"cancel":"{timer}","message_id":"{PID}:2:0"}}').encode()

