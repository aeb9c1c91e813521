"""A stale owner on demand: the zombie the fence exists for.

A host that was cut off, paused or half-killed keeps its process actor and its
old fencing token. :class:`StaleWriter` plays that actor from inside the
harness: it remembers a process's current token, and once a newer owner has
claimed the process (the fence rose), it restores the process from Redis and
tries to commit one workload-shaped change **with the old token**.

* With fencing on, the store must refuse (``FencedError``): the attempt is
  recorded as a ``fail`` with ``outcome: "fenced"``, and the checker's
  ``refused`` invariant proves nothing was stored.
* In the negative control (``unfenced=True``) the writer's backend has its fence
  check switched off with
  :func:`svit_cluster.store.testing.disable_fencing_for_negative_control`; the
  stale commit lands and the checker MUST report it (``tokens``).

The write is one ``host.write`` transaction that sets ``/memory/last`` to its
request id and bumps ``/memory/count``, so it is indistinguishable, to the
checker, from a workload activation committed by a stale actor.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import redis

from svit_cluster.errors import ErrorCode, FencedError, SvitError, UnavailableError
from svit_cluster.process import Process, Value
from svit_cluster.store import DEFAULT_PREFIX, ProcessKeys, RedisBackend, StoreConfig
from svit_cluster.store.testing import disable_fencing_for_negative_control

from .history import HistoryWriter
from .workload import KEEP_OPS

__all__ = ["STALE_CLIENT", "InFlight", "StaleWriter"]

#: The ``client`` of the stale writer's operations in the history.
STALE_CLIENT = "stale"


@dataclass(frozen=True)
class InFlight:
    """A change sealed by an owner that has not committed it yet (:meth:`StaleWriter.prepare`).

    Attributes:
        process, token: the process and the fencing token of the owner that sealed it.
        proc: the state it was sealed on (its ``version`` is the expected version).
        transition: the sealed transition.
        rid: its request id (``<run_id>.stale.<n>``).
    """

    process: str
    token: int
    proc: Process
    transition: Any
    rid: str


class StaleWriter:
    """Commits as a stale owner through a direct (unproxied) Redis client.

    Args:
        client: redis-py client (see :func:`svit_cluster.store.connect`).
        history: where the attempts go (client ``"stale"``).
        run_id: prefix of the request ids it writes.
        prefix: the store's key prefix (default ``"svit"``).
        unfenced: negative control only -- commit without the fence check.
    """

    def __init__(
        self,
        client: redis.Redis,
        history: HistoryWriter,
        *,
        run_id: str,
        prefix: str = DEFAULT_PREFIX,
        unfenced: bool = False,
    ) -> None:
        self.client = client
        self.history = history
        self.run_id = run_id
        self.config = StoreConfig(prefix=prefix)
        self.unfenced = unfenced
        self._seq = itertools.count(1)
        self.attempts = 0
        self.committed = 0

    def fence(self, process: str) -> int:
        """The current fence of ``process`` (0: never claimed). Raises UnavailableError."""
        return RedisBackend(self.client, process, 1, self.config).fence()

    def head_token(self, process: str) -> int:
        """The token of the last commit of ``process`` (0: none yet). Raises redis.RedisError."""
        raw = self.client.hget(ProcessKeys(process, self.config.prefix).head, "token")
        text = raw.decode() if isinstance(raw, bytes) else raw
        return int(text) if isinstance(text, str) and text.isdigit() else 0

    def _backend(self, process: str, token: int) -> RedisBackend:
        backend = RedisBackend(self.client, process, token, self.config)
        if self.unfenced:
            disable_fencing_for_negative_control(backend)
        return backend

    def prepare(self, process: str, token: int) -> InFlight:
        """Seal, as the owner holding ``token``, one change on the current state.

        This is the commit the owner has *in flight* when it is paused: call it
        while ``token`` still owns the process, pass the result to :meth:`write`
        after a newer owner has claimed. Nothing is written or recorded yet.

        Raises:
            SvitError: the process cannot be restored (Redis down, not in the store).
        """
        backend = self._backend(process, token)
        sealed = self._seal(backend, process)
        if isinstance(sealed, str):
            raise UnavailableError(f"cannot prepare a stale commit to {process}: {sealed}")
        return InFlight(process, token, *sealed)

    def write(self, process: str, token: int, *, tries: int = 5,
              prepared: InFlight | None = None) -> dict[str, Any]:
        """Commit to ``process`` as the owner holding ``token``, like a zombie would.

        The first try commits ``prepared`` (sealed by :meth:`prepare` before the
        failover) when given; every other try restores from Redis and commits one
        change. A ``conflict`` (the live owner committed in between) is retried up
        to ``tries`` times, as a zombie that keeps serving would. Every try is one
        operation in the history: ``invoke``, then ``ok`` / ``fail`` (fenced,
        conflict) / ``info`` (Redis failed: unknown outcome). Never raises for
        store outcomes.

        Returns:
            The last try: ``{"process", "token", "rid", "outcome", "version"?}``.
        """
        backend = self._backend(process, token)
        out: dict[str, Any] = {}
        for attempt in range(max(1, tries)):
            if attempt == 0 and prepared is not None and prepared.process == process \
                    and prepared.token == token:
                out = self._commit(backend, process, token, prepared.proc,
                                   prepared.transition, prepared.rid)
            else:
                out = self._try(backend, process, token)
            if out["outcome"] != str(ErrorCode.CONFLICT):
                break
        return out

    def _seal(self, backend: RedisBackend, process: str) -> tuple[Process, Any, str] | str:
        """Restore and seal one workload-shaped change; a string says why not."""
        rid = f"{self.run_id}.stale.{next(self._seq)}"
        try:
            proc = backend.restore()
        except SvitError as exc:
            return f"restore failed: {exc.code}"
        if proc is None:
            return "not in the store"
        count = proc.read("/memory/count")
        ops = proc.read("/memory/ops")
        wc = proc.working_copy()
        wc.write("/memory/last", rid)
        wc.write("/memory/count", (count if isinstance(count, int) else 0) + 1)
        kept: Value = [*ops, rid][-KEEP_OPS:] if isinstance(ops, list) else [rid]
        wc.write("/memory/ops", kept)
        return proc, proc.seal(wc, "host.write"), rid

    def _try(self, backend: RedisBackend, process: str, token: int) -> dict[str, Any]:
        sealed = self._seal(backend, process)
        if isinstance(sealed, str):
            return {"process": process, "token": token, "outcome": sealed}
        proc, transition, rid = sealed
        return self._commit(backend, process, token, proc, transition, rid)

    def _commit(self, backend: RedisBackend, process: str, token: int, proc: Process,
                transition: Any, rid: str) -> dict[str, Any]:
        out: dict[str, Any] = {"process": process, "token": token, "rid": rid}
        self.attempts += 1
        self.history.record("invoke", client=STALE_CLIENT, process=process, rid=rid,
                            expected=proc.version, token=token)
        common = {"client": STALE_CLIENT, "process": process, "rid": rid,
                  "expected": proc.version, "token": token}
        try:
            backend.commit(transition)
        except FencedError as exc:
            self.history.record("fail", **common, outcome="fenced",
                                fence=exc.fields.get("fence"))
            out["outcome"] = "fenced"
            return out
        except UnavailableError as exc:
            self.history.record("info", **common, error=exc.message[:200])
            out["outcome"] = "unknown"
            return out
        except SvitError as exc:
            self.history.record("fail", **common, outcome=str(exc.code))
            out["outcome"] = str(exc.code)
            return out
        version = transition.record.process_version_after
        self.committed += 1
        self.history.record("ok", **common, version=version, previous=proc.version)
        out.update(outcome="committed", version=version)
        return out
