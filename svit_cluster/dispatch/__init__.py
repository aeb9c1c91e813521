"""The outbox dispatcher: committed intents -> sinks, at least once.

Each commit appends its outbox intents to ``<prefix>:{P}:outbox`` in the same
Lua script as the commit. Dispatcher workers (OS processes; run more to scale
out) read those streams through one Redis consumer group, deliver each intent
to the sink its address names, and ``XACK`` only after the sink confirmed.

Public names, by importance:

* :class:`DispatchWorker`, :func:`run_worker` -- a worker; :class:`DispatchConfig`.
* :func:`delivery_status` -> :class:`IntentStatus` / :class:`DeliveryState`;
  :func:`outbox_summary` -> :class:`OutboxSummary` (counts that survive trimming);
  :func:`status_and_summary` -- both from one pass (``dispatcher status``);
  :func:`destination_records` -> :class:`DestinationRecord` -- read-only checks
  for tests and the chaos checker.
* :class:`DeadLetters`, :class:`DeadLetter`, :class:`RedriveResult` -- list and
  re-drive what could not be delivered.
* Durable timers: :func:`list_timers` -> :class:`TimerPage` of :class:`Timer`;
  :func:`cancel_timer` -> :class:`CancelOutcome`; :func:`timer_log`.
* Sinks: :class:`SinkRegistry`, :class:`Sink`, :class:`SvitInboxSink`,
  :class:`WebhookSink`, :class:`RedisStreamSink`; errors
  :class:`RetryableDeliveryError`, :class:`PermanentDeliveryError`.
* :class:`DispatchMetrics`, :class:`DispatchKeys`, :class:`Intent`;
  :func:`trim_acked` (what workers run after each acknowledged batch).
* Bounded reads for observers: :func:`worker_health` -> :class:`WorkerHealth`
  (the workers' heartbeats); :func:`undelivered` -> :class:`OutboxPage` of
  :class:`UndeliveredIntent` (one sender's unacknowledged intents).

Guarantees (details in ``README.md`` in this package):

* **At least once.** An entry leaves the pending list only after its sink
  confirmed or its dead letter was written. A killed worker's pending entries
  are reclaimed (``XAUTOCLAIM``) after ``claim_idle_s``. Redeliveries carry the
  same intent id; the ``svit`` sink stores one copy.
* **Order.** Per sender stream and destination, intents are first delivered in
  commit order (one worker per stream at a time, by claim). Nothing is ordered
  across senders or across destinations; a re-driven dead letter arrives after
  its successors.
* **Bounded.** Each source stream is trimmed below what every consumer group
  acknowledged (``DispatchConfig.trim_acked``), so it holds the unacknowledged
  entries plus one. The dead-letter stream keeps at most
  ``dead_letter_max_count`` letters, none older than ``dead_letter_max_age_s``.
"""

from svit_cluster.dispatch._config import DispatchConfig, read_cluster_json
from svit_cluster.dispatch._deadletter import DeadLetter, DeadLetters, RedriveResult
from svit_cluster.dispatch._errors import PermanentDeliveryError, RetryableDeliveryError
from svit_cluster.dispatch._intent import Intent
from svit_cluster.dispatch._keys import DEFAULT_GROUP, DispatchKeys
from svit_cluster.dispatch._metrics import DispatchMetrics
from svit_cluster.dispatch._observe import (
    OutboxPage,
    UndeliveredIntent,
    WorkerHealth,
    undelivered,
    worker_health,
)
from svit_cluster.dispatch._sinks import (
    RedisStreamSink,
    Sink,
    SinkRegistry,
    SvitInboxSink,
    WebhookSink,
)
from svit_cluster.dispatch._status import (
    DeliveryState,
    DestinationRecord,
    IntentStatus,
    OutboxSummary,
    delivery_status,
    destination_records,
    outbox_summary,
    status_and_summary,
)
from svit_cluster.dispatch._timers import (
    CancelOutcome,
    Timer,
    TimerPage,
    cancel_timer,
    list_timers,
    timer_log,
)
from svit_cluster.dispatch._trim import trim_acked
from svit_cluster.dispatch._worker import DispatchWorker, default_sinks, run_worker

__all__ = [
    "DEFAULT_GROUP",
    "CancelOutcome",
    "DeadLetter",
    "DeadLetters",
    "DeliveryState",
    "DestinationRecord",
    "DispatchConfig",
    "DispatchKeys",
    "DispatchMetrics",
    "DispatchWorker",
    "Intent",
    "IntentStatus",
    "OutboxPage",
    "OutboxSummary",
    "PermanentDeliveryError",
    "RedisStreamSink",
    "RedriveResult",
    "RetryableDeliveryError",
    "Sink",
    "SinkRegistry",
    "SvitInboxSink",
    "Timer",
    "TimerPage",
    "UndeliveredIntent",
    "WebhookSink",
    "WorkerHealth",
    "cancel_timer",
    "default_sinks",
    "delivery_status",
    "destination_records",
    "list_timers",
    "outbox_summary",
    "read_cluster_json",
    "run_worker",
    "status_and_summary",
    "timer_log",
    "trim_acked",
    "undelivered",
    "worker_health",
]
