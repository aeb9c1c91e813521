"""Two clients race on one version; one commits, the other observes and recomputes.

Run::

    python -m svit_cluster.examples.multi_client_control

Mirrors the reference's two-client example (control protocol: VAST): a planner
process is brought to version 7, clients A and B both send ``expected_version
7``; A commits version 8, B gets ``conflict`` with ``actual_version`` 8, reads
the new state, recomputes and commits version 9.
"""

from __future__ import annotations

from svit_cluster.control import ControlResponse, ProcessController, decode_request
from svit_cluster.process import Process, encode_value

PLAN = """
(define (main input)
  (let ((plans (read "/memory/plans"))
        (goal (value-get input "/goal")))
    (do
      (write "/memory/plans" (concat plans (value-array goal)))
      (value-map "planned" goal "count" (+ 1 (len plans))))))
"""
PID = "svit://local/example/planner"


def _request(client: str, rid: str, version: int, goal: str) -> dict[str, object]:
    return {
        "protocol": "svit-control@1",
        "client_id": client,
        "request_id": rid,
        "process_id": PID,
        "expected_version": version,
        "command": {
            "operation": "activate",
            "script": "plan",
            "input": encode_value({"goal": goal}),
        },
    }


def _line(who: str, resp: ControlResponse) -> str:
    out = resp.outcome
    if out.status == "committed":
        return f"{who}: committed version {out.activation.version} (from {out.previous_version})"
    if out.status == "conflict":
        return (f"{who}: conflict, expected {out.expected_version}, "
                f"actual {out.actual_version}")
    return f"{who}: rejected {out.failure.code}: {out.failure.message}"


def main() -> int:
    proc = Process.create(PID, memory={"plans": []}, scripts={"plan": PLAN})
    for i in range(7):  # bring the process to version 7 with host writes
        proc.write("/memory/setup", i)
    ctrl = ProcessController(proc)
    print(f"planner at version {proc.version}")
    a = ctrl.execute(decode_request(_request("agent-a", "turn-42", 7, "prepare release")))
    b = ctrl.execute(decode_request(_request("agent-b", "turn-7", 7, "write notes")))
    print(_line("A", a))
    print(_line("B", b))
    assert b.outcome.status == "conflict"
    plans, version = ctrl.read_versioned("/memory/plans")
    print(f"B observes version {version}: plans={plans}")
    b2 = ctrl.execute(decode_request(_request("agent-b", "turn-8", version, "write notes")))
    print(_line("B", b2))
    ok = (
        a.outcome.status == "committed"
        and a.outcome.activation.version == 8
        and b.outcome.actual_version == 8
        and b2.outcome.status == "committed"
        and b2.outcome.activation.version == 9
    )
    print(f"final version {proc.version}, plans={proc.read('/memory/plans')}: "
          + ("OK" if ok else "UNEXPECTED"))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
