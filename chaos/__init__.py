"""svit_chaos: the chaos harness of svit_cluster, a library and a command.

Public names, by importance:

* :func:`run`, :class:`RunConfig`, :class:`RunOutcome` -- a whole run (cluster
  behind proxies, workload, nemesis schedule, heal, dump, check, report).
* :func:`check`, :class:`CheckResult`, :class:`Anomaly`, :data:`DEFAULT_INVARIANTS`
  -- the checker; invariants are pluggable ``Context -> Iterable[Anomaly]``.
* :class:`HistoryWriter`, :func:`read_history` -- the JSONL history.
* :class:`StoredLogs`, :func:`dump_processes`, :func:`read_logs`,
  :func:`write_logs` -- the dumped commit logs.
* :class:`NemesisSpec`, :class:`Schedule`, :func:`build_schedule`,
  :class:`NemesisRunner`, :class:`FaultTarget` -- faults.
* :class:`ProxyHub`, :class:`TcpProxy`, :class:`LinkMode` -- per-host TCP proxies;
  :class:`ProcessProxyHub` serves them from a child process (what runs use).
* :class:`Workload`, :class:`WorkloadConfig` -- the clients.
* :mod:`svit_chaos.ports` -- the port-calling workload (``--workload ports``):
  the recording test server, the ``ports`` invariant and the report's figures.
* :mod:`svit_chaos.load` and :mod:`svit_chaos.leases` -- the ``load-host``
  nemesis's load processes, and the host lease losses the observer records,
  judged against the fault windows (the ``leases`` invariant and the report's
  ``host_leases``).
* :mod:`svit_chaos.breakdown` and :mod:`svit_chaos.failed` -- each failover cut
  into steps (fault, loss detected, claim, routed, commit) and the failed
  requests sorted by cause (conflict, unavailable, timeout, ...), per fault kind
  (the report's ``failover_breakdown`` and ``failed_requests``).
* :class:`StoreObserver`, :class:`StaleWriter` -- fence watcher and stale owner.
* :class:`ManualClock`, :class:`MonotonicClock` -- injectable clocks.
* :class:`HarnessError` -- the harness failed (the run is inconclusive).

The command is ``svit-chaos`` (:mod:`svit_chaos.cli`).
"""

from .checker import DEFAULT_INVARIANTS, Anomaly, CheckResult, Context, Invariant, check
from .clock import Clock, ManualClock, MonotonicClock
from .cluster import ChaosCluster, LaunchSpec, local_launcher
from .errors import HarnessError, HistoryError
from .history import HistoryWriter, read_history, write_history
from .logs import StoredLogs, dump_processes, read_logs, write_logs
from .observer import StoreObserver
from .proxy import LinkMode, ProxyHub, TcpProxy
from .proxy_process import ProcessProxyHub
from .run import RunConfig, RunOutcome, run
from .runner import NemesisRunner
from .schedule import SCENARIOS, build_schedule, random_schedule
from .spec import NemesisSpec, Schedule, Window
from .stale import StaleWriter
from .target import FaultTarget
from .workload import SCRIPT, Workload, WorkloadConfig

__all__ = [
    "DEFAULT_INVARIANTS",
    "SCENARIOS",
    "SCRIPT",
    "Anomaly",
    "ChaosCluster",
    "CheckResult",
    "Clock",
    "Context",
    "FaultTarget",
    "HarnessError",
    "HistoryError",
    "HistoryWriter",
    "Invariant",
    "LaunchSpec",
    "LinkMode",
    "ManualClock",
    "MonotonicClock",
    "NemesisRunner",
    "NemesisSpec",
    "ProcessProxyHub",
    "ProxyHub",
    "RunConfig",
    "RunOutcome",
    "Schedule",
    "StaleWriter",
    "StoreObserver",
    "StoredLogs",
    "TcpProxy",
    "Window",
    "Workload",
    "WorkloadConfig",
    "build_schedule",
    "check",
    "dump_processes",
    "local_launcher",
    "random_schedule",
    "read_history",
    "read_logs",
    "run",
    "write_history",
    "write_logs",
]
