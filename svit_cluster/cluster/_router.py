"""The gateway's Ray router: cached routes, placement by load, single-flight activation.

Placement (control plane) asks the least-loaded live host's agent to activate a
process; concurrent requests for the same process share one placement, and the
etcd ``create_revision == 0`` transaction guarantees one owner even across
several gateways. The request path (data path) only reads the route cache and
calls the owner's actor.

A call that cannot reach the owner (host dead or paused, lease not yet
expired) answers ``unavailable`` with a retry hint: its outcome is unknown, and
a retry with the same request id is safe (durable receipts + version check).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from redis.exceptions import RedisClusterException, RedisError

from svit_cluster import tracing
from svit_cluster.cluster._config import ClusterConfig
from svit_cluster.cluster._direct import DirectClient, DirectEndpoint, DirectUnreachable
from svit_cluster.cluster._names import agent_name
from svit_cluster.cluster._placement import HostWatch, pick_host, watch_nodes
from svit_cluster.cluster._redrive import InboxRedrive, RedriveBackoff
from svit_cluster.cluster._rehome import Rehomer
from svit_cluster.cluster._results import (
    Appended,
    CreateSpec,
    Deleted,
    Dropped,
    ForkHistory,
    Outcome,
    Read,
    Residency,
    Snapshot,
    control_from_frame,
)
from svit_cluster.cluster._routes import Route, RouteCache
from svit_cluster.cluster._types import Activated, ServeStatus
from svit_cluster.control import ControlAnswer, ControlRequest, RequestStatus
from svit_cluster.errors import (
    ConflictError,
    InternalError,
    NotFound,
    SvitError,
    UnavailableError,
)
from svit_cluster.events import RedisSignalSource
from svit_cluster.gateway import GatewayMetrics
from svit_cluster.process import Script, Value, encode_value
from svit_cluster.reasoning import ReasonerConfig
from svit_cluster.store import ProcessKeys, QueuedPage, connect, list_processes, list_queued

__all__ = ["RayRouter", "RouteMoved", "classify_call_error"]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Seconds placement tries a host that answered ``host_full`` only after the others.
FULL_HOST_BACKOFF_S = 1.0
#: Seconds a view of the hosts' status (:meth:`RayRouter.hosts`) is reused.
HOSTS_MAX_AGE_S = 2.0
#: Seconds a request waits for its process's activation before it is answered
#: ``unavailable`` (``activating``) while the activation goes on: below the
#: SDK's default timeout (10 s), so a client gets a typed 503 with Retry-After
#: rather than timing out.
PLACEMENT_WAIT_S = 8.0
#: ``Retry-After`` (s) of a ``cluster_full`` answer: a busy process actor at the
#: budget frees in about one request's time, a second is a fair first wait.
CLUSTER_FULL_RETRY_AFTER_S = 1


#: Queued process ids the inbox re-drive reads per sweep (one ``list_queued`` page).
REDRIVE_BATCH = 500


def _redrive_backoff(config: ClusterConfig) -> RedriveBackoff:
    """The re-drive bookkeeping of ``config``: grace = the lease TTL; waits
    between re-drives of one process = the reasoning loop's retry rule."""
    rcfg = ReasonerConfig.from_dict(config.reasoner)
    return RedriveBackoff(grace_s=float(config.lease_ttl_s), base_s=rcfg.retry_after_s,
                          max_s=max(rcfg.retry_after_s, rcfg.max_retry_after_s))


def _create_outcome_unknown(process_id: str, why: str) -> UnavailableError:
    return UnavailableError(
        f"create of {process_id}: the process exists now, but {why}, so it may be "
        "this create's own doing; retry (the SDK then compares the content)",
        process_id=process_id)


def _unreachable_types() -> tuple[type[BaseException], ...]:
    """Ray exceptions that mean "the callee is dead, gone or overloaded", not a bug."""
    import ray.exceptions as rex

    names = ("RayActorError", "NodeDiedError", "WorkerCrashedError", "LocalRayletDiedError",
             "OutOfMemoryError", "ObjectLostError", "ActorUnschedulableError",
             "TaskUnschedulableError", "PendingCallsLimitExceeded", "GetTimeoutError")
    return tuple(t for t in (getattr(rex, n, None) for n in names) if isinstance(t, type))


def classify_call_error(exc: BaseException, what: str) -> SvitError | None:
    """Map an exception from a Ray actor call to the error the gateway answers.

    * a timeout, a dead or unreachable actor, a dead node or worker (and Ray's
      other "cannot run it there now" errors) -> :class:`UnavailableError`:
      the outcome is unknown and a retry with the same request id is safe;
    * a ``RayTaskError`` wrapping one of our typed :class:`SvitError` s -> that error;
    * anything else -- a ``RayTaskError`` wrapping any other exception, or an
      exception raised before the call left this process -- is a bug in our
      code: logged with its traceback (the remote one too) and returned as a
      :class:`SvitError` with code ``internal`` (HTTP 500), never ``unavailable``.

    Returns:
        The error to raise, or None for ``CancelledError`` / ``KeyboardInterrupt``
        / ``SystemExit`` (re-raise those unchanged).
    """
    import ray.exceptions as rex

    if not isinstance(exc, Exception):
        return None
    if isinstance(exc, rex.RayTaskError):
        cause = getattr(exc, "cause", None)
        if isinstance(cause, SvitError):
            return cause
        log.error("%s raised %s (a bug, answered as internal):\n%s", what,
                  type(cause).__name__ if cause is not None else "an error",
                  getattr(exc, "traceback_str", "") or exc, exc_info=exc)
        return InternalError(f"internal error in {what}: "
                             f"{type(cause).__name__ if cause is not None else 'RayTaskError'}")
    if isinstance(exc, (TimeoutError, *_unreachable_types())):
        return UnavailableError(f"{what.split('.')[0]} did not answer ({type(exc).__name__}); "
                                "outcome unknown, retry with the same request id")
    if isinstance(exc, SvitError):
        return exc
    log.error("calling %s failed with %s (a bug, answered as internal)", what,
              type(exc).__name__, exc_info=exc)
    return InternalError(f"internal error calling {what}: {type(exc).__name__}")


