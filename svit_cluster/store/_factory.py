"""How a process actor builds its commit backend: a named factory.

The factory is named by an import path string (``"module:callable"``) so that it
travels inside the pickled cluster configuration to Ray actors. The empty path
(the default) is the fenced :class:`~svit_cluster.store.RedisBackend` itself.
"""

from __future__ import annotations

import importlib
from typing import Protocol

from svit_cluster.errors import ConfigurationError
from svit_cluster.store._fenced_runner import Guard
from svit_cluster.store._log import RedisBackend
from svit_cluster.store._log_config import StoreConfig
from svit_cluster.store._redis import RedisClient

__all__ = ["BackendFactory", "load_backend_factory"]


class BackendFactory(Protocol):
    """Builds one process's commit log for one owner token (``RedisBackend``'s signature)."""

    def __call__(self, client: RedisClient, process_id: str, token: int,
                 config: StoreConfig | None = None, *,
                 guard: Guard | None = None) -> RedisBackend: ...


def load_backend_factory(path: str) -> BackendFactory:
    """The backend factory named by ``path``.

    Args:
        path: ``""`` (the fenced :class:`RedisBackend`) or ``"package.module:name"``
            naming a callable with :class:`BackendFactory`'s signature.

    Raises:
        ConfigurationError: ``path`` is malformed, its module does not import, or
            it does not name a callable.
    """
    if not path:
        return RedisBackend
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigurationError(f"backend factory must be 'module:name', got {path[:200]!r}")
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigurationError(f"cannot load backend factory {path[:200]!r}: {exc}") from exc
    if not callable(factory):
        raise ConfigurationError(f"backend factory {path[:200]!r} is not callable")
    return factory  # type: ignore[no-any-return]
