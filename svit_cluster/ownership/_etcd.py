"""The etcd boundary: client construction and explicit error conversion (aetcd/gRPC).

Every aetcd, gRPC, timeout or socket error raised inside :func:`etcd_boundary`
becomes an :class:`~svit_cluster.errors.UnavailableError` that keeps the
original as ``__cause__``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, TypeVar

import aetcd
from aetcd import rpc as _rpc

from svit_cluster.errors import SvitError, UnavailableError
from svit_cluster.ownership._failover import FailoverClient, parse_endpoints

__all__ = ["DEFAULT_REQUEST_TIMEOUT_S", "etcd_call", "open_client"]

#: Default deadline of one etcd request, in seconds.
DEFAULT_REQUEST_TIMEOUT_S = 2.0

T = TypeVar("T")

# Reconnect quickly after etcd restarts (gRPC's default backoff grows to 120 s):
# the first retry after 100 ms, never more than 1 s apart.
#
# ``grpc.min_reconnect_backoff_ms`` is NOT a backoff: gRPC core uses it as the
# minimum deadline of one connection attempt (TCP connect + HTTP/2 SETTINGS
# exchange; gRPC's default is 20 s). Set as low as the backoff (100 ms), an
# attempt whose handshake takes longer fails with "connection attempt timed out
# before receiving SETTINGS frame", and calls on the channel fail at once until
# an attempt gets through: under a burst of activations on a loaded host, every
# new lease's keepalive client would fail to connect before the lease's local
# deadline, and hosts would lose one lease after another. 5 s lets a slow
# handshake finish (longer than any lease deadline it could save); a refused
# connection (etcd restarting) still fails at once and is retried after the
# short backoff above.
_CONNECT_TIMEOUT_MS = 5000
_CHANNEL = {
    "grpc.initial_reconnect_backoff_ms": 100,
    "grpc.min_reconnect_backoff_ms": _CONNECT_TIMEOUT_MS,
    "grpc.max_reconnect_backoff_ms": 1000,
}

_CONVERTED = (aetcd.ClientError, _rpc.RpcError, TimeoutError, OSError)


def open_client(
    endpoint: str, *, request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S
) -> Any:
    """An ``aetcd.Client`` for one or more etcd members (connects lazily, on first use).

    Args:
        endpoint: ``"127.0.0.1:2379"``, or a comma-separated list of members
            (``SVIT_ETCD_ENDPOINTS``: ``"etcd-0:2379,etcd-1:2379,etcd-2:2379"``).
            With several, the client is a
            :class:`~svit_cluster.ownership._failover.FailoverClient` that moves
            to the next member when the one in use stops answering.
        request_timeout_s: gRPC deadline of every request (default 2 s).

    Raises:
        ValueError: an entry is not ``host:port``, the list is empty, or the
            timeout is not positive.
    """
    endpoints = parse_endpoints(endpoint)
    if request_timeout_s <= 0:
        raise ValueError("request_timeout_s must be positive")
    if len(endpoints) == 1:
        host, port = endpoints[0]
        return aetcd.Client(host=host, port=port, timeout=request_timeout_s, options=_CHANNEL)
    return FailoverClient(endpoints, request_timeout_s=request_timeout_s, options=_CHANNEL)


async def etcd_call(op: str, awaitable: Awaitable[T], *, timeout_s: float,
                    outcome: str = "none", **fields: Any) -> T:
    """Await one etcd operation with a deadline, converting its failures.

    Args:
        op: operation name for the error's ``fields["op"]``.
        awaitable: the aetcd coroutine.
        timeout_s: local deadline in seconds (guards against a hung channel).
        outcome: ``"none"`` or ``"unknown"`` (a write may have been applied).
        fields: extra structured fields for the error (``process_id`` ...).

    Raises:
        UnavailableError: (``unavailable``) etcd is down, slow or refused.
    """
    try:
        return await asyncio.wait_for(awaitable, timeout_s)
    except SvitError:
        raise
    except _CONVERTED as exc:
        raise UnavailableError(
            f"etcd {op} failed: {type(exc).__name__}: {exc}",
            op=op,
            outcome=outcome,
            **fields,
        ) from exc
