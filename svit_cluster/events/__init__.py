"""Signals of Svit processes and their observers (reference: ``events.md``).

Every process has ONE durable, ordered signal stream, so the order across
kinds is the same for every observer on every gateway and across failovers:

* ``committed`` -- appended by the commit script itself, atomically with the
  transaction (every activation, inbox append and inbox acknowledge);
* ``canonical_event`` then ``message`` -- appended by the owner's reasoning
  loop together with the event in the paged event log, fenced;
* ``completion`` -- appended in the same commit as, and right after, the
  ``committed`` signal of the inbox acknowledge that ends the turn;
* ``failed`` -- a bounded, sanitized diagnostic when a turn fails.

Public names, by importance:

* :class:`Signal`, :class:`SignalKind`, :class:`Lagged`, :class:`EventRecord`
  -- the model; :func:`project_message` derives a message from an event.
* :func:`observe` -- follow a stream from a cursor with explicit lag;
  :class:`SignalHub` -- one reader per process, fanned out to subscriptions
  (the gateway); :class:`BoundedFeed` -- a client subscription's bounded buffer.
* :class:`RedisEventLog` (owner: fenced appends), :class:`RedisSignalSource`
  (gateway: async reads), :func:`fork_events` (store-level fork of history).
* the same in one Python process: ``svit_cluster.inprocess``.
* :class:`SignalSource`, :class:`Window`, :class:`ReadResult` -- the read contract.
"""

from svit_cluster.events._hub import SignalHub
from svit_cluster.events._model import (
    DEFAULT_MAX_EVENTS,
    DEFAULT_SIGNAL_RETENTION,
    EVENT_FORMAT,
    MAX_RECENT,
    ORIGIN,
    EventRecord,
    Lagged,
    Signal,
    SignalKind,
    change_payload,
    cursor_key,
    parse_cursor,
    project_message,
    session_for,
    validate_limit,
)
from svit_cluster.events._observer import BoundedFeed, observe, resolve_cursor
from svit_cluster.events._redis import RedisEventLog, RedisSignalSource, fork_events
from svit_cluster.events._source import ReadResult, SignalSource, Window

__all__ = [
    "DEFAULT_MAX_EVENTS",
    "DEFAULT_SIGNAL_RETENTION",
    "EVENT_FORMAT",
    "MAX_RECENT",
    "ORIGIN",
    "BoundedFeed",
    "EventRecord",
    "Lagged",
    "ReadResult",
    "RedisEventLog",
    "RedisSignalSource",
    "Signal",
    "SignalHub",
    "SignalKind",
    "SignalSource",
    "Window",
    "change_payload",
    "cursor_key",
    "fork_events",
    "observe",
    "parse_cursor",
    "project_message",
    "resolve_cursor",
    "session_for",
    "validate_limit",
]
