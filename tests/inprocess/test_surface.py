"""The in-process package: its public surface, and that it is the gateway's Router."""

from __future__ import annotations

import asyncio

import svit_cluster.gateway as gateway
import svit_cluster.inprocess as inprocess
from svit_cluster.control import ControlRequest
from svit_cluster.inprocess import MemorySignals
from svit_cluster.process import Limits, encode_value, script_from_value


def test_public_surface_is_pinned() -> None:
    assert sorted(inprocess.__all__) == [
        "InProcessRouter", "MemoryEventLog", "MemorySignals", "SignalingMemoryBackend"]
    # the gateway no longer carries an in-process implementation of its contract
    assert "LocalRouter" not in gateway.__all__ and not hasattr(gateway, "LocalRouter")


def test_the_router_serves_the_gateway_contract() -> None:
    router = inprocess.InProcessRouter()
    assert isinstance(router.signal_source(), MemorySignals)
    counter = script_from_value(
        {"source": '(define (main input) (write "/memory/count" (+ (read "/memory/count") 1)))'},
        Limits())

    async def run() -> tuple[int, str, int]:
        info = await router.create("svit://local/p", {"count": 0}, {"counter": counter})
        response = await router.control(ControlRequest.model_validate({
            "protocol": "svit-control@1", "process_id": "svit://local/p",
            "client_id": "c", "request_id": "r1", "expected_version": 0,
            "command": {"operation": "activate", "script": "counter",
                        "input": encode_value({})},
        }), "local")
        value, version = await router.state("svit://local/p", "/memory/count")
        return info["version"], response.status, version if value == 1 else -1

    assert asyncio.run(run()) == (0, "committed", 1)
