"""An etcd client that fails over between the members of a cluster.

``aetcd.Client`` talks to one ``host:port``. A Kubernetes install lists every
member (``SVIT_ETCD_ENDPOINTS=etcd-0:2379,etcd-1:2379,etcd-2:2379``): when the
member in use stops answering (drained, restarted, partitioned), the client must
move to another one, or every host lease held through it expires at once.

:class:`FailoverClient` is an ``aetcd.Client`` whose requests, when they fail
with a connection error (gRPC UNAVAILABLE, DEADLINE_EXCEEDED, a socket error)
or are cancelled after running (almost) as long as the request deadline, move the client to
the next endpoint in the list (round robin): the old gRPC channel and its
watches are closed, and the next request connects to the new member.

A request in flight on the old channel when another request moves the client
is cancelled by gRPC (which raises ``asyncio.CancelledError`` although no one
cancelled the caller); it fails with ``aetcd.ConnectionFailedError`` instead,
so that callers' error handling (and not their cancellation path) sees it.

The failed request itself is NOT retried here: a write may have been applied
(outcome unknown) and only the caller knows whether it is safe to repeat. Every
caller already treats an etcd error as "unavailable, try again" (lease
keepalives, the rejoin loop, the route-cache and ownership watches), so the
retry lands on the next member. Concurrent failures of one endpoint move the
client once (a generation counter), not once per failed request.

Any member serves every request: etcd forwards writes to the leader and lease
keepalives are cluster-wide, so the order of endpoints only chooses whom to
ask first.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import aetcd
from aetcd import rpc as _rpc

from svit_cluster.settings import parse_endpoints

__all__ = ["FailoverClient", "member_answers", "parse_endpoints"]

log = logging.getLogger(__name__)

#: Errors that say "this member does not answer" (not "the request was wrong").
_FAILOVER_ERRORS = (
    aetcd.ConnectionFailedError,
    aetcd.ConnectionTimeoutError,
    OSError,
)

#: A request cancelled after this fraction of its deadline counts as unanswered
#: (callers' own deadlines usually equal the request deadline and may fire first).
_HUNG_FRACTION = 0.9

#: aetcd.Client coroutine methods that send a request.
_REQUEST_METHODS = (
    "get", "get_prefix", "get_range", "get_all", "put", "delete", "delete_prefix",
    "delete_range", "replace", "transaction", "lease", "revoke_lease", "refresh_lease",
    "get_lease_info", "status", "members", "watch", "watch_prefix", "watch_once",
    "watch_prefix_once",
)


def _failing_over(name: str, method: Callable[..., Any] | None = None) -> Callable[..., Any]:
    method = method if method is not None else getattr(aetcd.Client, name)

    @functools.wraps(method)
    async def call(self: FailoverClient, *args: Any, **kwargs: Any) -> Any:
        generation = self._generation
        started = time.monotonic()
        try:
            return await method(self, *args, **kwargs)
        except _FAILOVER_ERRORS as exc:
            self._fail_over(generation, f"{name}: {type(exc).__name__}: {exc}")
            raise
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling() == 0 and generation != self._generation:
                # Nobody cancelled this task: gRPC cancelled the call because a
                # failover (of a concurrent request) closed its channel. That is
                # a failed request, not a cancellation: a CancelledError that
                # escaped would silently end the lease keepalive loop.
                raise aetcd.ConnectionFailedError(
                    f"{name}: the channel to the failed member was closed by a failover"
                ) from None
            # A caller's own deadline (asyncio.wait_for) fired while the member
            # did not answer within the request deadline: a hung member.
            if time.monotonic() - started >= _HUNG_FRACTION * self.request_timeout_s:
                self._fail_over(generation, f"{name}: no answer in {self.request_timeout_s}s")
            raise

    return call


async def _refresh_lease(self: FailoverClient, lease_id: int, *,
                         timeout_s: float | None = None) -> Any:
    """One LeaseKeepAlive request and its reply, under a gRPC deadline of
    ``timeout_s`` seconds (default: the client's request deadline).

    ``aetcd.Client.refresh_lease`` always uses the client-wide deadline; a lease
    keepalive needs a shorter one while it hunts for a member that answers
    (a member of a cluster without a leader holds a keepalive until it learns
    the new leader, in steps of one election timeout). The deadline, not a
    local cancellation, ends the call, so a member that does not answer in time
    is failed over like any other (``aetcd.ConnectionTimeoutError``).

    Returns:
        The ``LeaseKeepAliveResponse`` (its ``TTL`` is 0 when etcd no longer
        knows the lease), or None if the stream closed without a reply.

    Raises:
        aetcd.ConnectionTimeoutError: no reply within the deadline.
        aetcd.ConnectionFailedError: the member is unreachable or refused
            (gRPC ``UNAVAILABLE``).
        aetcd.ClientError: any other gRPC error.
    """
    await self.connect()
    try:
        async for reply in self.leasestub.LeaseKeepAlive(
            [_rpc.LeaseKeepAliveRequest(ID=lease_id)],
            timeout=self.request_timeout_s if timeout_s is None else timeout_s,
            metadata=self.metadata,
        ):
            return reply
    except _rpc.AioRpcError as exc:
        code = exc.code()
        if code == _rpc.StatusCode.DEADLINE_EXCEEDED:
            raise aetcd.ConnectionTimeoutError(exc.details()) from exc
        if code == _rpc.StatusCode.UNAVAILABLE:
            raise aetcd.ConnectionFailedError(exc.details()) from exc
        raise aetcd.ClientError(f"{code.name}: {exc.details()}") from exc
    return None


class FailoverClient(aetcd.Client):  # type: ignore[misc]
    """An ``aetcd.Client`` over several etcd members (see the module docstring).

    Args:
        endpoints: ``(host, port)`` pairs, tried in this order (at least one).
        request_timeout_s: gRPC deadline of every request, in seconds.
        options: gRPC channel options.

    Attributes:
        endpoints: the members, as given.
        failovers: how many times the client moved to another member.
    """

    def __init__(self, endpoints: Sequence[tuple[str, int]], *, request_timeout_s: float,
                 options: dict[str, Any] | None = None) -> None:
        if not endpoints:
            raise ValueError("FailoverClient needs at least one endpoint")
        host, port = endpoints[0]
        super().__init__(host=host, port=port, timeout=request_timeout_s, options=options)
        self.endpoints = tuple(endpoints)
        self.request_timeout_s = request_timeout_s
        self.failovers = 0
        self._index = 0
        self._generation = 0
        self._closing: set[asyncio.Task[None]] = set()

    @property
    def endpoint(self) -> str:
        """The member in use, ``host:port``."""
        host, port = self.endpoints[self._index]
        return f"{host}:{port}"

    def _fail_over(self, generation: int, reason: str) -> None:
        """Move to the next member, unless a newer failover already did (or there is one)."""
        if len(self.endpoints) < 2 or generation != self._generation:
            return
        old = self.endpoint
        self._generation += 1
        self._index = (self._index + 1) % len(self.endpoints)
        self._host, self._port = self.endpoints[self._index]
        self.failovers += 1
        # Detach the old channel now (synchronously, so the next request
        # connects to the new member) and close it in the background.
        channel, watcher = self.channel, self._watcher
        self._init_channel_attrs()
        self._connected.clear()
        log.warning("etcd %s failed (%s); failing over to %s", old, reason, self.endpoint)
        if channel is not None:
            task = asyncio.get_running_loop().create_task(self._close_old(channel, watcher))
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    @staticmethod
    async def _close_old(channel: Any, watcher: Any) -> None:
        try:
            if watcher is not None:
                await watcher.shutdown()
        except Exception:
            log.debug("closing the old etcd watcher failed", exc_info=True)
        try:
            await channel.close()
        except Exception:
            log.debug("closing the old etcd channel failed", exc_info=True)

    async def close(self) -> None:
        """Close the channel in use and any old one still closing."""
        await super().close()
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)


for _name in _REQUEST_METHODS:
    setattr(FailoverClient, _name, _failing_over(_name))
del _name
# refresh_lease(lease_id, *, timeout_s=None): a per-call deadline (see _refresh_lease)
FailoverClient.refresh_lease = _failing_over("refresh_lease", _refresh_lease)


async def member_answers(client: Any, *, timeout_s: float) -> bool:
    """Does an etcd member answer a status request within ``timeout_s`` seconds?

    A member answers status from its own state, with or without a leader, so
    True means etcd is reachable (not that it has a leader). A
    :class:`FailoverClient` tries its members in turn, each failure moving it
    to the next (a hung member is left after its share of the time); a plain
    ``aetcd.Client`` asks its one member. Never raises (any failure counts as
    no answer), except a cancellation of the caller.
    """
    deadline = time.monotonic() + timeout_s
    tries = len(client.endpoints) if isinstance(client, FailoverClient) else 1
    for n in range(tries):
        left = deadline - time.monotonic()
        if left <= 0.01:
            return False
        generation = getattr(client, "_generation", 0)
        try:
            await asyncio.wait_for(client.connect(), left)
            await client.maintenancestub.Status(
                _rpc.StatusRequest(), timeout=max(0.01, left / (tries - n)),
                metadata=client.metadata)
            return True
        except Exception as exc:  # any failure is "no answer" (the caller's rule is safe)
            if isinstance(client, FailoverClient):
                client._fail_over(generation, f"status: {type(exc).__name__}")
    return False
