"""The store observer: watches every workload process in Redis while the run goes on.

It talks to Redis directly (never through a host's proxy) from its own thread,
and every ``interval_s`` reads, per process, in one ``MULTI``/``EXEC``:

* the fence and the head version -- when the fence changes it records a
  ``fence`` event ``{process, fence, head}`` in the history. At that instant
  the fence was ``fence`` and the head ``head``, so **every entry above
  ``head`` must carry a token >= ``fence``**; the checker holds stale commits
  against these observations (invariant ``tokens``: no commit under a token
  below one that claimed);
* the stream entries after the last one it copied, and the snapshot version.
  It copies new entries and new snapshots into :class:`~svit_chaos.logs.StoredLogs`
  (``source="collected"``), so versions that a later snapshot trims from the
  stream can still be verified. In the same transaction it sets the process's
  tail-reader hold (``ProcessKeys.hold``) to the last version it copied, so the
  snapshot trim never removes an entry it has not copied, however far it lags
  (a busy machine, a Redis failover): whether the checker can verify every
  version does not depend on timing. The first poll runs in :meth:`start`,
  before the workload commits. A jump in the stream (entries trimmed before
  they were copied: a hold lost with a Redis node) is recorded as a ``note``.

With an etcd endpoint and a cluster name it also reads the ownership records
``/svit/<cluster>/owners/<process>`` (through etcd's JSON gateway, every few
polls) and records an ``owner`` event ``{process, host, token}`` whenever a
record appears, changes or disappears (``host: null``). The report uses them
to attribute failovers to the faulted host. In the same rounds it reads the
host registrations ``/svit/<cluster>/hosts/<host>`` and records a
``host_lease`` event ``{host, lease, incarnation, previous, since}`` whenever a
host's registration appears, moves to another etcd lease or disappears: an
agent registers its host under its lease, so a new lease id means the old
lease was lost (expired, revoked, or its holder restarted). ``since`` is when
the last read that still saw the old lease was sent, so the loss happened in
``(since, t]`` (:mod:`svit_chaos.leases` judges them).

Redis or etcd being down (a nemesis) only makes a poll fail; the observer
retries on the next tick.
"""

from __future__ import annotations

import base64
import contextlib
import json
import threading
import urllib.request
from collections.abc import Sequence
from typing import Any

import redis

from svit_cluster.ownership import hosts_prefix, owners_prefix, record_token
from svit_cluster.store import DEFAULT_PREFIX, ProcessKeys

from .history import HistoryWriter
from .logs import StoredLogs, parse_snapshot_hash, parse_stream_entry

__all__ = ["StoreObserver", "etcd_host_records", "etcd_hosts", "etcd_owners"]


def etcd_owners(
    endpoint: str, cluster: str, *, timeout_s: float = 1.0
) -> dict[str, tuple[str, int]]:
    """``{process: (host, token)}`` of every ownership record, via etcd's JSON gateway
    (the token is the record's fencing token: its epoch and create revision).

    ``endpoint`` may list several members (``"h:p0,h:p1,h:p2"``): each is asked
    in turn until one answers (a linearizable read: only a member that reaches
    the leader answers).

    Raises:
        OSError: no member answered, or each answered with an error.
        ValueError: the answer is not the expected JSON.
    """
    prefix = owners_prefix(cluster)
    out: dict[str, tuple[str, int]] = {}
    for kv in _etcd_range(endpoint, prefix, timeout_s=timeout_s):
        key = base64.b64decode(kv["key"])[len(prefix):].decode()
        value = base64.b64decode(kv.get("value", ""))
        try:
            host = str(json.loads(value)["host"])
        except (ValueError, KeyError, TypeError):
            host = "?"
        out[key] = (host, record_token(value, int(kv["create_revision"])))
    return out


def etcd_hosts(
    endpoint: str, cluster: str, *, timeout_s: float = 1.0
) -> dict[str, tuple[int, int | None]]:
    """``{host: (lease id, incarnation)}`` of every host registration, via etcd's JSON
    gateway (lease 0: the key has no lease; incarnation None: not in the value).

    Raises:
        OSError, ValueError: as :func:`etcd_owners`.
    """
    prefix = hosts_prefix(cluster)
    out: dict[str, tuple[int, int | None]] = {}
    for kv in _etcd_range(endpoint, prefix, timeout_s=timeout_s):
        host = base64.b64decode(kv["key"])[len(prefix):].decode()
        incarnation: int | None = None
        with contextlib.suppress(ValueError, KeyError, TypeError):
            incarnation = int(json.loads(base64.b64decode(kv.get("value", "")))["incarnation"])
        out[host] = (int(kv.get("lease", 0)), incarnation)
    return out


