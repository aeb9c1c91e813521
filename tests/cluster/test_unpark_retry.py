"""After a rejoin the agent activates its parked processes again, and retries
those whose activation answered ``unavailable`` (pure retry logic: the agent
object without Ray, its ``activate`` answering from a script).

Nobody else asks for a parked process, so a transient failure (the new lease
briefly SUSPENDED on a loaded machine, no worker in time) must be retried, or
the process stays unowned until its next request. The end-to-end case is
``tests/cluster/test_lease_rejoin.py`` on the real cluster.
"""

from __future__ import annotations

import asyncio

from svit_cluster.cluster._agent import HostAgent
from svit_cluster.cluster._config import ClusterConfig
from svit_cluster.cluster._results import CreateSpec, Outcome
from svit_cluster.cluster._types import Activated, ServeStatus
from svit_cluster.errors import NotFound, UnavailableError


def test_unpark_retries_unavailable_and_stops_at_a_final_answer() -> None:
    agent = HostAgent(ClusterConfig(), "h1")
    answers: dict[str, list[Outcome[Activated]]] = {
        # busy twice, then serving
        "svit://t/busy": [Outcome.fail(UnavailableError("no lease yet")),
                          Outcome.fail(UnavailableError("suspended")),
                          Outcome.ok(Activated(ServeStatus.SERVING, "h1", 7, "svit:h1:1"))],
        # deleted meanwhile: final, never asked again
        "svit://t/gone": [Outcome.fail(NotFound("no such process"))],
        # another host took it: final
        "svit://t/moved": [Outcome.ok(Activated(ServeStatus.OWNED, "h2", 9, None))],
    }
    calls: list[str] = []

    async def activate(pid: str, create: CreateSpec | None = None
                       ) -> Outcome[Activated]:
        calls.append(pid)
        return answers[pid].pop(0)

    agent.activate = activate  # type: ignore[method-assign]
    agent.supervisor.parked = list(answers)
    asyncio.run(asyncio.wait_for(agent._unpark(), 10))
    assert calls.count("svit://t/busy") == 3, calls
    assert calls.count("svit://t/gone") == 1, calls
    assert calls.count("svit://t/moved") == 1, calls
    assert agent.supervisor.parked == []

