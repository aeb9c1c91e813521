"""Point 11: path rules (reference: process.rs path reads, discover, writes, removes).

* reading through a scalar, or with a non-decimal array index: ``invalid_path``;
* ``discover`` of a missing path or of a scalar: ``invalid_path``;
* a write needs an existing array index (no append past the end);
* removing a missing key: ``invalid_path``;
* writing ``/memory`` itself is allowed (here: with a map; decision in
  docs/conformance.md), removing it is not.

Each rule holds for host calls and for guest scripts.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from svit_cluster.activation import activate
from svit_cluster.errors import ErrorCode, InvalidInput, SvitError
from svit_cluster.process import Process

MEMORY = {"n": 5, "arr": [10, 20], "m": {"k": 1}}


def _proc() -> Process:
    return Process.create("svit://conformance/paths", memory=MEMORY)


def _invalid_path(call: Callable[[], object]) -> None:
    with pytest.raises(InvalidInput) as info:
        call()
    assert info.value.code == ErrorCode.INVALID_PATH, info.value


def _guest(proc: Process, body: str) -> object:
    proc.write("/lib/probe", {"source": f"(define (main input) {body})"})
    return activate(proc, "probe", None).output


def test_11_reading_through_a_scalar_or_a_non_index_is_invalid_path() -> None:
    p = _proc()
    for path in ("/memory/n/x", "/memory/arr/x", "/memory/arr/-1", "/memory/arr/01"):
        _invalid_path(lambda path=path: p.read(path))  # type: ignore[misc]
        _invalid_path(lambda path=path: _guest(p, f'(read "{path}")'))  # type: ignore[misc]
    assert p.read("/memory/arr/5") is None and p.read("/memory/nope") is None  # missing: null
    assert _guest(p, '(read "/memory/arr/5")') is None


def test_11_discover_of_a_missing_path_or_a_scalar_is_invalid_path() -> None:
    p = _proc()
    for path in ("/memory/nope", "/memory/n"):
        _invalid_path(lambda path=path: p.discover(path))  # type: ignore[misc]
        _invalid_path(lambda path=path: _guest(p, f'(discover "{path}")'))  # type: ignore[misc]
    assert p.discover("/memory/arr") == ["0", "1"]


def test_11_writing_past_the_end_of_an_array_is_refused() -> None:
    p = _proc()
    _invalid_path(lambda: p.write("/memory/arr/2", 30))
    _invalid_path(lambda: _guest(p, '(write "/memory/arr/2" 30)'))
    p.write("/memory/arr/1", 21)
    assert p.read("/memory/arr") == [10, 21]


def test_11_removing_a_missing_key_is_invalid_path() -> None:
    p = _proc()
    for path in ("/memory/nope", "/memory/arr/2", "/memory/m/x", "/lib/nope"):
        _invalid_path(lambda path=path: p.remove(path))  # type: ignore[misc]
    _invalid_path(lambda: _guest(p, '(remove "/memory/nope")'))


def test_11_writing_memory_itself_is_allowed() -> None:
    p = _proc()
    change = p.write("/memory", {"fresh": 1})
    assert p.read("/memory") == {"fresh": 1} and "/memory" in change.paths
    _guest(p, '(write "/memory" (value-map "by-guest" 2))')
    assert p.read("/memory") == {"by-guest": 2}
    with pytest.raises(SvitError) as info:  # decision: /memory stays a map
        p.write("/memory", 5)
    assert info.value.code == ErrorCode.INVALID_VALUE
    _invalid_path(lambda: p.remove("/memory"))
