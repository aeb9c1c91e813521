"""Every default that two places share, written once here with its unit and range.

The settings (``SVIT_*``), ``ClusterConfig``, ``ClusterSpec``, ``StoreConfig``, the
CLI options and their docstrings name these constants instead of repeating a
value (``tests/cli/test_defaults_once.py``); the Helm chart, which cannot import
them, is compared with them (``tests/helm/test_values_defaults.py``). This
module imports only the standard library, so every layer may use it.

Modules that every process actor loads (the store) import them from here, not
from :mod:`svit_cluster.settings`, so a Ray worker serving one process does not
load pydantic-settings and dotenv for a constant (each active process is its
own Ray worker, which must stay light).
"""

from __future__ import annotations

from pathlib import Path

__all__ = [
    "DEAD_LETTER_PAGE_MAX",
    "DEFAULT_CLUSTER",
    "DEFAULT_DEAD_LETTER_PAGE",
    "DEFAULT_ETCD_ENDPOINT",
    "DEFAULT_EVICTION_CHECK_S",
    "DEFAULT_GATEWAY_PORT",
    "DEFAULT_HTTP_TIMEOUT_S",
    "DEFAULT_LEASE_TTL_S",
    "DEFAULT_LOCAL_DISPATCHERS",
    "DEFAULT_LOCAL_HOSTS",
    "DEFAULT_MAX_ACTIVE_PER_HOST",
    "DEFAULT_MAX_ACTORS_PSS_MIB",
    "DEFAULT_MAX_EVENTS",
    "DEFAULT_MAX_STARTING_PER_HOST",
    "DEFAULT_MAX_WARM_SPARES",
    "DEFAULT_PASSIVATE_AFTER_S",
    "DEFAULT_PROCESS_PAGE",
    "DEFAULT_REDIS_URL",
    "DEFAULT_REDRIVE_LIMIT",
    "DEFAULT_SIGNAL_RETENTION",
    "DEFAULT_SNAPSHOT_EVERY",
    "DEFAULT_STATE_DIR",
    "DEFAULT_TIMER_PAGE",
    "DEFAULT_WAIT_REPLICAS",
    "DEFAULT_WAIT_TIMEOUT_MS",
    "DEFAULT_WARM_SPARES",
    "LEASE_NICENESS",
    "LEASE_TTL_S_MAX",
    "LEASE_TTL_S_MIN",
    "LOCAL_CLUSTER",
    "LOCAL_DISPATCHERS_MAX",
    "LOCAL_HOSTS_MAX",
    "MAX_ACTIVE_PER_HOST_MAX",
    "MAX_STARTING_PER_HOST_MAX",
    "PROCESS_PAGE_MAX",
    "RETENTION_MAX",
    "RETENTION_MIN",
    "TIMER_PAGE_MAX",
    "WAIT_REPLICAS_MAX",
    "WAIT_TIMEOUT_MS_MAX",
]

# -- the cluster: ClusterSettings (SVIT_*), ClusterConfig, ClusterSpec, `up` options,
#    and the chart's runtime.* values (tests/helm/test_values_defaults.py) --------------

#: Cluster name a component joins when ``SVIT_CLUSTER`` is unset (etcd keys under
#: ``/svit/default/``, Ray namespace ``svit-default``); also ``ClusterConfig``'s
#: default, so a config built in code joins the same cluster as one read from an
#: empty environment. The chart always sets the variable (``clusterName``).
DEFAULT_CLUSTER = "default"
#: Cluster name of the embedded dev cluster (``svit-cluster up``, ``ClusterSpec``).
#: It differs from :data:`DEFAULT_CLUSTER` on purpose: a dev cluster records its
#: name in ``cluster.json`` and every command reads it from there, while changing
#: the environment default would move an existing deployment's etcd keys.
LOCAL_CLUSTER = "local"
#: Ray worker hosts a dev cluster starts (``up --hosts``, ``ClusterSpec.hosts``),
#: 1..:data:`LOCAL_HOSTS_MAX`.
DEFAULT_LOCAL_HOSTS = 3
#: Most hosts a dev cluster may start.
LOCAL_HOSTS_MAX = 16
#: Outbox dispatcher processes a dev cluster starts (``up --dispatchers``,
#: ``ClusterSpec.dispatchers``), 0..:data:`LOCAL_DISPATCHERS_MAX`.
DEFAULT_LOCAL_DISPATCHERS = 1
#: Most dispatcher processes a dev cluster may start.
LOCAL_DISPATCHERS_MAX = 16