def _fingerprint(create: CreateSpec) -> str:
    """What a create (or fork) would write, exactly (a Svit integer 1 and float 1.0
    differ), so that only the very same create joins one under way."""

    def plain(obj: Any) -> Any:
        if isinstance(obj, Script):
            return {"source": obj.source, "documentation": obj.documentation}
        if isinstance(obj, bytes):
            return obj.hex()
        raise TypeError(type(obj).__name__)

    parts: dict[str, Any]
    if create.snapshot is None:
        parts = {"memory": encode_value(create.memory), "scripts": dict(create.scripts)}
    else:
        parts = {"snapshot": create.snapshot}
        if create.history is not None:
            parts["history"] = {"parent": create.history.parent,
                                "upto_seq": create.history.upto_seq}
    raw = json.dumps(parts, sort_keys=True, default=plain, separators=(",", ":"))
    return hashlib.sha256(raw.encode()).hexdigest()


def _retrieved(fut: asyncio.Future[Any]) -> None:
    """Done callback: mark a background placement's outcome as seen (its
    error, if any, was already answered to the caller or will be to a retry)."""
    if not fut.cancelled():
        fut.exception()


class RouteMoved(UnavailableError):
    """The route of a call in flight moved (its ownership record went or names
    another actor): the call was abandoned; its outcome is unknown."""


async def _unless(call: Any, abandon: asyncio.Future[None], timeout_s: float,
                  what: str) -> Any:
    """Await ``call`` (a coroutine or an awaitable such as a Ray ``ObjectRef``) for
    at most ``timeout_s`` seconds unless ``abandon`` is done first.

    ``call`` runs in the calling task (no task of its own: this is on every
    request's path); ``abandon`` finishing cancels that task, and the
    cancellation is turned into :class:`RouteMoved` here.

    Raises:
        RouteMoved: ``abandon`` finished first (``call`` is cancelled; when it
            was already done before the call, ``call`` never starts).
        TimeoutError: neither within ``timeout_s``.
        asyncio.CancelledError: the calling task was cancelled from outside.
    """
    if abandon.done():
        if asyncio.iscoroutine(call):
            call.close()
        raise _abandoned(what)
    task = asyncio.current_task()
    assert task is not None
    state = {"waiting": True, "moved": False}

    def on_abandon(_: asyncio.Future[None]) -> None:
        if state["waiting"]:  # not once ``call`` has ended (the callback comes a step later)
            state["moved"] = True
            task.cancel()

    abandon.add_done_callback(on_abandon)
    deadline = asyncio.timeout(timeout_s)
    try:
        async with deadline:
            result = await call
    except asyncio.CancelledError:
        if state["moved"] and task.uncancel() == 0:
            raise _abandoned(what) from None
        raise
    except TimeoutError as exc:
        if deadline.expired():
            raise TimeoutError(f"{what} did not answer within {timeout_s} s") from exc
        raise  # the call's own TimeoutError, as it raised it
    finally:
        state["waiting"] = False
        abandon.remove_done_callback(on_abandon)
    if state["moved"]:
        # ``call`` swallowed the cancel and answered: keep its answer, and
        # leave the task as it was (no cancel pending for a later await)
        task.uncancel()
    return result


def _abandoned(what: str) -> RouteMoved:
    return RouteMoved(f"{what} abandoned: the process's owner record moved (its host's "
                      "lease is gone or it was released); outcome unknown, retry with "
                      "the same request id", route_moved=True)


