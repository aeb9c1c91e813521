"""A steady-state request costs no module lookups, on the SDK or the gateway.

httpcore's async lock, event and semaphore each call
``current_async_library()``, which runs ``import sniffio`` inside the function.
anyio 4.11 does not depend on sniffio, and Python does not cache a failed
import, so without sniffio installed every async request searches ``sys.path``
for it several times (encode/httpcore discussion #1102, pull request #1103):
sniffio is therefore a declared dependency. These tests count every import lookup
(``sys.meta_path``) made while warm requests run through the real gateway app
under uvicorn, so any per-request import that comes back fails here.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator, Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

import pytest

from svit_cluster.client import AsyncSvitClient, SvitClient
from svit_cluster.gateway import Principal, TokenStore, create_app
from svit_cluster.inprocess import InProcessRouter
from tests.events._server import serve

TOKEN = "acme-token-0123456789"
PROCESS = "svit://acme/cost"
COUNTER = """(define (main input)
  (let ((count (+ (read "/memory/count") 1)))
    (do (write "/memory/count" count) (value-map "count" count))))"""


class LookupRecorder:
    """A ``sys.meta_path`` finder that finds nothing and records every name asked for."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self._lock = threading.Lock()

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        with self._lock:
            self.names.append(fullname)
        return None


@pytest.fixture(scope="module")
def base() -> Iterator[str]:
    tokens = TokenStore()
    tokens.add(TOKEN, Principal(tenant="acme"))
    with serve(create_app(InProcessRouter(), tokens)) as url:
        with SvitClient(url, TOKEN) as client:
            client.create_process(PROCESS, memory={"count": 0}, scripts={"counter": COUNTER})
        yield url


def _recording() -> LookupRecorder:
    recorder = LookupRecorder()
    sys.meta_path.insert(0, recorder)
    return recorder


async def test_async_sdk_request_makes_no_import_lookup(base: str) -> None:
    async with AsyncSvitClient(base, TOKEN, client_id="cost-async") as client:
        version = 0
        for _ in range(5):  # warm: first-use imports are fine
            version = await _commit(client, version)
        recorder = _recording()
        try:
            for _ in range(20):
                version = await _commit(client, version)
        finally:
            sys.meta_path.remove(recorder)
    assert recorder.names == [], f"per-request import lookups: {sorted(set(recorder.names))}"


async def _commit(client: AsyncSvitClient, version: int) -> int:
    out = (await client.activate(PROCESS, "counter", {}, expected_version=version)).outcome
    assert out.status in ("committed", "conflict")
    return out.activation.version if out.status == "committed" else out.actual_version


def test_sync_sdk_request_makes_no_import_lookup(base: str) -> None:
    with SvitClient(base, TOKEN, client_id="cost-sync") as client:
        for _ in range(5):
            client.state(PROCESS, "/memory/count")
        recorder = _recording()
        try:
            for _ in range(20):
                client.state(PROCESS, "/memory/count")
        finally:
            sys.meta_path.remove(recorder)
    assert recorder.names == [], f"per-request import lookups: {sorted(set(recorder.names))}"
