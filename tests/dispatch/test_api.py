"""Public surface: exported names, config validation, the admin dead-letter routes."""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis
from click.testing import CliRunner
from starlette.testclient import TestClient

import svit_cluster.dispatch as dispatch
from svit_cluster.dispatch import DeadLetters, DispatchConfig, DispatchKeys, DispatchWorker
from svit_cluster.dispatch._claim import shard_of
from svit_cluster.dispatch._deadbound import BOUND_SCRIPT, DeadLetterBound
from svit_cluster.errors import ConfigurationError
from svit_cluster.gateway import Principal, TokenStore, create_app
from svit_cluster.inprocess import InProcessRouter
from tests.conftest import RedisTarget

ADMIN = "admin-token-0123456789"
TENANT = "tenant-token-0123456789"


def test_exported_names_are_pinned() -> None:
    assert sorted(dispatch.__all__) == sorted([
        "DEFAULT_GROUP", "DeadLetter", "DeadLetters", "DeliveryState", "DestinationRecord",
        "DispatchConfig", "DispatchKeys", "DispatchMetrics", "DispatchWorker", "Intent",
        "IntentStatus", "OutboxSummary", "PermanentDeliveryError", "RedisStreamSink",
        "RedriveResult",
        "RetryableDeliveryError", "Sink", "SinkRegistry", "SvitInboxSink", "WebhookSink",
        "default_sinks", "delivery_status", "destination_records", "outbox_summary",
        "read_cluster_json", "run_worker", "status_and_summary", "trim_acked",
        "CancelOutcome", "Timer", "TimerPage", "cancel_timer", "list_timers", "timer_log",
        "OutboxPage", "UndeliveredIntent", "WorkerHealth", "undelivered", "worker_health",
    ])
    for name in dispatch.__all__:
        assert getattr(dispatch, name) is not None
    assert DispatchWorker.__doc__


@pytest.mark.parametrize("bad", [
    {"redis_url": "http://x"}, {"max_attempts": 0}, {"claim_ttl_s": 1.0},
    {"claim_idle_s": -1}, {"webhook_hosts": ("a/b",)}, {"redis_stream_prefixes": ("svit:x",)},
    {"retry_initial_s": 2.0, "retry_max_s": 1.0}, {"batch_size": True}, {"nope": 1},
    {"dead_letter_max_count": 0}, {"dead_letter_max_count": 1.5},
    {"dead_letter_max_age_s": 0}, {"dead_letter_max_age_s": True},
])
def test_config_rejects_bad_values(bad: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError):
        DispatchConfig.from_mapping({"redis_url": "redis://127.0.0.1:1/0", **bad})


def test_config_from_cluster_document() -> None:
    doc = {"redis": {"url": "redis://127.0.0.1:9/0"}, "gateway": {"url": "http://gw"},
           "tokens": {"admin": ADMIN},
           "dispatch": {"options": {"webhook_hosts": ["a:1"], "max_attempts": 3}}}
    cfg = DispatchConfig.from_cluster_json_doc(doc, worker_id="x", max_attempts=None)
    assert (cfg.gateway_url, cfg.gateway_token, cfg.webhook_hosts, cfg.max_attempts,
            cfg.worker_id) == ("http://gw", ADMIN, ("a:1",), 3, "x")


def test_keys_and_placement() -> None:
    keys = DispatchKeys("svit")
    stream = keys.outbox("svit://t/a")
    assert stream == "svit:{svit://t/a}:outbox"
    assert keys.process_of(stream) == "svit://t/a"
    assert keys.process_of(keys.redrive) is None
    assert keys.claim(stream) == "svit:{svit://t/a}:outbox:lease"
    workers = ["w1", "w2", "w3"]
    streams = [keys.outbox(f"svit://t/{i}") for i in range(300)]
    placed = {s: shard_of(s, workers) for s in streams}
    assert set(placed.values()) == set(workers)
    # Adding a worker moves only streams the new worker wins.
    after = {s: shard_of(s, [*workers, "w4"]) for s in streams}
    assert all(after[s] in (placed[s], "w4") for s in streams)
    assert shard_of("x", []) is None


@pytest.fixture
def admin_client(redis_target: RedisTarget) -> TestClient:
    tokens = TokenStore()
    tokens.add(ADMIN, Principal(tenant=None, admin=True))
    tokens.add(TENANT, Principal(tenant="t"))
    return TestClient(create_app(InProcessRouter(), tokens, redis_url=redis_target.url))


def _plant(rclient: redis.Redis, n: int) -> list[str]:
    keys = DispatchKeys("svit")
    rclient.delete(keys.dead, keys.redrive)
    return [rclient.xadd(keys.dead, {
        "intent": f'{{"id":"svit://t/a:{i}:0","to":"x://y","body":1}}', "intent_id":
        f"svit://t/a:{i}:0", "to": "x://y", "source": "svit://t/a", "version": i,
        "stream": keys.outbox("svit://t/a"), "entry_id": f"{i}-0", "sink": "none",
        "reason": "unknown_scheme", "error": "no sink", "attempts": 0,
        "failed_ms": int(time.time() * 1000)}).decode() for i in range(n)]


