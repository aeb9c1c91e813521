"""A local Ray node that does not start says why in its error, and ``up`` says
what to do about a local start: the state directory (and so the node's log) of a
failed ``up`` in a temporary directory may be gone by the time anyone reads it,
and "check SVIT_URL" is advice for a client, not for ``up``.

The node's ``ray start`` is replaced by a shell that writes to the node's log
and exits, as ``ray start`` does when it cannot come up.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from svit_cluster.cli._util import failure_line
from svit_cluster.cli.local import _start_failure
from svit_cluster.errors import UnavailableError
from svit_cluster.local._ray import PortAllocator, RayNode


def test_a_node_that_exits_at_start_puts_the_end_of_its_log_in_the_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    node = RayNode("h1", tmp_path / "ray", tmp_path / "logs" / "ray-h1.log")
    lines = [f"line {i}: " + "x" * 60 for i in range(40)]
    script = "; ".join(f"echo '{line}'" for line in lines)
    script += "; echo 'raylet: bind failed' >&2; exit 7"
    monkeypatch.setattr(RayNode, "command", lambda self, ports, ray_bin: ["sh", "-c", script])
    with pytest.raises(UnavailableError) as info:
        node.start(PortAllocator(), timeout_s=10.0, attempts=1)
    message = info.value.message
    assert "ray node h1 exited with 7" in message and str(node.log_path) in message
    assert message.endswith("raylet: bind failed "), message  # the last line, kept whole
    assert "line 39" in message and "line 0:" not in message  # the end, not the start
    assert len(message.encode()) <= 1024


def test_up_failing_to_start_advises_a_new_up_not_a_gateway_check(tmp_path: Path) -> None:
    with pytest.raises(UnavailableError) as info, _start_failure(tmp_path / "s"):
        raise UnavailableError("ray node h1 did not start in 60.0 s; see x.log; it ends: y")
    line = failure_line(info.value)
    assert "SVIT_URL" not in line, line
    assert f"run `svit-cluster up --state-dir {tmp_path / 's'}` again" in line, line
    assert line.startswith("error: unavailable: ray node h1 did not start"), line
