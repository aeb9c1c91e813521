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
import logging
from typing import Any

from svit_cluster.cluster._agent import agent_name
from svit_cluster.cluster._config import ClusterConfig
from svit_cluster.cluster._routes import Route, RouteCache
from svit_cluster.control import ControlRequest, ControlResponse, decode_response
from svit_cluster.errors import (
    ConflictError,
    CorruptData,
    ErrorCode,
    FencedError,
    InvalidInput,
    LimitExceeded,
    NotFound,
    SvitError,
    UnavailableError,
)
from svit_cluster.gateway import GatewayMetrics, report_owner_token
from svit_cluster.process import Script, Value, decode_value

__all__ = ["RayRouter", "raise_error_dict"]

log = logging.getLogger(__name__)

_BY_CODE: dict[str, type[SvitError]] = {
    "not_found": NotFound,
    "conflict": ConflictError,
    "unavailable": UnavailableError,
    "fenced": FencedError,
    "corrupt_log": CorruptData,
    "resource_limit_exceeded": LimitExceeded,
}


def raise_error_dict(result: dict[str, Any]) -> dict[str, Any]:
    """Return ``result`` unless it is ``{"error": ...}``; then raise the matching error."""
    err = result.get("error")
    if err is None:
        return result
    code = str(err.get("code", "internal"))
    cls = _BY_CODE.get(code)
    if cls is None:
        cls = InvalidInput if code.startswith("invalid") else SvitError
    try:
        ecode = ErrorCode(code)
    except ValueError:
        ecode = ErrorCode.INTERNAL
    raise cls(str(err.get("message", code)), code=ecode, **err.get("fields", {}))


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
        self._placing: dict[str, asyncio.Future[Route]] = {}
        self._seen: dict[str, Route] = {}
        self._signals: Any = None

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

    async def _reconcile(self, route: Route) -> None:
        """Ask the owner's agent to release the route if its actor died (best effort)."""
        if route.host not in self.cache.hosts:
            return  # the host's lease runs out on its own
        try:
            await self._call(agent_name(route.host), "reconcile", route.process_id,
                             timeout_s=15)
        except SvitError:
            pass

    async def _call_route(self, route: Route, method: str, *args: Any) -> dict[str, Any]:
        try:
            return await self._call(route.actor, method, *args)
        except UnavailableError:
            await self._reconcile(route)
            raise

    async def _call(self, name: str, method: str, *args: Any,
                    timeout_s: float | None = None) -> dict[str, Any]:
        import ray

        handle = await self._handle(name)
        try:
            ref = getattr(handle, method).remote(*args)
            result: dict[str, Any] = await asyncio.wait_for(
                ref, timeout=timeout_s or self.cfg.call_timeout_s)
        except (TimeoutError, ray.exceptions.RayError) as exc:
            self._handles.pop(name, None)
            raise UnavailableError(
                f"{name} did not answer ({type(exc).__name__}); outcome unknown, retry "
                "with the same request id"
            ) from exc
        return result

    async def _route(self, process_id: str) -> Route:
        await self.cache.ready.wait()
        route = self.cache.routes.get(process_id)
        if route is not None:
            return route
        return await self._place(process_id, None)

    async def _place(self, process_id: str, create: dict[str, Any] | None) -> Route:
        pending = self._placing.get(process_id)
        if pending is not None and create is None:
            return await asyncio.shield(pending)
        fut: asyncio.Future[Route] = asyncio.get_running_loop().create_future()
        self._placing[process_id] = fut
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

    async def _place_once(self, process_id: str, create: dict[str, Any] | None) -> Route:
        load = self.cache.load()
        if not load:
            raise UnavailableError("no live hosts in the cluster")
        host = min(sorted(load), key=lambda h: load[h])
        result = raise_error_dict(
            await self._call(agent_name(host), "activate", process_id, create, timeout_s=90)
        )
        if result["status"] == "owned":
            if create is not None:
                raise ConflictError(f"process {process_id} already exists")
            owner_host, token = result.get("host"), result.get("token")
            actor = result.get("actor")
            if owner_host is None or token is None or actor is None:
                raise UnavailableError(f"{process_id} is owned elsewhere; retry")
            return Route(process_id, str(owner_host), int(token), str(actor))
        route = Route(process_id, host, int(result["token"]), str(result["actor"]))
        previous = self._seen.get(process_id)
        if previous is not None and previous.host not in self.cache.hosts and self.metrics:
            self.metrics.failovers.inc()
        self._seen[process_id] = route
        self.cache.routes.setdefault(process_id, route)
        return route

    # -- Router ---------------------------------------------------------------------

    async def control(self, request: ControlRequest, partition: str) -> ControlResponse:
        body = request.model_dump_json().encode()
        route = await self._route(request.process_id)
        result = await self._call_route(route, "control", body, partition)
        if "error" in result and result["error"].get("code") in ("unavailable", "fenced"):
            # The actor stopped serving (passivated, fenced, lease lost): if
            # etcd already shows no owner, place again once; else tell the
            # client to retry while the old lease runs out.
            await asyncio.sleep(0.05)
            if self.cache.routes.get(request.process_id) in (None, route):
                self.cache.routes.pop(request.process_id, None)
                route = await self._place(request.process_id, None)
                result = await self._call_route(route, "control", body, partition)
        raise_error_dict(result)
        response = decode_response(result["response"])
        report_owner_token(result.get("token"))
        if self.metrics is not None and response.outcome.status == "committed":
            self.metrics.activations.labels(str(result.get("host", route.host))).inc()
        return response

    async def create(self, process_id: str, memory: Value, scripts: dict[str, Script]
                     ) -> dict[str, Any]:
        await self.cache.ready.wait()
        if process_id in self.cache.routes:
            raise ConflictError(f"process {process_id} already exists")
        route = await self._place(process_id, {"memory": memory, "scripts": dict(scripts)})
        return {"process_id": process_id, "version": 0, "host": route.host,
                "token": route.token}

    async def inbox(self, process_id: str, message: Value, dedup_key: str | None
                    ) -> dict[str, Any]:
        route = await self._route(process_id)
        return raise_error_dict(await self._call_route(route, "inbox", message, dedup_key))

    async def state(self, process_id: str, path: str) -> tuple[Value, int]:
        route = await self._route(process_id)
        result = raise_error_dict(await self._call_route(route, "state", path))
        return decode_value(result["value"]), int(result["version"])

    async def request_status(self, process_id: str, partition: str, client_id: str,
                             request_id: str) -> dict[str, Any]:
        route = await self._route(process_id)
        result = raise_error_dict(await self._call_route(route, "request_status", partition,
                                                         client_id, request_id))
        return {k: result[k] for k in ("committed", "version", "retained_from_version")}

    async def snapshot(self, process_id: str) -> bytes:
        route = await self._route(process_id)
        result = raise_error_dict(await self._call_route(route, "snapshot"))
        data: bytes = result["snapshot"]
        return data

    async def fork(self, process_id: str, new_process_id: str) -> dict[str, Any]:
        route = await self._route(process_id)
        result = raise_error_dict(await self._call_route(route, "fork_snapshot",
                                                   new_process_id))
        child = await self._place(new_process_id, {"snapshot": result["snapshot"]})
        return {"process_id": new_process_id, "host": child.host, "token": child.token}

    def signal_source(self) -> Any:
        """Signals and history, read straight from Redis (no actor, no etcd)."""
        if self._signals is None:
            from svit_cluster.events import RedisSignalSource

            self._signals = RedisSignalSource.from_url(self.cfg.redis_url,
                                                       cluster=self.cfg.redis_cluster)
        return self._signals

    async def health(self) -> dict[str, Any]:
        ready = self.cache.ready.is_set()
        return {
            "ok": ready and bool(self.cache.hosts),
            "hosts_live": len(self.cache.hosts),
            "hosts": sorted(self.cache.hosts),
            "routes": len(self.cache.routes),
            "revision": self.cache.revision,
        }