class RayRouter:
    """:class:`~svit_cluster.gateway.Router` over Ray process actors.

    Args:
        config: the cluster configuration.
        cache: a started :class:`RouteCache`.
        metrics: gateway metrics (activations per host, failovers).
    """

    def __init__(self, config: ClusterConfig, cache: RouteCache,
                 metrics: GatewayMetrics | None = None) -> None:
        self.cfg = config
        self.cache = cache
        self.metrics = metrics
        self._handles: dict[str, Any] = {}
        #: Direct-transport clients by (actor name, owner token) -- a worker is
        #: reused for other processes, each binding with its own socket -- None:
        #: that binding is reached over Ray only; see :mod:`._direct`.
        self._direct: dict[tuple[str, int], DirectClient | None] = {}
        self._direct_asking: dict[tuple[str, int], asyncio.Task[DirectClient | None]] = {}
        #: host -> monotonic time until which placement tries it last (it answered
        #: ``host_full``: every process actor there busy at its budget).
        self._full_until: dict[str, float] = {}
        self._turn = 0  # rotates placement among equally loaded hosts
        self._hosts_view: list[dict[str, Any]] | None = None
        self._hosts_at = 0.0
        self._hosts_asking: asyncio.Task[list[dict[str, Any]]] | None = None
        #: process -> its placement under way, and what it creates (a create's
        #: fingerprint, None for an activation of an existing process).
        self._placing: dict[str, tuple[asyncio.Future[Route], str | None]] = {}
        #: host -> activations this router has under way there (counted as load).
        self._activating: dict[str, int] = {}
        #: The last placement of each process (to count failovers), bounded:
        #: those without a route are forgotten past 4 x routes + 4096 entries.
        self._seen: dict[str, Route] = {}
        self._signals: Any = None
        self._redis: Any = None  # the commit log's Redis, for listings (lazily)
        #: Hosts placement skips: dead per Ray's node table, or not answering.
        self.host_watch = HostWatch(suspect_s=float(config.lease_ttl_s))
        self._node_watch: asyncio.Task[None] | None = None
        #: Restores the processes whose owner died (see :mod:`._rehome`).
        self.rehomer = Rehomer(self._route, self.host_watch.is_dead,
                               grace_s=float(config.lease_ttl_s))
        cache.on_orphaned = self.rehomer.add
        cache.on_host_joined = self._host_joined
        self._prewarming: set[asyncio.Task[None]] = set()
        #: Activates owner-less processes with a queued inbox (see :mod:`._redrive`).
        self.redrive = InboxRedrive(self._queued_page, self._owned, self.rehomer.add_id,
                                    _redrive_backoff(config))

    def start_node_watch(self, *, poll_s: float = 0.5) -> None:
        """Poll Ray's node table on the running loop: skip dead hosts in placement
        and revoke the lease of a host whose node Ray declared dead (see
        :mod:`svit_cluster.cluster._placement` for the guard), or whose agent
        actor is gone. Idempotent."""
        if self._node_watch is None or self._node_watch.done():
            self._node_watch = asyncio.get_running_loop().create_task(
                watch_nodes(self.host_watch, self.cache.client, self.cfg.cluster,
                            poll_s=poll_s, hosts=self.cache.hosts,
                            namespace=self.cfg.namespace))

    def start_inbox_redrive(self) -> None:
        """Sweep the queued-inbox index on the running loop (see :mod:`._redrive`).
        Idempotent."""
        self.redrive.start()

    def _owned(self, process_id: str) -> bool:
        return process_id in self.cache.routes

    async def _queued_page(self, cursor: str | None) -> QueuedPage:
        """One page of queued process ids, once the route cache is loaded."""
        await self.cache.ready.wait()

        def scan() -> QueuedPage:
            return list_queued(self._store(), limit=REDRIVE_BATCH, cursor=cursor)

        return await asyncio.to_thread(scan)

    def _store(self) -> Any:
        """The commit log's Redis client, built on first use. Call it from a
        thread: building a Redis Cluster client talks to the cluster."""
        if self._redis is None:
            self._redis = connect(self.cfg.redis_url, cluster=self.cfg.redis_cluster)
        return self._redis

    async def close(self) -> None:
        """Stop the node watch (if started) and close the direct-transport connections."""
        for asking in [*self._direct_asking.values(), *self._prewarming]:
            asking.cancel()
        for key in list(self._direct):
            self._drop_direct(key)
        task, self._node_watch = self._node_watch, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.redrive.close()
        await self.rehomer.close()
        redis_client, self._redis = self._redis, None
        if redis_client is not None:
            redis_client.close()

    # -- plumbing -------------------------------------------------------------------

    async def _handle(self, name: str) -> Any:
        import ray

        handle = self._handles.get(name)
        if handle is None:
            try:
                handle = await asyncio.to_thread(ray.get_actor, name,
                                                 namespace=self.cfg.namespace)
            except ValueError as exc:
                raise UnavailableError(f"actor {name} is not registered") from exc
            self._handles[name] = handle
        return handle

    def _host_joined(self, host: str) -> None:
        """A new registration of ``host``: forget the handle of its earlier agent
        (a restarted host's agent is a new actor under the same name, and a call
        through the old handle fails and marks the host suspect for a lease TTL,
        just when it could take a failed host's processes), and resolve and call
        the new one now, in the background, so the first activation there does
        not wait for Ray to learn where the new actor lives."""
        self._handles.pop(agent_name(host), None)
        self.host_watch.clear(host)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # the cache filled before the gateway's loop runs
            return
        task = loop.create_task(self._prewarm(host))
        self._prewarming.add(task)
        task.add_done_callback(self._prewarming.discard)

    async def _prewarm(self, host: str) -> None:
        with contextlib.suppress(SvitError):
            await self._call(agent_name(host), "ping", timeout_s=30)

    async def _reconcile(self, route: Route) -> None:
        """Ask the owner's agent to release the route if its actor died (best effort)."""
        if route.host not in self.cache.hosts:
            return  # the host's lease runs out on its own
        try:
            await self._call(agent_name(route.host), "reconcile", route.process_id,
                             timeout_s=15)
        except SvitError:
            pass

    async def _call_route(self, route: Route, method: str, *args: Any) -> Outcome[Any]:
        """Call ``method`` on ``route``'s actor; abandon the call the moment the route
        moves (its ownership record is deleted -- released, or its host's lease
        revoked or expired -- or names another actor).

        Raises:
            RouteMoved: the route moved while the call was in flight (an
                :class:`UnavailableError`: outcome unknown, a retry with the
                same request id is safe -- receipts, the version check and the
                new owner's fence). No reconcile is asked of the old host.
            UnavailableError, SvitError: as :meth:`_call`.
        """
        moved = self.cache.moved(route)
        try:
            result: Outcome[Any] = await self._call(route.actor, method, route.token, *args,
                                                    abandon=moved)
            return result
        except RouteMoved:
            raise
        except UnavailableError:
            await self._reconcile(route)
            raise
        finally:
            self.cache.forget_moved(route, moved)

    def _direct_client(self, route: Route) -> DirectClient | None:
        """The direct-transport client of ``route``'s actor, or None: the actor is
        reached over Ray only (transport off, or the actor would not open it),
        or its endpoint is not known yet. In that last case the endpoint is
        asked for in the background (one Ray call), so the first request to
        an actor never waits for it."""
        if not self.cfg.direct_transport:
            return None
        key = (route.actor, route.token)
        if key in self._direct:
            return self._direct[key]
        if key not in self._direct_asking:
            self._direct_asking[key] = asyncio.get_running_loop().create_task(
                self._ask_endpoint(route))
        return None

    async def _ask_endpoint(self, route: Route) -> DirectClient | None:
        key = (route.actor, route.token)
        try:
            answer: Outcome[DirectEndpoint] = await self._call(
                route.actor, "direct_endpoint", timeout_s=self.cfg.call_timeout_s)
            # None: not serving (yet or any more); another token: not the route's owner
            return self._adopt_endpoint(route, answer.value)
        except SvitError:
            return None
        finally:
            self._direct_asking.pop(key, None)

    def _adopt_endpoint(self, route: Route, endpoint: DirectEndpoint | None
                        ) -> DirectClient | None:
        """Cache a direct client for ``route``'s actor from ``endpoint`` (a
        ``ProcessActor.direct_endpoint`` answer, from that call or carried in
        the activation answer); only an endpoint of the route's own token is
        ever cached.

        Returns:
            The client; or None: nothing cached (transport off, no endpoint,
            another token's).
        """
        if not self.cfg.direct_transport or endpoint is None or endpoint.token != route.token:
            return None
        client = DirectClient(endpoint)
        if len(self._direct) >= 4 * len(self.cache.routes) + 64:
            self._prune_direct()
        key = (route.actor, route.token)
        old = self._direct.get(key)
        if old is not None and old is not client:
            old.close()
        self._direct[key] = client
        return client

    def _prune_direct(self) -> None:
        """Forget clients of bindings no route names any more (bounded memory)."""
        live = {(r.actor, r.token) for r in self.cache.routes.values()}
        for key in [k for k in self._direct if k not in live]:
            self._drop_direct(key)

    def _drop_direct(self, key: tuple[str, int]) -> None:
        client = self._direct.pop(key, None)
        if client is not None:
            client.close()

    async def _control_call(self, route: Route, body: bytes, partition: str,
                            trace: str | None) -> Outcome[ControlAnswer]:
        """``ProcessActor.control`` over the direct transport when the actor has
        one, else (or when its connection fails) over Ray.

        Raises:
            RouteMoved: the route moved while the call was in flight (either
                transport; outcome unknown, the direct client is dropped).
            UnavailableError: no answer within ``call_timeout_s`` (outcome
                unknown), or as :meth:`_call_route`.
        """
        client = self._direct_client(route)
        key = (route.actor, route.token)
        if client is not None:
            meta = {"op": "control", "partition": partition, "trace": trace,
                    "token": route.token}
            moved = self.cache.moved(route)
            try:
                # Abandoned the moment the route moves, as over Ray (_call_route).
                answer, payload = await _unless(
                    client.call(meta, body, timeout_s=self.cfg.call_timeout_s), moved,
                    self.cfg.call_timeout_s + 1.0, f"{route.actor}.control (direct)")
            except RouteMoved:
                self._drop_direct(key)
                raise
            except TimeoutError as exc:
                await self._reconcile(route)
                raise UnavailableError(f"{route.actor} did not answer in "
                                       f"{self.cfg.call_timeout_s} s; outcome unknown, "
                                       "retry with the same request id") from exc
            except DirectUnreachable as exc:
                # Dead actor, ended binding or a broken connection: the Ray
                # path classifies it (and reconciles); repeating the request is
                # safe. This binding stays on Ray (a new one opens a new socket).
                log.info("direct transport to %s failed (%s); using Ray", route.actor, exc)
                self._drop_direct(key)
                self._direct[key] = None
            else:
                return control_from_frame(answer, payload)
            finally:
                self.cache.forget_moved(route, moved)
        return await self._call_route(route, "control", body, partition, trace)

    async def _call(self, name: str, method: str, *args: Any,
                    timeout_s: float | None = None,
                    abandon: asyncio.Future[None] | None = None) -> Any:
        """Call ``method`` of actor ``name`` and return its answer (an
        :class:`~svit_cluster.cluster._results.Outcome` for a request-path method).

        Raises:
            UnavailableError: the actor or its node is dead or unreachable, or
                it did not answer within ``timeout_s`` (default
                ``call_timeout_s``): the outcome is unknown, a retry is safe.
            SvitError: the actor raised one of our typed errors (re-raised as is).
            SvitError: code ``internal`` for anything else -- a bug in our code
                (a ``RayTaskError`` wrapping a non-project exception, a bad call);
                it is logged with its traceback, never reported as ``unavailable``.
        """
        handle = await self._handle(name)
        try:
            ref = getattr(handle, method).remote(*args)
            deadline = timeout_s or self.cfg.call_timeout_s
            if abandon is None:
                result = await asyncio.wait_for(ref, timeout=deadline)
            else:
                result = await _unless(ref, abandon, deadline, f"{name}.{method}")
        except RouteMoved:
            raise
        except BaseException as exc:
            failure = classify_call_error(exc, f"{name}.{method}")
            if failure is None:
                raise
            if isinstance(failure, UnavailableError):
                self._handles.pop(name, None)
            raise failure from exc
        return result

    async def _route(self, process_id: str) -> Route:
        """The route of ``process_id``: cached, or placed now.

        Raises:
            NotFound: (``not_found``) the commit log holds no such process
                (never created, or deleted): answered before any host claims
                it, so a request for an unknown id costs one Redis ``EXISTS``,
                not a claim, a worker and a failed restore.
            InvalidInput, UnavailableError, ConflictError: as :meth:`_place`.
        """
        await self.cache.ready.wait()
        route = self.cache.routes.get(process_id)
        if route is not None:
            return route
        await self._require_stored(process_id)
        return await self._place(process_id, None)

    async def _require_stored(self, process_id: str) -> None:
        """Raise :class:`NotFound` unless ``process_id``'s head key exists (every
        create writes it; a delete removes it). When Redis does not answer or
        refuses (its eviction policy), nothing is decided here: the placement's
        own restore reports that."""
        head = ProcessKeys(process_id).head
        try:
            stored = await asyncio.to_thread(lambda: bool(self._store().exists(head)))
        except (RedisError, RedisClusterException, OSError, SvitError) as exc:
            log.debug("existence check of %s skipped: %s", process_id, exc)
            return
        if not stored:
            raise NotFound(f"unknown process {process_id[:200]}", process_id=process_id)

    async def _place(self, process_id: str, create: CreateSpec | None) -> Route:
        """Place ``process_id`` (activate it on a host), waiting at most
        :data:`PLACEMENT_WAIT_S` for it.

        The activation goes on after that, and a retry joins it (or, once it is
        done, finds its route), so a slow one -- a full cluster waiting for
        busy process actors, workers starting on a loaded host -- is answered
        as a typed 503 before a client's own timeout instead of as a timeout.

        Raises:
            InvalidInput: (``invalid_process_id``) an id the store cannot key
                (``ProcessKeys``: no ``{`` or ``}``, the hash tag's braces),
                refused before any host claims it.
            UnavailableError: not placed within :data:`PLACEMENT_WAIT_S`
                (``activating``; retry: a create's outcome is then unknown,
                which the SDK resolves by comparing the content), or as
                :meth:`_place_once`.
            ConflictError: as :meth:`_place_once`.
        """
        ProcessKeys(process_id)
        placing = asyncio.ensure_future(self._place_now(process_id, create))
        try:
            return await asyncio.wait_for(asyncio.shield(placing), PLACEMENT_WAIT_S)
        except TimeoutError:
            placing.add_done_callback(_retrieved)
            raise UnavailableError(
                f"{process_id} is being activated (waiting for a process actor); retry",
                process_id=process_id, activating=True,
                retry_after_s=CLUSTER_FULL_RETRY_AFTER_S) from None

    async def _place_now(self, process_id: str, create: CreateSpec | None) -> Route:
        """One placement per process at a time: an activation joins the one under
        way; so does a create of the very same content (a client's retry after
        :data:`PLACEMENT_WAIT_S`; a new attempt would be a second activation of
        the same process on another host, and under load every retry added
        one). A create of other content while one is under way is answered
        ``unavailable``: its outcome depends on the first."""
        fingerprint = None if create is None else _fingerprint(create)
        pending = self._placing.get(process_id)
        if pending is not None:
            fut_pending, pending_print = pending
            if fingerprint is None or fingerprint == pending_print:
                return await asyncio.shield(fut_pending)
            raise UnavailableError(f"{process_id} is being created or activated by another "
                                   "request; retry", process_id=process_id, activating=True)
        fut: asyncio.Future[Route] = asyncio.get_running_loop().create_future()
        self._placing[process_id] = (fut, fingerprint)
        try:
            route = await self._place_once(process_id, create)
            fut.set_result(route)
            return route
        except BaseException as exc:
            fut.set_exception(exc)
            fut.exception()  # mark retrieved
            raise
        finally:
            self._placing.pop(process_id, None)

    def _spares_of(self, host: str) -> int:
        """The warm spares ``host``'s record states: ``ready`` (up now, published
        at most a second ago), else ``spares`` (its target), else ``warm_spares``."""
        record = self.cache.hosts.get(host, {})
        for field in ("ready", "spares"):
            value = record.get(field)
            if isinstance(value, int) and value >= 0:
                return value
        return self.cfg.warm_spares

    async def _place_once(self, process_id: str, create: CreateSpec | None) -> Route:
        """Activate on the least-loaded host Ray lists alive whose agent answers.

        A host whose agent call fails as ``unavailable`` (dead actor or node,
        timeout) is marked suspect and the next host is tried; a typed answer
        (``unavailable`` from an agent that did answer, e.g. its lease is
        SUSPENDED) also moves on. Every host is tried at most once.

        With ``create``, an attempt whose outcome is unknown (the agent call
        failed, or the agent answered ``unavailable``: its actor's start may
        have created the process in the store before it timed out or the
        lease left HELD) makes a later "already exists" ambiguous: it may be
        this very create. That conflict is answered as ``unavailable`` (outcome
        unknown, retry) rather than ``conflict``, so a retrying client checks
        the process's content instead of being told its own create clashed.

        Raises:
            UnavailableError: no registered host, or none could activate; or a
                create whose earlier attempt here has an unknown outcome found
                the process existing.
            ConflictError: a create found the process existing, and no earlier
                attempt of this placement could have created it.
        """
        if not self.cache.hosts:
            raise UnavailableError("no live hosts in the cluster")
        tried: set[str] = set()
        full: set[str] = set()  # hosts that answered host_full in this placement
        last: UnavailableError | None = None
        unknown: str | None = None  # a create attempt that may have succeeded
        while True:
            # Activations under way count as load: the processes of a failed host
            # are placed all at once, and without this they would all go to the
            # same least-loaded host, past its warm spares (cold starts).
            load = self.cache.load()
            for h, n in self._activating.items():
                if h in load:
                    load[h] += n
            skip = tried | self.host_watch.excluded()
            # First choice: a host with a warm spare left for this activation. Each
            # agent keeps its share of the busiest peer's processes as spares (at
            # least ``warm_spares``; cluster._headroom) and its record states how
            # many are up (``ready``); each activation under way there takes one;
            # beyond them an activation starts a Ray worker first (seconds). By
            # load alone, a failed host's processes placed at once can all go to
            # the least-loaded survivor, past its spares, while another survivor
            # has spares idle. A host whose record says it is not warm yet (it
            # just joined and its spares are still starting) has none. A host
            # that was full a moment ago is tried last.
            cold = {h for h in load if self._activating.get(h, 0) >= self._spares_of(h)
                    or self.cache.hosts.get(h, {}).get("warm") is False}
            full_now = self._recently_full()
            turn, self._turn = self._turn, self._turn + 1
            host = (pick_host(load, skip | full_now | cold, turn=turn)
                    or pick_host(load, skip | full_now, turn=turn)
                    or pick_host(load, skip, turn=turn))
            if host is None:
                if full and full >= set(load) - self.host_watch.excluded():
                    raise UnavailableError(
                        "the cluster is full: every host is at its residency budget with "
                        "every process actor busy; retry", cluster_full=True,
                        retry_after_s=CLUSTER_FULL_RETRY_AFTER_S, hosts=sorted(full))
                raise last or UnavailableError(
                    "no host can activate now (Ray reports them dead or their agents "
                    "do not answer); retry", hosts=sorted(load))
            tried.add(host)
            self._activating[host] = self._activating.get(host, 0) + 1
            try:
                answer: Outcome[Activated] = await self._call(
                    agent_name(host), "activate", process_id, create, timeout_s=90)
            except UnavailableError as exc:
                self.host_watch.mark_unanswering(host)
                log.warning("host %s's agent did not answer an activation: %s", host, exc)
                last = exc
                if create is not None:
                    unknown = f"the attempt on host {host} has an unknown outcome ({exc})"
                continue
            finally:
                left = self._activating.get(host, 1) - 1
                if left > 0:
                    self._activating[host] = left
                else:
                    self._activating.pop(host, None)
            self.host_watch.clear(host)
            try:
                activated = answer.unwrap()
            except UnavailableError as exc:  # the agent answered but cannot serve now
                last = exc
                if exc.fields.get("host_full"):
                    full.add(host)
                    self._full_until[host] = time.monotonic() + FULL_HOST_BACKOFF_S
                if create is not None:
                    # e.g. the actor's start timed out or the lease left HELD
                    # during it: the store may hold the process already
                    unknown = f"host {host} answered {exc.code}: {exc.message}"
                continue
            except ConflictError as exc:
                if unknown is not None:
                    raise _create_outcome_unknown(process_id, unknown) from exc
                raise
            break
        if activated.status is ServeStatus.OWNED:
            if create is not None:
                if unknown is not None:
                    raise _create_outcome_unknown(process_id, unknown)
                raise ConflictError(f"process {process_id} already exists")
            if activated.host is None or activated.token is None or activated.actor is None:
                raise UnavailableError(f"{process_id} is owned elsewhere; retry")
            return Route(process_id, activated.host, activated.token, activated.actor)
        if activated.token is None or activated.actor is None:
            raise InternalError(f"activation of {process_id} answered no token or actor")
        route = Route(process_id, host, activated.token, activated.actor)
        if activated.started is not None and (route.actor, route.token) not in self._direct:
            # the new owner's socket, from the agent: no Ray lookup before the first request
            self._adopt_endpoint(route, activated.started.direct)
        previous = self._seen.get(process_id)
        if previous is not None and previous.host not in self.cache.hosts and self.metrics:
            self.metrics.failovers.inc()
        if len(self._seen) >= 4 * len(self.cache.routes) + 4096:  # bounded memory
            self._seen = {p: r for p, r in self._seen.items() if p in self.cache.routes}
        self._seen[process_id] = route
        cached = self.cache.routes.get(process_id)
        if cached is None or cached.token < route.token:  # the watch may lag behind
            self.cache.routes[process_id] = route
        return route

    def _recently_full(self) -> set[str]:
        """Hosts that answered ``host_full`` within :data:`FULL_HOST_BACKOFF_S`."""
        now = time.monotonic()
        for host, until in list(self._full_until.items()):
            if until <= now:
                del self._full_until[host]
        return set(self._full_until)

    # -- Router ---------------------------------------------------------------------

    async def control(self, request: ControlRequest, partition: str,
                      body: bytes | None = None) -> ControlAnswer:
        if body is None:
            body = request.model_dump_json().encode()
        trace = tracing.current_traceparent()  # the gateway span, passed to the actor
        route = await self._route(request.process_id)
        try:
            result = await self._control_call(route, body, partition, trace)
        except RouteMoved:
            # The owner lost its record mid-call (its host paused, cut off or
            # dead, and its lease is gone): send the same request to the new
            # owner once. Safe: a commit the old owner made before the new
            # owner's claim is replayed from its receipt, and a later one is
            # refused by the fence.
            route = await self._route(request.process_id)
            result = await self._control_call(route, body, partition, trace)
        if result.failed:  # a commit, the common answer, takes no detour
            route, result = await self._again_if_stale_owner(
                request.process_id, route, result,
                lambda r: self._control_call(r, body, partition, trace))
        answer = result.unwrap()
        if self.metrics is not None and answer.status == "committed":
            self.metrics.activations.labels(answer.host or route.host).inc()
        return answer

    async def _again_if_stale_owner(
        self, process_id: str, route: Route, result: Outcome[T],
        call: Callable[[Route], Awaitable[Outcome[T]]],
    ) -> tuple[Route, Outcome[T]]:
        """``(route, result)`` unchanged unless ``result`` says the actor no longer
        serves that binding (``result.stale_owner``: passivated, fenced, its
        lease lost). Then, if etcd already shows no other owner, the process is
        placed again and ``call(new_route)`` sent once; if another owner is
        recorded, the error stands and the client retries while the old
        lease runs out.
        """
        if not result.stale_owner:
            return route, result
        self._drop_direct((route.actor, route.token))
        await asyncio.sleep(0.05)
        if self.cache.routes.get(process_id) in (None, route):
            self.cache.routes.pop(process_id, None)
            route = await self._place(process_id, None)
            result = await call(route)
        return route, result

    async def create(self, process_id: str, memory: Value, scripts: dict[str, Script]
                     ) -> dict[str, Any]:
        await self.cache.ready.wait()
        if process_id in self.cache.routes:
            raise ConflictError(f"process {process_id} already exists")
        route = await self._place(process_id, CreateSpec(memory=memory, scripts=dict(scripts)))
        return {"process_id": process_id, "version": 0, "host": route.host,
                "token": route.token}

    async def _call_process(self, process_id: str, method: str, *args: Any
                            ) -> tuple[Route, Any]:
        """Call ``method`` on ``process_id``'s owner (placed if needed); an answer
        that the actor refused before running anything (``route_moved``: it no
        longer serves that binding, e.g. passivated) is sent once more to the
        process's current owner, placed again if the record is gone.

        Returns:
            The route that answered and the answer's value.

        Raises:
            SvitError: the (second) answer's error (``Outcome.unwrap``).
        """
        route = await self._route(process_id)
        result = await self._call_route(route, method, *args)
        if result.route_moved:
            await asyncio.sleep(0.05)
            if self.cache.routes.get(process_id) in (None, route):
                self.cache.routes.pop(process_id, None)
            route = await self._route(process_id)
            result = await self._call_route(route, method, *args)
        return route, result.unwrap()

    async def inbox(self, process_id: str, message: Value, dedup_key: str | None
                    ) -> dict[str, Any]:
        appended: Appended = (await self._call_process(process_id, "inbox", message, dedup_key,
                                                       tracing.current_traceparent()))[1]
        return appended.to_json()

    async def inbox_drop(self, process_id: str, *, reason: str, message_id: str | None = None,
                         head_hash: str | None = None) -> dict[str, Any]:
        dropped: Dropped = (await self._call_process(process_id, "inbox_drop", message_id,
                                                     head_hash, reason))[1]
        return dropped.to_json()

    async def state(self, process_id: str, path: str) -> tuple[Value, int]:
        read: Read
        _, read = await self._call_process(process_id, "state", path)
        return read.value, read.version

    async def request_status(self, process_id: str, partition: str, client_id: str,
                             request_id: str) -> dict[str, Any]:
        status: RequestStatus
        _, status = await self._call_process(process_id, "request_status", partition,
                                             client_id, request_id)
        return status.to_json()

    async def snapshot(self, process_id: str) -> bytes:
        snapshot: Snapshot
        _, snapshot = await self._call_process(process_id, "snapshot")
        return snapshot.snapshot

    async def set_residency(self, process_id: str, *, passivate_after_s: float | None
                            ) -> dict[str, Any]:
        """Set the process's idle timeout through its owner (see ``Router.set_residency``)."""
        residency: Residency
        _, residency = await self._call_process(process_id, "set_residency", passivate_after_s)
        return {"process_id": process_id, "passivate_after_s": residency.passivate_after_s,
                "default": residency.default}

    async def fork(self, process_id: str, new_process_id: str, *, history: bool = False
                   ) -> dict[str, Any]:
        """Fork through the parent's owner, then activate the child (see ``Router.fork``).

        The parent's actor forks its state and, with ``history``, names the
        event prefix of that same state (``fork_snapshot``); the child's actor
        copies it after claiming the child and before creating it in the store
        (``ProcessActor.start``), so a retry repeats the copy harmlessly.
        """
        await self.cache.ready.wait()
        if new_process_id in self.cache.routes:
            raise ConflictError(f"process {new_process_id} already exists")
        args: tuple[Any, ...] = (new_process_id, True) if history else (new_process_id,)
        forked: Snapshot
        _, forked = await self._call_process(process_id, "fork_snapshot", *args)
        fork_history = None
        if history:
            if forked.upto_seq is None:
                raise InternalError(f"the fork of {process_id} answered no event prefix")
            fork_history = ForkHistory(process_id, forked.upto_seq)
        child = await self._place(new_process_id,
                                  CreateSpec(snapshot=forked.snapshot, history=fork_history))
        info: dict[str, Any] = {"process_id": new_process_id, "host": child.host,
                                "token": child.token}
        if history:
            info["history"] = {"upto_seq": forked.upto_seq}
        return info

    async def delete(self, process_id: str) -> dict[str, Any]:
        """Delete through the owner (activated if needed), then release its etcd record.

        The owner's actor runs the fenced store delete; then this router asks
        the owner's agent to release the ownership record (etcd) and stop the
        actor, and forgets the route. A stale route (the actor already left)
        is re-placed once, as in :meth:`control`.
        """
        route = await self._route(process_id)
        route, result = await self._again_if_stale_owner(
            process_id, route, await self._call_route(route, "delete"),
            lambda r: self._call_route(r, "delete"))
        deleted: Deleted = result.unwrap()
        released = False
        try:
            released = bool(await self._call(agent_name(route.host), "release", process_id,
                                             route.token, "deleted", timeout_s=15))
        except SvitError as exc:  # the actor's own fallback release follows
            log.warning("release of deleted %s on %s failed: %s", process_id, route.host, exc)
        if self.cache.routes.get(process_id) == route:
            self.cache.routes.pop(process_id, None)
        self._seen.pop(process_id, None)
        return {"process_id": process_id, "deleted": True, "version": deleted.version,
                "token": route.token, "released": released}

    def signal_source(self) -> Any:
        """Signals and history, read straight from Redis (no actor, no etcd)."""
        if self._signals is None:
            self._signals = RedisSignalSource.from_url(self.cfg.redis_url,
                                                       cluster=self.cfg.redis_cluster)
        return self._signals

    async def list_processes(self, *, tenant: str | None, limit: int,
                             cursor: str | None) -> dict[str, Any]:
        """One page of the processes in the commit log's Redis
        (:func:`svit_cluster.store.list_processes`: ``SCAN`` over head keys),
        each with its owner from the route cache (no etcd or actor call). See
        ``Router.list_processes``."""
        def scan() -> Any:
            return list_processes(self._store(), tenant=tenant, limit=limit, cursor=cursor)

        page = await asyncio.to_thread(scan)
        out = []
        for listed in page.processes:
            route = self.cache.routes.get(listed.process_id)
            out.append({"process_id": listed.process_id, "version": listed.version,
                        "active": route is not None,
                        "host": route.host if route is not None else None,
                        "token": route.token if route is not None else None})
        return {"processes": out, "next": page.next_cursor}

    async def hosts(self) -> list[dict[str, Any]]:
        """Each registered host's agent ``status()`` (without its process list),
        asked at most every :data:`HOSTS_MAX_AGE_S` (concurrent calls share one
        round); a host whose agent does not answer within 3 s is
        ``{"host", "answered": False}``."""
        loop = asyncio.get_running_loop()
        if self._hosts_view is not None and loop.time() - self._hosts_at < HOSTS_MAX_AGE_S:
            return self._hosts_view
        if self._hosts_asking is None:
            self._hosts_asking = loop.create_task(self._ask_hosts())
        try:
            return await asyncio.shield(self._hosts_asking)
        finally:
            if self._hosts_asking is not None and self._hosts_asking.done():
                self._hosts_asking = None

    async def _ask_hosts(self) -> list[dict[str, Any]]:
        names = sorted(self.cache.hosts)

        async def one(host: str) -> dict[str, Any]:
            try:
                status = await self._call(agent_name(host), "status", timeout_s=3.0)
            except SvitError:
                return {"host": host, "answered": False}
            status.pop("processes", None)
            return {**status, "host": host, "answered": True}

        view = list(await asyncio.gather(*(one(h) for h in names)))
        self._hosts_view, self._hosts_at = view, asyncio.get_running_loop().time()
        return view

    async def owner_changes(self, limit: int) -> list[dict[str, Any]]:
        """The route cache's newest ownership changes (``RouteCache.changes``)."""
        return [c.to_json() for c in self.cache.changes.recent(limit)]

    async def health(self) -> dict[str, Any]:
        ready = self.cache.ready.is_set()
        return {
            "ok": ready and bool(self.cache.hosts),
            "hosts_live": len(self.cache.hosts),
            "hosts": sorted(self.cache.hosts),
            "routes": len(self.cache.routes),
            "revision": self.cache.revision,
        }
