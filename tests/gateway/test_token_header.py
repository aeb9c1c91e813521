"""``/v1/control`` carries the answering owner's fencing token in ``X-Svit-Token``."""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.testclient import TestClient

from svit_cluster.client import SvitClient
from svit_cluster.gateway import (
    TOKEN_HEADER,
    Principal,
    TokenStore,
    capture_owner_token,
    create_app,
    report_owner_token,
)
from svit_cluster.inprocess import InProcessRouter
from tests.gateway.test_gateway import ADMIN, auth, control_doc, create


class TokenRouter(InProcessRouter):
    """A stub owner: answers like InProcessRouter and reports a fencing token, as RayRouter does."""

    def __init__(self, token: Any) -> None:
        super().__init__()
        self.token = token

    async def control(self, request: Any, partition: str) -> Any:
        response = await super().control(request, partition)
        await asyncio.sleep(0)  # the report survives awaits inside the router
        report_owner_token(self.token)
        return response


def app_client(router: InProcessRouter) -> TestClient:
    tokens = TokenStore()
    tokens.add(ADMIN, Principal(tenant=None, admin=True))
    return TestClient(create_app(router, tokens, max_request_bytes=4096))


def test_control_response_carries_the_owner_token() -> None:
    client = app_client(TokenRouter(42))
    assert create(client, "svit://acme/t").status_code == 201
    r = client.post("/v1/control", json=control_doc("svit://acme/t"), headers=auth(ADMIN))
    assert r.status_code == 200 and r.json()["outcome"]["status"] == "committed"
    assert r.headers[TOKEN_HEADER] == "42"
    # a conflict answer from the same owner carries it too
    r = client.post("/v1/control", json=control_doc("svit://acme/t", rid="r2"),
                    headers=auth(ADMIN))
    assert r.json()["outcome"]["status"] == "conflict" and r.headers[TOKEN_HEADER] == "42"


def test_no_header_without_a_known_token() -> None:
    for router in (InProcessRouter(), TokenRouter(None), TokenRouter("not-a-number")):
        client = app_client(router)
        create(client, "svit://acme/t")
        r = client.post("/v1/control", json=control_doc("svit://acme/t"), headers=auth(ADMIN))
        assert r.status_code == 200 and TOKEN_HEADER not in r.headers


def test_sdk_exposes_the_last_owner_token() -> None:
    client = app_client(TokenRouter(7))
    create(client, "svit://acme/t")
    sdk = SvitClient("http://testserver", ADMIN)
    sdk._http = client  # the TestClient is an httpx.Client bound to the app
    try:
        resp = sdk.activate("svit://acme/t", "counter", {"by": 1}, expected_version=0)
        assert resp.outcome.status == "committed" and sdk.last_owner_token == 7
    finally:
        sdk.close()


def test_reports_outside_a_capture_are_ignored() -> None:
    report_owner_token(3)  # nobody listens: no error
    with capture_owner_token() as box:
        report_owner_token(5)
        report_owner_token(True)
    assert box == [5]