#: etcd endpoint (``host:port``) when none is configured (``SVIT_ETCD_ENDPOINTS``).
DEFAULT_ETCD_ENDPOINT = "127.0.0.1:2379"
#: Commit-log Redis when none is configured (``SVIT_REDIS_URL``).
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"

#: TCP port the gateway listens on (``svit-cluster gateway --port``,
#: ``SVIT_GATEWAY_PORT`` of the container launcher, chart ``gateway.port``), and the
#: port ``svit-cluster healthcheck`` asks on 127.0.0.1 when no URL is given.
DEFAULT_GATEWAY_PORT = 8080

#: Host lease TTL in seconds (``SVIT_LEASE_TTL_S``, ``up --lease-ttl``, chart
#: ``runtime.leaseTtlS``).
DEFAULT_LEASE_TTL_S = 5
#: Smallest host lease TTL in seconds, everywhere.
LEASE_TTL_S_MIN = 1
#: Scheduling niceness of both ends of a keepalive on one machine: the host's
#: lease keeper and the etcd that ``svit_cluster.local`` starts. A lease lives
#: only while both get CPU within the local deadline, and a burst of starting
#: Ray workers runs at niceness 0. Below 0 needs ``CAP_SYS_NICE`` (root has it;
#: a Kubernetes pod needs ``securityContext.capabilities.add: [SYS_NICE]``);
#: without it each keeps the niceness it inherited.
LEASE_NICENESS = -5
#: Largest host lease TTL in seconds that ``up --lease-ttl``, ``ClusterSpec`` and
#: the chart's schema accept; ``SVIT_LEASE_TTL_S`` itself has no upper bound.
LEASE_TTL_S_MAX = 300

#: Idle seconds before a process actor passivates (``SVIT_PASSIVATE_AFTER_S``,
#: ``up --passivate-after``, chart ``runtime.passivateAfterS``); must be > 0.
DEFAULT_PASSIVATE_AFTER_S = 300.0

#: Commits between snapshots (``SVIT_SNAPSHOT_EVERY``, ``up --snapshot-every``, chart
#: ``runtime.snapshotEvery``); >= 1. Re-exported by ``settings`` and ``store``.
DEFAULT_SNAPSHOT_EVERY = 100

#: Process actors one host runs at once (``SVIT_MAX_ACTIVE_PER_HOST``,
#: ``up --max-active-per-host``); 0: derived from the host's CPUs and memory.
DEFAULT_MAX_ACTIVE_PER_HOST = 0
#: Largest residency budget accepted (0..this).
MAX_ACTIVE_PER_HOST_MAX = 100_000
#: Summed PSS in MiB of a host's process actors at which it counts as full
#: (``SVIT_MAX_ACTORS_PSS_MIB``, >= 0); 0: half its node's memory.
DEFAULT_MAX_ACTORS_PSS_MIB = 0.0
#: Ray workers a host starts at once (``SVIT_MAX_STARTING_PER_HOST``); 0: half its
#: node's CPUs, at least 1.
DEFAULT_MAX_STARTING_PER_HOST = 0
#: Largest such count accepted (0..this).
MAX_STARTING_PER_HOST_MAX = 64
#: Warm spares (started, unbound process actors) every host agent keeps.
DEFAULT_WARM_SPARES = 2
#: Most warm spares a host keeps for a peer's failover (cluster.json
#: ``max_warm_spares``): a host keeps ``ceil(busiest peer's processes / (live
#: hosts - 1))`` spares, at least ``DEFAULT_WARM_SPARES`` and at most this.
DEFAULT_MAX_WARM_SPARES = 4

# -- the commit log's Redis (StoreSettings, StoreConfig, store.connect) -------------------

#: Replicas a write script waits for (``SVIT_REDIS_WAIT_REPLICAS``; 0: no ``WAIT``),
#: the default of ``StoreSettings.redis_wait_replicas`` and ``StoreConfig.wait_replicas``.
DEFAULT_WAIT_REPLICAS = 0
#: Most replicas a write script may wait for (0..this).
WAIT_REPLICAS_MAX = 16

