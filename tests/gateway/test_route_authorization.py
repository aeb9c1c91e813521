"""Every gateway route that names a process refuses another tenant's token (403).

Walks ``app.routes``: a route that takes ``process_id`` (query or body) is called
with the ``other`` tenant's token on an ``acme`` process and must answer the typed
``403 forbidden`` before the router is reached, so a new endpoint cannot forget the
authorization check. ``/v1/control`` decodes its own envelope (no declared
parameters) and is covered by name.
"""

from __future__ import annotations

from typing import Any

from fastapi.routing import APIRoute
from starlette.testclient import TestClient

from svit_cluster.gateway import Principal, TokenStore, create_app
from svit_cluster.inprocess import InProcessRouter

OTHER = "other-token-0123456789"
FOREIGN = "svit://acme/p"
PID_FIELDS = ("process_id", "new_process_id")


def _fastapi(app: Any) -> Any:
    """The FastAPI app under the middleware stack (each layer keeps ``.app``)."""
    while not hasattr(app, "routes"):
        app = app.app
    return app


def _fill(field: Any) -> Any:
    return FOREIGN if field.name in PID_FIELDS else "x"


def _api_routes(routes: Any) -> list[APIRoute]:
    """Every APIRoute, descending into included routers (FastAPI >= 0.16x keeps an
    included router as one ``_IncludedRouter`` entry holding ``original_router``;
    include prefixes are empty here, the routers carry their own)."""
    out: list[APIRoute] = []
    for route in routes:
        if isinstance(route, APIRoute):
            out.append(route)
        elif (inner := getattr(route, "original_router", None)) is not None:
            out.extend(_api_routes(inner.routes))
    return out


def test_every_process_route_refuses_another_tenant() -> None:
    tokens = TokenStore()
    tokens.add(OTHER, Principal(tenant="other"))
    asgi = create_app(InProcessRouter(), tokens)
    client = TestClient(asgi)
    checked: list[str] = []
    for route in _api_routes(_fastapi(asgi).routes):
        dep = route.dependant
        query = {q.name: _fill(q) for q in dep.query_params
                 if q.field_info.is_required() or q.name in PID_FIELDS}
        body: dict[str, Any] = {}
        for b in dep.body_params:
            model = b.field_info.annotation
            fields = getattr(model, "model_fields", {})
            body = {n: (FOREIGN if n in PID_FIELDS else "x")
                    for n, f in fields.items() if f.is_required() or n in PID_FIELDS}
        if route.path == "/v1/control":
            body = {"protocol": "svit-control@1", "client_id": "c", "request_id": "r",
                    "process_id": FOREIGN, "expected_version": 0,
                    "command": {"operation": "activate", "script": "s",
                                "input": {"type": "map", "value": {}}}}
        elif "process_id" not in query and "process_id" not in body:
            continue
        for method in sorted(route.methods):
            r = client.request(method, route.path, params=query, json=body or None,
                               headers={"Authorization": f"Bearer {OTHER}"})
            assert (r.status_code, r.json()["error"]["code"]) == (403, "forbidden"), (
                method, route.path, r.status_code, r.text)
            assert r.json()["error"]["message"] == f"token may not act on {FOREIGN}"
            checked.append(f"{method} {route.path}")
    # The walk must actually reach the process routes (guards the walker itself).
    assert {"POST /v1/control", "POST /v1/processes", "GET /v1/processes/state",
            "GET /v1/processes/requests", "DELETE /v1/processes",
            "POST /v1/processes/inbox", "POST /v1/processes/inbox/drop",
            "POST /v1/processes/snapshot", "POST /v1/processes/fork",
            "GET /v1/processes/events/recent", "GET /v1/processes/timers",
            "POST /v1/processes/timers/cancel", "GET /v1/processes/timers/log",
            "GET /v1/processes/log", "GET /v1/processes/outbox",
            } <= set(checked), checked
