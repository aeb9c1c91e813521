"""Every stable error code reaches the SDK as its typed exception, with its fields.

The real gateway app (auth, error handlers, JSON bodies) runs under uvicorn on a
loopback port and the real SDK talks HTTP to it. The router is the in-memory
``InProcessRouter``; for ids ``svit://acme/raise-<code>`` its ``state`` raises the
error registered for ``<code>`` with structured fields, so each code crosses the
whole server -> JSON -> SDK path. Natural failures (401, 403, 404, 409, 413,
decode errors, a dead gateway, a slow one, ``Retry-After``) are produced for real.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from svit_cluster import errors as E
from svit_cluster.client import AsyncSvitClient, SvitClient
from svit_cluster.cluster._results import Outcome, control_from_frame
from svit_cluster.errors import ErrorCode, error_class
from svit_cluster.gateway import Principal, TokenStore, create_app
from svit_cluster.inprocess import InProcessRouter
from svit_cluster.local import free_port
from svit_cluster.process import Value
from tests.events._server import serve

ADMIN = "admin-token-0123456789"
ACME = "acme-token-0123456789"
FIELDS: dict[str, Any] = {"limit": "max_text_bytes", "max": 1024, "actual": 2048.5,
                          "path": "/memory/x", "ok": False, "nested": {"a": [1, "b"]}}


class RaisingRouter(InProcessRouter):
    """InProcessRouter whose ``state`` raises a chosen error, or sleeps, or fails N times."""

    def __init__(self) -> None:
        super().__init__()
        self.unavailable_left = 0

    async def state(self, process_id: str, path: str) -> tuple[Value, int]:
        name = process_id.removeprefix("svit://acme/")
        if name.startswith("raise-"):
            code = ErrorCode(name.removeprefix("raise-"))
            raise error_class(code)(f"raised {code}", code=code, **FIELDS)
        if name == "slow":
            await asyncio.sleep(1.5)
        if name == "flaky" and self.unavailable_left > 0:
            self.unavailable_left -= 1
            raise E.UnavailableError("owner is moving")
        return await super().state(process_id, path)


@pytest.fixture(scope="module")
def router() -> RaisingRouter:
    return RaisingRouter()


@pytest.fixture(scope="module")
def base(router: RaisingRouter) -> Iterator[str]:
    tokens = TokenStore()
    tokens.add(ADMIN, Principal(tenant=None, admin=True))
    tokens.add(ACME, Principal(tenant="acme"))
    with serve(create_app(router, tokens, max_request_bytes=4096)) as url:
        yield url


def test_every_code_has_exactly_one_class_from_errors_py() -> None:
    for code in ErrorCode:
        cls = error_class(code)
        assert cls.default_code == code, code
        assert cls.__module__ == "svit_cluster.errors", code
        assert cls.__name__ in E.__all__, code
    assert len({error_class(c) for c in ErrorCode}) == len(ErrorCode)
    assert error_class("no-such-code") is E.InternalError


@pytest.mark.parametrize("code", list(ErrorCode), ids=str)
def test_code_over_http_is_typed_with_fields(base: str, code: ErrorCode) -> None:
    with SvitClient(base, ACME, attempts=1) as client, pytest.raises(E.SvitError) as info:
        client.state(f"svit://acme/raise-{code}")
    exc = info.value
    if code == ErrorCode.FENCED:
        # A fenced owner is a retryable outage for the caller (the new owner serves).
        assert type(exc) is E.UnavailableError and exc.fields["fenced"] is True
    else:
        assert type(exc) is error_class(code), (code, type(exc))
        assert exc.code == code
    assert exc.message == f"raised {code}"
    for key, value in FIELDS.items():
        assert exc.fields[key] == value, (code, key)
    # The status is the raised class's own ``http_status`` (one table: the classes).
    assert exc.fields["status"] == error_class(code).http_status >= 400, code


@pytest.mark.parametrize("code", list(ErrorCode), ids=str)
def test_code_through_the_ray_actor_outcome(code: ErrorCode) -> None:
    """The actor -> gateway hop (``Outcome.fail`` / ``Outcome.unwrap``) keeps class and fields."""
    original = error_class(code)("boom", code=code, **FIELDS)
    with pytest.raises(E.SvitError) as info:
        Outcome.fail(original).unwrap()
    assert type(info.value) is type(original) and info.value.code == code
    assert info.value.fields == FIELDS


def test_wire_form_round_trips_and_unknown_codes_are_internal() -> None:
    for code in ErrorCode:
        original = error_class(code)("boom", code=code, **FIELDS)
        again = E.SvitError.from_wire(original.to_wire())
        assert type(again) is type(original) and again.to_wire() == original.to_wire()
    odd = E.SvitError.from_wire({"code": "from-a-newer-server", "message": "hi",
                                 "fields": {"code": "x", "n": 1}})
    assert type(odd) is E.InternalError and odd.message == "hi"
    assert odd.fields == {"wire_code": "from-a-newer-server", "n": 1}
    bare = E.SvitError.from_wire({"fields": ["not", "a", "map"]})
    assert type(bare) is E.InternalError and bare.fields == {}
    clash = E.SvitError.from_wire({"code": "newer", "fields": {"wire_code": "x", "self": 1}})
    assert type(clash) is E.InternalError and clash.fields == {"wire_code": "newer"}
    with pytest.raises(E.InternalError):
        control_from_frame({"error": "a bare string from an older actor"}, b"").unwrap()


def test_natural_http_failures_are_typed(base: str) -> None:
    with SvitClient(base, "wrong-token-0123456789", attempts=1) as bad, \
            pytest.raises(E.Unauthenticated) as unauth:
        bad.state("svit://acme/p")
    assert unauth.value.fields["status"] == 401
    with SvitClient(base, ACME, attempts=1) as acme:
        with pytest.raises(E.Forbidden) as forbidden:
            acme.state("svit://other/p")
        assert forbidden.value.fields["status"] == 403
        with pytest.raises(E.NotFound) as missing:
            acme.state("svit://acme/nope")
        assert missing.value.fields["status"] == 404
        acme.create_process("svit://acme/twice", memory={})
        with pytest.raises(E.ConflictError):
            acme.create_process("svit://acme/twice", memory={})
        with pytest.raises(E.PayloadTooLarge) as big:
            acme.create_process("svit://acme/big", memory={"x": "y" * 10_000})
        assert big.value.fields["status"] == 413
        with pytest.raises(E.InvalidProcessId):
            acme.state("not-a-process-id")


def test_transport_failure_is_unavailable_with_cause() -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    with SvitClient(dead, ACME, attempts=2, max_wait_s=0.05) as client, \
            pytest.raises(E.UnavailableError) as info:
        client.state("svit://acme/p")
    assert isinstance(info.value.__cause__, httpx.ConnectError)
    assert info.value.fields["attempts"] == 2 and info.value.fields["timeout"] is False


async def test_async_transport_failure_is_unavailable_with_cause() -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    async with AsyncSvitClient(dead, ACME, attempts=2, max_wait_s=0.05) as client:
        with pytest.raises(E.UnavailableError) as info:
            await client.state("svit://acme/p")
    assert isinstance(info.value.__cause__, httpx.ConnectError)


def test_per_call_timeout_overrides_the_client_timeout(base: str) -> None:
    with SvitClient(base, ACME, attempts=1, timeout_s=30.0) as client:
        client.create_process("svit://acme/slow", memory={})
        start = time.monotonic()
        with pytest.raises(E.UnavailableError) as info:
            client.state("svit://acme/slow", timeout_s=0.3)
        assert time.monotonic() - start < 1.2
        assert isinstance(info.value.__cause__, httpx.TimeoutException)
        assert info.value.fields["timeout"] is True
        # without the override the 30 s client timeout lets it finish
        assert client.state("svit://acme/slow") == ({}, 0)


def test_retry_after_is_honoured(base: str, router: RaisingRouter) -> None:
    """The gateway answers 503 with ``Retry-After: 1``: the retry waits about 1 s, not 50 ms."""
    with SvitClient(base, ACME, attempts=3, max_wait_s=5.0) as client:
        client.create_process("svit://acme/flaky", memory={})
        router.unavailable_left = 1
        start = time.monotonic()
        assert client.state("svit://acme/flaky") == ({}, 0)
        elapsed = time.monotonic() - start
    assert router.unavailable_left == 0
    assert 0.95 <= elapsed < 3.0, elapsed
