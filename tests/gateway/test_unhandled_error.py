"""An exception no handler takes answers a typed 500 and logs one ERROR line."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from starlette.testclient import TestClient

from svit_cluster.gateway import Principal, TokenStore, create_app
from svit_cluster.inprocess import InProcessRouter
from svit_cluster.process import encode_value

ADMIN = "admin-token-0123456789"
SECRET = "s3cret-in-the-exception-text"


class BrokenRouter(InProcessRouter):
    """``control`` raises RuntimeError and ``state`` KeyError, as a bug would."""

    async def control(self, request: Any, partition: str, body: bytes | None = None) -> Any:
        raise RuntimeError(SECRET)

    async def state(self, process_id: str, path: str) -> Any:
        raise KeyError(SECRET)


@pytest.fixture
def client() -> TestClient:
    tokens = TokenStore()
    tokens.add(ADMIN, Principal(tenant=None, admin=True))
    # raise_server_exceptions=False: the client sees what a real client would,
    # since ServerErrorMiddleware re-raises after sending the answer.
    return TestClient(create_app(BrokenRouter(), tokens), raise_server_exceptions=False)


def control_doc() -> dict[str, Any]:
    return {
        "protocol": "svit-control@1", "client_id": "c", "request_id": "r1",
        "process_id": "svit://acme/p", "expected_version": 0,
        "command": {"operation": "activate", "script": "s", "input": encode_value({"by": 1})},
    }


def test_control_runtime_error_is_typed_500(client: TestClient,
                                            caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="svit_cluster.gateway._errors"):
        r = client.post("/v1/control", json=control_doc(),
                        headers={"Authorization": f"Bearer {ADMIN}"})
    assert r.status_code == 500
    assert r.headers["content-type"].startswith("application/json")
    error = r.json()["error"]
    assert error["code"] == "internal"
    assert "RuntimeError" in error["message"]
    assert SECRET not in r.text and "Traceback" not in r.text
    records = [x for x in caplog.records if x.name == "svit_cluster.gateway._errors"]
    assert len(records) == 1
    assert records[0].levelno == logging.ERROR
    assert "POST /v1/control" in records[0].getMessage()
    assert records[0].exc_info is not None
    assert isinstance(records[0].exc_info[1], RuntimeError)


def test_state_key_error_is_typed_500(client: TestClient) -> None:
    r = client.get("/v1/processes/state", params={"process_id": "svit://acme/p", "path": "/"},
                   headers={"Authorization": f"Bearer {ADMIN}"})
    assert r.status_code == 500
    assert r.json()["error"] == {"code": "internal", "message": "internal error (KeyError)"}