def etcd_host_records(endpoint: str, cluster: str, *, timeout_s: float = 1.0
                      ) -> dict[str, dict[str, Any]]:
    """``{host: record}`` of every host registration (the agent's JSON: ``warm``,
    ``spares``, ``ready`` ...; a value that does not parse is ``{}``).

    Raises:
        OSError, ValueError: as :func:`etcd_owners`.
    """
    prefix = hosts_prefix(cluster)
    out: dict[str, dict[str, Any]] = {}
    for kv in _etcd_range(endpoint, prefix, timeout_s=timeout_s):
        host = base64.b64decode(kv["key"])[len(prefix):].decode()
        try:
            doc = json.loads(base64.b64decode(kv.get("value", "")))
        except ValueError:
            doc = {}
        out[host] = doc if isinstance(doc, dict) else {}
    return out


def _etcd_range(endpoint: str, prefix: bytes, *, timeout_s: float) -> list[dict[str, Any]]:
    """The key-values under ``prefix``, from the first of ``endpoint``'s members
    that answers (see :func:`etcd_owners`)."""
    members = [e.strip() for e in endpoint.split(",") if e.strip()]
    last: OSError | None = None
    for member in members:
        try:
            return _etcd_range_of(member, prefix, timeout_s=timeout_s)
        except OSError as exc:
            last = exc
    raise last if last is not None else OSError(f"no etcd endpoint in {endpoint!r}")


def _etcd_range_of(endpoint: str, prefix: bytes, *, timeout_s: float
                   ) -> list[dict[str, Any]]:
    end = prefix[:-1] + bytes([prefix[-1] + 1])
    body = json.dumps({"key": base64.b64encode(prefix).decode(),
                       "range_end": base64.b64encode(end).decode()}).encode()
    req = urllib.request.Request(f"http://{endpoint}/v3/kv/range", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout_s) as resp:
        doc = json.load(resp)
    kvs = doc.get("kvs", []) if isinstance(doc, dict) else None
    if not isinstance(kvs, list):
        raise ValueError(f"etcd answered {str(doc)[:200]!r} to a range read")
    return kvs


