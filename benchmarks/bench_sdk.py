"""SDK benchmark: the client CPU of one activation, SDK against a bare HTTP client.

Run::

    python -m benchmarks.bench_sdk [--calls 400] [--rounds 5] [--quick]

Starts a one-host local cluster and one counter process, then commits to it in
rounds, four clients taking turns round by round (so machine noise falls on
all four alike):

* ``sdk_sync`` / ``sdk_async``: :class:`SvitClient` / :class:`AsyncSvitClient`
  ``activate`` (typed errors, retries with the same request id, the
  ``traceparent`` hook, the typed response);
* ``bare_sync`` / ``bare_async``: an ``httpx.Client`` / ``httpx.AsyncClient``
  on one kept-alive connection POSTing the same svit-control@1 document
  (``json.dumps`` of a dict) with the same headers, and ``json.loads`` of the
  answer: what a user would write by hand, without retries or types.

Each call is measured as this thread's CPU (``RUSAGE_THREAD``, user + system)
and wall time; the clients run one at a time on the main thread (the async
ones on an event loop there), so the thread's CPU is the client's. Prints one
JSON document: per client the CPU ms per call (median over rounds), the wall
ms per call, and ``sdk_over_bare_ms`` (SDK CPU minus bare CPU, ms per call).

``--quick`` (CI): 40 calls, 2 rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

from benchmarks._cluster import local_cluster
from svit_cluster.client import AsyncSvitClient, SvitClient
from svit_cluster.control import Committed, Conflict, ControlResponse
from svit_cluster.local import ClusterSpec

COUNTER = """(define (main input)
  (let ((count (+ (read "/memory/count") (value-get input "/by"))))
    (do (write "/memory/count" count) (value-map "count" count))))"""

PID = "svit://local/sdk-bench"


def _thread_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_THREAD)
    return usage.ru_utime + usage.ru_stime


def _bare_body(client_id: str, version: int) -> bytes:
    return json.dumps({
        "protocol": "svit-control@1", "client_id": client_id,
        "request_id": uuid.uuid4().hex, "process_id": PID, "expected_version": version,
        "command": {"operation": "activate", "script": "counter",
                    "input": {"type": "map",
                              "value": {"by": {"type": "integer", "value": 1}}}},
    }).encode()


def _version_of(doc: dict[str, Any]) -> int:
    outcome = doc["outcome"]
    if outcome["status"] == "committed":
        return int(outcome["activation"]["version"])
    if outcome["status"] == "conflict":
        return int(outcome["actual_version"])
    raise RuntimeError(f"unexpected outcome {outcome}")


def _next_version(response: ControlResponse) -> int:
    outcome = response.outcome
    if isinstance(outcome, Committed):
        return outcome.activation.version
    if isinstance(outcome, Conflict):
        return outcome.actual_version
    raise RuntimeError(f"unexpected outcome {outcome}")


class _State:
    """The process's last seen version, shared by the four clients."""

    def __init__(self, version: int) -> None:
        self.version = version


def _sync_round(kind: str, url: str, token: str, state: _State, calls: int,
                clients: dict[str, Any]) -> tuple[float, float]:
    """``calls`` commits with one sync client; (CPU s, wall s)."""
    cpu0, t0 = _thread_cpu_s(), time.perf_counter()
    if kind == "sdk_sync":
        sdk: SvitClient = clients[kind]
        for _ in range(calls):
            out = sdk.activate(PID, "counter", {"by": 1}, expected_version=state.version)
            state.version = _next_version(out)
    else:
        bare: httpx.Client = clients[kind]
        for _ in range(calls):
            resp = bare.post(url + "/v1/control", content=_bare_body("bare", state.version))
            resp.raise_for_status()
            state.version = _version_of(json.loads(resp.content))
    return _thread_cpu_s() - cpu0, time.perf_counter() - t0


