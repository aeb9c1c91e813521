"""Test-only helpers for the fenced commit log. Never import this in production code.

The one switch here exists for the chaos harness's *negative control*: a run
with fencing switched off must be able to fail, which proves that the checks
would notice a stale owner committing. It is reachable only by calling it from
Python; no configuration, environment variable or command line enables it.
"""

from __future__ import annotations

from svit_cluster.store._fenced_runner import Guard
from svit_cluster.store._log import RedisBackend
from svit_cluster.store._log_config import StoreConfig
from svit_cluster.store._redis import RedisClient
from svit_cluster.store._scripts import commit_source

__all__ = [
    "UNFENCED_BACKEND_FACTORY",
    "disable_fencing_for_negative_control",
    "unfenced_backend",
]

#: The import path of :func:`unfenced_backend`, for ``ClusterConfig.backend_factory``
#: (the dev cluster passes it for ``LocalCluster.up(unsafe_disable_fencing=True)``).
UNFENCED_BACKEND_FACTORY = f"{__name__}:unfenced_backend"


def disable_fencing_for_negative_control(backend: RedisBackend) -> None:
    """Make ``backend`` commit WITHOUT the fence check (negative control only).

    After this call, :meth:`RedisBackend.commit` on this one backend object
    still checks the version and chain head but no longer compares its token
    with the stored fence, so a stale owner can commit. Other backends, and
    the scripts stored in Redis under the fenced script's SHA, are unaffected.
    """
    backend._scripts.commit = backend._client.register_script(commit_source(fenced=False))


def unfenced_backend(client: RedisClient, process_id: str, token: int,
                     config: StoreConfig | None = None, *,
                     guard: Guard | None = None) -> RedisBackend:
    """A :class:`RedisBackend` that commits WITHOUT the fence check (negative control).

    A :class:`~svit_cluster.store.BackendFactory`: same arguments as
    :class:`RedisBackend`, then :func:`disable_fencing_for_negative_control`.
    """
    backend = RedisBackend(client, process_id, token, config, guard=guard)
    disable_fencing_for_negative_control(backend)
    return backend
