"""The admin host view (``GET /v1/admin/hosts``), the ``svit_host_*`` gauges on
``/metrics`` and a process's own idle timeout (``PUT /v1/processes/residency``),
through the real gateway app over the in-process router."""

from __future__ import annotations

from typing import Any

from starlette.testclient import TestClient

from svit_cluster.gateway import TokenStore, create_app
from svit_cluster.gateway._auth import Principal
from svit_cluster.inprocess import InProcessRouter

ADMIN = "admin-token-0123456789abcdef"
TENANT = "tenant-token-0123456789abcdef"


class TwoHostsRouter(InProcessRouter):
    """Reports what the Ray router reports of two hosts, one not answering."""

    def __init__(self) -> None:
        super().__init__()
        self.h1: dict[str, Any] = {"host": "h1", "answered": True, "lease_state": "held",
                                   "keepalive_lag_s": 0.002, "max_keepalive_lag_s": 0.04,
                                   "actors": 7, "max_active": 8, "spares": 1, "starting": 0,
                                   "pss_mib": 512.5, "lru_idle_s": 42.0, "evictions": 3,
                                   "host_full": 0}

    async def hosts(self) -> list[dict[str, Any]]:
        return [self.h1, {"host": "h2", "answered": False}]


def _client(router: InProcessRouter) -> TestClient:
    tokens = TokenStore()
    tokens.add(ADMIN, Principal(tenant=None, admin=True))
    tokens.add(TENANT, Principal(tenant="t"))
    return TestClient(create_app(router, tokens))


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_the_host_view_is_for_admins_only() -> None:
    client = _client(TwoHostsRouter())
    got = client.get("/v1/admin/hosts", headers=_auth(ADMIN))
    assert got.status_code == 200
    hosts = got.json()["hosts"]
    assert [h["host"] for h in hosts] == ["h1", "h2"]
    assert hosts[0]["actors"] == 7 and hosts[0]["max_active"] == 8
    denied = client.get("/v1/admin/hosts", headers=_auth(TENANT))
    assert denied.status_code == 403 and denied.json()["error"]["code"] == "forbidden"
    assert client.get("/v1/admin/hosts").status_code == 401


def test_metrics_carry_each_answering_hosts_residency_and_drop_gone_hosts() -> None:
    router = TwoHostsRouter()
    client = _client(router)
    text = client.get("/metrics", headers=_auth(ADMIN)).text
    assert 'svit_host_active_actors{host="h1"} 7.0' in text
    assert 'svit_host_max_active_actors{host="h1"} 8.0' in text
    assert 'svit_host_lease_held{host="h1"} 1.0' in text
    assert 'svit_host_actors_pss_mib{host="h1"} 512.5' in text
    assert 'svit_host_lru_idle_seconds{host="h1"} 42.0' in text
    assert 'host="h2"' not in text  # not answering: no stale figures
    router.h1 = {**router.h1, "lease_state": "suspended", "actors": 2}
    text = client.get("/metrics", headers=_auth(ADMIN)).text
    assert 'svit_host_lease_held{host="h1"} 0.0' in text
    assert 'svit_host_active_actors{host="h1"} 2.0' in text
    router.h1 = {"host": "h1", "answered": False}
    text = client.get("/metrics", headers=_auth(ADMIN)).text
    assert 'host="h1"' not in text


def test_a_process_idle_timeout_is_set_checked_and_reset() -> None:
    client = _client(InProcessRouter())
    pid = "svit://t/idle"
    assert client.post("/v1/processes", json={"process_id": pid, "memory": {}},
                       headers=_auth(TENANT)).status_code == 201
    got = client.put("/v1/processes/residency", headers=_auth(TENANT),
                     json={"process_id": pid, "passivate_after_s": 30})
    assert got.status_code == 200, got.text
    assert got.json() == {"process_id": pid, "default": False, "passivate_after_s": 30.0}
    for bad in (0.5, 8 * 24 * 3600, "soon"):
        refused = client.put("/v1/processes/residency", headers=_auth(TENANT),
                             json={"process_id": pid, "passivate_after_s": bad})
        assert refused.status_code == 400, (bad, refused.text)
    reset = client.put("/v1/processes/residency", headers=_auth(TENANT),
                       json={"process_id": pid, "passivate_after_s": None})
    assert reset.json()["default"] is True
    missing = client.put("/v1/processes/residency", headers=_auth(TENANT),
                         json={"process_id": "svit://t/none", "passivate_after_s": 30})
    assert missing.status_code == 404
    foreign = client.put("/v1/processes/residency", headers=_auth(TENANT),
                         json={"process_id": "svit://u/p", "passivate_after_s": 30})
    assert foreign.status_code == 403