def test_admin_routes_list_and_redrive(admin_client: TestClient, rclient: redis.Redis) -> None:
    ids = _plant(rclient, 3)
    auth = {"Authorization": f"Bearer {ADMIN}"}
    r = admin_client.get("/v1/admin/dead-letters", params={"limit": 2}, headers=auth)
    assert r.status_code == 200
    doc = r.json()
    assert doc["count"] == 3 and [d["id"] for d in doc["dead_letters"]] == ids[:2]
    assert doc["next"] == ids[1]
    assert doc["dead_letters"][0]["reason"] == "unknown_scheme"
    r = admin_client.get("/v1/admin/dead-letters", params={"after": doc["next"]}, headers=auth)
    assert [d["id"] for d in r.json()["dead_letters"]] == ids[2:]
    r = admin_client.post("/v1/admin/dead-letters/redrive", json={"ids": [ids[0], "9-9"]},
                          headers=auth)
    assert r.json() == {"redriven": [ids[0]], "missing": ["9-9"], "trimmed": []}
    moved = rclient.xrange(DispatchKeys("svit").redrive)
    assert len(moved) == 1 and moved[0][1][b"dead_letter_id"] == ids[0].encode()
    assert moved[0][1][b"intent_id"] == b"svit://t/a:0:0"
    r = admin_client.post("/v1/admin/dead-letters/redrive", json={"all": True}, headers=auth)
    assert r.json()["redriven"] == ids[1:]
    assert DeadLetters(rclient).count() == 0
    assert admin_client.post("/v1/admin/dead-letters/redrive", json={},
                             headers=auth).status_code == 400
    assert admin_client.get("/v1/admin/dead-letters", params={"after": "x"},
                            headers=auth).status_code == 400


def test_redrive_of_a_letter_the_bounds_removed_says_so(
        admin_client: TestClient, rclient: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = _plant(rclient, 3)
    keys = DispatchKeys("svit")
    rclient.delete(keys.dead_trim)
    rclient.register_script(BOUND_SCRIPT)(keys=[keys.dead, keys.dead_trim],
                                          args=DeadLetterBound(max_count=1).args)
    auth = {"Authorization": f"Bearer {ADMIN}"}
    doc = admin_client.post("/v1/admin/dead-letters/redrive", json={"ids": ids[:1]},
                            headers=auth).json()
    assert (doc["redriven"], doc["missing"], doc["trimmed"]) == ([], [], ids[:1])
    assert doc["trimmed_reason"].startswith(f"removed by the dead-letter bounds (every "
                                            f"letter below {ids[2]} is gone; the dispatcher "
                                            "keeps at most 1 letters, none older than 604800 s")

    import svit_cluster.cli.dispatch as dcli
    from svit_cluster.cli import cli

    monkeypatch.setattr(dcli, "_call", lambda *a, **k: doc)
    result = CliRunner().invoke(cli, ["dead-letters", "redrive", ids[0], "--url", "http://gw",
                                      "--token", ADMIN])
    assert result.exit_code == 1
    assert f"error: not_found: dead letter(s) {ids[0]}: removed by the dead-letter bounds" \
        in result.stderr


def test_admin_routes_need_an_admin_token(admin_client: TestClient) -> None:
    assert admin_client.get("/v1/admin/dead-letters").status_code == 401
    r = admin_client.get("/v1/admin/dead-letters",
                         headers={"Authorization": f"Bearer {TENANT}"})
    assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden"
    r = admin_client.post("/v1/admin/dead-letters/redrive", json={"all": True},
                          headers={"Authorization": f"Bearer {TENANT}"})
    assert r.status_code == 403


def test_admin_routes_without_redis_are_unavailable() -> None:
    tokens = TokenStore()
    tokens.add(ADMIN, Principal(tenant=None, admin=True))
    client = TestClient(create_app(InProcessRouter(), tokens))
    r = client.get("/v1/admin/dead-letters", headers={"Authorization": f"Bearer {ADMIN}"})
    assert r.status_code == 503 and r.json()["error"]["code"] == "unavailable"


def test_the_old_option_name_lease_ttl_s_still_configures_the_stream_claim() -> None:
    """cluster.json files written before the rename record ``lease_ttl_s``."""
    cfg = DispatchConfig.from_mapping({"redis_url": "redis://x:1/0", "lease_ttl_s": 7.0})
    assert cfg.claim_ttl_s == 7.0
    with pytest.raises(ConfigurationError):
        DispatchConfig.from_mapping({"redis_url": "redis://x:1/0", "lease_ttl_s": 7.0,
                                     "claim_ttl_s": 7.0})
