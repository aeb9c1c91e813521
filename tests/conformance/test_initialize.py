"""Point 10: ``initialize`` answers only the capabilities both sides list; an omitted
capability is unsupported (reference: control-protocol.md, "Protocol evolution":
compatible additions use negotiated capabilities)."""

from __future__ import annotations

from starlette.testclient import TestClient

from svit_cluster.gateway import CAPABILITIES, TokenStore, create_app
from svit_cluster.inprocess import InProcessRouter


def _client() -> TestClient:
    return TestClient(create_app(InProcessRouter(), TokenStore()))


def test_10_initialize_with_no_capabilities_gets_none() -> None:
    client = _client()
    for body in ({"protocols": ["svit-control@1"], "capabilities": []},
                 {"protocols": ["svit-control@1"]}):
        r = client.post("/v1/initialize", json=body)
        assert r.status_code == 200
        assert r.json()["capabilities"] == []
    some = client.post("/v1/initialize", json={
        "protocols": ["svit-control@1"], "capabilities": [CAPABILITIES[0], "unknown-x"]})
    assert some.json()["capabilities"] == [CAPABILITIES[0]]
    every = client.post("/v1/initialize", json={
        "protocols": ["svit-control@1"], "capabilities": list(CAPABILITIES)})
    assert every.json()["capabilities"] == list(CAPABILITIES)
