"""``/v1/control`` carries the answering owner's fencing token in ``X-Svit-Token``."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from starlette.testclient import TestClient

from svit_cluster.client import SvitClient
from svit_cluster.control import ControlAnswer
from svit_cluster.errors import InvalidInput
from svit_cluster.gateway import TOKEN_HEADER, Principal, TokenStore, create_app
from svit_cluster.inprocess import InProcessRouter
from tests.gateway.test_gateway import ADMIN, auth, control_doc, create


class TokenRouter(InProcessRouter):
    """A stub owner: answers like InProcessRouter with a fencing token, as RayRouter does."""

    def __init__(self, token: int | None) -> None:
        super().__init__()
        self.token = token

    async def control(self, request: Any, partition: str, body: bytes | None = None
                      ) -> ControlAnswer:
        answer = await super().control(request, partition, body)
        return dataclasses.replace(answer, token=self.token)


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
    for router in (InProcessRouter(), TokenRouter(None)):
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


def test_an_answer_from_an_actor_result_keeps_its_bytes_and_metadata() -> None:
    """What ProcessActor.control returns becomes the gateway's answer without a
    decode; an older actor's result (no status) is decoded once; a token that is
    not an integer is dropped."""
    client = app_client(InProcessRouter())
    create(client, "svit://acme/t")
    body = client.post("/v1/control", json=control_doc("svit://acme/t"),
                       headers=auth(ADMIN)).content
    committed = ControlAnswer.from_result({"response": body, "status": "committed",
                                           "code": None, "token": 9, "host": "h1"})
    assert (committed.body, committed.status, committed.token, committed.host) == (
        body, "committed", 9, "h1")
    assert ControlAnswer.from_result(committed.to_result()) == committed
    legacy = ControlAnswer.from_result({"response": body, "token": True, "host": "h1"})
    assert legacy.status == "committed" and legacy.token is None and legacy.code is None
    assert legacy.response().process_id == "svit://acme/t"
    with pytest.raises(InvalidInput):
        ControlAnswer.from_result({"response": b"{not json"})