#: That ``WAIT``'s deadline in milliseconds (``SVIT_REDIS_WAIT_TIMEOUT_MS``), the
#: default of ``StoreSettings.redis_wait_timeout_ms`` and ``StoreConfig.wait_timeout_ms``.
DEFAULT_WAIT_TIMEOUT_MS = 1000
#: Longest ``WAIT`` deadline in milliseconds (1..this).
WAIT_TIMEOUT_MS_MAX = 60_000

#: Seconds a node's ``maxmemory-policy`` verdict stays valid before the next write
#: to it reads the policy again (``SVIT_REDIS_EVICTION_CHECK_S``), the default of
#: ``StoreSettings.redis_eviction_check_s`` and of ``store.connect``'s
#: ``eviction_check_s``.
DEFAULT_EVICTION_CHECK_S = 2.0

# -- what a process keeps in Redis besides its log ----------------------------------------

#: Smallest count :data:`DEFAULT_SIGNAL_RETENTION` and :data:`DEFAULT_MAX_EVENTS` may
#: be set to (``SVIT_SIGNAL_RETENTION``, ``SVIT_MAX_EVENTS``, ``up`` options,
#: ``ClusterSpec``, ``StoreConfig``, the chart's schema).
RETENTION_MIN = 16
#: Largest such count.
RETENTION_MAX = 10_000_000

#: Observer signals kept per process (``XADD MAXLEN ~``; ``SVIT_SIGNAL_RETENTION``,
#: ``up --signal-retention``, chart ``runtime.signalRetention``), in
#: :data:`RETENTION_MIN`..:data:`RETENTION_MAX`; re-exported by ``events``.
DEFAULT_SIGNAL_RETENTION = 10_000

#: Canonical reasoning events kept per session of a process (``XADD MAXLEN ~``;
#: ``SVIT_MAX_EVENTS``, ``up --max-events``, chart ``runtime.maxEvents``), in
#: :data:`RETENTION_MIN`..:data:`RETENTION_MAX`; re-exported by ``events``.
DEFAULT_MAX_EVENTS = 100_000

# -- dead letters (DeadLetters, /v1/admin/dead-letters, ``svit-cluster dead-letters``) ----

#: Dead letters one listing returns by default (``DeadLetters.list``, ``GET
#: /v1/admin/dead-letters?limit=``, ``dead-letters list --limit``).
DEFAULT_DEAD_LETTER_PAGE = 100
#: Dead letters a re-drive without ids moves by default, oldest first
#: (``DeadLetters.redrive``, the redrive body's ``limit``, ``dead-letters redrive --limit``).
DEFAULT_REDRIVE_LIMIT = 1000
#: Most dead letters one listing, one re-drive or one list of ids may name (1..this).
DEAD_LETTER_PAGE_MAX = 10_000

# -- clients (SvitClient, the CLI) --------------------------------------------------------

#: Seconds one HTTP call to a gateway may take (``SvitClient(timeout_s=)``,
#: ``AsyncSvitClient``, the CLI's ``--timeout``).
DEFAULT_HTTP_TIMEOUT_S = 10.0
#: The local cluster's folder, relative to the current directory: ``svit-cluster
#: up`` writes ``cluster.json`` there, and clients look for it there
#: (``--state-dir``, ``settings.DEFAULT_CLUSTER_JSON``).
DEFAULT_STATE_DIR = Path(".svit")

# -- pages of the HTTP API (gateway routes, SvitClient, CLI ``--limit``) -----------------

#: Processes one page of ``GET /v1/processes`` asks for by default
#: (``SvitClient.list_processes``, ``svit-cluster list --limit``).
DEFAULT_PROCESS_PAGE = 100
#: Largest such ``limit`` (1..this).
PROCESS_PAGE_MAX = 1000
#: Parked timers one page of ``GET /v1/processes/timers`` asks for by default
#: (``SvitClient.timers``, ``svit-cluster timers list --limit``).
DEFAULT_TIMER_PAGE = 100
#: Largest such ``limit`` (1..this).
TIMER_PAGE_MAX = 1000
