"""A write-script lane: one owner's scripts on one Redis connection of its own.

A pooled call (``client.evalsha``) takes a connection from the pool, checks it,
records the pool's metrics, encodes every argument in Python, sends, parses
and gives the connection back: on a commit of about 20 arguments that is most
of the call's CPU. A :class:`ScriptLane` keeps one connection for one owner
(one process actor serves one process at a time) and sends ``EVALSHA`` packed
by hiredis (``hiredis.pack_command``; redis-py's own packer without it).

What stays as on the pooled path:

* the connection comes from the client's pool (``make_connection``): same
  address, timeouts, no retries, and the ``maxmemory-policy`` check of every
  new connection (:func:`~svit_cluster.store._redis.connect`);
* before each script the connection is checked for unread data or a close by
  the server (as the pool checks a connection it hands out), and opened anew
  if so: a Redis restart does not fail the next commit;
* ``NOSCRIPT`` (a restarted or new server) loads the script and sends it once
  more; any other error reply leaves the connection in step and is raised;
* a connection or timeout error drops the connection (the next script opens
  a new one) and is raised: the outcome of that script is unknown, and the
  caller's :func:`~svit_cluster.store._redis.redis_boundary` says so.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import redis
from redis.commands.core import Script
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError

_pack: Callable[[tuple[Any, ...]], bytes] | None
try:  # redis-py's optional C parser and packer (a dependency of this project)
    from hiredis import pack_command as _pack
except ImportError:  # pragma: no cover - a platform without hiredis wheels
    _pack = None

__all__ = ["ScriptLane"]


class ScriptLane:
    """``EVALSHA`` on one connection of ``client``'s pool, one script at a time.

    Args:
        client: a non-cluster client from :func:`~svit_cluster.store._redis.connect`.

    The connection opens on first use and stays open until :meth:`close`
    (or until this object is collected); a connection lost in between is
    opened again by the next script.
    """

    def __init__(self, client: redis.Redis) -> None:
        self._pool = client.connection_pool
        self._lock = threading.Lock()
        self._conn: Any = None
        self._closed = False

    def run(self, script: Script, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """Run registered ``script`` with ``keys`` and ``args``; its reply.

        Raises:
            redis.exceptions.RedisError: an error reply, or the connection
                failed (convert with :func:`~svit_cluster.store._redis.redis_boundary`).
        """
        command = ("EVALSHA", script.sha, len(keys), *keys, *args)
        with self._lock:
            if self._closed:
                raise RedisConnectionError("the owner's Redis connection was closed "
                                           "(its binding ended); nothing was sent")
            conn = self._conn
            if conn is None:
                conn = self._conn = self._pool.make_connection()
            if conn.is_connected and self._stale(conn):
                conn.disconnect()  # unread data or closed by the server: open anew
            try:
                try:
                    return self._send(conn, command)
                except NoScriptError:
                    conn.send_command("SCRIPT", "LOAD", script.script)
                    conn.read_response()
                    return self._send(conn, command)
            except ResponseError:
                raise  # an error reply: the connection is still in step
            except BaseException:
                conn.disconnect()
                raise
            finally:
                if self._closed:  # closed while this script ran: it was the last
                    conn.disconnect()
                    self._conn = None

    @staticmethod
    def _stale(conn: Any) -> bool:
        try:
            return bool(conn.can_read())
        except (RedisConnectionError, OSError):  # closed by the server
            return True

    @staticmethod
    def _send(conn: Any, command: tuple[Any, ...]) -> Any:
        packed = None
        if _pack is not None:
            try:
                packed = _pack(command)
            except TypeError:  # an argument hiredis does not pack (redis-py encodes it)
                packed = None
        conn.send_packed_command([packed] if packed is not None
                                 else conn.pack_command(*command), check_health=False)
        return conn.read_response()

    def close(self) -> None:
        """Close the connection for good, without waiting (idempotent): a script
        running now finishes and then closes it; a later :meth:`run` raises
        ``ConnectionError`` before sending anything. (The actor calls this on
        its event loop when a binding ends.)"""
        self._closed = True
        if not self._lock.acquire(blocking=False):
            return  # a script runs: its end closes the connection
        try:
            conn, self._conn = self._conn, None
        finally:
            self._lock.release()
        if conn is not None:
            conn.disconnect()
