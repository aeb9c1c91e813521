"""The data path: one Ray actor per active Svit process.

A :class:`ProcessActor` serves one process under one fencing token at a time
(a *binding*). Its host agent binds it only *after* winning the etcd ownership
transaction; before it serves, the actor claims the Redis fence with that token
and restores (snapshot + tail, hash chain verified). Every commit then goes
through the fenced Redis commit log; a newer owner's claim makes any later
commit of this binding fail with ``fenced``, after which it stops serving.

A binding ends when the process passivates (idle, or chosen as the host's least
recently used at its residency budget) or is deleted: :meth:`ProcessActor.unbind`
drops every piece of the process's state, and the agent may then bind the same
worker to another process (its Ray worker is reused instead of a new one
started: a worker start costs about a second of CPU). Every request therefore
names the token it was routed for, and the actor refuses one that is not its
current binding's (``unavailable``, ``route_moved``): a gateway's stale route
can never reach another process's state. Ownership and commits are untouched
by reuse: a binding's token is checked by the fence exactly like a new actor's.

Request-path calls return an :class:`~svit_cluster.cluster._results.Outcome`
(a typed value, or a project error carried as its wire form): an expected
failure is answered, never raised across the Ray boundary.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from enum import StrEnum
from typing import TYPE_CHECKING, Any, TypeVar

from svit_cluster import tracing
from svit_cluster.cluster._config import ClusterConfig, lower_priority
from svit_cluster.cluster._direct import DirectEndpoint, DirectServer
from svit_cluster.cluster._results import (
    ActorInfo,
    ActorUsage,
    Appended,
    CreateSpec,
    Deleted,
    Dropped,
    ForkHistory,
    Outcome,
    Read,
    Residency,
    Snapshot,
    Started,
    Unbound,
    control_frame,
)
from svit_cluster.cluster._spawn import RaySpawner
from svit_cluster.control import (
    ControlAnswer,
    ProcessController,
    RequestStatus,
    decode_request,
)
from svit_cluster.errors import (
    ConflictError,
    FencedError,
    InvalidInput,
    MountUnavailable,
    NotFound,
    SvitError,
    UnavailableError,
)
from svit_cluster.process import Process, Transaction, mount_ops, to_plain_json
from svit_cluster.store import (
    RestoreStats,
    StoreConfig,
    connect,
    load_backend_factory,
    redis_boundary,
)
from svit_cluster.values import Value

if TYPE_CHECKING:  # the ports package loads only where a registry is built
    from svit_cluster.ports import PortCallRecord

__all__ = ["ProcessActor"]

log = logging.getLogger(__name__)

T = TypeVar("T")


class ActorClosed(StrEnum):
    """Why a process actor's binding stopped serving for good (until it is bound
    again): each refuses every request of that binding."""

    #: idle past its timeout, or unbound by its agent (the worker is reused)
    PASSIVATED = "passivated"
    #: a commit met a newer owner's fence
    FENCED = "fenced"
    #: its agent ended the binding: the host lease was LOST
    FENCED_OUT = "fenced out"
    #: the process was deleted through this binding
    DELETED = "deleted"
    #: restore or create failed (the detail is the error code)
    START_FAILED = "start failed"


class ProcessActor:
    """Serves one process under one fencing token at a time (wrapped with
    ``ray.remote`` by the agent).

    The agent may create an actor ahead of need (a warm *spare*, with
    ``process_id=""`` and ``token=0``) and :meth:`bind` it to a process once it
    owns one, so that activation and failover do not wait for a new Ray
    worker; after :meth:`unbind` it is a spare again.

    Args:
        config: the cluster's configuration (pickled by Ray as the frozen
            dataclass it is).
        host: the host this actor is pinned to.
        process_id: the process ("" for a spare).
        token: the fencing token from the etcd ownership record (0 for a spare).
        agent_name: the Ray name of this host's agent (for passivation).
        niceness: lower every thread of this process to this niceness once it
            is warm (the agent passes ``PROCESS_ACTOR_NICENESS``, below its own
            and its lease keeper's, so serving load cannot starve the host's
            lease); the start-up (imports, the Redis connection) runs at the
            worker's own niceness, like the agent's: its starts are paced by
            the agent, and at the lowest priority a start beside a busy
            neighbour took tens of seconds. None (the default) leaves the
            process alone: an actor built outside its own Ray worker (tests,
            in-process use) must not slow down its host.
    """

    def __init__(
        self, config: ClusterConfig, host: str, process_id: str, token: int, agent_name: str,
        niceness: int | None = None,
    ) -> None:
        self._niceness = niceness
        self.cfg = config
        self.host = host
        self.process_id = process_id
        self.token = token
        self.agent_name = agent_name
        #: The sequence number of the last lease notice (older ones are ignored):
        #: host-wide, so kept across bindings.
        self._lease_seq = 0
        self._client: Any = None  # the pooled Redis client, opened by warm or start
        #: Held while a request is counted in or out (:meth:`_admit`) and while
        #: passivation or :meth:`unbind` checks that none is in flight.
        self._admitting = threading.Lock()
        #: The actor's event loop, for work a direct-transport thread hands back.
        self._aloop: asyncio.AbstractEventLoop | None = None
        #: Bindings this worker has served (its agent stops reusing it past a bound).
        self.bindings = 0
        self._reset_binding()

    def _reset_binding(self) -> None:
        """Forget everything of the current binding (process state, loop, socket,
        the backend's own Redis connection)."""
        close = getattr(getattr(self, "_backend", None), "close", None)
        if close is not None:
            close()
        #: Why the host lease is SUSPENDED (refusing work until it is HELD again).
        self._suspended: str | None = None
        #: The host lease is SUSPENDED but still certain: serve, do not passivate.
        self._holding = False
        self._ctrl: ProcessController | None = None
        #: Why this binding stopped serving for good (None while open), and detail.
        self._closed: ActorClosed | None = None
        self._closed_why = ""
        self._last_used = time.monotonic()
        self._inflight = 0
        self._watchdog: asyncio.Task[None] | None = None
        self._backend: Any = None
        self._events: Any = None
        self._loop: Any = None  # svit_cluster.reasoning.TurnLoop, once serving
        self._port_calls: deque[PortCallRecord] = deque(maxlen=256)
        self._direct: DirectServer | None = None
        #: Set when this binding ends; :meth:`watch` calls of it return then.
        self._ended = asyncio.Event()
        #: This binding's idle timeout (s): the process's own setting, else the cluster's.
        self.passivate_after_s = self.cfg.passivate_after_s

    # -- lifecycle --------------------------------------------------------------------

    async def warm(self) -> int:
        """Do now what every ``start`` would otherwise do first, so a spare binds in
        milliseconds: import the data-path modules, read the store's environment
        settings (``StoreConfig`` defaults) and open this host's pooled Redis client
        with one connection (its eviction-policy check included). A Redis that
        cannot be reached now is only logged: ``start`` connects again.

        Returns:
            This worker's process id (the agent reads its memory from ``/proc``).
        """
        await asyncio.to_thread(self._warm_sync)
        self._lower_priority()
        return os.getpid()

    def _lower_priority(self) -> None:
        """Go to the serving niceness (once; see the ``niceness`` argument)."""
        niceness, self._niceness = self._niceness, None
        if niceness is not None:
            lower_priority(niceness)

    def _warm_sync(self) -> None:
        """Load what a binding serves with (events, ports, reasoning: imported here,
        in :meth:`warm`'s thread, so a new actor answers before it has paid for
        them) and open the Redis connection ahead of :meth:`start`."""
        import svit_cluster.events
        import svit_cluster.ports
        import svit_cluster.reasoning  # noqa: F401  (loaded, not called, here)

        StoreConfig()
        try:
            client = self._connect()
            client.ping()
        except Exception as exc:  # Redis down or refusing: start connects on its own
            log.warning("spare could not pre-connect to Redis: %s", type(exc).__name__)
            return
        self._client = client

    def _connect(self) -> Any:
        return connect(self.cfg.redis_for(self.host), allow_unverified_eviction_policy=(
            self.cfg.redis_allow_unverified_eviction_policy), cluster=self.cfg.redis_cluster)

    async def bind(self, process_id: str, token: int) -> bool:
        """Give a spare its process and fencing token (then call :meth:`start`).

        Returns:
            False if this actor is bound now (a binding ends with :meth:`unbind`).
        """
        if self.token:
            return False
        self._lower_priority()  # a worker bound without warm-up
        self._reset_binding()
        self.process_id = process_id
        self.token = token
        self.bindings += 1
        return True

    async def unbind(self, token: int, only_if_idle: bool = True) -> Unbound:
        """End the binding of ``token``: stop serving its process for good and
        drop all of its state; the actor is a spare again.

        With ``only_if_idle`` (least-recently-used passivation), nothing happens
        while a request is in flight or a reasoning turn runs: the check and
        the closing of the binding happen under the lock every request is
        admitted under, so no request can start in between. Requests that arrive later name
        ``token`` and are refused (``unavailable``, ``route_moved``).

        The caller (the agent) then releases the etcd ownership record. Commits
        of this binding cannot happen after this returns: none is in flight,
        and every new request is refused.

        Returns:
            ``Unbound(True)``; or ``Unbound(False, busy=True)`` (in use: try
            another) or ``Unbound(False, token=current)`` (not bound to ``token``).
        """
        if token != self.token or not token:
            return Unbound(False, token=self.token)
        loop = self._loop
        with self._admitting:
            if only_if_idle and (self._inflight > 0 or (loop is not None and loop.busy)):
                return Unbound(False, busy=True)
            if self._closed is None:
                self._closed = ActorClosed.PASSIVATED
        self._ended.set()
        watchdog, self._watchdog = self._watchdog, None
        if watchdog is not None and watchdog is not asyncio.current_task():
            watchdog.cancel()
        if self._direct is not None:
            self._direct.close()
        await self._stop_loop()
        self._reset_binding()
        self.process_id, self.token = "", 0
        return Unbound(True)

    async def residency(self) -> ActorUsage:
        """What the agent's least-recently-used choice needs, without waking
        anything (:class:`ActorUsage`)."""
        loop = self._loop
        busy = loop is not None and loop.busy
        return ActorUsage(self.token, self.process_id,
                          0.0 if busy else time.monotonic() - self._last_used,
                          self._inflight, busy, os.getpid(), self.bindings)

    def _closed_text(self) -> str:
        """Why the binding stopped serving, for messages (empty while open)."""
        if self._closed is None:
            return ""
        return f"{self._closed}: {self._closed_why}" if self._closed_why else str(self._closed)

    def _guard(self) -> None:
        if self._closed is not None:
            raise UnavailableError(f"{self.process_id} is not served here: "
                                   f"{self._closed_text()}")
        if self._suspended is not None:
            raise UnavailableError(f"{self.process_id} is not served now: {self._suspended}; "
                                   "retry", lease_state="suspended")

    async def bind_start_serve(self, process_id: str, token: int,
                               create: CreateSpec | None = None) -> Outcome[Started]:
        """:meth:`bind`, :meth:`start` and :meth:`serve` in one Ray call: what the
        agent does with a warm spare once it owns ``process_id`` under ``token``
        (one Ray round trip instead of three on the cold activation path).

        Returns:
            :meth:`start`'s :class:`Started` with :meth:`serve`'s endpoint
            (``direct``) and this worker's ``pid`` on success; :meth:`start`'s
            error, or ``unavailable`` when this actor is already bound (a spare
            is bound once).
        """
        if not await self.bind(process_id, token):
            return Outcome.fail(UnavailableError(f"actor already bound to {self.process_id}"))
        result = await self.start(create)
        if result.value is None:
            return result
        return Outcome.ok(dataclasses.replace(result.value, direct=await self.serve(),
                                              pid=os.getpid()))

    async def start(self, create: CreateSpec | None = None) -> Outcome[Started]:
        """Claim the fence, then create or restore the process.

        Args:
            create: None to restore an existing process; a :class:`CreateSpec`
                with ``memory`` and ``scripts`` to create one at version 0, or
                with a fork's ``snapshot`` to create one from it, copying the
                parent's event prefix (``events.fork_events``) into the new
                process's session first when it names a ``history``.

        Returns:
            :class:`Started` (serving now), or the error (``not_found``,
            ``conflict`` if it already exists, ``fenced``, ``unavailable``,
            ``corrupt_log``).
        """
        try:
            return Outcome.ok(await asyncio.to_thread(self._start_sync, create))
        except SvitError as exc:
            self._closed, self._closed_why = ActorClosed.START_FAILED, str(exc.code)
            return Outcome.fail(exc)

    def _start_sync(self, create: CreateSpec | None) -> Started:
        from svit_cluster.events import RedisEventLog

        client = self._client if self._client is not None else self._connect()
        # The fenced RedisBackend unless the chaos negative control named its
        # unfenced test factory (ClusterConfig.backend_factory).
        backend = load_backend_factory(self.cfg.backend_factory)(
            client,
            self.process_id,
            self.token,
            StoreConfig(max_receipts=self.cfg.max_receipts,
                        snapshot_every=self.cfg.snapshot_every,
                        signal_retention=self.cfg.signal_retention,
                        dedicated_connection=True),
            guard=self._guard,
        )
        self._events = RedisEventLog(client, self.process_id, self.token,
                                     signal_retention=self.cfg.signal_retention,
                                     max_events=self.cfg.max_events,
                                     guard=self._guard)
        # The agent already claimed this token (Owners.claim, for ownership);
        # this claim is kept because it is also the receipts load (one script),
        # which lets every activation make a single round trip (the commit).
        backend.claim()
        restore: RestoreStats | None = None
        if create is None:
            proc = backend.restore()
            if proc is None:
                raise NotFound(f"unknown process {self.process_id}")
            restore = backend.last_restore
        elif create.snapshot is not None:
            proc = Process.restore(create.snapshot)
            if proc.id != self.process_id:
                raise ConflictError("fork snapshot names another process")
            if create.history is not None:
                self._copy_history(client, backend, create.history)
            backend.create(proc)
        else:
            proc = Process.create(self.process_id, memory=create.memory,
                                  scripts=dict(create.scripts))
            backend.create(proc)
        self._backend = backend
        self.passivate_after_s = backend.residency().get("passivate_after_s",
                                                         self.cfg.passivate_after_s)
        self._ctrl = ProcessController(proc, backend, ports=self._registry(), token=self.token)
        # Replace /ports by this host's grants before serving (a stale catalog
        # from a snapshot, a fork or another host never stays).
        self._ctrl.grant_ports()
        self._attach_mounts(proc, backend)
        return Started(proc.version, proc.root_hash, restore)

    def _attach_mounts(self, proc: Process, backend: Any) -> None:
        """Commit the operator's mount grants for this process (``mounts.refresh``,
        if they changed) and attach their providers under this owner's token.

        A writable folder is fenced: attaching takes the fence with this token
        (a frozen earlier owner's late write is refused from then on) and
        re-applies the committed writes the last owner left unapplied, read
        back from the log, before the process serves. A mount that cannot be
        attached (a source down, a fence held past its wait) stays detached:
        its paths answer ``mount_unavailable`` and the attach is retried when
        the mount is next used; everything else is served.
        """
        from svit_cluster.mounts import MountsConfig

        grants = MountsConfig.parse(self.cfg.mounts).for_process(self.process_id)
        # A grant is committed even when its provider cannot be built here (a
        # folder not there yet): the process then sees it detached
        # (``attached: false``, ``mount_unavailable``), not "not mounted".
        providers: dict[str, Any] = {}
        descriptors = {g.name: g.descriptor() for g in grants}
        for grant in grants:
            try:
                providers[grant.name] = grant.provider(proc.limits)
                descriptors[grant.name] = providers[grant.name].descriptor()
            except SvitError as exc:
                log.error("mount %s of %s not attached yet: %s", grant.name,
                          self.process_id, exc)
        assert self._ctrl is not None
        self._ctrl.grant_mounts(descriptors)

        def history(after: int) -> list[tuple[int, list[Any]]]:
            return [(e.version, mount_ops(Transaction.decode(e.record)))
                    for e in backend.entries(after_version=after)]

        for grant in grants:
            def attach(grant: Any = grant) -> None:
                provider = providers.get(grant.name) or grant.provider(proc.limits)
                proc.attach_mount(grant.name, provider, process_id=self.process_id,
                                  token=self.token, head_version=proc.version, history=history)
                # Materialize a query's rows in the background, so the first
                # activation need not wait for them and a slow or down database
                # never delays the start (the provider keeps the rows, or the
                # failure, for its cache TTL; a failure is the mount's to report
                # when it is read).
                threading.Thread(target=_warm, args=(provider, proc.limits),
                                 name=f"warm-mount-{grant.name}", daemon=True).start()
            try:
                if grant.name not in providers:
                    raise MountUnavailable(f"mount {grant.name} has no provider yet")
                attach()
            except SvitError as exc:
                if providers.get(grant.name) is not None:
                    log.error("mount %s of %s not attached yet: %s", grant.name,
                              self.process_id, exc)
                proc.mounts.attach_later(grant.name, attach)

    def _copy_history(self, client: Any, backend: Any, history: ForkHistory) -> None:
        """Copy a history fork's event prefix before the child exists in the store.

        Runs after this actor claimed the child's fence and before
        ``backend.create``: a child already in the store is refused first (its
        log is never touched), and a retry after a crash between the copy and
        the create finds the copied prefix and adds only what is missing
        (``fork_events`` is safe to retry; one MULTI/EXEC on the child's slot).

        Raises:
            ConflictError: the child already exists, or its log has events of
                its own beyond the prefix.
            UnavailableError: Redis failed (retry the fork).
        """
        from svit_cluster.events import fork_events

        self._guard()
        with redis_boundary("fork_exists", self.process_id):
            exists = bool(client.exists(backend.keys.head))
        if exists:
            raise ConflictError(f"process {self.process_id} already exists in the store",
                                process_id=self.process_id)
        fork_events(client, history.parent, self.process_id,
                    prefix=backend.keys.prefix, upto_seq=history.upto_seq)

    def _registry(self) -> Any:
        """This host's port registry (``ClusterConfig.ports``); calls are kept for
        :meth:`port_calls` and logged with the fencing token."""
        from svit_cluster.ports import PortsConfig, build_registry
        from svit_cluster.reasoning import ReasonerConfig

        return build_registry(PortsConfig.parse(self.cfg.ports),
                              reasoner_config=ReasonerConfig.from_dict(self.cfg.reasoner),
                              spawner=RaySpawner(self.cfg, self.agent_name),
                              on_call=lambda call: self._port_calls.append(call.to_dict()))

    async def port_calls(self) -> list[PortCallRecord]:
        """The last 256 port calls of this actor (``PortCall.to_dict``, with the token)."""
        return list(self._port_calls)

    async def serve(self) -> DirectEndpoint | None:
        """Start the passivation watchdog and the reasoning loop (called by the
        agent after ``start``). The loop resumes pending inbox items at once.

        The idle clock starts now: a warm spare may have waited longer than
        ``passivate_after_s`` to be bound, and must not passivate before the
        request that activated it arrives.

        Returns:
            The :meth:`direct_endpoint` (with this binding's token) when the
            direct transport is on and listening, else None. The agent passes
            it on in its activation answer, so the gateway's first request to
            a new owner goes over the socket instead of a Ray name lookup and
            a Ray call first (a shorter cold activation).
        """
        if self._watchdog is None:
            self._last_used = time.monotonic()
            self._watchdog = asyncio.get_running_loop().create_task(self._idle_loop())
        if (self._loop is None and self._ctrl is not None and self._closed is None
                and self._suspended is None):
            from svit_cluster.reasoning import ReasonerConfig, TurnLoop, build_reasoner

            rcfg = ReasonerConfig.from_dict(self.cfg.reasoner)
            if rcfg.enabled:
                self._loop = TurnLoop(self._ctrl, self._events, build_reasoner(rcfg),
                                      config=rcfg, on_fenced=self._loop_fenced,
                                      attempt_tag=str(self.token))
                self._loop.start()
        if not self.cfg.direct_transport:
            return None
        return (await self.direct_endpoint()).value

    def _loop_fenced(self) -> None:
        if self._closed is None:
            self._closed = ActorClosed.FENCED
            asyncio.get_running_loop().create_task(self._leave("fenced", self.token))

    async def _stop_loop(self) -> None:
        loop, self._loop = self._loop, None
        if loop is not None:
            await loop.stop()

    async def _idle_loop(self) -> None:
        """Passivate once idle for ``passivate_after_s``: sleep until that deadline,
        not in short polls (an idle actor must not wake up).

        A request moves the deadline (``_last_used``); it is read again at each
        wakeup. While a reasoning turn runs, or one ended since the last wakeup
        (its commits do not pass :meth:`_run`), the actor counts as used then and
        looks again within ``period``; so it never passivates earlier than a
        one-second poll would, at most one ``passivate_after_s`` later.

        A loop that still has work (:attr:`TurnLoop.pending`: a turn runs, or a
        failed turn's head waits for its retry) is never passivated by the idle
        timeout: nothing else would drive its queued head before a new request.
        It is looked at again within ``period``; the idle clock starts when the
        loop has no more work. (Passivation at the residency budget may still
        take it; the gateway's inbox re-drive then activates it again, see
        ``svit_cluster.cluster._redrive``.)
        """
        period = max(0.05, min(1.0, self.passivate_after_s / 4))
        turns = -1
        while self._closed is None:
            now = time.monotonic()
            loop = self._loop
            if loop is not None:
                done = loop.turns_completed + loop.turns_failed
                if loop.pending or (turns >= 0 and done != turns):
                    self._last_used = now
                turns = done
            if loop is not None and loop.pending:
                delay = period
            else:
                delay = self._last_used + self.passivate_after_s - now
                if delay <= 0:
                    # Not while the host lease is SUSPENDED: the release could not
                    # reach etcd, and the lease may still come back HELD.
                    with self._admitting:
                        idle = (self._inflight == 0 and self._suspended is None
                                and not self._holding and self._closed is None)
                        if idle:
                            self._closed = ActorClosed.PASSIVATED
                    if idle:
                        await self._leave("passivated", self.token)
                        return
                    delay = period  # a request is under way: its end moves the deadline
            await asyncio.sleep(max(delay, 0.05))

    async def watch(self, token: int) -> bool:
        """Answer only when the binding of ``token`` ends (at once if it is not
        the current one); never while it lasts and the worker lives.

        The agent keeps one such call outstanding per served process: when the
        worker dies (a crash, Ray's memory monitor, ``ray.kill``), Ray fails the
        call with ``RayActorError`` at once and the agent releases the
        ownership, instead of polling every actor. The call holds one of the
        actor's ``max_concurrency`` slots and costs nothing while idle; it
        returns when the binding ends, so a reused worker never piles up the
        calls of earlier bindings.

        Returns:
            False (the binding of ``token`` is over).
        """
        if token == self.token and token:
            await self._ended.wait()
        return False

    async def _leave(self, reason: str, token: int) -> None:
        """Ask the agent to release the binding of ``token`` (if it is still the
        current one; the agent then reuses or stops this worker)."""
        import ray

        if token != self.token or not token:
            return  # that binding already ended
        try:
            agent = ray.get_actor(self.agent_name, namespace=self.cfg.namespace)
            agent.release.remote(self.process_id, token, reason)
        except Exception:  # the agent may be gone with its host; the lease expiry cleans up
            log.warning("could not reach agent %s to release %s", self.agent_name,
                        self.process_id)

    async def hold(self, seq: int, token: int) -> None:
        """Keep serving but do not passivate: the host lease is SUSPENDED (no
        keepalive answered lately) yet cannot have expired, so commits stay
        safe, while a release could not reach etcd. :meth:`resume` ends it,
        :meth:`suspend` follows it if the lease stays SUSPENDED past its
        certain time. ``seq`` and ``token`` as for :meth:`suspend`."""
        if seq < self._lease_seq or token != self.token or not token:
            return
        self._lease_seq = seq
        self._holding = True

    async def suspend(self, reason: str, seq: int, token: int) -> None:
        """Refuse work while the host lease is SUSPENDED past the time it is certain
        (in the election grace: it has probably not expired, but no keepalive
        proves it); the reasoning loop stops. :meth:`resume` undoes it when the lease is HELD
        again; LOST is :meth:`fence_out`. ``seq`` orders the agent's notices:
        an older one than the last seen is ignored (closing every actor at each
        SUSPENDED made one etcd member's loss an outage). A notice for another
        binding than ``token``'s is ignored: a suspension belongs to the
        binding it was sent to, and a reused worker starts its next binding
        unsuspended, under the lease that was HELD when it was bound."""
        if seq < self._lease_seq or token != self.token or not token:
            return
        self._lease_seq = seq
        self._suspended = reason
        await self._stop_loop()

    async def resume(self, seq: int, token: int) -> None:
        """Serve again after :meth:`suspend`, passivate again after :meth:`hold`
        (the lease is HELD again)."""
        if seq < self._lease_seq or token != self.token or not token:
            return
        self._lease_seq = seq
        self._suspended = None
        self._holding = False
        if self._closed is None and self._ctrl is not None:
            await self.serve()

    async def fence_out(self, reason: str, token: int) -> None:
        """Stop serving the binding of ``token`` for good (lease LOST or ownership
        lost); a notice for another binding is ignored."""
        if token != self.token or not token:
            return
        if self._closed is None:
            self._closed, self._closed_why = ActorClosed.FENCED_OUT, reason
        if self._direct is not None:
            self._direct.close()
        await self._stop_loop()

    # -- requests ---------------------------------------------------------------------

    def _admit(self, token: int) -> SvitError | None:
        """Count a request of the binding of ``token`` in, or say why it is refused
        (``unavailable``: another binding, closed, suspended; ``not_found``:
        deleted). Under ``_admitting``: a request admitted here is counted
        before passivation or :meth:`unbind` looks at ``_inflight`` (they run
        on the actor's loop, direct-transport requests on their own threads)."""
        with self._admitting:
            if token != self.token or not token:
                return UnavailableError(
                    f"this actor does not serve owner token {token} "
                    f"(now {self.token or 'none'}); its route moved, retry", route_moved=True)
            if self._closed is ActorClosed.DELETED:
                return NotFound(f"process {self.process_id} was deleted")
            if self._closed is not None or self._ctrl is None:
                # nothing ran: the router may send it to the current owner at once
                return UnavailableError(f"{self.process_id} is not served here: "
                                        f"{self._closed_text() or 'starting'}",
                                        route_moved=True)
            if self._suspended is not None:
                return UnavailableError(f"{self.process_id} is not served now: "
                                        f"{self._suspended}; retry",
                                        lease_state="suspended")
            self._inflight += 1
            self._last_used = time.monotonic()
        return None

    def _done(self) -> None:
        with self._admitting:
            self._inflight -= 1
            self._last_used = time.monotonic()

    async def _fenced(self, token: int) -> None:
        """This binding's commit was fenced: stop serving it and ask to be released."""
        if token != self.token:
            return  # that binding already ended
        self._closed = ActorClosed.FENCED
        await self._stop_loop()
        await self._leave("fenced", token)

    async def _run(self, token: int, fn: Callable[[], T]) -> Outcome[T]:
        """Run ``fn`` in a thread for the binding of ``token``: its value, or the
        refusal (:meth:`_admit`) or the project error it raised."""
        refused = self._admit(token)
        if refused is not None:
            return Outcome.fail(refused)
        try:
            return Outcome.ok(await asyncio.to_thread(fn))
        except FencedError as exc:
            await self._fenced(token)
            return Outcome.fail(exc)
        except SvitError as exc:
            return Outcome.fail(exc)
        finally:
            self._done()

    def _run_here(self, token: int, fn: Callable[[], T]) -> Outcome[T]:
        """:meth:`_run` on the calling (direct-transport) thread. A fenced
        commit closes the binding at once; stopping its loop and asking for the
        release run on the actor's loop, not awaited."""
        refused = self._admit(token)
        if refused is not None:
            return Outcome.fail(refused)
        try:
            return Outcome.ok(fn())
        except FencedError as exc:
            self._closed = ActorClosed.FENCED
            if self._aloop is not None:
                asyncio.run_coroutine_threadsafe(self._fenced(token), self._aloop)
            return Outcome.fail(exc)
        except SvitError as exc:
            return Outcome.fail(exc)
        finally:
            self._done()

    def _control_fn(self, body: bytes, partition: str, trace: str | None
                    ) -> Callable[[], ControlAnswer]:
        def run() -> ControlAnswer:
            ctrl = self._ctrl
            assert ctrl is not None
            request = decode_request(body)
            if trace is not None:
                log.debug("activation %s request %s/%s trace %s", self.process_id,
                          request.client_id, request.request_id, trace)
            return ControlAnswer.of(ctrl.execute(request, tenant=partition),
                                    token=self.token, host=self.host)
        return run

    async def control(self, token: int, body: bytes, partition: str, trace: str | None = None
                      ) -> Outcome[ControlAnswer]:
        """Run one svit-control@1 request routed to owner ``token``. Returns the
        :class:`ControlAnswer` (its ``body`` encoded once, here; ``status``,
        ``code``, ``host``, ``token``); ``unavailable`` (``route_moved``) when
        ``token`` is not this actor's current binding.

        ``trace`` is the caller's W3C ``traceparent`` (the gateway span): the
        activation and its commit run as its children (:mod:`svit_cluster.tracing`);
        an invalid one is ignored.
        """
        with tracing.use_traceparent(trace):  # to_thread copies the context
            return await self._run(token, self._control_fn(body, partition, trace))

    async def direct_endpoint(self) -> Outcome[DirectEndpoint]:
        """Open (once) the direct transport for :meth:`control` and return where it is.

        See :mod:`svit_cluster.cluster._direct`: the socket listens on this
        node's IP, accepts only connections that present the returned secret,
        and runs each request through :meth:`control` (same guards, same fenced
        commit).

        Returns:
            The :class:`DirectEndpoint` with this binding's ``token``, or
            ``unavailable`` while not serving, or when the socket cannot be bound.
        """
        if self._closed is not None or self._ctrl is None:
            return Outcome.fail(UnavailableError(f"{self.process_id} is not served here: "
                                                 f"{self._closed_text() or 'starting'}"))
        if self._direct is None:
            import ray

            node_ip: str = ray.util.get_node_ip_address()  # type: ignore[no-untyped-call]
            self._direct = DirectServer(self._direct_request, node_ip)
            self._aloop = asyncio.get_running_loop()
        try:
            endpoint = self._direct.start()
        except OSError as exc:
            return Outcome.fail(UnavailableError(f"direct transport cannot listen: {exc}"))
        return Outcome.ok(DirectEndpoint(endpoint.host, endpoint.port, endpoint.secret,
                                         self.token))

    def _direct_request(self, meta: dict[str, Any], payload: bytes
                        ) -> tuple[dict[str, Any], bytes]:
        """One direct-transport request, on its connection's thread: ``control``
        only, with :meth:`control`'s guards and answer, as a frame
        (:func:`~._results.control_frame`: the response bytes are the payload)."""
        partition, trace, token = meta.get("partition"), meta.get("trace"), meta.get("token")
        if (meta.get("op") != "control" or not isinstance(partition, str)
                or type(token) is not int
                or not (trace is None or isinstance(trace, str))):
            return control_frame(Outcome.fail(InvalidInput("direct transport: bad request frame")))
        with tracing.use_traceparent(trace):
            return control_frame(self._run_here(token, self._control_fn(payload, partition,
                                                                        trace)))

    async def inbox(self, token: int, message: Value, dedup_key: str | None,
                    trace: str | None = None) -> Outcome[Appended]:
        """Commit ``message`` to ``/inbox``: :class:`Appended`
        (``trace``: as :meth:`control`)."""
        def run() -> Appended:
            assert self._ctrl is not None
            appended, version, _ = self._ctrl.append_inbox(message, dedup_key=dedup_key)
            return Appended(appended, version)

        with tracing.use_traceparent(trace):
            result = await self._run(token, run)
        if result.value is not None and result.value.appended and self._loop is not None:
            self._loop.wake()
        return result

    async def inbox_drop(self, token: int, message_id: str | None, head_hash: str | None,
                         reason: str) -> Outcome[Dropped]:
        """Dead-letter the inbox head (:meth:`ProcessController.drop_inbox_head`):
        :class:`Dropped`. The loop then serves the next item."""
        def run() -> Dropped:
            assert self._ctrl is not None
            version, letter = self._ctrl.drop_inbox_head(reason=reason, message_id=message_id,
                                                         head_hash=head_hash)
            return Dropped(letter, version)

        result = await self._run(token, run)
        if result.value is not None and self._loop is not None:
            self._loop.wake()
        return result

    async def state(self, token: int, path: str) -> Outcome[Read]:
        """:class:`Read` (the value and its version) from one observation."""
        def run() -> Read:
            assert self._ctrl is not None
            value, version = self._ctrl.read_versioned(path)
            return Read(value, version)

        return await self._run(token, run)

    async def request_status(self, token: int, partition: str, client_id: str,
                             request_id: str) -> Outcome[RequestStatus]:
        """The :class:`RequestStatus` of one request (see
        :meth:`ProcessController.request_status`)."""
        def run() -> RequestStatus:
            assert self._ctrl is not None
            return self._ctrl.request_status(client_id, request_id, tenant=partition)

        return await self._run(token, run)

    async def snapshot(self, token: int) -> Outcome[Snapshot]:
        """:class:`Snapshot` of the current state."""
        def run() -> Snapshot:
            assert self._ctrl is not None
            with self._ctrl.locked():
                return Snapshot(self._ctrl.process.snapshot())

        return await self._run(token, run)

    async def fork_snapshot(self, token: int, new_process_id: str, history: bool = False
                            ) -> Outcome[Snapshot]:
        """:class:`Snapshot` of a fork of the current state into ``new_process_id``.

        With ``history`` its ``upto_seq`` is set: the last event of the
        acknowledged prefix of that same state (``reasoning.history_prefix_seq``
        of its ``/thread``), which the child's :meth:`start` copies.
        """
        def run() -> Snapshot:
            from svit_cluster.reasoning import history_prefix_seq

            assert self._ctrl is not None
            with self._ctrl.locked():
                proc = self._ctrl.process
                snapshot = proc.fork(new_process_id).snapshot()
                if not history:
                    return Snapshot(snapshot)
                return Snapshot(snapshot,
                                history_prefix_seq(to_plain_json(proc.read("/thread"))))

        return await self._run(token, run)

    async def set_residency(self, token: int, passivate_after_s: float | None
                            ) -> Outcome[Residency]:
        """Set this process's idle timeout: it passivates after ``passivate_after_s``
        idle seconds (None: the cluster's ``passivate_after_s``), stored with the
        process (fenced like a commit, no new version), so every later owner on
        any host applies it too. Takes effect at once.

        Returns:
            :class:`Residency` (the effective seconds), or the error
            (``fenced``, ``not_found``, ``unavailable``).
        """
        def run() -> bool:
            self._backend.set_residency("passivate_after_s", passivate_after_s)
            return True

        result = await self._run(token, run)
        if result.failed:
            return result.failure()
        self.passivate_after_s = (self.cfg.passivate_after_s if passivate_after_s is None
                                  else float(passivate_after_s))
        watchdog, self._watchdog = self._watchdog, None
        if watchdog is not None:
            watchdog.cancel()
            self._watchdog = asyncio.get_running_loop().create_task(self._idle_loop())
        return Outcome.ok(Residency(self.passivate_after_s, passivate_after_s is None))

    async def delete(self, token: int) -> Outcome[Deleted]:
        """Delete the process: fenced store delete, then stop serving for good.

        The reasoning loop is stopped first; the store delete runs under the
        controller lock (no commit of this actor interleaves) and is fenced
        like a commit (``RedisBackend.delete``). On success the actor answers
        ``not_found`` from then on and asks its agent to release the ownership
        record (the gateway also asks, and waits; this is the fallback).

        Returns:
            :class:`Deleted`, or the error (``fenced``: a newer owner exists,
            nothing deleted; ``not_found``; ``unavailable``: Redis failed,
            outcome unknown, retry).
        """
        if token != self.token or not token:
            # the route moved: refused before anything runs
            return await self._run(token, lambda: Deleted(None, 0, self.host, token))
        await self._stop_loop()

        def run() -> Deleted:
            assert self._ctrl is not None
            with self._ctrl.locked():
                result: dict[str, Any] = self._backend.delete()
            self._closed = ActorClosed.DELETED
            return Deleted(result.get("version"), int(result.get("removed_keys") or 0),
                           self.host, self.token)

        result = await self._run(token, run)
        if self._closed is ActorClosed.DELETED and token == self.token:
            asyncio.get_running_loop().create_task(
                self._leave_later("deleted", token, delay_s=2.0))
        elif result.failed and self._closed is None:
            await self.serve()  # not deleted (e.g. Redis down): keep serving, loop again
        return result

    async def _leave_later(self, reason: str, token: int, *, delay_s: float) -> None:
        await asyncio.sleep(delay_s)
        await self._leave(reason, token)

    async def info(self) -> ActorInfo:
        """This actor's binding, version, idle time, loop and niceness
        (:class:`ActorInfo`; ``niceness``: see
        :data:`svit_cluster.cluster._config.PROCESS_ACTOR_NICENESS`)."""
        version = self._ctrl.process.version if self._ctrl is not None else None
        loop = self._loop
        return {"process_id": self.process_id, "host": self.host, "token": self.token,
                "closed": self._closed_text() or None, "version": version, "niceness": os.nice(0),
                "idle_s": time.monotonic() - self._last_used,
                "loop": None if loop is None else {
                    "state": loop.state, "turns_completed": loop.turns_completed,
                    "turns_failed": loop.turns_failed}}


def _warm(provider: Any, limits: Any) -> None:
    """Resolve a mount's root once (a query runs and its rows are kept)."""
    from svit_cluster.mounts import MountPath

    with contextlib.suppress(SvitError):
        provider.stat(MountPath(), limits)