class StoreObserver:
    """Polls fences, heads, streams and snapshots of ``processes``.

    Args:
        client: a redis-py client connected straight to Redis (no proxy); a
            short socket timeout (about 1 s) keeps polls from hanging.
        processes: the process ids to watch.
        history: where ``fence`` and ``note`` events go.
        prefix: the store's key prefix (default ``"svit"``).
        interval_s: poll period in seconds (default 0.05).
        etcd_endpoint, cluster: where to read ownership records (both or
            neither; default: do not read them).
        owners_every: read ownership records and host registrations every this
            many polls (default 4).
    """

    def __init__(
        self,
        client: redis.Redis,
        processes: Sequence[str],
        history: HistoryWriter,
        *,
        prefix: str = DEFAULT_PREFIX,
        interval_s: float = 0.05,
        etcd_endpoint: str | None = None,
        cluster: str | None = None,
        owners_every: int = 4,
    ) -> None:
        if interval_s <= 0:
            raise ValueError("interval_s must be positive")
        self.client = client
        self.processes = list(processes)
        self.history = history
        self.prefix = prefix
        self.interval_s = interval_s
        self.collected = StoredLogs()
        self.polls = 0
        self.errors = 0
        self._fence: dict[str, int] = {}
        self._last: dict[str, int] = {}
        self._snap: dict[str, int] = {}
        self._owners: dict[str, tuple[str, int] | None] = {}
        #: host -> (lease id, incarnation) or None (gone) as last read
        self._hosts: dict[str, tuple[int, int | None] | None] = {}
        #: history ``t`` when the last successful host read was sent
        self._hosts_read_at: float | None = None
        #: history ``t`` when the last successful poll of each process was sent
        self._polled_at: dict[str, float] = {}
        #: history ``t`` when the last successful ownership read was sent
        self._owners_read_at: float | None = None
        self.etcd_endpoint = etcd_endpoint
        self.cluster = cluster
        self.owners_every = max(1, owners_every)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def start(self) -> StoreObserver:
        """Poll once (setting every process's hold), then start the polling
        thread (idempotent)."""
        if self._thread is None:
            self.poll_once()
            self._thread = threading.Thread(target=self._loop, name="svit-chaos-observer",
                                            daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop polling and join the thread (idempotent)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    def poll_once(self) -> bool:
        """One poll over every process. Returns False if Redis failed for any."""
        if self.etcd_endpoint and self.cluster and self.polls % self.owners_every == 0:
            self.poll_owners()
            self.poll_hosts()
        ok = True
        for process in self.processes:  # one process's dead slot does not blind the rest
            try:
                self._poll(process)
            except redis.RedisError:
                ok = False
        self.polls += 1
        if not ok:
            self.errors += 1
        return ok

    def poll_owners(self) -> bool:
        """Read the ownership records once; records ``owner`` events on changes."""
        assert self.etcd_endpoint and self.cluster
        asked = self.history.elapsed()
        try:
            owners = etcd_owners(self.etcd_endpoint, self.cluster)
        except (OSError, ValueError):
            return False
        for process in self.processes:
            now = owners.get(process)
            if now != self._owners.get(process):
                self._owners[process] = now
                self.history.record("owner", process=process,
                                    host=now[0] if now else None,
                                    token=now[1] if now else None,
                                    since=self._owners_read_at)
        self._owners_read_at = asked
        return True

    def poll_hosts(self) -> bool:
        """Read the host registrations once; records ``host_lease`` events on changes."""
        assert self.etcd_endpoint and self.cluster
        asked = self.history.elapsed()
        try:
            hosts = etcd_hosts(self.etcd_endpoint, self.cluster)
        except (OSError, ValueError):
            return False
        for host in sorted(set(hosts) | set(self._hosts)):
            now, before = hosts.get(host), self._hosts.get(host)
            if host in self._hosts and now == before:
                continue
            self._hosts[host] = now
            self.history.record("host_lease", host=host,
                                lease=now[0] if now else None,
                                incarnation=now[1] if now else None,
                                previous=before[0] if before else None,
                                since=self._hosts_read_at)
        self._hosts_read_at = asked
        return True

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.poll_once()
            self._stop.wait(self.interval_s)
        with contextlib.suppress(Exception):
            self.poll_once()  # last look, so the final entries are collected too

    def _poll(self, process: str) -> None:
        keys = ProcessKeys(process, self.prefix)
        asked = self.history.elapsed()
        last = self._last.get(process, 0)
        pipe = self.client.pipeline(transaction=True)
        pipe.set(keys.hold, last)  # everything above `last` stays until copied
        pipe.get(keys.fence)
        pipe.hget(keys.head, "version")
        pipe.xrange(keys.stream, min=f"{last + 1}-0")
        pipe.hget(keys.snapshot, "version")
        _, fence_raw, head_raw, stream, snap_raw = pipe.execute()
        fence = int(fence_raw) if fence_raw is not None and fence_raw.isdigit() else 0
        head = int(head_raw) if head_raw is not None and head_raw.isdigit() else 0
        with self._lock:
            log = self.collected.get(process)
            if fence != self._fence.get(process, 0):
                self._fence[process] = fence
                self.history.record("fence", process=process, fence=fence, head=head,
                                    since=self._polled_at.get(process))
            self._polled_at[process] = asked
            for eid, fields in stream or ():
                parsed = parse_stream_entry(process, eid, fields, source="collected")
                if isinstance(parsed, str):
                    log.problems.append(f"observer: {parsed}")
                    continue
                if parsed.version > last + 1 and last + 1 not in log.collected:
                    self.history.record(
                        "note", process=process,
                        message=f"observer missed versions {last + 1}..{parsed.version - 1}"
                                " (trimmed before they were copied)")
                log.collected[parsed.version] = parsed
                last = max(last, parsed.version)
            self._last[process] = last
            snap_version = int(snap_raw) if snap_raw is not None and snap_raw.isdigit() else -1
            if snap_version >= 0 and snap_version != self._snap.get(process, -1):
                raw = self.client.hgetall(keys.snapshot)
                snap = parse_snapshot_hash(process, raw, source="collected")
                if isinstance(snap, str):
                    log.problems.append(f"observer: {snap}")
                elif snap is not None:
                    self._snap[process] = snap.version
                    if all(s.version != snap.version for s in log.snapshots):
                        log.snapshots.append(snap)

    def fence_of(self, process: str) -> int:
        """The last fence seen for ``process`` (0 if none yet)."""
        return self._fence.get(process, 0)

    def snapshot(self) -> StoredLogs:
        """A copy of what has been collected so far (safe while running)."""
        with self._lock:
            out = StoredLogs()
            for pid, log in self.collected.processes.items():
                copy = out.get(pid)
                copy.collected = dict(log.collected)
                copy.snapshots = list(log.snapshots)
                copy.problems = list(log.problems)
            return out
