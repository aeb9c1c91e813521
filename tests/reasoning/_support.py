"""One owner of one process on real Redis: backend, controller, event log, loop."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import redis

from svit_cluster.control import ProcessController
from svit_cluster.events import RedisEventLog, Signal
from svit_cluster.process import Process
from svit_cluster.reasoning import Reasoner, ReasonerConfig, SimulatedReasoner, TurnLoop
from svit_cluster.store import RedisBackend, StoreConfig

COUNTER = """(define (main input)
  (let ((count (+ (read "/memory/count") (value-get input "/by"))))
    (do (write "/memory/count" count) (value-map "count" count))))"""


class Owner:
    """Claim ``pid`` with ``token`` (creating it when ``create``) and run a loop."""

    def __init__(self, client: redis.Redis, pid: str, prefix: str, token: int, *,
                 create: bool = False, reasoner: Reasoner | None = None,
                 **config: Any) -> None:
        self.backend = RedisBackend(client, pid, token, StoreConfig(prefix=prefix))
        self.backend.claim()
        if create:
            proc = Process.create(pid, memory={"count": 0}, scripts={"counter": COUNTER})
            self.backend.create(proc)
        else:
            restored = self.backend.restore()
            assert restored is not None
            proc = restored
        self.ctrl = ProcessController(proc, self.backend)
        self.log = RedisEventLog(client, pid, token, prefix=prefix)
        self.fenced = False
        self.loop = TurnLoop(self.ctrl, self.log, reasoner or SimulatedReasoner(),
                             config=ReasonerConfig(**config), on_fenced=self._on_fenced,
                             attempt_tag=str(token))

    def _on_fenced(self) -> None:
        self.fenced = True

    def send(self, message: Any) -> None:
        self.ctrl.append_inbox(message)
        self.loop.wake()

    def signals(self) -> list[Signal]:
        return self.log.signals()


async def wait_for(predicate: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.02)


def kinds(signals: list[Signal]) -> list[str]:
    return [str(s.kind) for s in signals]