async def _async_round(kind: str, url: str, state: _State, calls: int,
                       clients: dict[str, Any]) -> tuple[float, float]:
    cpu0, t0 = _thread_cpu_s(), time.perf_counter()
    if kind == "sdk_async":
        sdk: AsyncSvitClient = clients[kind]
        for _ in range(calls):
            out = await sdk.activate(PID, "counter", {"by": 1},
                                     expected_version=state.version)
            state.version = _next_version(out)
    else:
        bare: httpx.AsyncClient = clients[kind]
        for _ in range(calls):
            resp = await bare.post(url + "/v1/control",
                                   content=_bare_body("bare", state.version))
            resp.raise_for_status()
            state.version = _version_of(json.loads(resp.content))
    return _thread_cpu_s() - cpu0, time.perf_counter() - t0


KINDS = ("sdk_sync", "bare_sync", "sdk_async", "bare_async")


def measure(url: str, token: str, *, calls: int, rounds: int) -> dict[str, Any]:
    """Run ``rounds`` rounds of ``calls`` commits per client; the summary."""
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}
    state = _State(0)
    loop = asyncio.new_event_loop()
    clients: dict[str, Any] = {
        "sdk_sync": SvitClient(url, token, client_id="sdk-sync"),
        "bare_sync": httpx.Client(headers=headers, timeout=30),
        "sdk_async": AsyncSvitClient(url, token, client_id="sdk-async"),
        "bare_async": httpx.AsyncClient(headers=headers, timeout=30),
    }
    cpu: dict[str, list[float]] = {k: [] for k in KINDS}
    wall: dict[str, list[float]] = {k: [] for k in KINDS}
    try:
        for kind in KINDS:  # warm each connection and code path
            _run(kind, url, token, state, 5, clients, loop)
        for _ in range(rounds):
            for kind in KINDS:
                c, w = _run(kind, url, token, state, calls, clients, loop)
                cpu[kind].append(1000 * c / calls)
                wall[kind].append(1000 * w / calls)
    finally:
        clients["sdk_sync"].close()
        clients["bare_sync"].close()
        loop.run_until_complete(clients["sdk_async"].aclose())
        loop.run_until_complete(clients["bare_async"].aclose())
        loop.close()
    out: dict[str, Any] = {
        k: {"cpu_ms_per_call": round(statistics.median(cpu[k]), 3),
            "wall_ms_per_call": round(statistics.median(wall[k]), 3),
            "cpu_ms_per_call_rounds": [round(x, 3) for x in cpu[k]]}
        for k in KINDS}
    out["sdk_over_bare_ms"] = {
        "sync": round(out["sdk_sync"]["cpu_ms_per_call"] - out["bare_sync"]["cpu_ms_per_call"], 3),
        "async": round(out["sdk_async"]["cpu_ms_per_call"]
                       - out["bare_async"]["cpu_ms_per_call"], 3)}
    return out


def _run(kind: str, url: str, token: str, state: _State, calls: int,
         clients: dict[str, Any], loop: asyncio.AbstractEventLoop) -> tuple[float, float]:
    if kind.endswith("_sync"):
        return _sync_round(kind, url, token, state, calls, clients)
    return loop.run_until_complete(_async_round(kind, url, state, calls, clients))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="CI smoke run: 40 calls, 2 rounds")
    ap.add_argument("--calls", type=int, default=400, help="commits per client per round")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    if args.quick:
        args.calls, args.rounds = 40, 2
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    with tempfile.TemporaryDirectory(prefix="svit-bench-sdk-") as tmp:
        with local_cluster(ClusterSpec(state_dir=Path(tmp), hosts=1)) as cluster:
            url, token = cluster.doc["gateway"]["url"], cluster.doc["tokens"]["admin"]
            with SvitClient(url, token) as c:
                c.create_process(PID, memory={"count": 0}, scripts={"counter": COUNTER})
            result = measure(url, token, calls=args.calls, rounds=args.rounds)
    print(json.dumps({**result, "calls": args.calls, "rounds": args.rounds}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
