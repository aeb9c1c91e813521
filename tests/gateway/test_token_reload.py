"""The gateway follows its tokens file: a rotated Secret works without a restart.

Kubernetes updates a mounted Secret by swapping a symlink (``..data``) to a new
folder; this test does the same on a temporary folder and drives the real ASGI
app (byte cap -> auth -> routes) through httpx.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import httpx

from svit_cluster.gateway import TokenStore, create_app
from svit_cluster.inprocess import InProcessRouter

OLD = "old-admin-token-0123456789"
NEW = "new-admin-token-0123456789"


def _mount(root: Path, version: int, token: str) -> None:
    """Write the Secret as the kubelet does: a new data folder, then an atomic symlink swap."""
    data = root / f"..{version}"
    data.mkdir()
    (data / "tokens.json").write_text(json.dumps({"tokens": [{"token": token, "admin": True}]}))
    link = root / "..data_tmp"
    link.symlink_to(data.name)
    os.replace(link, root / "..data")
    if not (root / "tokens.json").exists():
        (root / "tokens.json").symlink_to("..data/tokens.json")


async def _status(app: object, token: str) -> int:
    transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
        resp = await client.get("/v1/processes/state",
                                params={"process_id": "svit://t/none", "path": "/"},
                                headers={"Authorization": f"Bearer {token}"})
        return resp.status_code


async def test_a_rotated_secret_is_used_without_restart(tmp_path: Path) -> None:
    _mount(tmp_path, 1, OLD)
    tokens = TokenStore.from_file(tmp_path / "tokens.json", reload_interval_s=0.0)
    app = create_app(InProcessRouter(), tokens)
    assert await _status(app, OLD) != 401
    assert await _status(app, NEW) == 401
    _mount(tmp_path, 2, NEW)
    assert await _status(app, NEW) != 401
    assert await _status(app, OLD) == 401  # the old token is revoked


async def test_a_broken_new_file_keeps_the_previous_tokens(tmp_path: Path) -> None:
    _mount(tmp_path, 1, OLD)
    tokens = TokenStore.from_file(tmp_path / "tokens.json", reload_interval_s=0.0)
    app = create_app(InProcessRouter(), tokens)
    bad = tmp_path / "..2"
    bad.mkdir()
    (bad / "tokens.json").write_text("{not json")
    (tmp_path / "..data_tmp").symlink_to(bad.name)
    os.replace(tmp_path / "..data_tmp", tmp_path / "..data")
    assert await _status(app, OLD) != 401
    assert await _status(app, "x" * 20) == 401


def test_checks_are_rate_limited(tmp_path: Path) -> None:
    _mount(tmp_path, 1, OLD)
    tokens = TokenStore.from_file(tmp_path / "tokens.json", reload_interval_s=3600.0)
    _mount(tmp_path, 2, NEW)
    assert tokens.lookup(OLD) is not None and tokens.lookup(NEW) is None
