"""Gateway layers: byte cap (413) -> authentication (401) -> authorization (403)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from starlette.testclient import TestClient

from svit_cluster.gateway import Principal, TokenStore, create_app
from svit_cluster.inprocess import InProcessRouter
from svit_cluster.process import encode_value

ADMIN = "admin-token-0123456789"
ACME = "acme-token-0123456789"
OTHER = "other-token-0123456789"
COUNTER = """(define (main input)
  (let ((count (+ (read "/memory/count") (value-get input "/by"))))
    (do (write "/memory/count" count) (value-map "count" count))))"""


class SpyRouter(InProcessRouter):
    """Records control calls, to prove 403 happens before any receipt lookup."""

    def __init__(self) -> None:
        super().__init__()
        self.control_calls = 0

    async def control(self, request: Any, partition: str, body: bytes | None = None) -> Any:
        self.control_calls += 1
        return await super().control(request, partition, body)


@pytest.fixture
def router() -> SpyRouter:
    return SpyRouter()


@pytest.fixture
def client(router: SpyRouter) -> TestClient:
    tokens = TokenStore()
    tokens.add(ADMIN, Principal(tenant=None, admin=True))
    tokens.add(ACME, Principal(tenant="acme"))
    tokens.add(OTHER, Principal(tenant="other"))
    return TestClient(create_app(router, tokens, max_request_bytes=4096))


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def control_doc(pid: str, rid: str = "r1", version: int = 0) -> dict[str, Any]:
    return {
        "protocol": "svit-control@1",
        "client_id": "c",
        "request_id": rid,
        "process_id": pid,
        "expected_version": version,
        "command": {"operation": "activate", "script": "counter",
                    "input": encode_value({"by": 2})},
    }


def create(client: TestClient, pid: str, token: str = ADMIN) -> Any:
    return client.post(
        "/v1/processes",
        json={"process_id": pid, "memory": {"count": 0}, "scripts": {"counter": COUNTER}},
        headers=auth(token),
    )


def test_no_token_is_401(client: TestClient) -> None:
    r = client.post("/v1/control", json=control_doc("svit://acme/p"))
    assert r.status_code == 401
    assert r.json()["error"]["code"] == "unauthenticated"


def test_unknown_token_is_401(client: TestClient) -> None:
    r = client.post("/v1/control", json=control_doc("svit://acme/p"),
                    headers=auth("nope-nope-nope-nope"))
    assert r.status_code == 401


def test_other_tenant_is_403_before_any_receipt_lookup(
    client: TestClient, router: SpyRouter
) -> None:
    assert create(client, "svit://acme/p").status_code == 201
    r = client.post("/v1/control", json=control_doc("svit://acme/p"), headers=auth(OTHER))
    assert r.status_code == 403
    assert r.json()["error"]["code"] == "forbidden"
    assert router.control_calls == 0


def test_oversized_body_is_413_before_decoding(client: TestClient, router: SpyRouter) -> None:
    body = b"{" + b" " * 5000  # not even JSON: the cap answers first
    r = client.post("/v1/control", content=body,
                    headers={**auth(ACME), "Content-Type": "application/json"})
    assert r.status_code == 413
    assert r.json()["error"]["code"] == "payload_too_large"
    assert router.control_calls == 0


def test_oversized_body_without_auth_is_still_413(client: TestClient) -> None:
    r = client.post("/v1/control", content=b"x" * 5000,
                    headers={"Content-Type": "application/json"})
    assert r.status_code == 413


def test_garbled_body_is_400_decode_error(client: TestClient) -> None:
    r = client.post("/v1/control", content=b"{not json",
                    headers={**auth(ACME), "Content-Type": "application/json"})
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "decode_error"


def test_wrong_content_type_is_415(client: TestClient) -> None:
    r = client.post("/v1/control", content=json.dumps(control_doc("svit://acme/p")),
                    headers={**auth(ACME), "Content-Type": "text/plain"})
    assert r.status_code == 415


def test_unknown_process_is_404(client: TestClient) -> None:
    r = client.post("/v1/control", json=control_doc("svit://acme/missing"), headers=auth(ACME))
    assert r.status_code == 404
    assert r.json()["error"]["code"] == "not_found"


def test_tenant_commits_and_reads_state(client: TestClient) -> None:
    assert create(client, "svit://acme/p", ACME).status_code == 201
    r = client.post("/v1/control", json=control_doc("svit://acme/p"), headers=auth(ACME))
    assert r.status_code == 200, r.text
    assert r.json()["outcome"]["status"] == "committed"
    s = client.get("/v1/processes/state", params={"process_id": "svit://acme/p",
                                                   "path": "/memory/count"}, headers=auth(ACME))
    assert s.json() == {"process_id": "svit://acme/p", "path": "/memory/count", "version": 1,
                        "value": {"type": "integer", "value": 2}}


def test_receipts_are_partitioned_by_tenant(client: TestClient) -> None:
    assert create(client, "svit://acme/p").status_code == 201
    first = client.post("/v1/control", json=control_doc("svit://acme/p"), headers=auth(ACME))
    assert first.json()["outcome"]["status"] == "committed"
    # The admin uses the same (client_id, request_id): a different partition,
    # so no replay of acme's receipt -- it is evaluated (and conflicts).
    admin = client.post("/v1/control", json=control_doc("svit://acme/p"), headers=auth(ADMIN))
    assert admin.json()["replayed"] is False
    assert admin.json()["outcome"]["status"] == "conflict"
    again = client.post("/v1/control", json=control_doc("svit://acme/p"), headers=auth(ACME))
    assert again.json()["replayed"] is True


def test_initialize_negotiates_without_a_token(client: TestClient) -> None:
    r = client.post("/v1/initialize", json={"protocols": ["svit-control@1"]})
    assert r.status_code == 200
    body = r.json()
    assert body["protocol"] == "svit-control@1"
    assert body["authentication"]["scheme"] == "bearer"
    assert body["implementation"]["name"] == "svit-cluster"
    bad = client.post("/v1/initialize", json={"protocols": ["svit-control@9"]})
    assert bad.status_code == 400


def test_snapshot_and_fork(client: TestClient) -> None:
    create(client, "svit://acme/p", ACME)
    snap = client.post("/v1/processes/snapshot", json={"process_id": "svit://acme/p"},
                       headers=auth(ACME))
    assert snap.status_code == 200
    assert snap.json()["snapshot"]["format"] == "svit-snapshot@1"
    fork = client.post("/v1/processes/fork",
                       json={"process_id": "svit://acme/p", "new_process_id": "svit://acme/q"},
                       headers=auth(ACME))
    assert fork.status_code == 201
    cross = client.post("/v1/processes/fork",
                        json={"process_id": "svit://acme/p", "new_process_id": "svit://other/q"},
                        headers=auth(ACME))
    assert cross.status_code == 403


def test_health_metrics_openapi(client: TestClient) -> None:
    assert client.get("/healthz").status_code == 200
    create(client, "svit://acme/p")
    client.post("/v1/control", json=control_doc("svit://acme/p"), headers=auth(ACME))
    text = client.get("/metrics").text
    assert 'svit_control_outcomes_total{status="committed"} 1.0' in text
    spec = client.get("/openapi.json").json()
    assert "/v1/control" in spec["paths"]
    body = spec["paths"]["/v1/control"]["post"]["requestBody"]["content"]["application/json"]
    assert body["schema"] == {"$ref": "#/components/schemas/ControlRequest"}
    assert "ControlRequest" in spec["components"]["schemas"]


def test_tokens_are_stored_hashed() -> None:
    tokens = TokenStore()
    tokens.add(ADMIN, Principal(tenant=None, admin=True))
    assert ADMIN.encode() not in repr(tokens._entries).encode()
    assert tokens.lookup(ADMIN) is not None
    assert tokens.lookup(ADMIN + "x") is None


def test_inbox_append_dedups_on_key_and_checks_size(client: TestClient) -> None:
    create(client, "svit://acme/p", ACME)
    msg = {"process_id": "svit://acme/p", "message": {"text": "hi"}, "dedup_key": "k1"}
    first = client.post("/v1/processes/inbox", json=msg, headers=auth(ACME))
    assert first.status_code == 200, first.text
    assert first.json()["appended"] is True
    again = client.post("/v1/processes/inbox", json=msg, headers=auth(ACME))
    assert again.json() == {**first.json(), "appended": False}
    inbox = client.get("/v1/processes/state", params={"process_id": "svit://acme/p",
                                                      "path": "/inbox"}, headers=auth(ACME))
    assert len(inbox.json()["value"]["value"]) == 1
    big = {"process_id": "svit://acme/p", "message": "x" * 5000}
    assert client.post("/v1/processes/inbox", json=big, headers=auth(ACME)).status_code == 413
    other = client.post("/v1/processes/inbox", json=msg, headers=auth(OTHER))
    assert other.status_code == 403
