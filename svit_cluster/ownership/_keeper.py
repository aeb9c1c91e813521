"""The lease keeper: a small OS process that holds one host lease.

Run as ``python -m svit_cluster.ownership._keeper`` by
:class:`~svit_cluster.ownership.KeptLease` (the host agent's handle on it), never
by hand. It grants the lease, keeps it alive with its own etcd connection and
publishes its state in a shared record (:mod:`._status_file`) after every round.

Why a process of its own: the host agent is a busy Ray worker (activations,
actor starts, Ray's own threads), and a keepalive thread inside it shares its
interpreter lock and its scheduling weight. Under a burst of new processes the
keepalives then starved past the local deadline and hosts lost their leases.
The keeper's only work is the lease, it asks for a higher priority than the
agent's (``--niceness``; the agent passes
:data:`svit_cluster.cluster._config.KEEPER_NICENESS`; below 0 needs
``CAP_SYS_NICE``, otherwise it keeps the agent's), and nothing the agent does
can hold it up.

What keeps the lease honest -- it lives only while the host can serve:

* every ``--watch`` process (the agent that started the keeper, the raylet) is
  checked every 0.2 s: one that is gone, a zombie or stopped (SIGSTOP) makes
  the keeper revoke the lease at once and exit (a host whose agent is frozen or
  dead cannot activate anything, and its processes should move now);
* the agent's end of the keeper's stdin closing (the agent died) does the same;
* the agent can report the host unhealthy (``unhealthy <reason>`` on stdin, e.g.
  Ray declared its node dead): revoke and exit;
* ``revoke`` revokes and exits (the agent sends it when it finds the lease
  LOST itself, even if this keeper still holds it: the holder's verdict ends
  the lease); ``close`` stops keepalives without revoking (the lease then runs
  out its TTL); ``pause`` stops keepalives but keeps the process (tests, a
  simulated cut-off);
* a lease that becomes LOST (its deadline passed, etcd forgot it) is
  published as such, and the keeper exits: LOST is terminal, a new lease needs
  a new keeper.

A busy-but-alive agent keeps its lease: that is the point. Safety never
depends on the lease anyway (``docs/architecture.md``, "Ownership and the fencing
token"): every commit carries the fencing
token, and the Redis fence refuses a stale one.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import time

from svit_cluster.errors import UnavailableError
from svit_cluster.ownership._etcd import DEFAULT_REQUEST_TIMEOUT_S, open_client
from svit_cluster.ownership._lease import HostLease, LeaseState
from svit_cluster.ownership._status_file import LeaseStatus, StatusFile

__all__ = ["main", "process_problem"]

log = logging.getLogger("svit_cluster.lease_keeper")

#: Seconds between two checks of the watched processes.
WATCH_POLL_S = 0.2


def process_problem(label: str, pid: int) -> str | None:
    """None while process ``pid`` runs (or sleeps); else why the host cannot serve:
    gone, a zombie, or stopped by a signal (a debugger's tracing stop is not a fault).

    Reads ``/proc/<pid>/stat`` (Linux); where that is missing, only existence is checked.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except FileNotFoundError:
        return f"{label} {pid} is gone"
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return f"{label} {pid} is gone"
        except PermissionError:
            pass
        return None
    state = stat[stat.rfind(b")") + 2:][:1]
    if state == b"Z" or state == b"X":
        return f"{label} {pid} has exited"
    if state == b"T":
        return f"{label} {pid} is stopped"
    return None


def _lower_niceness(target: int) -> int:
    """Ask for niceness ``target`` (best effort); returns the niceness in effect."""
    now = os.getpriority(os.PRIO_PROCESS, 0)
    if target < now:
        try:
            os.setpriority(os.PRIO_PROCESS, 0, target)
        except OSError as exc:
            log.info("lease keeper stays at niceness %d (%s; grant CAP_SYS_NICE for %d)",
                     now, exc.strerror, target)
    return os.getpriority(os.PRIO_PROCESS, 0)


class _Keeper:
    def __init__(self, args: argparse.Namespace, status: StatusFile) -> None:
        self.args = args
        self.status_file = status
        self.status = LeaseStatus(keeper_pid=os.getpid())
        self.watched: list[tuple[str, int]] = []
        for spec in args.watch or []:
            label, _, pid = spec.partition(":")
            self.watched.append((label, int(pid)))
        self.reported: str | None = None  # the agent's "unhealthy" reason
        self.lease: HostLease | None = None
        self._rounds_seen = 0

    def health(self) -> str | None:
        if self.reported is not None:
            return self.reported
        for label, pid in self.watched:
            problem = process_problem(label, pid)
            if problem is not None:
                return problem
        return None

    def publish(self) -> None:
        lease, st = self.lease, self.status
        if lease is not None and lease.lease_id is not None:
            st.lease_id = lease.lease_id
            st.deadline = lease.deadline
            st.last_ok = lease.last_ok
            st.interval_s = lease.keepalive_interval_s
            st.ttl_s = lease.granted_ttl_s
            st.granted = True
            st.failing = lease.failing
            st.stopped = lease.stopped
            st.lost = lease.lost
            st.revoked = lease.revoked
            st.lost_reason = lease.lost_reason or ""
            st.unhealthy = lease.unhealthy or ""
            st.rounds = lease.keepalive_rounds
            st.last_lag_s = lease.last_keepalive_lag_s
            st.max_lag_s = lease.max_keepalive_lag_s
            st.max_rtt_s = lease.max_keepalive_rtt_s
            if lease.keepalive_rounds > self._rounds_seen:
                self._rounds_seen = lease.keepalive_rounds
                st.observe_lag(lease.last_keepalive_lag_s)
        self.status_file.write(st)

    async def run(self) -> int:
        args = self.args
        client = open_client(args.etcd, request_timeout_s=args.request_timeout)
        lease = self.lease = HostLease(
            client, ttl_s=args.ttl, safety_margin_s=args.margin,
            request_timeout_s=args.request_timeout, health_check=self.health,
            revoke_when_unhealthy=True, health_poll_s=WATCH_POLL_S, on_round=self.publish,
            probe_client=lambda: open_client(args.etcd, request_timeout_s=args.request_timeout))
        commands: asyncio.Queue[str] = asyncio.Queue()
        reader = asyncio.get_running_loop().create_task(self._read_commands(commands))
        try:
            try:
                await lease.grant()
            except UnavailableError as exc:
                self.status.error = f"grant failed: {exc.message}"
                return 3
            return await self._serve(lease, commands)
        finally:
            reader.cancel()
            self.status.exited = True
            self.publish()
            try:
                await asyncio.wait_for(client.close(), 2.0)
            except Exception:  # closing a broken channel: nothing left to do
                log.debug("closing the keeper's etcd client failed", exc_info=True)

    async def _serve(self, lease: HostLease, commands: asyncio.Queue[str]) -> int:
        while True:
            try:
                line = await asyncio.wait_for(commands.get(), WATCH_POLL_S)
            except TimeoutError:
                line = None
            if lease.state is LeaseState.LOST:
                return 0
            if line is None:
                continue
            word, _, rest = line.partition(" ")
            if word == "revoke" or word == "eof":
                try:
                    await lease.revoke()
                except UnavailableError as exc:
                    log.warning("lease %s: revoke failed (%s); it lapses by TTL",
                                lease.lease_id, exc)
                return 0
            if word == "close":
                await lease.close()
                return 0
            if word == "unhealthy":
                # the keepalive loop's health poll revokes within WATCH_POLL_S
                self.reported = rest or "reported unhealthy by the agent"
            elif word == "pause":
                lease.stop_keepalive()
                self.publish()
            else:
                log.warning("lease keeper: unknown command %r", word)

    async def _read_commands(self, commands: asyncio.Queue[str]) -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        while True:
            raw = await reader.readline()
            if not raw:  # the agent's end closed: it is gone
                await commands.put("eof")
                return
            await commands.put(raw.decode("utf-8", "replace").strip())


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m svit_cluster.ownership._keeper",
                                description="Hold one host lease for a host agent.")
    p.add_argument("--etcd", required=True, help="etcd endpoint(s), comma-separated")
    p.add_argument("--ttl", type=int, required=True, help="lease TTL in whole seconds")
    p.add_argument("--margin", type=float, required=True, help="safety margin in seconds")
    p.add_argument("--request-timeout", type=float, default=DEFAULT_REQUEST_TIMEOUT_S,
                   help="deadline of one etcd request in seconds")
    p.add_argument("--status", required=True, help="the shared status record to write")
    p.add_argument("--watch", action="append", metavar="LABEL:PID",
                   help="a process the host needs (repeatable)")
    p.add_argument("--niceness", type=int, default=None, help="niceness to ask for")
    return p


def main(argv: list[str] | None = None) -> int:
    """The keeper process. Exit codes: 0 done (revoked, closed or LOST), 2 usage,
    3 the lease could not be granted."""
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s lease-keeper[%(process)d] %(levelname)s %(message)s")
    if args.niceness is not None:
        _lower_niceness(args.niceness)
    status = StatusFile.open(args.status)
    status.unlink()  # both ends have it mapped now; nothing outlives them
    started = time.monotonic()
    try:
        code = asyncio.run(_Keeper(args, status).run())
    finally:
        status.close()
    log.info("lease keeper done after %.1f s (exit %d)", time.monotonic() - started, code)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
