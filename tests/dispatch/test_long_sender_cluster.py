"""A process that sends forever, on a REAL local cluster.

One host, one dispatcher delivering webhooks to a real HTTP server, at the
dispatcher's defaults (trimming on). One process commits 4 000 activations
(over fifteen times ``OUTBOX_WINDOW``), each sending one webhook intent: every
one commits and is delivered, the activation latency does not grow with the
number of sends, and ``/system/outbox`` in the state stays a window
(docs/conformance.md D9), so an append costs O(window), not O(intents ever sent).

The long figures live elsewhere: 25 000 sends in process, past the send count
at which an unbounded outbox fails (tests/process/test_outbox_window.py), and
50 000 sends on a cluster whose hosts are killed (benchmarks/bench_soak.py).
"""

from __future__ import annotations

import os
import statistics
import time
import uuid
from collections.abc import Iterator

import pytest

from svit_cluster.client import SvitClient
from svit_cluster.dispatch import outbox_summary
from svit_cluster.local import LocalCluster
from svit_cluster.process import OUTBOX_WINDOW
from svit_cluster.store import connect
from tests._support import wait_for
from tests.dispatch._support import WebhookStub, webhook_cluster

pytestmark = [pytest.mark.cluster, pytest.mark.servers]
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

SENDS = 4_000
HOOK = """(define (main input)
  (do (send! (value-get input "/to") (value-map "n" (value-get input "/n")))
      (write "/memory/n" (value-get input "/n"))
      (value-get input "/n")))"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, stub: WebhookStub
            ) -> Iterator[LocalCluster]:
    yield from webhook_cluster(tmp_path_factory.mktemp("long"), stub,
                               hosts=1, lease_ttl_s=5, dispatchers=1)


# 4,000 activations one after another take 25-40 s on a quiet 2-core machine;
# the latency ratio below is the criterion, the timeout only guards against a hang.
@pytest.mark.timeout(300)
def test_a_process_sending_4000_webhooks_stays_fast_and_bounded(
        cluster: LocalCluster, stub: WebhookStub) -> None:
    pid = f"svit://t/long-{uuid.uuid4().hex[:8]}"
    to = f"{stub.base}/ok"
    durations: list[float] = []
    with SvitClient(cluster.doc["gateway"]["url"], cluster.doc["tokens"]["admin"]) as admin:
        admin.create_process(pid, memory={"n": -1}, scripts={"hook": HOOK})
        for n in range(SENDS):
            t0 = time.perf_counter()
            resp = admin.activate(pid, "hook", {"to": to, "n": n}, expected_version=n)
            durations.append(time.perf_counter() - t0)
            assert resp.outcome.status == "committed", (n, resp.outcome)
        assert admin.state(pid, "/memory/n") == (SENDS - 1, SENDS)
        outbox, _ = admin.state(pid, "/system/outbox")
    assert isinstance(outbox, list) and len(outbox) == OUTBOX_WINDOW <= 1000
    assert outbox[-1]["message_id"] == f"{pid}:{SENDS}:0"  # type: ignore[index]

    # the first window fills the outbox; compare full-window activations
    first = statistics.median(durations[OUTBOX_WINDOW:OUTBOX_WINDOW + 1000])
    last = statistics.median(durations[-1000:])
    print(f"\nLONG-SENDER first 1000 p50 {first * 1e3:.2f} ms, last 1000 p50 {last * 1e3:.2f} ms")
    assert last <= 1.5 * first, (first, last)

    rc = connect(cluster.doc["redis"]["url"])
    try:
        def delivered() -> bool:
            s = outbox_summary(rc, [pid])[pid]
            return s.committed == SENDS and s.pending == 0 and s.dead_lettered == 0
        wait_for(delivered, what=f"{SENDS} intents delivered", timeout_s=300)
        summary = outbox_summary(rc, [pid])[pid]
        assert summary.delivered == SENDS and summary.retained <= 1
    finally:
        rc.close()
    keys = {k for k in stub.keys_for("/ok") if k is not None and k.startswith(pid + ":")}
    assert len(keys) == SENDS  # each intent reached the sink (retries share a key)
